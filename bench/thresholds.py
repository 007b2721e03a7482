"""Calibrate the similarity thresholds of the agent loop and the context builder.

Two settings decide on a cosine similarity of all-MiniLM-L6-v2 (int8 ONNX, the default
backend); each is chosen on one split of public data and checked on others:

* ``workflow_reuse_similarity``: after a turn whose tool steps equal those of the
  user's closest workflow, the loop counts a use of it when the request is at least
  this similar to it (the workflow's embedded text ``name: Handle requests like:
  <request>\\n<request>``, as ``MemoryAgent`` writes it), else it writes a new workflow.
  *Same*: two ToolBench queries with the same set of relevant APIs (one workflow
  recorded from the first, the second as the new request); on the hand-written
  catalogue (``bench/data/tool_catalogue.txt``), a workflow recorded from a tool's first
  example request and its other requests. *Different*: for each workflow, the three
  closest requests with another API set (ToolBench) or for another tool of the same
  domain (catalogue): the requests most likely to be mistaken for it. Chosen on ToolBench
  G1: the lowest threshold at which at most 5 % of the different requests would be
  counted as a use (a wrong count hides a new kind of request from the workflows); its
  true and false rates are then reported on G2+G3 and on the catalogue.
* ``passage_near_duplicate_similarity``: the context builder keeps only one of two
  passages at least this similar. *Near-duplicates*: a passage and the same passage
  re-ingested with small edits (case and punctuation folded; its last tenth of words
  cut; a short header line added). *Distinct*: a passage and the next one of the same
  source (the next turn of the same LoCoMo session; another API of the same ToolBench
  tool): same topic, other content. Chosen on two fit sets, LoCoMo conv-26 + conv-30
  (conversation turns) and the tools of ToolBench's G1 files (templated API docs, where
  two APIs of a tool often differ by a word: "by name" / "by ticker"): the lowest
  threshold at which at most 1 % of distinct pairs would be dropped in each (dropping a
  distinct passage loses information; keeping a near-duplicate only costs tokens, and
  maximal marginal relevance already prefers diverse passages), then reported on
  conv-41 and on the tools that appear only in G2/G3.

Prints, per threshold on a grid, the share of *same* / *near-duplicate* pairs at or
above it and the share of *different* / *distinct* pairs at or above it, per split.

    .venv/bin/python bench/thresholds.py          # ~3-6 min on 2 loaded cores (embedding)
"""

from __future__ import annotations

import json
import random
import re
import sys
from pathlib import Path
from typing import Any
from collections.abc import Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import base_parser, bench_embedder, log, print_table, write_json  # noqa: E402
from _public_data import ROOT, locomo_turns  # noqa: E402
from tool_catalogue import load as load_catalogue  # noqa: E402

from memory.settings import Settings  # noqa: E402

GRID = [round(x, 2) for x in np.arange(0.50, 0.981, 0.02)] + [0.99, 1.0]
MAX_FALSE_REUSE = 0.05
MAX_DISTINCT_DROPPED = 0.01


def _standard(text: str) -> str:
    text = re.sub(r"[^a-z0-9_]+", "_", text.lower()).strip("_")
    return re.sub(r"_+", "_", text) or "x"


def workflow_text(names: Sequence[str], request: str) -> str:
    """What ``MemoryAgent._record_workflow`` stores and ``write_workflow`` embeds."""
    name = " -> ".join(names)[:200]
    return f"{name}: Handle requests like: {request[:300]}\n{request}"


class Embedder:
    """The bench embedder with a cache, returning unit vectors."""

    def __init__(self, backend: str) -> None:
        self.inner = bench_embedder(backend)
        self.cache: dict[str, np.ndarray] = {}

    def __call__(self, texts: Sequence[str]) -> None:
        todo = sorted({t for t in texts if t not in self.cache})
        if todo:
            for t, v in zip(todo, self.inner.embed(todo), strict=True):
                v = np.asarray(v, dtype=np.float32)
                self.cache[t] = v / (np.linalg.norm(v) or 1.0)

    def cos(self, a: str, b: str) -> float:
        return float(self.cache[a] @ self.cache[b])


