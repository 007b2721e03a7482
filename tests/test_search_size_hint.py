"""search_memory's statement for a user last seen above the switch point: the indexed shape alone.

A search reports the user's message count (and so does reading the user's speaker names,
which a user's first search does first); the next search of a user seen above
``search_exact_max_rows`` sends a statement without the exact shape's half (cheaper to
plan), which checks the user's count itself and says so when the history is no longer
above the switch: the search then runs the switching statement. So the hint decides only
which statement is sent, never what is found, and one user's hint never touches another's.
``small_bounds`` makes 12 messages the switch point.
"""

from __future__ import annotations

import asyncio
import uuid

import psycopg

from memory import MemoryManager, Settings
from memory.aio import AsyncMemoryManager
from memory.tables import search as search_mod
from memory.retrieval.embeddings import HashEmbedder

from fix_search_shapes import one_conn  # noqa: F401  (a fixture)
from fix_search_shapes import INDEXED_FIRST, INDEXED_REST, INDEXED_ONLY, outnumbered, statement_runs
from fix_plans import generic_plan, scans

MARKER = INDEXED_ONLY  # the statement these tests count

TURNS = [
    "My sister Ingrid moved to Tromso last spring.",
    "I'm training for the Bergen marathon in June.",
    "Our cat Miso hates the vacuum cleaner.",
    "The export job EXP-2291 failed with disk quota exceeded.",
    "Ingrid says the northern lights in Tromso are unreal.",
    "My marathon pace goal is 5:10 per kilometre.",
]
QUERIES = ["where does Ingrid live", "marathon pace", "what did the cat do"]


def write(mm: MemoryManager, user: str, n: int) -> list[int]:
    msgs = [dict(role="user" if i % 2 == 0 else "assistant", content=f"{TURNS[i % len(TURNS)]} ({i})")
            for i in range(n)]
    return [m.id for m in mm.write_messages(msgs, user_id=user, thread_id="t")]


def found(hits: list) -> list[tuple[str, float]]:
    return [(h.item.id, round(h.score, 9)) for h in hits]


def test_a_large_history_is_searched_by_the_indexed_only_statement_with_the_same_hits(one_conn: MemoryManager,
                                                                                      user: str) -> None:
    mm = one_conn
    write(mm, user, 30)
    # unseen, but its count came with its speaker names: the indexed shape in two statements
    first = found(mm.search_memory(QUERIES[0], user_id=user, k=8))
    assert [statement_runs(mm, s) for s in (MARKER, INDEXED_FIRST, INDEXED_REST)] == [0, 1, 1]
    # the first query's vector is cached now, so the indexed-only statement alone; the others'
    # keyword halves go out while their queries are embedded, then the rest
    again = {q: found(mm.search_memory(q, user_id=user, k=8)) for q in QUERIES}
    assert [statement_runs(mm, s) for s in (MARKER, INDEXED_FIRST, INDEXED_REST)] == [1] + [len(QUERIES)] * 2
    assert again[QUERIES[0]] == first and all(again.values())
    assert again == {q: found(mm.search_memory(q, user_id=user, k=8, shape="indexed")) for q in QUERIES}


