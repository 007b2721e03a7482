"""Reciprocal rank fusion: several ranked lists of ids become one, best first."""

from __future__ import annotations

from typing import Any
from collections.abc import Sequence

#: Reciprocal-rank-fusion constant and weights; see ``fuse_rankings``.
RRF_K = 60


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
