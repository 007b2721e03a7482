"""Every statement of the hot paths targets one user: on Citus, one shard.

A scripted session (write, agent turn, context, search, consolidate, expand, undo,
facts, corrections, tool log, forget) runs against a stand-in of a Citus cluster: the
schema with every per-user table hash-partitioned on user_id (tests/fix_partitioned.py).
The server reports every plan it builds, the statements that triggers, functions and
foreign-key checks run included; each must touch partitions of the session user's
remainder only, which is what Citus's router needs to send it to that user's shard.
"""

from __future__ import annotations

import uuid
from collections import Counter

import psycopg
import pytest

from fix_partitioned import MODULUS, partition_by_user, recording_manager, remainder_of
from memory import MemoryAgent
from memory.integrations.langgraph_store import AgentMemStore
from memory.store.distribution import check_schema


@pytest.fixture
def stand_in(pg_uri, settings, fresh_schema):
    from memory import HashEmbedder, MemoryManager

    MemoryManager.open(settings.with_(schema=fresh_schema), embedder=HashEmbedder()).close()
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        tables = partition_by_user(conn, fresh_schema)
        assert check_schema(conn, fresh_schema) == []  # partitioning kept every key
    return fresh_schema, tables


def _two_users(conn: psycopg.Connection, schema: str) -> tuple[str, str]:
    """A session user and a neighbour whose rows live in another partition (another shard)."""
    me = f"u-{uuid.uuid4().hex[:10]}"
    mine = remainder_of(conn, schema, "conversational_memory", me)
    while True:
        other = f"o-{uuid.uuid4().hex[:10]}"
        if remainder_of(conn, schema, "conversational_memory", other) != mine:
            return me, other


def _session(mm, user: str, thread: str) -> None:
    """The hot paths, as an application drives them for one user."""
    mm.write_messages([
        {"role": "user", "content": "My nightly export EXP-2291 failed with disk quota exceeded"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "check_disk", "args": {}}]},
        {"role": "tool", "content": "volume /data 100% full", "tool_call_id": "c1", "tool_name": "check_disk"},
        {"role": "assistant", "content": "The data volume is full; I will clean old exports."},
    ], user_id=user, thread_id=thread)
    mm.write_messages([{"role": "user", "content": "Thanks, please keep weekly backups"}], user_id=user,
                      thread_id=thread, embed=False)
    mm.write_tool_log("check_disk", {}, "volume /data 100% full", user_id=user, thread_id=thread, tool_call_id="c1")
    mm.read_tool_log(user_id=user, thread_id=thread)
    mm.write_knowledge("A disk quota error means the volume is full.", user_id=user, source="errors.md")
    mm.write_entity("EXP-2291", "job", "nightly export job", user_id=user)
    mm.write_workflow("clean exports", "free disk space by deleting old exports", ["check_disk", "delete"],
                      user_id=user, query="disk full")
    workflows = mm.read_workflows("disk is full", user_id=user)
    if workflows:
        mm.record_workflow_use(str(workflows[0].item.id), user_id=user)
    pref = mm.remember("preference", "Prefers weekly backups", user_id=user).fact
    mm.remember("preference", "Prefers weekly backups", user_id=user)  # the same: unchanged
    mm.remember("stable_fact", "Lives in Oslo", user_id=user)
    moved = mm.remember("stable_fact", "Lives in Bergen, not Oslo", user_id=user)  # a contradiction: supersedes
    mm.fact_history(moved.fact.id, user_id=user)
    mm.recall(user_id=user, include_history=True)
    mm.correct("Oslo", "Bergen", user_id=user, thread_id=thread)
    MemoryAgent(mm, extract_with_model=False).run("Is my export job fixed?", user_id=user, thread_id=thread)
    mm.build_context("why did the export fail?", user_id=user, thread_id=thread)
    mm.search_memory("export failed disk quota", user_id=user, k=5)
    mm.search_memory("backups", user_id=user, k=5, thread_id=thread)
    result = mm.summarize_conversation(thread_id=thread, user_id=user, keep_recent=1)
    assert result.summarized, result.message
    summary_id = result.summary.summary_id
    mm.expand_summary(summary_id, user_id=user)
    mm.read_summary_memory("export", user_id=user)
    mm.offload_to_summary("## Conversation Memory\nold\n", thread_id=thread, user_id=user, summary_id=summary_id)
    mm.undo_consolidation(summary_id, user_id=user)
    again = mm.summarize_conversation(thread_id=thread, user_id=user)
    assert again.summarized
    mm.forget(pref.id, user_id=user)
    mm.forget(moved.fact.id, user_id=user, purge=True)
    store = AgentMemStore(mm, index={"fields": ["text"]}, ttl={"default_ttl": 60.0})
    store.put((user, "memories"), "tea", {"text": "likes green tea", "n": 2})
    store.get((user, "memories"), "tea")
    store.search((user, "memories"), query="what does the user drink", filter={"n": {"$gte": 1}})
    store.list_namespaces(prefix=(user,), max_depth=1)
    store.delete((user, "memories"), "tea")
    store.put((user, "memories"), "coffee", {"text": "no coffee after noon"})
    mm.forget_user(user_id=user)


