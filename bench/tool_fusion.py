"""Tool ranking constants fitted on one split and checked on the other (ToolBench and the 181-tool catalogue).

How the constants of ``toolbox/index.py`` (keyword and group weights, the keyword and
group coverage priors) are chosen, as a script anyone can rerun. Every signal is
computed once per request by the toolbox's own code (``ToolIndex`` over the tools'
stored search text, embedded as registration embeds it, each request embedded as
``Toolbox.retrieve`` embeds it), then every setting of a grid is scored from those
signals:

* ToolBench (``../shared/data``, 2,479 APIs, 765 requests) split by group: G1 (one
  tool per request) and G2+G3 (several tools per request);
* the 181-tool catalogue (``bench/data/tool_catalogue.txt``), plain and with its
  scripted augmentation, dev and test requests.

For each direction (fit on G1, check on G2+G3; and the reverse) the chosen setting is
the best ToolBench recall@5 + NDCG@5 on the fit split among the settings that keep the
catalogue's **dev** recall@1 and recall@5 at least at the previous constants' (vector
+ 0.5 keyword + 3 group, no priors); it is then reported on the other split and on the
catalogue's test requests, which no choice looked at. The shipped constants are
printed next to both.

    python bench/tool_fusion.py          # ~6-10 min on 2 loaded cores (embedding 2,479 tools)
"""

from __future__ import annotations

import itertools
import json
import math
import sys
from pathlib import Path
from typing import Any
from collections.abc import Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import base_parser, bench_embedder, log, print_load, print_table, write_json  # noqa: E402
from public_retrieval import TOOLBENCH, load_toolbench, openai_schema, tool_names  # noqa: E402
from tool_catalogue import load, make_function  # noqa: E402

from memory.retrieval.bm25 import BM25Index  # noqa: E402
from memory.retrieval.embeddings import EmbeddingService  # noqa: E402
from toolbox import index as ix  # noqa: E402
from toolbox.augment import parse_answer  # noqa: E402
from toolbox.ranking import embed_requests  # noqa: E402
from toolbox.schema import describe_function  # noqa: E402
from toolbox.schemas import describe_schema  # noqa: E402
from toolbox.text import search_text  # noqa: E402

PRIORS = (0.0, 20.0, 40.0, 60.0, 90.0, 130.0, 180.0)
KEYWORD_WEIGHTS = (0.5, 1.0, 2.0, 3.0, 4.0)
GROUP_WEIGHTS = (1.0, 2.0, 3.0, 4.0)
GROUP_PRIORS = (0.0, 20.0, 60.0)
BEFORE = (0.0, 0.5, 3.0, 0.0)  # (keyword prior, keyword weight, group weight, group prior) before this script
SHIPPED = (ix.KEYWORD_PRIOR, ix.KEYWORD_WEIGHT, ix.GROUP_WEIGHT, ix.GROUP_PRIOR)


class Signals:
    """Per request and tool: vector, raw keyword and group BM25F scores, and each request's bound."""

    def __init__(self, index: ix.ToolIndex, svc: EmbeddingService, queries: Sequence[str]) -> None:
        vectors = []
        for q in queries:  # one request at a time, as retrieve embeds it
            svc.clear_cache()
            vectors.append(embed_requests(svc, [q])[0])
        self.vector = np.stack([index.signals(q, v)["vector"] for q, v in zip(queries, vectors, strict=True)])
        self.kw, self.kw_bound = _raw(index.keywords, queries)
        group, self.group_bound = _raw(index.groups, queries)
        self.group = np.concatenate([group, np.zeros((len(queries), 1))], axis=1)[:, index.member]
        self.kw_scale, self.group_scale = index.keywords.k1 + 1.0, index.groups.k1 + 1.0

    def score(self, setting: tuple[float, float, float, float]) -> np.ndarray:
        prior, kw, gw, gprior = setting
        # BM25Index.coverage(query, prior=p): score / ((k1 + 1) * (the query's idf mass + p))
        return (self.vector + kw * self.kw / np.maximum(self.kw_bound + self.kw_scale * prior, 1e-12)
                + gw * self.group / np.maximum(self.group_bound + self.group_scale * gprior, 1e-12))


