"""The fusion both retrieval paths share: vector ranks + gated keyword ranks, weighted RRF.

:meth:`Toolbox.retrieve` (the tools this process registered) and the CLI's
``tools search`` (every stored tool of a namespace) must rank alike, so the ranking
lives here once. The settings and why they are what they are: ``toolbox.toolbox``.
"""

from __future__ import annotations

from typing import Sequence

from memory.retrieval.fusion import fuse_rankings
from memory import Database
from memory.retrieval.embeddings import EmbeddingService

from . import store
from .text import keyword_query

#: Fusion settings, chosen on the dev split of bench/tool_retrieval.py (never on its test split):
#: weighted reciprocal rank fusion (vector 1.0, keyword 0.5, the usual constant 60), where
#: a tool enters the keyword ranking only if its text covers at least 70 % of the request's
#: word information (IDF mass). Ungated, keyword ranks made paraphrased requests worse at
#: every weight tried (short tool texts share incidental words like "city" or "list" with
#: almost any request); gated, they change nothing on paraphrases and fix the requests
#: that name a tool's own words.
DEFAULT_WEIGHTS = (1.0, 0.5)
DEFAULT_RRF_K = 60
DEFAULT_MIN_COVERAGE = 0.7
MODES = ("hybrid", "vector", "keyword")


def rank_tools(db: Database, embeddings: EmbeddingService, namespace: str, names: Sequence[str], query: str,
               k: int, *, mode: str = "hybrid", weights: Sequence[float] = DEFAULT_WEIGHTS,
               rrf_k: int = DEFAULT_RRF_K, min_coverage: float = DEFAULT_MIN_COVERAGE) -> list[tuple[str, float | None]]:
    """The ``k`` best of ``names`` for ``query``, each with its cosine similarity (None if keyword-only)."""
    pool = max(4 * k, 20)
    ranked_vec: list[tuple[str, float]] = []
    ranked_kw: list[str] = []
    if mode != "keyword":
        qvec = embeddings.embed([query[:4000]])[0]
        ranked_vec = store.vector_ranking(db, namespace, names, qvec, pool)
    tsq = keyword_query(query)
    if mode != "vector" and tsq:
        ranked_kw = [n for n, coverage in store.keyword_ranking(db, namespace, names, tsq.replace(" | ", " "), tsq,
                                                                pool)
                     if mode == "keyword" or coverage >= min_coverage]
    sims = dict(ranked_vec)
    order = fuse_rankings([[n for n, _ in ranked_vec], ranked_kw], list(weights), k=rrf_k)
    return [(n, sims.get(n)) for n in order[:k]]