def test_every_hot_path_statement_touches_one_users_shard(stand_in, settings, pg_uri):
    schema, tables = stand_in
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        me, other = _two_users(conn, schema)
        mine = remainder_of(conn, schema, "conversational_memory", me)
        assert all(remainder_of(conn, schema, t, me) == mine for t in tables)  # colocated: one remainder
    with recording_manager(settings, schema) as (mm, recorder):
        mm.write_messages([{"role": "user", "content": "Neighbour's export failed too"}], user_id=other, thread_id="t")
        mm.remember("preference", "Prefers daily backups", user_id=other)
        recorder.plans.clear()
        recorder.statements.clear()
        _session(mm, me, "t")
    wrong = [(p.statement[:300], sorted(x for x in p.partitions if not x.endswith(f"_p{mine}")))
             for p in recorder.plans if any(not x.endswith(f"_p{mine}") for x in p.partitions)]
    assert not wrong, "statements reaching other users' partitions:\n" + "\n".join(f"{s}\n  -> {ps}" for s, ps in wrong)
    # The recording saw the session: plans on the user's partitions of every table it writes.
    touched = Counter(x.rsplit("_p", 1)[0] for p in recorder.plans for x in p.partitions)
    assert {"conversational_memory", "conversational_context", "summary_memory", "fact_memory",
            "knowledge_memory", "entity_memory", "tool_log", "workflow_memory", "store_memory",
            "store_vectors"} <= set(touched), touched
    assert len(recorder.statements) > 50


def test_the_recording_catches_a_statement_that_forgets_the_user(stand_in, settings, pg_uri):
    """The check can fail: a lookup by id alone plans every partition."""
    schema, _ = stand_in
    with recording_manager(settings, schema) as (mm, recorder):
        with mm.db.connection() as conn:
            conn.execute("SELECT content FROM fact_memory WHERE id = %s", (uuid.uuid4(),))
            conn.execute("SELECT content FROM fact_memory WHERE user_id = %s AND id = %s", ("u", uuid.uuid4()))
    by_statement = {p.statement: p.partitions for p in recorder.plans}
    unscoped = by_statement["SELECT content FROM fact_memory WHERE id = %s"]
    assert unscoped == {f"fact_memory_p{r}" for r in range(MODULUS)}
    assert len(by_statement["SELECT content FROM fact_memory WHERE user_id = %s AND id = %s"]) == 1


def test_settings_the_workers_need_are_sent_as_set_local(stand_in, settings):
    """Citus forwards SET LOCAL to the shards' nodes (citus.propagate_set_commands = local),
    not set_config() calls: the row-level-security key and the HNSW search settings are
    read there, by the policies and the index scans."""
    schema, _ = stand_in
    user = f"u-{uuid.uuid4().hex[:10]}"
    with recording_manager(settings, schema) as (mm, recorder):
        mm.write_knowledge("A disk quota error means the volume is full.", user_id=user)
        mm.read_knowledge("disk full", user_id=user)
        with mm.db.connection(user) as conn:
            assert conn.execute("SELECT current_setting('agentmem.user_id')").fetchone() == (user,)
    # (one round trip may carry several: "SET LOCAL agentmem.user_id = ...; SET LOCAL hnsw...")
    sent = [p.strip() for s in recorder.statements for p in s.split(";") if "agentmem.user_id" in p or "hnsw." in p]
    assert any(s.startswith("SET LOCAL agentmem.user_id = ") for s in sent)
    assert any(s.startswith("SET LOCAL hnsw.ef_search = ") for s in sent)
    assert not [s for s in sent if "set_config" in s], sent


def test_a_user_holding_a_partitioned_table_is_still_read_in_its_partition(stand_in, settings, pg_uri):
    """The plan-free reads (``memory.tables.base.NO_SORT``) are for a plain table: a generic plan
    prunes partitions only as it runs, and the keyword statement pinned to the gin index reads
    every user's matches. A partitioned table's size reads as unknown, so a user holding nearly
    all of its passages, with its statistics up to date, is still read planned for its values,
    in its own partition (on Citus, its shard)."""
    schema, _ = stand_in
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        me, other = _two_users(conn, schema)
        mine = remainder_of(conn, schema, "knowledge_memory", me)
    small = settings.with_(schema=schema, similar_exact_max_rows=12)
    with recording_manager(small, schema) as (mm, recorder):
        mm.write_knowledge_batch([{"content": f"The Bergen office moved to Bryggen in May ({i})."}
                                  for i in range(40)], user_id=me)
        mm.write_knowledge("A neighbour's note about Bergen.", user_id=other)
        with psycopg.connect(pg_uri, autocommit=True) as conn:
            conn.execute(psycopg.sql.SQL("ANALYZE {}").format(psycopg.sql.Identifier(schema, "knowledge_memory")))
            assert conn.execute("SELECT reltuples FROM pg_class WHERE oid = %s::regclass",
                                (f"{schema}.knowledge_memory",)).fetchone()[0] == 41  # the parent's estimate
        assert mm.knowledge._table_rows("knowledge_memory") == 0
        mm.read_knowledge("where did the Bergen office move", user_id=me)  # seen: above the switch point
        recorder.plans.clear()
        hits = mm.read_knowledge("when did the office move to Bryggen", user_id=me)  # the keyword half ahead
    assert hits
    reads = [p for p in recorder.plans if any(x.startswith("knowledge_memory_p") for x in p.partitions)]
    assert reads and all(p.partitions <= {f"knowledge_memory_p{mine}", f"knowledge_stats_p{mine}",
                                          f"knowledge_terms_p{mine}"} for p in reads), \
        [(p.statement[:120], sorted(p.partitions)) for p in reads]