def test_the_indexed_shape_in_two_statements_finds_summaries_facts_and_unembedded_rows_as_one_does(
        one_conn: MemoryManager, user: str) -> None:
    """The second statement of the indexed shape carries the summaries' and facts' halves only for a
    user who has some; a message still waiting for its embedding is embedded before the search runs.
    Either way the hits are the one statement's."""
    mm = one_conn
    write(mm, user, 30)  # its first search reads the count with the speaker names: large
    for q in QUERIES:
        assert found(mm.search_memory(q, user_id=user, k=8)) == found(mm.search_memory(q, user_id=user, k=8,
                                                                                        shape="indexed"))
    assert statement_runs(mm, INDEXED_REST) == len(QUERIES)
    assert statement_runs(mm, INDEXED_REST, "s_total AS (") == statement_runs(mm, INDEXED_REST, "f_total AS (") == 0
    summary = mm.write_summary("Ingrid, Tromso and the marathon plan", "Ingrid lives in Tromso; marathon in June.",
                               user_id=user, thread_id="t")
    mm.remember("stable_fact", "The user's marathon pace goal is 5:10 per kilometre", user_id=user)
    late = mm.write_messages([dict(role="user", content="Ingrid adopted a second cat named Tofu")], user_id=user,
                             thread_id="t", embed=False)[0]
    hits = {q: mm.search_memory(q + " now", user_id=user, k=8) for q in QUERIES}  # queries not embedded yet
    assert {h.item.kind for q in QUERIES for h in hits[q]} == {"message", "summary", "fact"}
    assert str(summary.summary_id) in {h.item.id for h in hits[QUERIES[0]]}
    with psycopg.connect(mm.db.conninfo, autocommit=True) as conn:  # embedded by the first search
        embedded = psycopg.sql.SQL("SELECT embedding IS NOT NULL FROM {} WHERE user_id = %s AND id = %s").format(
            psycopg.sql.Identifier(mm.db.schema, "conversational_memory"))
        assert conn.execute(embedded, (user, late.id)).fetchone() == (True,)
    for q in QUERIES:
        assert found(hits[q]) == found(mm.search_memory(q + " now", user_id=user, k=8, shape="indexed")), q
    # the first search found the unembedded message and searched again after embedding it; the others
    # sent both halves
    assert statement_runs(mm, INDEXED_REST, "s_total AS (", "f_total AS (") == len(QUERIES) - 1


def test_the_async_front_door_searches_a_large_history_in_the_same_two_statements(one_conn: MemoryManager,
                                                                                   settings: Settings,
                                                                                   user: str) -> None:
    mm = one_conn
    write(mm, user, 30)
    expected = {q: found(mm.search_memory(q, user_id=user, k=8, shape="indexed")) for q in QUERIES}

    async def scenario() -> dict[str, list[tuple[str, float]]]:
        async with await AsyncMemoryManager.open(settings.with_(search_exact_max_rows=12, search_term_candidates=4,
                                                                search_sample_rows=20, pool_max_size=1),
                                                 embedder=HashEmbedder()) as amm:
            got = {q: found(await amm.search_memory(q, user_id=user, k=8)) for q in QUERIES}
            async with amm.adb.pool.connection() as conn:
                cur = await conn.execute("SELECT count(*) FROM pg_prepared_statements WHERE strpos(statement, %s) > 0",
                                         (INDEXED_REST,))
                assert await cur.fetchone() == (1,)  # the second statement of the two ran on this connection
            return got

    assert asyncio.run(scenario()) == expected


def test_the_keyword_statement_runs_its_generic_plan_which_probes_by_key_the_rest_is_planned_for_its_values(
        one_conn: MemoryManager, user: str) -> None:
    """The indexed shape's keyword statement reads postings, windows and messages by their primary
    keys only: its generic plan, made once per connection, is every user's plan (no hash or merge
    join, no sequential or bitmap scan of a per-user table whatever the estimates). The statement
    after the embedding, which finds the nearest rows, is planned for its values each time."""
    mm = one_conn
    outnumbered(mm, user, 30)  # not the plan-free statement of a user holding half the messages
    write(mm, user, 30)  # large: the first search knows it (the count comes with the speaker names)
    for q in QUERIES:
        mm.search_memory(q, user_id=user)
    with mm.db.pool.connection() as conn:
        plans = dict(conn.execute(
            "SELECT CASE WHEN strpos(statement, %s) > 0 THEN 'first' ELSE 'rest' END,"
            " ARRAY[generic_plans, custom_plans] FROM pg_prepared_statements"
            " WHERE strpos(statement, %s) > 0 OR strpos(statement, %s) > 0",
            (INDEXED_FIRST, INDEXED_FIRST, INDEXED_REST)).fetchall())
        assert plans == {"first": [len(QUERIES), 0], "rest": [0, len(QUERIES)]}
        text, _ = search_mod._keyword_first_query("large")
        plan = "\n".join(r[0] for r in conn.execute("EXPLAIN (GENERIC_PLAN) " + text).fetchall())
    tables = ("conversational_memory", "conversational_context", "conversational_terms")
    assert "Index Only Scan using conversational_terms_pkey" in plan
    for bad in ["Hash Join", "Merge Join", "Hash Semi Join", "Hash Anti Join"] + [
            f"{scan} on {t}" for t in tables for scan in ("Seq Scan", "Bitmap Heap Scan")]:
        assert bad not in plan, bad