def _raw(index: BM25Index, queries: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    scores = np.stack([index.scores(q) for q in queries]) if len(index) else np.zeros((len(queries), 0))
    bound = np.array([(index.k1 + 1.0) * sum(index.idf.get(t, index.max_idf) for t in index.terms(q))
                      for q in queries])[:, None]
    return scores, bound


def metrics(score: np.ndarray, relevant: Sequence[set[int]]) -> dict[str, float]:
    top = np.argsort(-score, axis=1, kind="stable")[:, :10]
    r1 = r5 = ndcg = 0.0
    for ranked, rel in zip(top.tolist(), relevant, strict=True):
        r1 += len(rel & set(ranked[:1])) / len(rel)
        r5 += len(rel & set(ranked[:5])) / len(rel)
        dcg = sum(1 / math.log2(i + 2) for i, d in enumerate(ranked[:5]) if d in rel)
        ndcg += dcg / sum(1 / math.log2(i + 2) for i in range(min(5, len(rel))))
    n = max(1, len(relevant))
    return {"R@1": r1 / n, "R@5": r5 / n, "NDCG@5": ndcg / n}


def toolbench(svc: EmbeddingService) -> dict[str, tuple[Signals, list[set[int]]]]:
    apis, queries = load_toolbench()
    keys = list(apis)
    specs = [describe_schema(openai_schema(k, apis[k], n)).spec for k, n in zip(keys, tool_names(keys), strict=True)]
    log(f"ToolBench: embedding {len(specs)} APIs as registration does")
    index = _index([(s.name, s.description, s.parameters, [], k[0]) for s, k in zip(specs, keys, strict=True)], svc)
    at = {k: i for i, k in enumerate(keys)}
    out = {}
    for split, prefix in (("G1", ("G1_",)), ("G2+G3", ("G2_", "G3_"))):
        chosen = [(q, {at[tuple(r)] for r in rel if tuple(r) in at}) for f, q, rel in queries if f.startswith(prefix)]
        log(f"ToolBench {split}: embedding {len(chosen)} requests one by one")
        out[split] = (Signals(index, svc, [q for q, _ in chosen]), [r for _, r in chosen])
    return out


def catalogue(svc: EmbeddingService) -> dict[str, tuple[Signals, list[set[int]]]]:
    tools = load()
    specs = [describe_function(make_function(t)) for t in tools]
    out = {}
    for label in ("plain", "augmented"):
        rows = []
        for t, s in zip(tools, specs, strict=True):
            if label == "plain":
                rows.append((s.name, s.description, s.parameters, [], ""))
            else:  # what the scripted augmenter of bench/tool_retrieval.py answers, parsed as the toolbox parses it
                aug = parse_answer(json.dumps({"description": t.summary, "queries": t.aug}), fallback=s.description, n=5)
                rows.append((s.name, aug.description, s.parameters, aug.queries, ""))
        index = _index(rows, svc)
        for split in ("dev", "test"):
            pairs = [(q, {i}) for i, t in enumerate(tools) for q in getattr(t, split)]
            out[f"{label} {split}"] = (Signals(index, svc, [q for q, _ in pairs]), [r for _, r in pairs])
    return out


def _index(rows: Sequence[tuple[str, str, dict[str, Any], list[str], str]], svc: EmbeddingService) -> ix.ToolIndex:
    svc.clear_cache()
    vectors = svc.embed([search_text(n, d, p, q, c)[:4000] for n, d, p, q, c in rows])  # one call, as registration
    return ix.ToolIndex([ix.IndexedTool(n, d, p, q, c, v) for (n, d, p, q, c), v in zip(rows, vectors, strict=True)])


def main() -> None:
    parser = base_parser(__doc__.splitlines()[0])
    args = parser.parse_args()
    if not TOOLBENCH.is_dir():
        print(f"{TOOLBENCH} not found: the ToolBench dev data is read from ../shared/data (see its README); "
              "nothing was measured")
        return
    svc = EmbeddingService(bench_embedder(args.backend, args.torch_threads))
    sets = toolbench(svc) | catalogue(svc)
    grid = sorted(set(itertools.product(PRIORS, KEYWORD_WEIGHTS, GROUP_WEIGHTS, GROUP_PRIORS)) | {BEFORE, SHIPPED})
    log(f"scoring {len(grid)} settings")
    table = {setting: {name: metrics(sig.score(setting), rel) for name, (sig, rel) in sets.items()}
             for setting in grid}
    base = table[BEFORE]["plain dev"]
    keeps_catalogue = [s for s in grid if table[s]["plain dev"]["R@1"] >= base["R@1"]
                       and table[s]["plain dev"]["R@5"] >= base["R@5"]]
    rows, chosen = [], {}
    for fit, check in (("G1", "G2+G3"), ("G2+G3", "G1")):
        best = max(keeps_catalogue, key=lambda s, f=fit: (table[s][f]["R@5"] + table[s][f]["NDCG@5"], -grid.index(s)))
        chosen[f"fit {fit}"] = best
    for label, setting in (("before", BEFORE), *chosen.items(), ("shipped", SHIPPED)):
        t = table[setting]
        rows.append([label, "/".join(f"{x:g}" for x in setting),
                     t["G1"]["R@5"], t["G1"]["NDCG@5"], t["G2+G3"]["R@5"], t["G2+G3"]["NDCG@5"],
                     t["plain dev"]["R@1"], t["plain test"]["R@1"], t["augmented dev"]["R@1"],
                     t["augmented test"]["R@1"]])
    print_table(f"{len(grid)} settings (keyword prior / keyword weight / group weight / group prior); 'fit X': "
                f"best R@5 + NDCG@5 on X among the {len(keeps_catalogue)} that keep the catalogue's dev R@1 and "
                "R@5; the other ToolBench split and the catalogue's test columns were never looked at by that "
                "choice",
                ["setting", "constants", "G1 R@5", "G1 NDCG@5", "G2+G3 R@5", "G2+G3 NDCG@5", "cat dev R@1",
                 "cat test R@1", "aug dev R@1", "aug test R@1"], rows)
    print_load()
    write_json(args.json, {"grid": len(grid), "chosen": {k: list(v) for k, v in chosen.items()},
                           "rows": {" ".join(f"{x:g}" for x in s): t for s, t in table.items()}})


if __name__ == "__main__":
    main()
