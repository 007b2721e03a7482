"""read_knowledge (``Table._similar``) for a store last seen above the switch point: the indexed shape alone.

A read reports how many rows were under its filter; the next read of a user seen above
``similar_exact_max_rows`` sends a statement without the exact shape's half (cheaper to
plan), which returns rows only while the store is still above the switch point; when it
returns none, the read runs the switching statement. So the hint picks which statement
is sent, never what is found, and one user's hint never touches another's. The switch
point is 12 passages here.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from memory import HashEmbedder, MemoryManager
from memory.tables.knowledge import KnowledgeItem

PASSAGES = ["The Bergen office moved to Bryggen in May.", "Our release train ships every second Tuesday.",
            "Disk quota errors mean the export volume is full.", "The Oslo team owns the billing service."]
QUERIES = ["where did the Bergen office move", "disk quota export", "who owns billing"]


@pytest.fixture
def one_conn(settings: Any) -> Iterator[MemoryManager]:
    mm = MemoryManager.open(settings.with_(pool_min_size=1, pool_max_size=1, similar_exact_max_rows=12),
                            embedder=HashEmbedder())
    yield mm
    mm.close()


def runs(mm: MemoryManager, *, large: bool) -> int:
    """Executions of the knowledge read's indexed-only (``large``) or switching statement on the pooled connection."""
    with mm.db.connection() as conn:
        row = conn.execute("SELECT coalesce(sum(generic_plans + custom_plans), 0) FROM pg_prepared_statements"
                           " WHERE statement LIKE '%%knowledge_memory%%' AND statement LIKE '%%hit_size%%'"
                           " AND strpos(statement, %s) = 0 AND (statement LIKE '%%e_rows%%') <> %s",
                           (AHEAD[1], large)).fetchone()
    return int(row[0])


#: Text that only the two statements of the indexed shape in two hold: the keyword half, sent
#: while the query is embedded, and the rest, given its results.
AHEAD = ("rank() OVER (ORDER BY ks DESC)", "WITH ORDINALITY AS t(tq, idf, ord)")


def ahead_runs(mm: MemoryManager) -> tuple[int, int]:
    """Executions of the two statements of the indexed shape in two (``AHEAD``) on the pooled connection."""
    with mm.db.connection() as conn:
        return tuple(int(conn.execute("SELECT coalesce(sum(generic_plans + custom_plans), 0)"
                                      " FROM pg_prepared_statements WHERE strpos(statement, %s) > 0",
                                      (text,)).fetchone()[0]) for text in AHEAD)  # type: ignore[return-value]


def write(mm: MemoryManager, user: str, n: int) -> list[str]:
    items = mm.write_knowledge_batch([{"content": f"{PASSAGES[i % len(PASSAGES)]} ({i})"} for i in range(n)],
                                     user_id=user)
    return [str(item.id) for item in items]


def found(mm: MemoryManager, query: str, user: str, shape: str = "auto") -> list[tuple[str, float]]:
    """read_knowledge's hits (``shape`` "auto"), or those of its switching statement forced to one shape."""
    if shape == "auto":
        hits = mm.read_knowledge(query, user_id=user, k=5)
    else:
        hits = mm.knowledge._similar("knowledge_memory", KnowledgeItem, query, sql.SQL("user_id = %(uid)s"),
                                     {"uid": user}, k=5, shape=shape, postings="knowledge_terms")
    return [(str(h.item.id), h.score) for h in hits]


def test_a_large_store_is_read_by_the_indexed_only_statement_with_the_same_hits(one_conn: MemoryManager,
                                                                               user: str) -> None:
    mm = one_conn
    write(mm, user, 30)
    first = found(mm, QUERIES[0], user)  # not seen yet: the switching statement
    assert runs(mm, large=True) == 0 and runs(mm, large=False) == 1 and ahead_runs(mm) == (0, 0)
    # seen large: the first query's vector is cached (nothing to overlap), the indexed-only
    # statement; the others' keyword halves go out while their queries are embedded
    again = {q: found(mm, q, user) for q in QUERIES}
    assert runs(mm, large=True) == 1 and runs(mm, large=False) == 1
    assert ahead_runs(mm) == (len(QUERIES) - 1, len(QUERIES) - 1)
    assert again[QUERIES[0]] == first and all(again.values())
    assert again == {q: found(mm, q, user, shape="indexed") for q in QUERIES}


def shrunk(mm: MemoryManager, user: str) -> list[str]:
    """30 passages, read once (seen above the switch point), then all but the first 8 deleted by the owner."""
    ids = write(mm, user, 30)
    found(mm, QUERIES[0], user)
    with psycopg.connect(mm.db.conninfo, autocommit=True) as conn:
        conn.execute(sql.SQL("DELETE FROM {} WHERE user_id = %s AND NOT id = ANY (%s::uuid[])").format(
            sql.Identifier(mm.db.schema, "knowledge_memory")), (user, ids[:8]))
    return ids


def test_a_store_fallen_under_the_switch_since_the_last_read_is_read_exactly(one_conn: MemoryManager,
                                                                            user: str) -> None:
    mm = one_conn
    ids = shrunk(mm, user)
    switching = runs(mm, large=False)
    hits = found(mm, QUERIES[0], user)
    assert runs(mm, large=True) == 1 and runs(mm, large=False) == switching + 1  # sent, found nothing, ran again
    assert hits and hits == found(mm, QUERIES[0], user, shape="exact")
    assert {i for i, _ in hits} <= set(ids[:8])
    for q in QUERIES[1:]:  # the count it reported (8): the switching statement from now on
        assert found(mm, q, user) == found(mm, q, user, shape="exact")
    assert runs(mm, large=True) == 1


def test_a_store_fallen_under_the_switch_is_read_exactly_when_its_keyword_half_goes_ahead(
        one_conn: MemoryManager, user: str) -> None:
    mm = one_conn
    ids = shrunk(mm, user)
    switching = runs(mm, large=False)
    # not embedded yet: the keyword half first, which counts 8 (the rest, sent right behind the model in
    # its round trip, found nothing: it reads only above the switch point), then the switching statement
    hits = found(mm, QUERIES[1], user)
    assert ahead_runs(mm) == (1, 1) and runs(mm, large=False) == switching + 1
    assert hits and hits == found(mm, QUERIES[1], user, shape="exact")
    assert {i for i, _ in hits} <= set(ids[:8])


def test_one_users_large_store_never_changes_another_users_read(one_conn: MemoryManager, user: str) -> None:
    mm = one_conn
    big_ids = set(write(mm, user, 30))
    found(mm, QUERIES[0], user)  # the large user is seen
    other = f"small-{uuid.uuid4().hex[:8]}"
    small_ids = set(write(mm, other, 8))
    for q in QUERIES:
        mine = found(mm, q, user)
        assert mine == found(mm, q, user, shape="indexed") and {i for i, _ in mine} <= big_ids
        theirs = found(mm, q, other)
        assert theirs and {i for i, _ in theirs} <= small_ids
        assert theirs == found(mm, q, other, shape="exact")
    # only the large user's reads were sent the indexed shape alone, or in two (the queries after the first)
    assert runs(mm, large=True) == 1 and ahead_runs(mm) == (len(QUERIES) - 1,) * 2