def test_a_history_fallen_under_the_switch_since_the_last_search_is_searched_exactly(one_conn: MemoryManager,
                                                                                     user: str) -> None:
    mm = one_conn
    ids = write(mm, user, 30)
    mm.search_memory("warm-up", user_id=user)  # seen with 30 messages
    with psycopg.connect(mm.db.conninfo, autocommit=True) as conn:  # the owner drops all but 8 of them
        conn.execute(psycopg.sql.SQL("DELETE FROM {} WHERE user_id = %s AND id > %s").format(
            psycopg.sql.Identifier(mm.db.schema, "conversational_memory")), (user, ids[7]))
    for q in QUERIES:
        hits = mm.search_memory(q, user_id=user, k=8)
        assert hits and found(hits) == found(mm.search_memory(q, user_id=user, k=8, shape="exact")), q
        assert {h.item.message_id for h in hits} <= set(ids[:8])
    # after the warm-up's two statements, the first search's keyword half (the indexed shape's) said the
    # user is small now (the rest had gone out right behind it, in its round trip: its rows are dropped),
    # and the switching statement searched; the next searches knew it
    assert [statement_runs(mm, s) for s in (INDEXED_FIRST, INDEXED_REST)] == [2, 2]


def test_one_users_large_history_never_changes_another_users_search(one_conn: MemoryManager, user: str) -> None:
    mm = one_conn
    big_ids = set(write(mm, user, 30))
    mm.search_memory("warm-up", user_id=user)
    other = f"small-{uuid.uuid4().hex[:8]}"
    small_ids = set(write(mm, other, 8))
    for q in QUERIES:
        assert found(mm.search_memory(q, user_id=user, k=8)) == found(mm.search_memory(q, user_id=user, k=8,
                                                                                        shape="indexed"))
        hits = mm.search_memory(q, user_id=other, k=8)
        assert hits and {h.item.message_id for h in hits} <= small_ids
        assert found(hits) == found(mm.search_memory(q, user_id=other, k=8, shape="exact"))
        assert {h.item.message_id for h in mm.search_memory(q, user_id=user, k=8)} <= big_ids


def test_the_indexed_shape_knows_the_turns_around_its_candidates_like_the_exact_one(mm: MemoryManager,
                                                                                    user: str) -> None:
    """Every row a candidate (30 messages, a pool of 50; threads interleaved in time) and no
    bound of the indexed shape reached (default settings): each hit's neighbour share, the
    better own score of the turns before and after it, is the exact shape's. The indexed
    shape finds the turn before through the thread index and the turn after as the
    candidate whose turn before is this one."""
    for t in range(3):
        msgs = [dict(role="user" if i % 2 == 0 else "assistant", content=f"{TURNS[(i + t) % len(TURNS)]} ({t}.{i})")
                for i in range(10)]
        mm.write_messages(msgs, user_id=user, thread_id=f"t{t}")
    for q in QUERIES:
        exact = {h.item.id: round(h.signals["neighbour"], 9)
                 for h in mm.search_memory(q, user_id=user, k=30, scope="messages", shape="exact")}
        indexed = {h.item.id: round(h.signals["neighbour"], 9)
                   for h in mm.search_memory(q, user_id=user, k=30, scope="messages", shape="indexed")}
        assert len(exact) == 30 and indexed == exact, q
        assert len(set(exact.values())) > 3, q  # the shares differ from row to row


