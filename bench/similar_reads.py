"""Similarity reads (``read_knowledge`` and the other ``_similar`` readers) on public data.

The knowledge, workflow, entity, summary and fact reads share one ranking
(``memory.tables.base.Table._similar``). This bench measures it on two public sets
written as knowledge passages, through the library, with the real MiniLM:

* **LoCoMo** (three conversations, one user each): every turn is a passage
  (``speaker: text``); the questions of categories 1-4 ask for their evidence turns.
  Split by conversation: conv-26 and conv-30 (fit), conv-41 (held out).
* **ToolBench** (2,479 APIs, one user): every API is a passage (``tool: api -
  description``); each query asks for its relevant APIs. Split G1 (fit) / G2+G3
  (held out).

Methods: ``vector`` (``hybrid=False``), ``hybrid`` (the library's default fusion and
weight) and the same statement with other keyword weights (``kw=W``), so the weight is
chosen on the fit splits and reported on the held-out ones. Printed: R@1/5/10 and MRR of
the relevant rows, per split.

    .venv/bin/python bench/similar_reads.py            # ~5-10 min on 2 loaded cores
    .venv/bin/python bench/similar_reads.py --weights 0.25,0.5,1,2
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any
from collections.abc import Callable, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Timer, base_parser, bench_embedder, embedded_server, log, open_manager, print_table, write_json  # noqa: E402
from _public_data import ROOT, locomo_questions, locomo_turns  # noqa: E402
from psycopg import sql  # noqa: E402

from memory import MemoryManager  # noqa: E402
from memory.store.rows import KnowledgeItem  # noqa: E402

FIT_CONVERSATIONS = ("conv-26", "conv-30")
KS = (1, 5, 10)


def _toolbench() -> tuple[list[tuple[str, str]], list[tuple[str, str, list[str]]]]:
    """(API key, passage text) pairs and (file, query, relevant keys) over the six files."""
    apis: dict[str, str] = {}
    queries: list[tuple[str, str, list[str]]] = []
    for path in sorted((ROOT / "toolbench").glob("*.json")):
        for entry in json.loads(path.read_text()):
            queries.append((path.stem, entry["query"], [f"{t}::{a}" for t, a in entry["relevant APIs"]]))
            for api in entry["api_list"]:
                key = f"{api['tool_name']}::{api['api_name']}"
                desc = (api.get("api_description") or "").strip()
                apis.setdefault(key, f"{api['tool_name']}: {api['api_name']}" + (f" - {desc}" if desc else ""))
    return list(apis.items()), queries


def metrics(ranked: Sequence[Sequence[str]], relevant: Sequence[set[str]]) -> dict[str, float]:
    out = {f"R@{k}": 0.0 for k in KS} | {"MRR": 0.0}
    for top, rel in zip(ranked, relevant, strict=True):
        for k in KS:
            out[f"R@{k}"] += len(rel & set(top[:k])) / len(rel)
        out["MRR"] += next((1 / (i + 1) for i, d in enumerate(top) if d in rel), 0.0)
    n = max(1, len(relevant))
    return {k: round(v / n, 3) for k, v in out.items()}


def searchers(mm: MemoryManager, weights: Sequence[float]) -> dict[str, Callable[[str, str], list[str]]]:
    """Each method: (query, user) -> the sources of the top 10 passages."""
    where = sql.SQL("user_id = %(uid)s")

    def at_weight(w: float) -> Callable[[str, str], list[str]]:
        def search(q: str, u: str) -> list[str]:
            hits = mm.knowledge._similar("knowledge_memory", KnowledgeItem, q, where, {"uid": u}, k=10,
                                         keyword_weight=w)
            return [h.item.source for h in hits]
        return search

    out: dict[str, Callable[[str, str], list[str]]] = {
        "vector": lambda q, u: [h.item.source for h in mm.read_knowledge(q, user_id=u, k=10, hybrid=False)],
        "hybrid (default)": lambda q, u: [h.item.source for h in mm.read_knowledge(q, user_id=u, k=10)],
    }
    for w in weights:
        out[f"kw={w:g}"] = at_weight(w)
    return out


def run(args: Any) -> dict[str, Any]:
    weights = [float(w) for w in args.weights.split(",") if w.strip()]
    turns = locomo_turns()
    questions = [q for q in locomo_questions() if q.evidence]
    apis, tb_queries = _toolbench()
    result: dict[str, Any] = {"weights": weights, "splits": {}}
    with embedded_server() as uri:
        mm = open_manager(uri, embedder=bench_embedder(args.backend))
        try:
            with Timer() as t_write:
                by_conv: dict[str, list[dict[str, Any]]] = {}
                for t in turns:
                    by_conv.setdefault(t.conversation, []).append(
                        {"content": f"{t.speaker}: {t.text}", "source": t.dia_id})
                for conv, items in by_conv.items():
                    mm.write_knowledge_batch(items, user_id=conv)
                mm.write_knowledge_batch([{"content": text, "source": key} for key, text in apis],
                                         user_id="toolbench")
            log(f"wrote {len(turns)} turns and {len(apis)} APIs in {t_write.seconds:.0f} s")
            sets: dict[str, list[tuple[str, str, set[str]]]] = {
                "LoCoMo fit (conv-26, conv-30)": [(q.text, q.conversation, set(q.evidence)) for q in questions
                                                  if q.conversation in FIT_CONVERSATIONS],
                "LoCoMo held out (conv-41)": [(q.text, q.conversation, set(q.evidence)) for q in questions
                                              if q.conversation not in FIT_CONVERSATIONS],
                "ToolBench fit (G1)": [(q, "toolbench", set(rel)) for f, q, rel in tb_queries if f.startswith("G1_")],
                "ToolBench held out (G2+G3)": [(q, "toolbench", set(rel)) for f, q, rel in tb_queries
                                               if not f.startswith("G1_")],
            }
            for name, search in searchers(mm, weights).items():
                with Timer() as t:
                    for split, qs in sets.items():
                        ranked = [search(q, u) for q, u, _ in qs]
                        result["splits"].setdefault(split, {"queries": len(qs), "methods": {}})
                        result["splits"][split]["methods"][name] = metrics(ranked, [rel for _, _, rel in qs])
                log(f"{name}: {t.seconds:.0f} s")
        finally:
            mm.close()
    return result


def main() -> None:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--weights", default="0.25,0.5,1,2",
                        help="keyword weights to measure besides the default (comma-separated)")
    args = parser.parse_args()
    result = run(args)
    for split, table in result["splits"].items():
        cols = ["method", *[f"R@{k}" for k in KS], "MRR"]
        print_table(f"{split}: {table['queries']} questions", cols,
                    [[m, *v.values()] for m, v in table["methods"].items()])
    if args.json:
        write_json(args.json, result)


if __name__ == "__main__":
    main()
