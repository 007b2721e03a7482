"""search_memory's ranking of the rows its statements found (``_order``), without a database:
the hybrid score of each candidate is the documented sum, and ranking leaves the caller's
candidates as they were (``bench/recall.py`` ranks the same candidates under several weights)."""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import datetime, timezone

from memory.tables.search import DEFAULT_WEIGHTS, _Candidate, _order, _rank

AT = datetime(2026, 12, 1, tzinfo=timezone.utc)
W = replace(DEFAULT_WEIGHTS, feedback_weight=0.0)


def message(key: int, vector: float, keyword: float = 0.0, *, thread: str | None = "t", prev: int | None = None,
            nxt: int | None = None, speaker: bool = False) -> _Candidate:
    row = dict(kind="message", id=str(key), content=f"turn {key}", created_at=AT, thread_id=thread, summary_id=None,
               role="user", name=None, metadata=None, prev_id=prev, next_id=nxt, n_covered=None, first_id=None,
               last_id=None, terms=f"turn{key}")
    return _Candidate(row, vector, keyword, None, dict(vector=vector, keyword=keyword, speaker=float(speaker)))


def fact(key: int, vector: float) -> _Candidate:
    row = dict(kind="fact", id=str(key), content=f"fact {key}", created_at=AT, thread_id=None, summary_id=None,
               role=None, name=None, metadata=None, prev_id=None, next_id=None, n_covered=None, first_id=None,
               last_id=None, terms=f"fact{key}")
    return _Candidate(row, vector, 0.0, None, dict(vector=vector, keyword=0.0, speaker=0.0))


def own(c: _Candidate) -> float:
    return c.vector + W.keyword_weight * c.keyword + W.speaker_weight * c.signals["speaker"]


def test_a_message_gains_its_better_adjacent_turn_and_its_threads_best_three() -> None:
    # 1 <- 2 -> 3 in thread t (3's score is negative: "better" is the greater, not the larger
    # magnitude); 5 has only a turn after it, 7 only one before; 9 is alone in thread u
    found = [message(1, 0.30, nxt=2), message(2, 0.50, 0.4, prev=1, nxt=3), message(3, -0.10, prev=2),
             message(5, 0.20, nxt=6), message(6, 0.05, prev=5, nxt=7), message(7, 0.10, prev=6, speaker=True),
             message(9, 0.40, thread="u"), fact(11, 0.45)]
    by_id = {c.row["id"]: c for c in found}
    scores = {c.row["id"]: (c.score, dict(c.signals)) for c in _order(found, "hybrid", W, "q")}
    t_best = sorted((own(c) for c in found if c.row["thread_id"] == "t"), reverse=True)[:3]
    t_mean = sum(t_best) / 3
    adjacent = {"1": own(by_id["2"]), "2": max(own(by_id["1"]), own(by_id["3"])), "3": own(by_id["2"]),
                "5": own(by_id["6"]), "6": max(own(by_id["5"]), own(by_id["7"])), "7": own(by_id["6"]), "9": 0.0}
    for key, better in adjacent.items():
        score, signals = scores[key]
        thread = W.thread_weight * (own(by_id[key]) if key == "9" else t_mean)
        assert signals["neighbour"] == W.adjacent_weight * better, key
        assert signals["thread"] == thread, key
        assert score == own(by_id[key]) + (W.adjacent_weight * better + thread), key
    # a fact is not a turn of a thread: its own score alone
    assert scores["11"][0] == own(by_id["11"]) and "neighbour" not in scores["11"][1]
    # a lone negative neighbour is still the better one (not 0)
    lone = [message(1, 0.3, nxt=2), message(2, -0.2, prev=1)]
    assert {c.row["id"]: c.signals["neighbour"] for c in _order(lone, "hybrid", W, "q")}["1"] == \
        W.adjacent_weight * -0.2


def test_ranking_leaves_the_callers_candidates_as_they_were() -> None:
    found = [message(i, 0.1 * (i % 7), 0.2 * (i % 3), prev=i - 1 if i else None, nxt=i + 1) for i in range(20)]
    before = copy.deepcopy([(c.row, c.vector, c.keyword, c.in_range, c.signals, c.score) for c in found])
    first = [(h.item.id, h.score, h.signals) for h in _rank(found, "hybrid", DEFAULT_WEIGHTS, "turn", 10)]
    for method in ("vector", "keyword"):
        _rank(found, method, DEFAULT_WEIGHTS, "turn", 10)
    _rank(found, "hybrid", replace(DEFAULT_WEIGHTS, fusion="rrf"), "turn", 10)
    assert [(c.row, c.vector, c.keyword, c.in_range, c.signals, c.score) for c in found] == before
    assert [(h.item.id, h.score, h.signals) for h in _rank(found, "hybrid", DEFAULT_WEIGHTS, "turn", 10)] == first