def test_a_user_holding_half_the_messages_has_the_nearest_rows_from_the_index_on_the_generic_plan(
        settings: Settings, fresh_schema: str, user: str) -> None:
    """The statement after the embedding, for a user holding half of the messages table, runs on
    the generic plan with sorting off. Among many small users the planner, blind to which user a
    generic plan is for, would find an unknown user's nearest rows by sorting that user's rows
    (for this user, half the table); with sorting off it takes them from the HNSW index, and every
    other row it reads is a probe by key. The hits are those of the one statement, planned for its
    values."""
    # ef_search 1,000 (more than the table's rows): the index's nearest rows are the exact ones, so the
    # hits do not depend on whether a plan reads them from the index or sorts the user's rows
    mm = MemoryManager.open(settings.with_(schema=fresh_schema, search_exact_max_rows=12, search_term_candidates=4,
                                           search_sample_rows=20, pool_min_size=1, pool_max_size=1,
                                           hnsw_ef_search=1000),
                            embedder=HashEmbedder())
    try:
        for i in range(100):
            mm.write_messages([{"role": "user", "content": f"a line of user {i}, number {j}"} for j in range(3)],
                              user_id=f"{user}-{i}", thread_id="t")
        write(mm, user, 400)
        with mm.db.pool.connection() as conn:
            conn.execute("ANALYZE conversational_memory")
            conn.execute("ANALYZE conversational_context")
        text, _ = search_mod._search_query(("messages",), "large-rest")
        plans = {sort: generic_plan(mm, text, sort) for sort in ("on", "off")}
        index = "Index Scan using conversational_memory_embedding"
        assert index not in plans["on"], plans["on"]  # what the planner does for an unknown user
        assert index in plans["off"], plans["off"]
        # and every other read of a row is a probe by its key: nothing reads the user's rows
        read = scans(plans["off"], "conversational_memory") | scans(plans["off"], "conversational_context")
        assert read and read <= {"Index Scan using conversational_memory_embedding",
                                 "Index Scan using conversational_memory_pkey",
                                 "Index Scan using conversational_context_pkey"}, plans["off"]
        assert "Join Filter" not in plans["off"] and "Hash" not in plans["off"], plans["off"]
        for q in QUERIES:
            two = mm.search_memory(q, user_id=user)  # the keyword half ahead, then the plan-free rest
            one = mm.search_memory(q, user_id=user)  # the query's vector cached: one statement
            assert two and [(h.item.id, h.score) for h in two] == [(h.item.id, h.score) for h in one]
        with mm.db.pool.connection() as conn:
            runs = conn.execute("SELECT ARRAY[generic_plans, custom_plans] FROM pg_prepared_statements"
                                " WHERE strpos(statement, %s) > 0", (INDEXED_REST,)).fetchall()
        assert runs == [([len(QUERIES), 0],)]  # never planned for its values
    finally:
        mm.close()


def test_each_query_of_one_call_reads_its_own_keyword_statements_words_and_weights(one_conn: MemoryManager,
                                                                                   user: str) -> None:
    """The indexed shape, several queries of one call, none embedded yet: each statement after the
    model reads the words, IDFs, denominator and candidates its own query's keyword statement handed
    over (one setting per query): the hits of one search per query."""
    mm = one_conn
    write(mm, user, 30)
    mm.search_memory("warm-up", user_id=user)  # seen: large
    queries = [q + " (many)" for q in QUERIES]
    many = mm.memory_search.search_memory_many(queries, user_id=user, k=8)
    assert [statement_runs(mm, s) for s in (INDEXED_FIRST, INDEXED_REST)] == [1 + len(queries)] * 2
    one = [found(mm.search_memory(q, user_id=user, k=8, shape="indexed")) for q in queries]
    assert all(many) and [found(h) for h in many] == one
    assert len({tuple(h) for h in one}) == len(queries)
