"""The ranking both retrieval paths share: request parts embedded in one batch, then the index.

:meth:`Toolbox.retrieve` / :meth:`Toolbox.retrieve_many` (the tools this process
registered) and the CLI's ``tools search`` (every stored tool of a namespace) rank
alike, so the steps live here once. The signals and their weights: ``index.py``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from memory.retrieval.embeddings import EmbeddingService

from .index import MODES, ToolIndex, request_parts

__all__ = ["MODES", "rank_many"]


def embed_requests(embeddings: EmbeddingService, queries: Sequence[str]) -> list[np.ndarray]:
    """Each request's parts as a matrix (one row per part), all parts embedded in one batch."""
    parts = [request_parts(q) for q in queries]
    flat = [p[:4000] for ps in parts for p in ps]
    vectors = embeddings.embed(flat) if flat else []
    out, start = [], 0
    for ps in parts:
        out.append(np.stack(vectors[start:start + len(ps)]))
        start += len(ps)
    return out


def rank_many(index: ToolIndex, embeddings: EmbeddingService, queries: Sequence[str], k: int,
              mode: str = "hybrid") -> list[list[tuple[int, float, dict[str, float]]]]:
    """For each request, the ``k`` best tools of ``index`` as (position, score, signals)."""
    if index.n == 0:
        return [[] for _ in queries]
    vectors: list[np.ndarray | None] = list(embed_requests(embeddings, queries)) if mode != "keyword" \
        else [None] * len(queries)
    return [index.rank(q, v, k, mode) for q, v in zip(queries, vectors, strict=True)]
