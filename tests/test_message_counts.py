"""Each user's message count (``conversational_stats``, migration 012), kept on write.

search_memory's indexed shape reads N (the user's messages) from it instead of counting
the user's rows per search, and the switch between the shapes reads it too. So it must
equal ``count(*)`` of the user's messages after anything that adds or removes them:
``write_messages``, plain SQL, a thread's deletion, retention, ``forget_user``, a row
moved to another user, TRUNCATE; consolidation marks rows and changes nothing. It is
filled from the rows a database already holds when the migration runs, and one user's
writes never touch another user's count (row-level security covers the table).
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Iterator

import psycopg
import pytest
from psycopg import sql

from memory import HashEmbedder, MemoryManager, create_app_role

from fix_schemas import migrations_before


def counts(conn: psycopg.Connection, *users: str) -> dict[str, tuple[int, int]]:
    """Per user: (the kept count, the messages there are); a missing count row is 0."""
    out = {}
    for u in users:
        kept = conn.execute("SELECT messages FROM conversational_stats WHERE user_id = %s", (u,)).fetchone()
        real = conn.execute("SELECT count(*) FROM conversational_memory WHERE user_id = %s", (u,)).fetchone()
        out[u] = (kept[0] if kept else 0, real[0] if real else 0)
    return out


def turns(n: int, tag: str) -> list[dict[str, str]]:
    return [dict(role="user" if i % 2 == 0 else "assistant", content=f"{tag} message number {i}") for i in range(n)]


@pytest.fixture
def own_mm(settings, fresh_schema) -> Iterator[MemoryManager]:
    mm = MemoryManager.open(settings.with_(schema=fresh_schema), embedder=HashEmbedder())
    yield mm
    mm.close()


@pytest.fixture
def own_sql(own_mm) -> Iterator[psycopg.Connection]:
    with psycopg.connect(own_mm.db.conninfo, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}, public").format(sql.Identifier(own_mm.db.schema)))
        yield conn


def test_the_count_follows_every_write_and_delete(own_mm, own_sql) -> None:
    mm, c = own_mm, own_sql
    a, b = f"a-{uuid.uuid4().hex[:8]}", f"b-{uuid.uuid4().hex[:8]}"
    mm.write_messages(turns(7, "alpha"), user_id=a, thread_id="t1")
    mm.write_messages(turns(3, "alpha"), user_id=a, thread_id="t2")
    mm.write_messages(turns(4, "beta"), user_id=b, thread_id="t1")
    mm.write_conversational_memory("user", "one more", user_id=a, thread_id="t1")
    assert counts(c, a, b) == {a: (11, 11), b: (4, 4)}
    # one plain-SQL statement writing both users' rows
    c.execute("INSERT INTO conversational_memory (user_id, thread_id, role, content)"
              " VALUES (%s, 't3', 'user', 'x'), (%s, 't3', 'user', 'y'), (%s, 't3', 'user', 'z')", (a, b, a))
    assert counts(c, a, b) == {a: (13, 13), b: (5, 5)}
    # consolidation marks rows (summary_id): still messages, still counted
    result = mm.summarize_conversation(thread_id="t1", user_id=a, keep_recent=1)
    assert result.summarized
    assert c.execute("SELECT count(*) FROM conversational_memory WHERE user_id = %s AND summary_id IS NOT NULL",
                     (a,)).fetchone()[0] > 0
    mm.undo_consolidation(result.summary.summary_id, user_id=a)
    assert counts(c, a, b) == {a: (13, 13), b: (5, 5)}
    # a delete of some rows, of a thread, and a row given to the other user
    c.execute("DELETE FROM conversational_memory WHERE user_id = %s AND thread_id = 't2'", (a,))
    assert counts(c, a, b) == {a: (10, 10), b: (5, 5)}
    # (its window row names the user too: a DBA moving a message drops it first)
    mid = c.execute("SELECT min(id) FROM conversational_memory WHERE user_id = %s", (a,)).fetchone()[0]
    with c.transaction():
        c.execute("DELETE FROM conversational_context WHERE user_id = %s AND message_id = %s", (a, mid))
        c.execute("UPDATE conversational_memory SET user_id = %s WHERE user_id = %s AND id = %s", (b, a, mid))
    assert counts(c, a, b) == {a: (9, 9), b: (6, 6)}
    # a write that fails rolls its count back with its rows
    with pytest.raises(psycopg.errors.NotNullViolation):
        with c.transaction():
            c.execute("INSERT INTO conversational_memory (user_id, thread_id, role, content) VALUES (%s, 't', 'user', 'ok')",
                      (a,))
            c.execute("INSERT INTO conversational_memory (user_id, thread_id, role, content) VALUES (%s, 't', 'user', NULL)",
                      (a,))
    assert counts(c, a, b) == {a: (9, 9), b: (6, 6)}
    # forget_user removes the count with the rows; the other user keeps theirs
    mm.forget_user(user_id=a)
    assert counts(c, a, b) == {a: (0, 0), b: (6, 6)}
    assert c.execute("SELECT count(*) FROM conversational_stats WHERE user_id = %s", (a,)).fetchone()[0] == 0
    c.execute("TRUNCATE conversational_memory CASCADE")
    assert counts(c, a, b) == {a: (0, 0), b: (0, 0)}


def test_retention_keeps_the_count_right(settings, fresh_schema) -> None:
    mm = MemoryManager.open(settings.with_(schema=fresh_schema, retention_days={"conversational_memory": 30}),
                            embedder=HashEmbedder())
    try:
        u = f"r-{uuid.uuid4().hex[:8]}"
        old = datetime.now(timezone.utc) - timedelta(days=90)
        mm.write_messages([dict(m, created_at=old + timedelta(minutes=i)) for i, m in enumerate(turns(5, "old"))],
                          user_id=u, thread_id="t")
        mm.write_messages(turns(4, "new"), user_id=u, thread_id="t")
        with psycopg.connect(mm.db.conninfo, autocommit=True) as c:
            c.execute(sql.SQL("SET search_path TO {}, public").format(sql.Identifier(fresh_schema)))
            c.execute("UPDATE conversational_memory SET expires_at = now() - interval '1 minute'"
                      " WHERE id = (SELECT max(id) FROM conversational_memory WHERE user_id = %s)", (u,))
            assert counts(c, u) == {u: (9, 9)}
            removed = mm.purge_expired()
            assert removed["conversational_memory"] == 6
            assert counts(c, u) == {u: (3, 3)}
    finally:
        mm.close()


def test_the_migration_counts_the_rows_already_there(settings, fresh_schema, tmp_path: Path) -> None:
    older = migrations_before(12, tmp_path)
    before = MemoryManager.open(settings.with_(schema=fresh_schema, sql_dir=older), embedder=HashEmbedder())
    with psycopg.connect(before.db.conninfo) as c:
        assert c.execute("SELECT to_regclass(format('%%I.conversational_stats', %s::text))",
                         (fresh_schema,)).fetchone()[0] is None
    a, b = f"a-{uuid.uuid4().hex[:8]}", f"b-{uuid.uuid4().hex[:8]}"
    before.write_messages(turns(6, "pre"), user_id=a, thread_id="t")
    before.write_messages(turns(2, "pre"), user_id=b, thread_id="t")
    before.close()
    after = MemoryManager.open(settings.with_(schema=fresh_schema), embedder=HashEmbedder())
    try:
        with psycopg.connect(after.db.conninfo, autocommit=True) as c:
            c.execute(sql.SQL("SET search_path TO {}, public").format(sql.Identifier(fresh_schema)))
            assert counts(c, a, b) == {a: (6, 6), b: (2, 2)}
        after.write_messages(turns(3, "post"), user_id=a, thread_id="t")
        with psycopg.connect(after.db.conninfo, autocommit=True) as c:
            c.execute(sql.SQL("SET search_path TO {}, public").format(sql.Identifier(fresh_schema)))
            assert counts(c, a, b) == {a: (9, 9), b: (2, 2)}
    finally:
        after.close()


def test_an_app_role_counts_and_sees_only_its_own_user(settings, fresh_schema, pg_uri) -> None:
    MemoryManager.open(settings.with_(schema=fresh_schema), embedder=HashEmbedder()).close()
    role = create_app_role(pg_uri, f"app_{uuid.uuid4().hex[:8]}", "pw-counts", schema=fresh_schema)
    app = MemoryManager.open(settings.with_(schema=fresh_schema, database_url=role.conninfo), embedder=HashEmbedder())
    try:
        a, b = f"a-{uuid.uuid4().hex[:8]}", f"b-{uuid.uuid4().hex[:8]}"
        app.write_messages(turns(5, "mine"), user_id=a, thread_id="t")
        app.write_messages(turns(2, "theirs"), user_id=b, thread_id="t")
        with app.db.connection(a) as conn:
            seen = conn.execute("SELECT user_id, messages FROM conversational_stats").fetchall()
            assert seen == [(a, 5)]
            # under a's scope, b's count can be neither changed nor removed
            conn.execute("UPDATE conversational_stats SET messages = 0 WHERE user_id = %s", (b,))
            conn.execute("DELETE FROM conversational_stats WHERE user_id = %s", (b,))
        with psycopg.connect(pg_uri, autocommit=True) as c:
            c.execute(sql.SQL("SET search_path TO {}, public").format(sql.Identifier(fresh_schema)))
            assert counts(c, a, b) == {a: (5, 5), b: (2, 2)}
    finally:
        app.close()
