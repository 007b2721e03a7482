"""write_messages as a pipeline: later stages are embedded while earlier ones are inserted.

Real PostgreSQL; the hash embedder (deterministic, so each stored vector can be checked
against the text it belongs to). What must hold: a failure in either stage (the model,
a statement) leaves no row of the call; rows keep their order, content and their own
vector; concurrent writers each get all their rows, in order.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any, Sequence

import numpy as np
import psycopg
import pytest
from psycopg import sql

from memory import HashEmbedder, MemoryManager
from memory.errors import AgentMemError, DatabaseError, EmbeddingError
from memory.tables.conversation import embedding_text, stages

N = 300  # five stages: 148, 100, 36, 12, 4 messages


def messages(n: int, tag: str = "") -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(n):
        words = " ".join(f"w{(i * 7 + j) % 97}" for j in range(1 + (i * 13) % 40))  # lengths vary: sorting matters
        if i % 11 == 5:
            out.append({"role": "assistant", "content": "", "tool_calls": [
                {"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": "{}"}}]})
        elif i % 11 == 6:
            out.append({"role": "tool", "content": f"result {i} {words}", "tool_call_id": f"c{i - 1}"})
        else:
            out.append({"role": "user" if i % 2 == 0 else "assistant", "content": f"{tag}message {i}: {words}",
                        "name": "Ann" if i % 3 == 0 else None, "metadata": {"i": i}})
    return out


class Poisoned:
    """The hash embedder, failing on any batch holding ``poison`` once the writer's
    transaction has inserted an earlier stage (it waits up to 10 s for that, since every
    stage is embedded ahead of the inserts); records how many such transactions it saw."""

    backend = "hash"

    def __init__(self, uri: str, poison: str) -> None:
        self.inner = HashEmbedder()
        self.name, self.dimension = self.inner.name, self.inner.dimension
        self.uri, self.poison = uri, poison
        self.inserting_transactions = -1

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if any(self.poison in t for t in texts):
            with psycopg.connect(self.uri, autocommit=True) as conn:
                deadline = time.monotonic() + 10
                while True:  # the writer's open transaction, once it has inserted an earlier stage
                    self.inserting_transactions = conn.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE state IN ('active', 'idle in transaction')"
                        " AND backend_xid IS NOT NULL AND query LIKE 'INSERT INTO conversational_memory%%'"
                    ).fetchone()[0]
                    if self.inserting_transactions or time.monotonic() > deadline:
                        break
                    time.sleep(0.01)
            raise RuntimeError("model crashed")
        return self.inner.embed(texts)


def count_rows(conn: psycopg.Connection, user: str) -> tuple[int, int]:
    msgs = conn.execute("SELECT count(*) FROM conversational_memory WHERE user_id = %s", (user,)).fetchone()[0]
    ctx = conn.execute("SELECT count(*) FROM conversational_context WHERE user_id = %s", (user,)).fetchone()[0]
    return msgs, ctx


def test_stages_cover_every_message_in_order_with_a_short_last_stage():
    for n in (1, 3, 4, 5, 16, 17, 52, 53, 152, 153, 402, 403, 1426, 1427, 10_000):
        plan = stages(n)
        assert plan[0][0] == 0 and plan[-1][1] == n
        assert all(a[1] == b[0] for a, b in zip(plan, plan[1:]))
        assert all(0 < end - start <= 1024 for start, end in plan)  # one INSERT each, within its parameters
        assert plan[-1][1] - plan[-1][0] <= 4
    assert stages(N) == [(0, 148), (148, 248), (248, 284), (284, 296), (296, 300)]
    assert [end - start for start, end in stages(10_000)] == [959] * 2 + [960] * 8 + [250, 100, 36, 12, 4]
    assert [end - start for start, end in stages(1427)] == [512, 513, 250, 100, 36, 12, 4]  # no stray stage of 1


def test_a_model_failure_in_a_later_stage_leaves_no_row(settings, user, thread, sql_conn):
    msgs = messages(N)
    msgs[298]["content"] = "poison pill in the last stage"
    embedder = Poisoned(settings.database_url, "poison pill")
    with MemoryManager.open(settings.with_(pool_max_size=2), embedder=embedder) as pmm:
        with pytest.raises(EmbeddingError):
            pmm.write_messages(msgs, user_id=user, thread_id=thread)
        assert embedder.inserting_transactions == 1  # it failed mid-pipeline, earlier stages inserted
        assert count_rows(sql_conn, user) == (0, 0)
        # the manager still works, and writes everything on a clean call
        msgs[298]["content"] = "a harmless message"
        written = pmm.write_messages(msgs, user_id=user, thread_id=thread)
    assert len(written) == N
    assert count_rows(sql_conn, user) == (N, N)


def test_a_statement_failure_in_a_later_stage_leaves_no_row(settings, fresh_schema, user, thread):
    with MemoryManager.open(settings.with_(schema=fresh_schema, pool_max_size=2), embedder=HashEmbedder()) as smm:
        with psycopg.connect(settings.database_url, autocommit=True) as conn:
            conn.execute(sql.SQL("SET search_path TO {}, public").format(sql.Identifier(fresh_schema)))
            conn.execute("CREATE FUNCTION refuse_boom() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
                         " IF NEW.content = 'boom' THEN RAISE EXCEPTION 'refused'; END IF; RETURN NEW; END $$")
            conn.execute("CREATE TRIGGER refuse_boom BEFORE INSERT ON conversational_memory"
                         " FOR EACH ROW EXECUTE FUNCTION refuse_boom()")
            msgs = messages(N)
            msgs[200]["content"] = "boom"  # the second stage of five
            with pytest.raises(DatabaseError) as err:
                smm.write_messages(msgs, user_id=user, thread_id=thread)
            assert isinstance(err.value, AgentMemError) and "refused" in str(err.value.__cause__)
            assert count_rows(conn, user) == (0, 0)
            msgs[200]["content"] = "fine"
            assert len(smm.write_messages(msgs, user_id=user, thread_id=thread)) == N


def test_order_content_and_each_rows_own_vector_are_kept(mm, user, thread, sql_conn):
    msgs = messages(N)
    written = mm.write_messages(msgs, user_id=user, thread_id=thread)
    assert [(m.role, m.content, m.name) for m in written] == [(m["role"], m["content"], m.get("name")) for m in msgs]
    assert [m.id for m in written] == sorted(m.id for m in written)
    assert [m.created_at for m in written] == sorted(m.created_at for m in written)
    assert [m.content for m in mm.read_thread(user_id=user, thread_id=thread)] == [m["content"] for m in msgs]
    rows = sql_conn.execute("SELECT role, content, name, embedding::text FROM conversational_memory WHERE user_id = %s"
                            " ORDER BY created_at, id", (user,)).fetchall()
    hasher = HashEmbedder()
    for role, content, name, vec in rows:
        if not content:
            assert vec is None
            continue
        expected = hasher.embed([embedding_text(role, content, name)])[0]
        assert np.allclose(np.asarray(json.loads(vec), dtype=np.float32), expected, atol=1e-6), content
    assert count_rows(sql_conn, user) == (N, N)


def test_concurrent_writers_each_get_all_their_rows_in_order(mm, user, sql_conn):
    errors: list[BaseException] = []
    results: dict[tuple[str, int], list[Any]] = {}

    def writer(uid: str, thread_id: str, w: int) -> None:
        try:
            for call in range(2):
                results[(uid + thread_id, w * 10 + call)] = mm.write_messages(
                    messages(150, tag=f"w{w}c{call} "), user_id=uid, thread_id=thread_id)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    other = user + "-b"
    jobs = [(user, "shared", 0), (user, "shared", 1), (user, "own", 2), (other, "shared", 3)]
    threads = [threading.Thread(target=writer, args=job) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for (_, key), rows in results.items():
        tag = f"w{key // 10}c{key % 10} "
        assert [r.content for r in rows] == [m["content"] for m in messages(150, tag=tag)]
        assert [r.id for r in rows] == sorted(r.id for r in rows)
    assert count_rows(sql_conn, user) == (3 * 2 * 150, 3 * 2 * 150)
    assert count_rows(sql_conn, other) == (2 * 150, 2 * 150)
    # each call's rows keep their order in their thread, whatever was written between them
    for uid, thread_id in ((user, "shared"), (user, "own"), (other, "shared")):
        stored = [m.content for m in mm.read_thread(user_id=uid, thread_id=thread_id)]
        for w in range(4):
            for call in range(2):
                mine = [c for c in stored if c.startswith(f"w{w}c{call} ")]
                if mine:
                    assert mine == [m["content"] for m in messages(150, tag=f"w{w}c{call} ")
                                    if m["content"].startswith(f"w{w}c{call} ")]
