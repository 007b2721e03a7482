"""How the similarity reads (read_knowledge and the others of ``Table._similar``) are planned.

A read reports how many rows were under its filter (counted up to the switch point + 1).
The next read of the same user by the same statement runs PostgreSQL's generic plan at
once where that count was well inside the exact shape (at most half the switch point),
and is planned for its values everywhere else: a generic plan, blind to the row count,
is a hundred times slower on a large history. The count picks the plan, never the hits:
the statement still chooses its shape by its own count. A read of a user not seen yet is
planned the same way from the user's count kept on write (knowledge: migration 014), which
the server reads in the settings' round trip. ``similar_exact_max_rows`` is 12 here, so 6
rows are small and 30 large.
"""

from __future__ import annotations

from typing import Any

import pytest
from psycopg import sql

from memory import HashEmbedder, MemoryManager
from memory.tables import base
from memory.tables.knowledge import KnowledgeItem

from fix_plans import generic_plan, scans

PASSAGES = ["The Bergen office moved to Bryggen in May.", "Our release train ships every second Tuesday.",
            "Disk quota errors mean the export volume is full.", "The Oslo team owns the billing service."]
QUERY = "where did the Bergen office move"


def _plans(mm: MemoryManager) -> tuple[int, int]:
    """(generic, custom) plans made of the knowledge read's prepared statement on the one pooled connection."""
    with mm.db.connection() as conn:
        row = conn.execute("SELECT coalesce(sum(generic_plans), 0), coalesce(sum(custom_plans), 0)"
                           " FROM pg_prepared_statements WHERE statement LIKE '%%knowledge_memory%%'"
                           " AND statement LIKE '%%hit_size%%'").fetchone()
    return int(row[0]), int(row[1])


def _write(mm: MemoryManager, user: str, n: int) -> None:
    mm.write_knowledge_batch([{"content": f"{PASSAGES[i % len(PASSAGES)]} ({i})"} for i in range(n)], user_id=user)


def _found(mm: MemoryManager, user: str, shape: str | None = None) -> list[tuple[str, float]]:
    """read_knowledge's hits, or (``shape``) those of its statement forced to one shape."""
    if shape is None:
        hits = mm.read_knowledge(QUERY, user_id=user, k=5)
    else:
        hits = mm.knowledge._similar("knowledge_memory", KnowledgeItem, QUERY, sql.SQL("user_id = %(uid)s"),
                                     {"uid": user}, k=5, shape=shape, postings="knowledge_terms")
    return [(str(h.item.id), h.score) for h in hits]


@pytest.fixture
def one_conn(settings: Any) -> Any:
    mm = MemoryManager.open(settings.with_(pool_min_size=1, pool_max_size=1, similar_exact_max_rows=12),
                            embedder=HashEmbedder())
    yield mm
    mm.close()


@pytest.mark.parametrize("rows, small", [(6, True), (30, False)])
def test_a_small_history_gets_the_generic_plan_from_its_first_read_a_large_one_never(
        one_conn: MemoryManager, user: str, rows: int, small: bool) -> None:
    mm = one_conn
    _write(mm, user, rows)
    first = _found(mm, user)
    assert first and _plans(mm) == ((1, 0) if small else (0, 1))  # unseen: by the user's kept count
    again = [_found(mm, user) for _ in range(6)]
    assert _plans(mm) == ((7, 0) if small else (0, 7))
    assert all(hits == first for hits in again)
    assert first == _found(mm, user, shape="exact" if small else "indexed")


def test_a_history_grown_past_the_switch_is_found_by_the_indexed_shape_and_planned_for_its_values_again(
        one_conn: MemoryManager, user: str) -> None:
    mm = one_conn
    _write(mm, user, 6)
    assert _found(mm, user)  # seen small
    _write(mm, user, 24)  # 30 now: above the switch point
    grown = _found(mm, user)  # the generic plan, once more: the statement's own count picks the indexed shape
    assert grown == _found(mm, user, shape="indexed")
    generic, custom = _plans(mm)
    assert generic == 2
    _found(mm, user)
    assert _plans(mm) == (generic, custom + 1)  # the count it reported: planned for its values from now on


def test_one_users_small_history_never_changes_how_another_users_read_is_planned(
        one_conn: MemoryManager, user: str) -> None:
    mm = one_conn
    _write(mm, user, 6)
    big = f"{user}-big"
    _write(mm, big, 30)
    _found(mm, user)
    _found(mm, user)  # the small user: generic
    before = _plans(mm)
    hits = _found(mm, big)  # the large user, never seen: planned for its values
    assert _plans(mm) == (before[0], before[1] + 1)
    assert hits == _found(mm, big, shape="indexed")


