"""One retrieval core: every similarity read and ``search_memory`` fuse the same signals
the same way (``memory.retrieval.fusion``), so a score means the same everywhere.

The hash embedder is enough here: what is pinned is the keyword signal (IDF coverage),
the fusion formula and that a score does not depend on a row's rank among others.
"""

from __future__ import annotations

import pytest

from memory import MemoryManager
from memory.retrieval.fusion import fuse
from memory.tables.search import DEFAULT_WEIGHTS


def test_a_fact_gets_the_same_signals_from_recall_and_from_search_memory(mm: MemoryManager, user: str) -> None:
    for text in ("User keeps a pet axolotl named Pico", "User commutes by bike to the harbour office",
                 "User is allergic to walnuts", "User prefers answers in metric units"):
        mm.remember("stable_fact", text, user_id=user)
    query = "does the user have an axolotl or any pet"
    recalled = {h.item.content: h for h in mm.recall(query, user_id=user, k=10)}
    searched = {h.item.content: h for h in mm.search_memory(query, user_id=user, scope="facts", k=10)}
    assert recalled["User keeps a pet axolotl named Pico"].signals["keyword"] > 0
    assert set(searched) <= set(recalled) and searched
    for content, hit in searched.items():
        other = recalled[content]
        assert other.signals["vector"] == pytest.approx(hit.signals["vector"], abs=1e-6)
        assert other.signals["keyword"] == pytest.approx(hit.signals["keyword"], abs=1e-9)
        # one formula, each reader with its weights (facts carry no speaker or time signal)
        assert other.score == pytest.approx(fuse(other.signals, {"vector": 1.0, "keyword": mm.settings.keyword_weight}))
        assert hit.score == pytest.approx(fuse(hit.signals, {"vector": 1.0, "keyword": DEFAULT_WEIGHTS.keyword_weight}))
    # and one weight by default: the same fact scores the same in both lists
    assert mm.settings.keyword_weight == DEFAULT_WEIGHTS.keyword_weight
    for content, hit in searched.items():
        assert recalled[content].score == pytest.approx(hit.score, abs=1e-6)


def test_the_keyword_signal_weighs_rare_words_above_common_ones(mm: MemoryManager, user: str) -> None:
    fillers = [f"Weekly report number {i} for the finance team" for i in range(8)]
    mm.write_knowledge_batch([{"content": t} for t in fillers], user_id=user)
    rare = mm.write_knowledge("The walrus enclosure needs a new pump", user_id=user)
    common = mm.write_knowledge("Another report went out on Monday", user_id=user)
    both = mm.write_knowledge("Walrus report: pump replaced, enclosure reopened", user_id=user)
    hits = {h.item.id: h for h in mm.read_knowledge("walrus report", user_id=user, k=20)}
    kw = {key: hits[i.id].signals["keyword"] for key, i in (("rare", rare), ("common", common), ("both", both))}
    # IDF coverage in 0..1: both words > the rare word alone > the common word alone
    assert 1.0 >= kw["both"] > kw["rare"] > kw["common"] > 0


def test_a_similarity_score_is_absolute_not_a_rank(mm: MemoryManager, user: str) -> None:
    passage = mm.write_knowledge("Quarterly inventory of the spare parts shelf", user_id=user)
    query = "tell me something about it"  # shares no word with the passage
    first = next(h for h in mm.read_knowledge(query, user_id=user, k=50) if h.item.id == passage.id)
    # rows closer to the query now rank above the passage; its score stays what it was
    mm.write_knowledge_batch([{"content": f"tell me something about it, part {i}"} for i in range(6)],
                             user_id=user)
    hits = mm.read_knowledge(query, user_id=user, k=50)
    again = next(h for h in hits if h.item.id == passage.id)
    assert hits.index(again) > 0 and again.signals["keyword"] == 0.0
    assert again.score == pytest.approx(first.score) == pytest.approx(first.signals["vector"])
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
