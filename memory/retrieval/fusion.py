"""Fusion: how the signals of a search become one score.

**One fusion for every reader of memory.** A hit's score is a weighted sum of its
signals, each on an absolute scale:

    score = vector_weight * vector + keyword_weight * keyword (+ the reader's own signals)

* ``vector``: the cosine similarity of the row's embedding to the query's (-1..1; 0 for
  a row written without an embedding);
* ``keyword``: IDF coverage of the query's words (0..1): the share of the query's
  information (the summed IDF of its stemmed words, at least ``MIN_TERMS`` rare words'
  worth) that the row contains. The SQL is :data:`memory.tables.base.KEYWORD_CTES` for
  the similarity reads and the same formula in ``memory.tables.search`` for
  ``search_memory``;
* a reader may add signals of its own (``search_memory``: speaker, time, neighbour,
  thread), with their weights, through the same :func:`fuse`.

Because every term is absolute, a score means the same for every query and every
reader (knowledge, workflows, entities, summaries, facts, ``search_memory``), so a
threshold can be applied to it. :func:`fuse_rankings` (reciprocal rank fusion) stays for
benchmarks that compare against it and for lists with no scores.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Mapping, Sequence

from memory.settings import default_of

#: Reciprocal-rank-fusion constant; see ``fuse_rankings``.
RRF_K = 60

#: The keyword signal's weight, for every reader: ``Settings.keyword_weight`` (the
#: similarity reads; how it was chosen is written there) is also the default of
#: ``SearchWeights.keyword_weight`` (``search_memory``).
KEYWORD_WEIGHT: float = default_of("keyword_weight")

#: The keyword signal's denominator is at least this many rare words' IDF, so a query
#: with one informative word cannot reach full keyword score by matching it.
MIN_TERMS = 2.0


def fuse(signals: Mapping[str, float], weights: Mapping[str, float]) -> float:
    """The fused score: the sum of each signal times its weight (a signal with no weight counts 0)."""
    return sum(float(weights.get(name, 0.0)) * float(value) for name, value in signals.items())


def fuse_rankings(rankings: Sequence[Sequence[Any]], weights: Sequence[float] | None = None,
                  k: int = RRF_K) -> list[Any]:
    """Weighted reciprocal rank fusion of several ranked id lists, best first."""
    weights = weights or [1.0] * len(rankings)
    scores: dict[Any, float] = {}
    first_seen: dict[Any, int] = {}
    for ranking, weight in zip(rankings, weights, strict=False):
        for rank, key in enumerate(ranking):
            scores[key] = scores.get(key, 0.0) + weight / (k + rank + 1)
            first_seen.setdefault(key, len(first_seen))
    return sorted(scores, key=lambda key: (-scores[key], first_seen[key]))
