"""Shared by the tests of search_memory's one-shape statements (exact-only, indexed-only)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from memory import MemoryManager
from memory.retrieval.embeddings import HashEmbedder
from memory.settings import Settings


@pytest.fixture
def one_conn(settings: Settings) -> Iterator[MemoryManager]:
    """Tiny bounds (switch at 12 messages) and one pooled connection, whose prepared statements we can list."""
    mm = MemoryManager.open(settings.with_(search_exact_max_rows=12, search_term_candidates=4, search_sample_rows=20,
                                           pool_min_size=1, pool_max_size=1), embedder=HashEmbedder())
    yield mm
    mm.close()


#: Text that only one of search_memory's statements holds: the exact-only one (its row saying the
#: user is large now), the indexed-only one (saying small), and each shape in two statements:
#: the keyword half sent ahead of the embedding, then the rest with its results.
EXACT_ONLY, INDEXED_ONLY = "SELECT 'large'", "SELECT 'small'"
KEYWORD_FIRST, EXACT_NEAR = "me_top AS (", "ORDER BY v.d, v.key LIMIT"
INDEXED_FIRST, INDEXED_REST = "mk_top AS (", "FROM mi_near m"


def statement_runs(mm: MemoryManager, marker: str, *also: str) -> int:
    """How many times the pooled connection ran the search statements holding ``marker`` (above), and
    ``also`` each of these texts."""
    with mm.db.pool.connection() as conn:
        row = conn.execute("SELECT coalesce(sum(generic_plans + custom_plans), 0) FROM pg_prepared_statements"
                           " WHERE statement LIKE 'WITH terms AS%%'"
                           " AND (SELECT bool_and(strpos(statement, m) > 0) FROM unnest(%s::text[]) AS m)",
                           ([marker, *also],)).fetchone()
    return int(row[0]) if row else 0


def outnumbered(mm: MemoryManager, user: str, rows: int) -> None:
    """Write another user more than twice ``rows`` messages and bring the messages table's
    statistics up to date (ANALYZE): ``user``, with ``rows`` written after, then holds less than
    half of the table by those statistics alone, whatever the tests before wrote (they only add
    rows), so its searches of the indexed shape plan what needs the vector for its values
    (the plan-free statement, ``memory.tables.base.NO_SORT``, is for a user holding half)."""
    other = f"{user}-neighbour"
    mm.write_messages([{"role": "user", "content": f"neighbour line {i}"} for i in range(2 * rows + 1)],
                      user_id=other, thread_id="t")
    analyze_messages(mm)


def analyze_messages(mm: MemoryManager) -> None:
    """Bring the messages table's statistics up to date (ANALYZE), so the table's size a search
    reads is known at once rather than when the server's statistics next catch up (on a fresh
    schema whose only large user is searched: that user holds half the table)."""
    with mm.db.pool.connection() as conn:
        conn.execute("ANALYZE conversational_memory")
