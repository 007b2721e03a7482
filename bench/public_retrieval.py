"""Retrieval on public data: Toolbox.retrieve on ToolBench and search_memory on LoCoMo, next to plain baselines.

Reads ``../shared/data`` (see its README; never copied into the project) and says so
when it is absent. ``--part tools`` (this file), ``--part memory``
(``bench/_public_memory.py``) or ``--part all``.

Tools: StableToolBench's test queries (765 in six files) over the union of their
``api_list``s (2,479 APIs of 811 tools). Each API is registered through the public API
as an OpenAI tool schema (``Toolbox.register_schemas``): the function name ToolBench's
own converter would give (``<api>_for_<tool>``, 64 characters), the API's description
as it is, its parameters as a JSON schema, and its tool as the ``category``. Computed
in the same run, over the same APIs written as ``tool: api - description``:

* **dense**: MiniLM cosine (the library's backend);
* **bm25**: ``bm25s`` with its standard parameters (Lucene BM25, k1 1.5, b 0.75,
  English stemming and stop words);
* **hybrid**: reciprocal rank fusion of the two (each list's top 100), k = 60.

Printed per split (G1: one tool per query, where the toolbox's constants were chosen;
G2/G3: several tools per query, held out; and all 765): R@1/5/10 of the relevant APIs
(the share found, averaged over queries), NDCG@5, MRR@10, and per-query latency
(embedding included; ``Toolbox.retrieve`` one request at a time). Then "no suitable
tool": ``calibrate_min_score`` on G1's requests (keep 95 %), then on G2/G3 the share of
requests still said answerable and, for each request with its relevant APIs taken out
of the ranking, the share said to have no suitable tool (the best other API's score,
which the ranking over every tool gives exactly; the group signal still counts the
removed APIs' words, so this is a lower bound of the flag rate).

    .venv/bin/python bench/public_retrieval.py --part tools     # ~5-8 min on 2 cores
    .venv/bin/python bench/public_retrieval.py --part all --json /tmp/public.json
"""

from __future__ import annotations

import json
import math
import re
import sys
import time
from pathlib import Path
from typing import Any
from collections.abc import Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (Timer, base_parser, bench_embedder, embedded_server, log, open_manager, percentiles,  # noqa: E402
                     print_load, print_table, write_json)

from toolbox import Toolbox  # noqa: E402

DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
TOOLBENCH = DATA / "toolbench"
SPLITS = {"G1 (fit)": ("G1_",), "G2+G3 (held out)": ("G2_", "G3_"), "all": ("G",)}


def _standard(text: str) -> str:
    text = re.sub(r"[^a-z0-9_]+", "_", text.lower()).strip("_")
    return re.sub(r"_+", "_", text) or "x"


def load_toolbench() -> tuple[dict[tuple[str, str], dict[str, Any]], list[tuple[str, str, list[tuple[str, str]]]]]:
    apis: dict[tuple[str, str], dict[str, Any]] = {}
    queries: list[tuple[str, str, list[tuple[str, str]]]] = []
    for path in sorted(TOOLBENCH.glob("*.json")):
        for entry in json.loads(path.read_text()):
            queries.append((path.stem, entry["query"], [tuple(r) for r in entry["relevant APIs"]]))
            for api in entry["api_list"]:
                apis.setdefault((api["tool_name"], api["api_name"]), api)
    return apis, queries


def tool_names(keys: Sequence[tuple[str, str]]) -> list[str]:
    """The function name ToolBench's own converter gives each (tool, api): ``<api>_for_<tool>``, 64 characters."""
    names: list[str] = []
    taken: set[str] = set()
    for tool, api in keys:
        base = f"{_standard(api)}_for_{_standard(tool)}"[:64]
        name, n = base, 2
        while name in taken:
            name = f"{base[:60]}_{n}"
            n += 1
        taken.add(name)
        names.append(name)
    return names


def openai_schema(key: tuple[str, str], api: dict[str, Any], name: str) -> dict[str, Any]:
    props: dict[str, Any] = {}
    required = []
    kinds = {"string": "string", "number": "number", "integer": "integer", "boolean": "boolean"}
    groups = ((False, api.get("required_parameters") or []), (True, api.get("optional_parameters") or []))
    for optional, params in groups:
        for p in params:
            pname = str(p.get("name") or "").strip()
            if not pname or pname in props:
                continue
            prop: dict[str, Any] = {"type": kinds.get(str(p.get("type", "")).lower(), "string")}
            if p.get("description"):
                prop["description"] = str(p["description"])
            props[pname] = prop
            if not optional:
                required.append(pname)
    return {"type": "function", "function": {"name": name, "description": (api.get("api_description") or ""),
                                             "parameters": {"type": "object", "properties": props,
                                                            "required": required}}}