# -- workflow reuse --------------------------------------------------------------------------
def toolbench_workflow_pairs(emb: Embedder) -> dict[str, tuple[list[float], list[float]]]:
    """Per split: (same-workflow similarities, different-workflow similarities)."""
    queries: list[tuple[str, str, frozenset[tuple[str, str]]]] = []
    for path in sorted((ROOT / "toolbench").glob("*.json")):
        for entry in json.loads(path.read_text()):
            queries.append((path.stem[:2], entry["query"], frozenset(tuple(r) for r in entry["relevant APIs"])))
    names = {q: [_standard(f"{t}_{a}")[:64] for t, a in sorted(rel)] for _, q, rel in queries}
    emb([q for _, q, _ in queries] + [workflow_text(names[q], q) for _, q, _ in queries])
    out: dict[str, tuple[list[float], list[float]]] = {}
    for split, groups in (("ToolBench G1 (fit)", ("G1",)), ("ToolBench G2+G3", ("G2", "G3"))):
        qs = [(q, rel) for g, q, rel in queries if g in groups]
        same, diff = [], []
        for i, (q1, rel1) in enumerate(qs):
            wf = workflow_text(names[q1], q1)
            others = [(emb.cos(wf, q2), rel2 == rel1) for j, (q2, rel2) in enumerate(qs) if j != i and q2 != q1]
            same += [s for s, eq in others if eq]
            diff += sorted((s for s, eq in others if not eq), reverse=True)[:3]
        out[split] = (same, diff)
    return out


def catalogue_workflow_pairs(emb: Embedder) -> tuple[list[float], list[float]]:
    tools = [t for t in load_catalogue() if t.aug]
    requests = {t.name: t.aug + t.dev + t.test for t in tools}
    emb([r for rs in requests.values() for r in rs] + [workflow_text([t.name], requests[t.name][0]) for t in tools])
    same, diff = [], []
    for t in tools:
        wf = workflow_text([t.name], requests[t.name][0])
        same += [emb.cos(wf, r) for r in requests[t.name][1:]]
        others = [emb.cos(wf, r) for o in tools if o.domain == t.domain and o.name != t.name for r in requests[o.name]]
        diff += sorted(others, reverse=True)[:3]
    return same, diff


