"""How a request finds its tools: three signals over every registered tool, one linear fusion.

The toolbox holds its tools in the process (it holds their functions), so it ranks them
there, exactly: every tool gets a score for every request, and the top ``k`` is a
prefix of the top ``k + 1`` (the first five never change with ``k``).

Signals (each in ``Hit``-style ``signals`` of a retrieved tool):

* ``vector``: cosine similarity of the tool's stored embedding (name words, group,
  description, parameters, example requests) with the request, **taken per part**:
  a request of several sentences ("Track my parcel. Also, what is the euro rate?")
  asks for several tools, and one embedding of the whole blurs them, so each sentence
  is embedded (one batch) and a tool keeps its best part;
* ``keyword``: :class:`memory.retrieval.bm25.BM25Index` over the tool's fields (name
  words x3, group x2, description, parameter names, parameter descriptions x0.5,
  example requests), as coverage: the request's idf mass the tool matches (saturated)
  over the request's idf mass plus :data:`KEYWORD_PRIOR`. Stemmed, field-weighted,
  never gated; the prior makes it as strong as the request is informative: one word
  shared with a five-word paraphrase ("what are we paying for hosting" and
  ``pay_bill``) is an accident, ten shared with a forty-word request are not;
* ``group``: the same coverage (prior :data:`GROUP_PRIOR`) of the tool's group as one
  document (the group's name and all its tools' names and descriptions): a request
  about a service lifts all its endpoints, so the second and third tool of one API
  are not crowded out. 0 for a tool registered without a group.

``score = vector + 3 * keyword + 3 * group``. The constants were chosen by
``bench/tool_fusion.py``, which fits on one split and checks on the other: the best
(ToolBench recall@5 + NDCG@5) on G1 among the settings that keep the 181-tool
catalogue's dev split (short paraphrased requests, no groups) at least where it was,
then reported on G2/G3 (held out) and the catalogue's test split; and the reverse
(fitted on G2/G3, checked on G1), which picks a neighbouring setting with the same
gain. (The int8 embedding quantises per batch, so the fits move with the embedding
batching, within keyword 3, group 2-3, prior 130-180: at most 0.005 recall@5 apart.)
Without the prior the keyword weight pulls the two catalogues apart (ToolBench gains up
to weight 2, the catalogue loses from 0.25 on), which is why it was 0.5.

"No suitable tool": the score has one scale for every request of one catalogue, but
not across catalogues (the best score of 95 % of answerable requests is above 0.78 on
ToolBench G1 and only above 0.22 on the 181-tool catalogue's dev requests: request and
description styles differ). So :data:`NO_TOOL_SCORE` (0.2), the default ``Toolbox.min_score``, is
the conservative value under both (it almost never says "no tool" wrongly, and rarely
says it at all); :meth:`Toolbox.calibrate_min_score` sets the threshold for a
catalogue from sample requests it can answer (the score that keeps 95 % of them).
bench/public_retrieval.py measures both on requests whose relevant tools were removed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from collections.abc import Sequence

import numpy as np

from memory.retrieval.bm25 import BM25Index, split_identifier

#: Field weights of the keyword signal (BM25F).
FIELD_WEIGHTS = {"name": 3.0, "category": 2.0, "description": 1.0, "params": 1.0, "param_desc": 0.5,
                 "queries": 1.0}
#: Field weights of the group document.
GROUP_WEIGHTS = {"category": 2.0, "name": 1.0, "description": 1.0}
#: Fusion weights: score = vector + keyword * KEYWORD_WEIGHT + group * GROUP_WEIGHT.
KEYWORD_WEIGHT = 3.0
GROUP_WEIGHT = 3.0
#: Idf mass added to a request's own in the keyword (group) coverage bound (``BM25Index.coverage``).
KEYWORD_PRIOR = 130.0
GROUP_PRIOR = 20.0
#: Below this best score, ``retrieve`` says no registered tool suits the request.
NO_TOOL_SCORE = 0.2
#: At most this many parts of a request are embedded apart (a cap on work per request).
MAX_PARTS = 8
MODES = ("hybrid", "vector", "keyword")

_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")


def request_parts(text: str) -> list[str]:
    """The sentences of a request (the whole text if it has one), at most :data:`MAX_PARTS`."""
    parts = [p.strip() for p in _SENTENCE.split(text) if len(p.strip()) > 1]
    if len(parts) <= 1:
        return [text]
    if len(parts) > MAX_PARTS:  # keep the first ones apart and the rest as one part
        parts = parts[:MAX_PARTS - 1] + [" ".join(parts[MAX_PARTS - 1:])]
    return parts


@dataclass(frozen=True)
class IndexedTool:
    """What the index reads of a tool."""

    name: str
    description: str
    parameters: dict[str, Any]
    queries: Sequence[str]
    category: str
    embedding: Any


def _fields(tool: IndexedTool) -> dict[str, str]:
    props = tool.parameters.get("properties", {}) if isinstance(tool.parameters, dict) else {}
    props = props if isinstance(props, dict) else {}
    descs = []
    for prop in props.values():
        if isinstance(prop, dict):
            if prop.get("description"):
                descs.append(str(prop["description"]))
            if isinstance(prop.get("enum"), list):
                descs.append(" ".join(str(v) for v in prop["enum"] if v is not None))
    return {"name": " ".join(split_identifier(tool.name)), "category": tool.category,
            "description": tool.description, "params": " ".join(" ".join(split_identifier(str(p))) for p in props),
            "param_desc": " ".join(descs), "queries": "\n".join(tool.queries)}


class ToolIndex:
    """The three signals over a fixed set of tools (build a new one when the set changes)."""

    def __init__(self, tools: Sequence[IndexedTool]) -> None:
        self.names = [t.name for t in tools]
        self.n = len(tools)
        dim = next((len(t.embedding) for t in tools if t.embedding is not None), 1)
        matrix = np.zeros((self.n, dim), dtype=np.float32)
        for i, t in enumerate(tools):
            if t.embedding is not None:
                v = np.asarray(t.embedding, dtype=np.float32)
                norm = float(np.linalg.norm(v))
                matrix[i] = v / norm if norm else v
        self.matrix = matrix
        fields = [_fields(t) for t in tools]
        self.keywords = BM25Index(fields, weights=FIELD_WEIGHTS)
        groups: dict[str, list[int]] = {}
        for i, t in enumerate(tools):
            if t.category:
                groups.setdefault(t.category, []).append(i)
        self.member = np.full(self.n, len(groups), dtype=np.int64)  # ungrouped: the extra slot, always 0
        group_docs = []
        for g, (key, members) in enumerate(groups.items()):
            self.member[members] = g
            group_docs.append({"category": key, "name": " ".join(fields[i]["name"] for i in members),
                               "description": " ".join(fields[i]["description"] for i in members)})
        self.groups = BM25Index(group_docs, weights=GROUP_WEIGHTS)

    def signals(self, query: str, part_vectors: np.ndarray | None) -> dict[str, np.ndarray]:
        """Each signal's value for every tool (``part_vectors``: one row per request part; None: no vector)."""
        out: dict[str, np.ndarray] = {}
        if part_vectors is not None:
            raw = np.asarray(part_vectors, dtype=np.float32).reshape(-1, self.matrix.shape[1])
            norms = np.linalg.norm(raw, axis=1, keepdims=True)
            parts = raw / np.where(norms == 0, 1, norms)
            # einsum, not ``@``: a few rows times the catalogue is too small for BLAS threads,
            # which on busy cores cost 10-20 ms here instead of well under one
            sims = np.einsum("pd,nd->pn", parts, self.matrix)
            out["vector"] = sims.max(axis=0).astype(np.float64)
        out["keyword"] = self.keywords.coverage(query, prior=KEYWORD_PRIOR)
        out["group"] = np.append(self.groups.coverage(query, prior=GROUP_PRIOR), 0.0)[self.member]
        return out

    def rank(self, query: str, part_vectors: np.ndarray | None, k: int,
             mode: str = "hybrid") -> list[tuple[int, float, dict[str, float]]]:
        """The ``k`` best tools as (position, score, signals), best first; ties by registration order."""
        sig = self.signals(query, part_vectors if mode != "keyword" else None)
        if mode == "vector":
            score = sig["vector"]
        elif mode == "keyword":
            score = KEYWORD_WEIGHT * sig["keyword"] + GROUP_WEIGHT * sig["group"]
        else:
            score = sig["vector"] + KEYWORD_WEIGHT * sig["keyword"] + GROUP_WEIGHT * sig["group"]
        candidates = np.flatnonzero(score > 0) if mode == "keyword" else np.arange(self.n)
        order = candidates[np.lexsort((candidates, -score[candidates]))][:k]
        return [(int(i), float(score[i]), {name: round(float(v[i]), 6) for name, v in sig.items()})
                for i in order]