def metrics(rankings: Sequence[Sequence[int]], relevant: Sequence[set[int]]) -> dict[str, float]:
    out = {"R@1": 0.0, "R@5": 0.0, "R@10": 0.0, "NDCG@5": 0.0, "MRR": 0.0}
    for ranked, rel in zip(rankings, relevant, strict=True):
        top = list(ranked[:10])
        for k in (1, 5, 10):
            out[f"R@{k}"] += len(rel & set(top[:k])) / len(rel)
        dcg = sum(1 / math.log2(i + 2) for i, d in enumerate(top[:5]) if d in rel)
        out["NDCG@5"] += dcg / sum(1 / math.log2(i + 2) for i in range(min(5, len(rel))))
        out["MRR"] += next((1 / (i + 1) for i, d in enumerate(top) if d in rel), 0.0)
    n = max(1, len(relevant))
    return {k: v / n for k, v in out.items()}


def _rrf(*rankings: Sequence[int], k: int = 60) -> list[int]:
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, d in enumerate(ranking):
            scores[d] = scores.get(d, 0.0) + 1.0 / (k + rank + 1)
    return sorted(scores, key=lambda d: -scores[d])


def run_tools(args: Any) -> dict[str, Any]:
    if not TOOLBENCH.is_dir():
        return {"skipped": f"{TOOLBENCH} not found: the ToolBench dev data is read from ../shared/data (see its "
                           "README); nothing was measured"}
    import bm25s
    import Stemmer

    apis, queries = load_toolbench()
    keys = list(apis)
    names = tool_names(keys)
    position = {name: i for i, name in enumerate(names)}
    index_of = {key: i for i, key in enumerate(keys)}
    relevant = [{index_of[r] for r in rel if r in index_of} for _, _, rel in queries]
    texts = [q for _, q, _ in queries]
    log(f"ToolBench: {len(keys)} APIs of {len({k[0] for k in keys})} tools, {len(queries)} queries")
    result: dict[str, Any] = {"apis": len(keys), "queries": len(queries)}
    with embedded_server() as uri:
        embedder = bench_embedder(args.backend, args.torch_threads)
        mm = open_manager(uri, embedder=embedder)
        tb = Toolbox(mm, namespace="toolbench")
        with Timer() as t_reg:
            tb.register_schemas([openai_schema(k, apis[k], n) for k, n in zip(keys, names, strict=True)],
                                categories=[k[0] for k in keys])
        log(f"registered {len(tb)} tools in {t_reg.seconds:.1f}s")
        result["register_s"] = t_reg.seconds
        tb.retrieve("warm up", 1)
        toolbox_rank, toolbox_best, lat_tb = [], [], []
        for q in texts:
            start = time.perf_counter()
            hits = tb.retrieve(q, 10)
            lat_tb.append(time.perf_counter() - start)
            toolbox_rank.append([position[h.item.name] for h in hits])
            toolbox_best.append([(position[h.item.name], h.score) for h in hits])
        # Baselines over "tool: api - description", same embedder, same run.
        base_texts = [f"{t}: {a}" + (f" - {d}" if (d := (apis[(t, a)].get('api_description') or '').strip())
                                     else "") for t, a in keys]
        corpus = np.asarray(embedder.embed(base_texts), dtype=np.float32)
        corpus /= np.linalg.norm(corpus, axis=1, keepdims=True)
        stemmer = Stemmer.Stemmer("english")
        bm = bm25s.BM25()
        bm.index(bm25s.tokenize(base_texts, stopwords="en", stemmer=stemmer, show_progress=False),
                 show_progress=False)
        dense_rank, bm_rank, hybrid_rank, lat_dense, lat_bm = [], [], [], [], []
        for q in texts:
            start = time.perf_counter()
            qv = np.asarray(embedder.embed([q + " "]), dtype=np.float32)[0]  # a fresh embedding, no cache
            d = list(np.argsort(-(corpus @ (qv / np.linalg.norm(qv))), kind="stable")[:100])
            mid = time.perf_counter()
            docs, _ = bm.retrieve(bm25s.tokenize([q], stopwords="en", stemmer=stemmer, show_progress=False),
                                  k=100, show_progress=False)
            b = [int(x) for x in docs[0]]
            end = time.perf_counter()
            lat_dense.append(mid - start)
            lat_bm.append(end - mid)
            dense_rank.append([int(x) for x in d])
            bm_rank.append(b)
            hybrid_rank.append(_rrf(dense_rank[-1], b))
        mm.close()
    methods = {"Toolbox.retrieve": toolbox_rank, "dense (MiniLM)": dense_rank, "bm25 (bm25s)": bm_rank,
               "hybrid (RRF k=60)": hybrid_rank}
    result["latency"] = {"Toolbox.retrieve": percentiles(lat_tb), "dense (MiniLM)": percentiles(lat_dense),
                         "bm25 (bm25s)": percentiles(lat_bm),
                         "hybrid (RRF k=60)": percentiles([a + b for a, b in zip(lat_dense, lat_bm, strict=True)])}
    result["splits"] = {}
    for split, prefixes in SPLITS.items():
        idx = [i for i, (f, _, _) in enumerate(queries) if f.startswith(prefixes)]
        result["splits"][split] = {"queries": len(idx), **{
            m: metrics([r[i] for i in idx], [relevant[i] for i in idx]) for m, r in methods.items()}}
    result["no_tool"] = _no_tool(tb, texts, queries, relevant, toolbox_best)
    return result


