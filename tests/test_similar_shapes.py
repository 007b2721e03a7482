"""The similarity reads' two execution shapes (``memory.tables.base``), on a real Postgres.

* ``exact`` (a filter with few rows: every row read once) and ``indexed`` (HNSW and
  bounded gin probes) agree where the indexed shape's bounds are not reached, and the
  switch picks the shape by the number of rows under the filter;
* above the per-word bound, a word's document frequency is estimated (a common word
  weighs little), a rare word still finds its row among many common ones, and a row
  with every common word of the query is found whatever the per-word samples held;
* one user's rows never leak into another's results nor change their scores;
* a filter that keeps few of a user's rows still gets ``k`` rows in both shapes.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from psycopg import sql

from memory import InvalidInputError, MemoryManager
from memory.store.rows import KnowledgeItem


def word() -> str:
    """A word no other test writes."""
    return "quokka" + uuid.uuid4().hex[:8]


def similar(mm: MemoryManager, query: str, user: str, *, k: int = 10, shape: str = "auto",
            where: str = "user_id = %(uid)s", postings: str | None = None, **params: Any) -> list[Any]:
    return mm.knowledge._similar("knowledge_memory", KnowledgeItem, query, sql.SQL(where),  # type: ignore[arg-type]
                                 {"uid": user, **params}, k=k, shape=shape, postings=postings)


#: The indexed shape's two sources of a word's rows: the gin index (every table) and the
#: postings of migration 013 (knowledge_memory, what read_knowledge uses).
SOURCES = pytest.mark.parametrize("postings", [None, "knowledge_terms"], ids=["gin", "postings"])


PASSAGES = [
    "Bergen is the rainiest city in Norway.",
    "The Bergen marathon starts at the fish market.",
    "Tromso has northern lights from September to March.",
    "The export job EXP-2291 failed with disk quota exceeded.",
    "PostgreSQL 18 adds asynchronous I/O.",
    "The fish market in Bergen opens at eight.",
    "Disk quota for EXP jobs was raised to 2 TB.",
    "Northern lights are best seen away from city lights.",
]


def test_the_shapes_agree_below_the_bounds(mm: MemoryManager, user: str) -> None:
    mm.write_knowledge_batch([{"content": p} for p in PASSAGES], user_id=user)
    for q in ("fish market in Bergen", "disk quota EXP", "northern lights city", "asynchronous postgres"):
        exact, indexed = similar(mm, q, user, shape="exact"), similar(mm, q, user, shape="indexed")
        assert exact, q
        # the same keyword signals for every row either shape scored (both exact here)
        kw_exact = {h.item.id: h.signals["keyword"] for h in exact if h.signals["keyword"] > 0}
        kw_indexed = {h.item.id: h.signals["keyword"] for h in indexed if h.signals["keyword"] > 0}
        assert kw_exact and kw_exact == pytest.approx(kw_indexed), q
        assert [h.item.id for h in exact[:3]] == [h.item.id for h in indexed[:3]], q
        # 8 rows are below the default switch point: auto is the exact shape
        assert [(h.item.id, h.score) for h in similar(mm, q, user)] == [(h.item.id, h.score) for h in exact], q


def test_an_unknown_shape_is_invalid_input(mm: MemoryManager, user: str) -> None:
    with pytest.raises(InvalidInputError, match="shape must be one of"):
        similar(mm, "anything", user, shape="fast")


@SOURCES
def test_a_common_word_above_the_bound_weighs_little_and_a_rare_one_finds_its_row(
        small_bounds: MemoryManager, user: str, postings: str | None) -> None:
    mm = small_bounds
    common, rare = word(), word()
    rows = mm.write_knowledge_batch([{"content": f"note {i} about the {common}"} for i in range(40)]
                                    + [{"content": f"the {common} near the {rare}"}], user_id=user)
    target = rows[-1].id
    auto = similar(mm, f"{common} {rare}", user, k=5, postings=postings)
    indexed = similar(mm, f"{common} {rare}", user, k=5, shape="indexed", postings=postings)
    assert [h.item.id for h in auto] == [h.item.id for h in indexed]  # 41 rows > 12: indexed
    assert auto[0].item.id == target
    # "common" is in all 41 rows, far above the cap of 4: its frequency is estimated from
    # the sample, not taken as 4, so a row with it alone gets almost no keyword signal
    alone = [h.signals["keyword"] for h in auto if h.item.id != target]
    assert alone and max(alone) < 0.05 < auto[0].signals["keyword"]


@SOURCES
def test_a_row_with_every_common_word_is_found_beyond_the_samples(small_bounds: MemoryManager, user: str,
                                                                   postings: str | None) -> None:
    mm = small_bounds
    a, b = word(), word()
    # written first, so a per-word sample of 4 rows (in table order) holds only these
    mm.write_knowledge_batch([{"content": f"{a} entry {i}"} for i in range(20)]
                             + [{"content": f"{b} entry {i}"} for i in range(20)], user_id=user)
    both = mm.write_knowledge(f"where {a} meets {b}", user_id=user).id
    hits = similar(mm, f"{a} {b}", user, k=10, postings=postings)
    by_id = {h.item.id: h for h in hits}
    assert both in by_id and by_id[both].signals["keyword"] == max(h.signals["keyword"] for h in hits) > 0


@SOURCES
def test_one_users_rows_never_reach_another_user(small_bounds: MemoryManager, user: str,
                                                  postings: str | None) -> None:
    mm = small_bounds
    w, other = word(), f"other-{uuid.uuid4().hex[:8]}"
    mine = {r.id for r in mm.write_knowledge_batch([{"content": f"{w} fact {i}"} for i in range(3)], user_id=user)}
    before = [(h.item.id, h.score, h.signals) for h in similar(mm, f"{w} fact", user, postings=postings)]
    # the other user gets many rows with the same words: the indexed shape for them
    theirs = {r.id for r in mm.write_knowledge_batch([{"content": f"{w} fact {i} of theirs"} for i in range(30)],
                                                     user_id=other)}
    for shape in ("auto", "exact", "indexed"):
        assert {h.item.id for h in similar(mm, f"{w} fact", user, shape=shape, postings=postings)} == mine, shape
        assert {h.item.id for h in similar(mm, f"{w} fact", other, k=50, shape=shape,
                                       postings=postings)} == theirs, shape
    # nor change the scores (document frequencies and row counts are this user's own)
    assert [(h.item.id, h.score, h.signals) for h in similar(mm, f"{w} fact", user, postings=postings)] == before
    assert {h.item.id for h in mm.read_knowledge(f"{w} fact", user_id=user, k=10)} == mine


@SOURCES
def test_a_filtered_read_still_returns_k_rows(small_bounds: MemoryManager, user: str, postings: str | None) -> None:
    mm = small_bounds
    w = word()
    # 60 rows, one in six from the source the filter keeps; the query is nearest to the others
    mm.write_knowledge_batch([{"content": f"{w} harbour crane {i}" if i % 6 else f"ledger line {i}",
                               "source": "kept" if i % 6 == 0 else "other"} for i in range(60)], user_id=user)
    for shape in ("auto", "exact", "indexed"):
        hits = similar(mm, f"{w} harbour crane", user, k=5, shape=shape, postings=postings,
                       where="user_id = %(uid)s AND source = %(src)s", src="kept")
        assert len(hits) == 5 and {h.item.source for h in hits} == {"kept"}, shape