# -- near-duplicate passages ----------------------------------------------------------------
def edits(text: str) -> list[str]:
    """The same passage re-ingested with small edits."""
    words = text.split()
    folded = re.sub(r"[^\w\s]", "", text.lower())
    cut = " ".join(words[:max(1, len(words) - max(1, len(words) // 10))])
    return [folded, cut, f"Notes:\n{text}"]


def passage_pairs(emb: Embedder, sources: Sequence[Sequence[str]], rng: random.Random,
                  sample: int) -> tuple[list[float], list[float]]:
    """(near-duplicate similarities, distinct similarities) over consecutive passages of each source."""
    pairs = [(a, b) for src in sources for a, b in zip(src, src[1:], strict=False)
             if len(a.split()) >= 12 and len(b.split()) >= 12 and a != b]
    rng.shuffle(pairs)
    pairs = pairs[:sample]
    emb([t for a, b in pairs for t in (a, b, *edits(a))])
    near = [emb.cos(a, e) for a, _ in pairs for e in edits(a)]
    distinct = [emb.cos(a, b) for a, b in pairs]
    return near, distinct


def locomo_sources(conversations: set[str]) -> list[list[str]]:
    sessions: dict[tuple[str, str], list[str]] = {}
    for t in locomo_turns():
        if t.conversation in conversations:
            sessions.setdefault((t.conversation, t.dia_id.split(":")[0]), []).append(f"{t.speaker}: {t.text}")
    return list(sessions.values())


def toolbench_sources(g1: bool) -> list[list[str]]:
    """API passages per tool: the tools of the G1 files, or those appearing only in G2/G3."""
    tools: dict[str, dict[str, str]] = {}
    in_g1: set[str] = set()
    for path in sorted((ROOT / "toolbench").glob("*.json")):
        for entry in json.loads(path.read_text()):
            if path.stem.startswith("G1_"):
                in_g1.update(api["tool_name"] for api in entry["api_list"])
            for api in entry["api_list"]:
                desc = (api.get("api_description") or "").strip()
                if desc:
                    tools.setdefault(api["tool_name"], {}).setdefault(
                        api["api_name"], f"{api['tool_name']}: {api['api_name']} - {desc}")
    return [list(apis.values()) for tool, apis in tools.items() if (tool in in_g1) == g1]


# -- report ---------------------------------------------------------------------------------
def share_at(values: Sequence[float], t: float) -> float:
    return sum(v >= t for v in values) / len(values) if values else 0.0


def choose(negatives: Sequence[float], max_share: float) -> float:
    """The lowest grid threshold with at most ``max_share`` of ``negatives`` at or above it."""
    return next(t for t in GRID if share_at(negatives, t) <= max_share)


def table(title: str, splits: dict[str, tuple[list[float], list[float]]], pos: str, neg: str,
          marks: dict[float, str]) -> None:
    cols = ["threshold"] + [f"{s}: {lab}" for s in splits for lab in (pos, neg)]
    rows = []
    for t in GRID:
        rows.append([f"{t:.2f}{marks.get(t, '')}"]
                    + [f"{share_at(v, t):.3f}" for p, n in splits.values() for v in (p, n)])
    print_table(title + "  (" + ", ".join(f"{s}: {len(p)} / {len(n)} pairs" for s, (p, n) in splits.items()) + ")",
                cols, rows)


def main() -> None:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--sample", type=int, default=300, help="passage pairs per split")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    emb = Embedder(args.backend)
    default = Settings()
    result: dict[str, Any] = {}

    log("workflow reuse: embedding ToolBench queries and workflows")
    wf = toolbench_workflow_pairs(emb)
    log("workflow reuse: the tool catalogue")
    wf["catalogue"] = catalogue_workflow_pairs(emb)
    reuse = choose(wf["ToolBench G1 (fit)"][1], MAX_FALSE_REUSE)
    result["workflow_reuse"] = {"chosen": reuse, "default": default.workflow_reuse_similarity, "splits": {
        s: {"same": len(p), "different": len(n), "same counted": share_at(p, reuse),
            "different counted": share_at(n, reuse)} for s, (p, n) in wf.items()}}
    table("workflow reuse: share of requests counted as a use of the workflow", wf, "same", "different",
          {reuse: " <- chosen on G1", default.workflow_reuse_similarity: " (default)"}
          if reuse != default.workflow_reuse_similarity else {reuse: " <- chosen on G1 (default)"})

    log("near-duplicate passages: embedding")
    nd = {"LoCoMo conv-26+30 (fit)": passage_pairs(emb, locomo_sources({"conv-26", "conv-30"}), rng, args.sample),
          "ToolBench G1 tools (fit)": passage_pairs(emb, toolbench_sources(True), rng, args.sample),
          "LoCoMo conv-41": passage_pairs(emb, locomo_sources({"conv-41"}), rng, args.sample),
          "ToolBench G2/G3-only tools": passage_pairs(emb, toolbench_sources(False), rng, args.sample)}
    near = max(choose(nd[s][1], MAX_DISTINCT_DROPPED) for s in nd if s.endswith("(fit)"))
    result["near_duplicate"] = {"chosen": near, "default": default.passage_near_duplicate_similarity, "splits": {
        s: {"near-duplicate": len(p), "distinct": len(n), "near-duplicates dropped": share_at(p, near),
            "distinct dropped": share_at(n, near)} for s, (p, n) in nd.items()}}
    table("near-duplicate passages: share of pairs at or above the threshold (one of the two dropped)", nd,
          "near-dup", "distinct",
          {near: " <- chosen on the fit sets", default.passage_near_duplicate_similarity: " (default)"}
          if near != default.passage_near_duplicate_similarity else {near: " <- chosen (default)"})
    print(f"\nchosen: workflow_reuse_similarity {reuse:.2f} (default {default.workflow_reuse_similarity:.2f}), "
          f"passage_near_duplicate_similarity {near:.2f} (default {default.passage_near_duplicate_similarity:.2f})")
    for name, part in result.items():
        for split, figures in part["splits"].items():
            print(f"  {name} at {part['chosen']:.2f}, {split}: " + ", ".join(
                f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in figures.items()))
    if args.json:
        write_json(args.json, result)


if __name__ == "__main__":
    main()
