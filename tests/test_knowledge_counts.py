"""Each user's passage count (``knowledge_stats``, migration 014), kept on write.

read_knowledge's indexed shape reads N (the user's passages) from it instead of counting
the user's rows per read, and picks its shape by it. So the sum of the user's slots must
equal ``count(*)`` of the user's passages after anything that adds or removes them:
``write_knowledge_batch``, plain SQL writing several users at once, a delete, a row given
to another user, a failed write, retention, ``forget_user`` (which leaves no count row
behind), TRUNCATE; it is filled from the passages a database already holds when the
migration runs. Two concurrent writers of one user do not wait for each other on it (the
count is spread over slots), and one user's writes never touch another's count.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Iterator

import psycopg
import pytest
from psycopg import sql

from memory import HashEmbedder, MemoryManager

from fix_schemas import migrations_before


def counts(conn: psycopg.Connection, *users: str) -> dict[str, tuple[int, int]]:
    """Per user: (the kept count, the sum of its slots; the passages there are)."""
    out = {}
    for u in users:
        kept = conn.execute("SELECT coalesce(sum(passages), 0) FROM knowledge_stats WHERE user_id = %s",
                            (u,)).fetchone()[0]
        real = conn.execute("SELECT count(*) FROM knowledge_memory WHERE user_id = %s", (u,)).fetchone()[0]
        out[u] = (int(kept), int(real))
    return out


def passages(n: int, tag: str) -> list[dict[str, str]]:
    return [{"content": f"{tag} passage number {i}"} for i in range(n)]


@pytest.fixture
def own_mm(settings, fresh_schema) -> Iterator[MemoryManager]:
    mm = MemoryManager.open(settings.with_(schema=fresh_schema), embedder=HashEmbedder())
    yield mm
    mm.close()


def owner_sql(mm: MemoryManager) -> psycopg.Connection:
    conn = psycopg.connect(mm.db.conninfo, autocommit=True)
    conn.execute(sql.SQL("SET search_path TO {}, public").format(sql.Identifier(mm.db.schema)))
    return conn


def test_the_count_follows_every_write_and_delete(own_mm) -> None:
    mm = own_mm
    a, b = f"a-{uuid.uuid4().hex[:8]}", f"b-{uuid.uuid4().hex[:8]}"
    with owner_sql(mm) as c:
        mm.write_knowledge_batch(passages(7, "alpha"), user_id=a)
        mm.write_knowledge_batch(passages(3, "beta"), user_id=b)
        mm.write_knowledge("one more", user_id=a)
        assert counts(c, a, b) == {a: (8, 8), b: (3, 3)}
        # one plain-SQL statement writing both users' rows
        c.execute("INSERT INTO knowledge_memory (user_id, content) VALUES (%s, 'x'), (%s, 'y'), (%s, 'z')", (a, b, a))
        assert counts(c, a, b) == {a: (10, 10), b: (4, 4)}
        # an edit of the content or metadata changes no count
        c.execute("UPDATE knowledge_memory SET content = content || ' edited', metadata = '{\"k\": 1}'::jsonb"
                  " WHERE user_id = %s", (a,))
        assert counts(c, a, b) == {a: (10, 10), b: (4, 4)}
        # a delete of some rows, and a row given to the other user
        c.execute("DELETE FROM knowledge_memory WHERE user_id = %s AND content LIKE 'alpha passage number 1%%'", (a,))
        assert counts(c, a, b) == {a: (9, 9), b: (4, 4)}
        some = c.execute("SELECT id FROM knowledge_memory WHERE user_id = %s LIMIT 2", (a,)).fetchall()
        c.execute("UPDATE knowledge_memory SET user_id = %s WHERE user_id = %s AND id = ANY(%s)",
                  (b, a, [r[0] for r in some]))
        assert counts(c, a, b) == {a: (7, 7), b: (6, 6)}
        # a write that fails rolls its count back with its rows
        with pytest.raises(psycopg.errors.NotNullViolation):
            with c.transaction():
                c.execute("INSERT INTO knowledge_memory (user_id, content) VALUES (%s, 'ok')", (a,))
                c.execute("INSERT INTO knowledge_memory (user_id, content) VALUES (%s, NULL)", (a,))
        assert counts(c, a, b) == {a: (7, 7), b: (6, 6)}
        # forget_user removes the count with the rows, leaves no count row; the other user keeps theirs
        removed = mm.forget_user(user_id=a)
        assert removed["knowledge_memory"] == 7 and removed["knowledge_stats"] >= 1
        assert counts(c, a, b) == {a: (0, 0), b: (6, 6)}
        assert c.execute("SELECT count(*) FROM knowledge_stats WHERE user_id = %s", (a,)).fetchone()[0] == 0
        c.execute("TRUNCATE knowledge_memory")
        assert counts(c, a, b) == {a: (0, 0), b: (0, 0)}
        assert c.execute("SELECT count(*) FROM knowledge_stats").fetchone()[0] == 0


def test_concurrent_writers_of_one_user_do_not_wait_for_each_other(own_mm) -> None:
    """A count in one row per user would make the second writer wait for the first's commit."""
    mm = own_mm
    u = f"w-{uuid.uuid4().hex[:8]}"
    mm.write_knowledge("first passage", user_id=u)
    with owner_sql(mm) as c:
        with psycopg.connect(mm.db.conninfo) as t1, psycopg.connect(mm.db.conninfo) as t2:
            for t in (t1, t2):
                t.execute(sql.SQL("SET search_path TO {}, public").format(sql.Identifier(mm.db.schema)))
            t1.execute("INSERT INTO knowledge_memory (user_id, content) VALUES (%s, 'by the first writer')", (u,))
            t2.execute("SET lock_timeout = '3s'")  # fails the test instead of hanging, were it to wait
            t2.execute("INSERT INTO knowledge_memory (user_id, content) VALUES (%s, 'by the second writer')", (u,))
            t2.commit()
            t1.commit()
        assert counts(c, u) == {u: (3, 3)}