@pytest.mark.parametrize("others, rows, most", [(100, 400, False), (30, 900, True)])
def test_a_user_holding_half_the_passages_reads_them_through_the_indexes_on_generic_plans(
        settings: Any, fresh_schema: str, user: str, others: int, rows: int, most: bool) -> None:
    """read_knowledge of a large store in two statements (the keyword half while the query is
    embedded), beside many users of 3 passages. For a user holding half of the passages table, the
    statement after the embedding runs on the generic plan with sorting off; for one holding most
    of it (nine tenths), the keyword statement does too, in a form pinned to the gin index. Neither
    is then planned for its values. The planner, blind to which user a generic plan is for, would
    sort an unknown user's passages for the nearest ones (for this user, half the table), and
    would find the passages with every common word of the query by intersecting the words' gin
    matches with all of the user's primary-key entries. With sorting off the statement after the
    embedding takes the nearest from the HNSW index and reads every other row by key; the pinned
    keyword statement reads the gin index alone and filters its matches by user after (it reads
    the other users' matches, which is why it waits for a user holding most of the table). The
    hits are those of the one statement, planned for its values."""
    # ef_search 1,000 (more than the table's rows): the index's nearest rows are the exact ones (see
    # test_search_size_hint)
    mm = MemoryManager.open(settings.with_(schema=fresh_schema, pool_min_size=1, pool_max_size=1,
                                           similar_exact_max_rows=12, hnsw_ef_search=1000),
                            embedder=HashEmbedder())
    try:
        for i in range(others):
            mm.write_knowledge_batch([{"content": f"a note of user {i}, number {j}"} for j in range(3)],
                                     user_id=f"{user}-{i}")
        _write(mm, user, rows)  # 57 % of the table, or 91 %
        # The writes' row counts reach the statistics when their backend flushes them (at most once
        # a second); flushed after ANALYZE they would be counted twice, and the table's rows
        # (greatest of reltuples and the live rows) read up to twice the truth. Flush them first.
        with mm.db.pool.connection() as conn:
            conn.execute("SELECT pg_stat_force_next_flush()")
        with mm.db.pool.connection() as conn:
            conn.execute("ANALYZE knowledge_memory")
        cols = base.select_list(KnowledgeItem, "x").as_string()
        first, _ = base._ahead_query("knowledge_memory", base.USER_ROWS, cols, "knowledge_terms", 1, True)
        unpinned, _ = base._ahead_query("knowledge_memory", base.USER_ROWS, cols, "knowledge_terms", 1)
        second, _ = base._ahead_query("knowledge_memory", base.USER_ROWS, cols, "knowledge_terms", 2)
        pkey, gin = "Index Scan using knowledge_memory_pkey", "Bitmap Index Scan knowledge_memory_tsv"
        # the keyword statement: what the planner does for an unknown user, then pinned to the gin index
        assert "Bitmap Index Scan knowledge_memory_pkey" in scans(generic_plan(mm, unpinned), "knowledge_memory")
        assert scans(generic_plan(mm, first), "knowledge_memory") == {
            "Bitmap Heap Scan", gin, pkey, "Index Only Scan using knowledge_memory_pkey"}  # the last: the sample's bound
        # the statement after the embedding
        index = "Index Scan using knowledge_memory_embedding"
        assert index not in scans(generic_plan(mm, second, sort="on"), "knowledge_memory")
        plan = generic_plan(mm, second)
        assert scans(plan, "knowledge_memory") == {index, pkey}, plan
        assert "Join Filter" not in plan and "Hash Join" not in plan, plan
        assert _found(mm, user)  # seen: above the switch point
        for q in ("when does the release train ship", "who owns billing", "what do disk quota errors mean"):
            two = [(str(h.item.id), h.score) for h in mm.read_knowledge(q, user_id=user, k=5)]  # keyword half ahead
            one = [(str(h.item.id), h.score) for h in mm.read_knowledge(q, user_id=user, k=5)]  # vector cached: one
            assert two and two == one
        with mm.db.connection() as conn:
            runs = [conn.execute("SELECT ARRAY[generic_plans, custom_plans] FROM pg_prepared_statements"
                                 " WHERE statement = %s", (text,)).fetchall() for text in (first, unpinned, second)]
        if most:  # never planned for their values
            assert runs == [[([3, 0],)], [], [([3, 0],)]]
        else:  # the keyword statement as written, planned for its values
            assert runs == [[], [([0, 3],)], [([3, 0],)]]
    finally:
        mm.close()