def _no_tool(tb: Toolbox, texts: list[str], queries: list[Any], relevant: list[set[int]],
             best: list[list[tuple[int, float]]]) -> dict[str, Any]:
    fit = [i for i, (f, _, _) in enumerate(queries) if f.startswith("G1_")]
    held = [i for i, (f, _, _) in enumerate(queries) if not f.startswith("G1_")]
    default = tb.min_score
    top = [b[0][1] for b in best]
    without = [next(s for p, s in b if p not in relevant[i]) for i, b in enumerate(best)]
    tb.min_score = float(sorted(top[i] for i in fit)[int(0.05 * len(fit))])  # what calibrate_min_score(keep=0.95) sets
    out = {}
    for label, threshold in (("default", default), ("calibrated on G1", tb.min_score)):
        out[label] = {"threshold": threshold,
                      **{f"{name} answerable kept": float(np.mean([top[i] >= threshold for i in idx]))
                         for name, idx in (("G1", fit), ("G2+G3", held))},
                      **{f"{name} relevant removed, flagged": float(np.mean([without[i] < threshold for i in idx]))
                         for name, idx in (("G1", fit), ("G2+G3", held))}}
    return out


def print_tools(result: dict[str, Any]) -> None:
    if "skipped" in result:
        print(f"\nTOOLS: skipped - {result['skipped']}")
        return
    for split, table in result["splits"].items():
        rows = [[m, *(v[c] for c in ("R@1", "R@5", "R@10", "NDCG@5", "MRR")),
                 result["latency"][m]["p50_ms"], result["latency"][m]["p95_ms"]]
                for m, v in table.items() if m != "queries"]
        print_table(f"ToolBench {split}: {table['queries']} queries over {result['apis']} APIs",
                    ["method", "R@1", "R@5", "R@10", "NDCG@5", "MRR", "p50 ms", "p95 ms"], rows)
    rows = [[label, *v.values()] for label, v in result["no_tool"].items()]
    print_table("No suitable tool (Toolbox.retrieve(...).suitable)",
                ["min_score", "threshold", "G1 kept", "G2+G3 kept", "G1 removed: flagged",
                 "G2+G3 removed: flagged"], rows)


def main() -> None:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("tools", "memory", "all"), default="all")
    memory: Any = None
    try:
        import _public_memory as memory  # the memory half (bench/_public_memory.py)
        memory.add_arguments(parser)
    except ImportError:
        memory = None
    args = parser.parse_args()
    if not DATA.is_dir():
        print(f"{DATA} not found: this benchmark reads the public dev data from ../shared/data "
              "(see its README); nothing was measured")
        return
    results: dict[str, Any] = {}
    if args.part in ("tools", "all"):
        results["tools"] = run_tools(args)
        print_tools(results["tools"])
    if args.part in ("memory", "all"):
        if memory is None:
            print("\nMEMORY: skipped - bench/_public_memory.py is not there")
        else:
            results["memory"] = memory.run(args)
            memory.print_results(results["memory"])
    print_load()
    write_json(args.json, results)


if __name__ == "__main__":
    main()