def test_retention_keeps_the_count_right(settings, fresh_schema) -> None:
    mm = MemoryManager.open(settings.with_(schema=fresh_schema), embedder=HashEmbedder())
    try:
        u = f"r-{uuid.uuid4().hex[:8]}"
        mm.write_knowledge_batch(passages(5, "kept"), user_id=u)
        with owner_sql(mm) as c:
            c.execute("UPDATE knowledge_memory SET expires_at = %s WHERE user_id = %s AND id IN"
                      " (SELECT id FROM knowledge_memory WHERE user_id = %s ORDER BY id LIMIT 2)",
                      (datetime.now(timezone.utc) - timedelta(minutes=1), u, u))
            assert counts(c, u) == {u: (5, 5)}
            assert mm.purge_expired()["knowledge_memory"] == 2
            assert counts(c, u) == {u: (3, 3)}
    finally:
        mm.close()


def test_the_migration_counts_the_passages_already_there(settings, fresh_schema, tmp_path: Path) -> None:
    older = migrations_before(14, tmp_path)
    before = MemoryManager.open(settings.with_(schema=fresh_schema, sql_dir=older), embedder=HashEmbedder())
    a, b = f"a-{uuid.uuid4().hex[:8]}", f"b-{uuid.uuid4().hex[:8]}"
    before.write_knowledge_batch(passages(6, "pre"), user_id=a)
    before.write_knowledge_batch(passages(2, "pre"), user_id=b)
    before.close()
    after = MemoryManager.open(settings.with_(schema=fresh_schema), embedder=HashEmbedder())
    try:
        with owner_sql(after) as c:
            assert counts(c, a, b) == {a: (6, 6), b: (2, 2)}
            after.write_knowledge_batch(passages(3, "post"), user_id=a)
            assert counts(c, a, b) == {a: (9, 9), b: (2, 2)}
    finally:
        after.close()


def test_the_indexed_read_weighs_words_by_the_kept_count(small_bounds: MemoryManager, user: str) -> None:
    """read_knowledge's indexed shape takes N from knowledge_stats: a count that is off moves its scores."""
    mm = small_bounds
    w = "numbat" + uuid.uuid4().hex[:8]
    mm.write_knowledge_batch([{"content": f"{w} note {i}" if i % 5 == 0 else f"filler line {i}"}
                              for i in range(40)], user_id=user)  # 40 rows > 12: the indexed shape
    before = [(h.item.id, h.signals["keyword"]) for h in mm.read_knowledge(f"{w} note", user_id=user, k=5)]
    with mm.db.connection(user) as conn:  # the count doubled behind the rows' back
        conn.execute("UPDATE knowledge_stats SET passages = passages * 2 WHERE user_id = %s", (user,))
    after = [(h.item.id, h.signals["keyword"]) for h in mm.read_knowledge(f"{w} note", user_id=user, k=5)]
    assert [i for i, _ in after] == [i for i, _ in before]
    assert [s for _, s in after] != pytest.approx([s for _, s in before])


def test_a_batch_larger_than_one_statement_comes_back_in_input_order(own_mm) -> None:
    """write_knowledge_batch sends INSERT_ROWS passages per statement (the triggers run once per
    statement); the items come back in the order given, duplicates included, and are counted."""
    from memory.tables.knowledge import INSERT_ROWS

    mm = own_mm
    u = f"o-{uuid.uuid4().hex[:8]}"
    items = [{"content": f"passage {i % 7}", "source": f"s{i}"} for i in range(INSERT_ROWS + 3)]
    written = mm.write_knowledge_batch(items, user_id=u)
    assert [(w.content, w.source) for w in written] == [(i["content"], i["source"]) for i in items]
    assert len({w.id for w in written}) == len(items)
    with owner_sql(mm) as c:
        assert counts(c, u) == {u: (len(items), len(items))}
