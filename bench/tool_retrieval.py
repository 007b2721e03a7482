"""Tool retrieval: recall@1/@5 and MRR for vector, keyword and hybrid search, plain vs
augmented descriptions, and retrieval latency over 1,000 registered tools.

The catalogue (``data/tool_catalogue.txt``, 181 hand-written tools over 21 domains,
with deliberate near-duplicates such as current weather / forecast / historical
weather, or convert_currency / get_exchange_rate) is registered twice with the real
MiniLM model: once plain (docstring only) and once augmented. Augmentation here is
done by a **scripted fake model** (``ScriptedAugmenter``) that answers the toolbox's
real augmentation prompt with the catalogue's hand-written example requests; it
shows the mechanics and the effect of example queries, not the quality of any LLM.
``--llm`` uses the chat model configured in the environment instead.

Each tool has two held-out paraphrased requests: ``dev`` (with ToolBench's G1, used to
choose the fusion weights: see ``toolbox/index.py``) and ``test`` (reported, never used
for tuning); both are reported through ``Toolbox.retrieve`` itself. A second,
mechanically derived set of literal requests (the tool's name words and its first
parameter, e.g. "get exchange rate base") shows what keyword search is for.
Latency is measured over ``--tools`` registered tools (the catalogue plus variants
scoped to other products), each request embedded afresh (no cache hit).

    python bench/tool_retrieval.py                 # ~3-5 minutes on 2 cores
    python bench/tool_retrieval.py --tools 1000 --json /tmp/tools.json
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (bench_embedder, Timer, base_parser, embedded_server, log, open_manager, percentiles,  # noqa: E402
                     print_table, write_json)
from tool_catalogue import CatalogueTool, ScriptedAugmenter, load, make_function  # noqa: E402

from memory import MemoryManager  # noqa: E402
from toolbox import GROUP_WEIGHT, KEYWORD_WEIGHT, Toolbox  # noqa: E402
from toolbox.text import split_identifier  # noqa: E402

K_EVAL = 10


def metrics(ranked: Sequence[Sequence[str]], labels: Sequence[str]) -> dict[str, float]:
    n = len(labels)
    r1 = sum(1 for r, y in zip(ranked, labels) if r[:1] == [y]) / n
    r5 = sum(1 for r, y in zip(ranked, labels) if y in r[:5]) / n
    mrr = sum(1.0 / (list(r).index(y) + 1) for r, y in zip(ranked, labels) if y in r[:K_EVAL]) / n
    return {"recall@1": r1, "recall@5": r5, "mrr": mrr}


def queries(tools: list[CatalogueTool], split: str) -> tuple[list[str], list[str]]:
    if split == "name":  # literal requests, derived mechanically: the tool's name words + its first parameter
        pairs = [(" ".join(split_identifier(t.name) + split_identifier(t.params[0].name)), t.name) for t in tools]
        return [q for q, _ in pairs], [y for _, y in pairs]
    pairs = [(q, t.name) for t in tools for q in getattr(t, split)]
    return [q for q, _ in pairs], [y for _, y in pairs]


def register_catalogue(mm: MemoryManager, tools: list[CatalogueTool], namespace: str, *, augment: bool,
                       llm: Any) -> tuple[Toolbox, float]:
    tb = Toolbox(mm, namespace=namespace, llm=llm)
    with Timer() as t:
        tb.register_tools([make_function(c) for c in tools], augment=augment)
    return tb, t.seconds


def synthetic_tools(tools: list[CatalogueTool], total: int) -> list[Callable[..., Any]]:
    """``total`` distinct tools: the catalogue, then variants scoped to other products."""
    scopes = ["for the billing system", "in the legacy CRM", "for the EU region", "via the partner API",
              "for enterprise accounts", "in the sandbox", "for the mobile app", "through the admin console"]
    funcs = [make_function(t) for t in tools]
    i = 0
    while len(funcs) < total:
        t = tools[i % len(tools)]
        scope = scopes[(i // len(tools)) % len(scopes)]
        funcs.append(make_function(t, name=f"{t.name}_v{i // len(tools) + 2}",
                                   summary=f"{t.summary.rstrip('.')} {scope}."))
        i += 1
    return funcs


def main() -> None:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--tools", type=int, default=1000, help="registered tools for the latency run (0: skip it)")
    parser.add_argument("--latency-queries", type=int, default=362, help="retrievals timed (distinct requests)")
    parser.add_argument("--llm", action="store_true", help="augment with the model configured in the environment")
    args = parser.parse_args()
    tools = load()
    dev_q, dev_y = queries(tools, "dev")
    test_q, test_y = queries(tools, "test")
    log(f"catalogue: {len(tools)} tools, {len({t.domain for t in tools})} domains, "
        f"{len(dev_q)} dev and {len(test_q)} test requests")
    results: dict[str, Any] = {"tools": len(tools), "dev_queries": len(dev_q), "test_queries": len(test_q)}
    with embedded_server() as uri:
        minilm = bench_embedder(args.backend, getattr(args, "torch_threads", 0))
        mm = open_manager(uri, embedder=minilm)
        if args.llm:
            from memory.llm.chat import chat_model_from_env
            llm = chat_model_from_env()
            llm_label = "model from environment"
        else:
            llm = ScriptedAugmenter.from_catalogue(tools)
            llm_label = "SCRIPTED fake model (catalogue's example requests)"
        plain, t_plain = register_catalogue(mm, tools, "plain", augment=False, llm=None)
        aug, t_aug = register_catalogue(mm, tools, "augmented", augment=True, llm=llm)
        log(f"registered {len(tools)} tools plain in {t_plain:.1f}s, augmented ({llm_label}) in {t_aug:.1f}s")
        calls_before, texts_before = aug.llm_calls, mm.embeddings.texts_embedded
        with Timer() as t_re:
            again = Toolbox(mm, namespace="augmented", llm=llm)
            again.register_tools([make_function(c) for c in tools], augment=True)
        results["reregister"] = {"seconds": t_re.seconds, "llm_calls": again.llm_calls,
                                 "texts_embedded": mm.embeddings.texts_embedded - texts_before}
        log(f"re-registering the unchanged catalogue: {t_re.seconds:.2f}s, {again.llm_calls} LLM calls, "
            f"{mm.embeddings.texts_embedded - texts_before} embeddings (first run: {calls_before} LLM calls)")

        # 2. The held-out test split (and literal by-name requests) through Toolbox.retrieve itself.
        detail: dict[str, Any] = {}
        for split, (qs, ys) in (("dev", (dev_q, dev_y)), ("test", (test_q, test_y)),
                                ("name", queries(tools, "name"))):
            table = []
            for label, tb in (("plain", plain), ("augmented", aug)):
                for mode in ("vector", "keyword", "hybrid"):
                    ranked = [tb.retrieve(q, K_EVAL, mode=mode).names for q in qs]
                    m = metrics(ranked, ys)
                    detail[f"{split}/{label}/{mode}"] = m
                    table.append([label, mode, m["recall@1"], m["recall@5"], m["mrr"]])
            title = {"dev": f"DEV split: {len(qs)} paraphrased requests (used to choose the weights)",
                     "test": f"TEST split: {len(qs)} held-out paraphrased requests",
                     "name": f"BY-NAME requests: {len(qs)} literal requests (tool name words + first parameter)"}[split]
            print_table(f"{title}, {len(tools)} tools; hybrid = vector + {KEYWORD_WEIGHT} keyword + {GROUP_WEIGHT} "
                        f"group; augmentation: {llm_label}",
                        ["descriptions", "search", "recall@1", "recall@5", "MRR"], table)
        results["test"] = detail
        # "No suitable tool": the threshold calibrated on the dev requests, applied to the test requests.
        table = []
        for label, tb in (("plain", plain), ("augmented", aug)):
            threshold = tb.calibrate_min_score(dev_q)
            kept = sum(r.suitable for r in tb.retrieve_many(test_q, 1)) / len(test_q)
            results[f"calibrated/{label}"] = {"min_score": threshold, "test_kept": kept}
            table.append([label, threshold, kept])
        print_table("No suitable tool: Toolbox.calibrate_min_score(dev requests) (keeps 95 % of them), applied to "
                    "the test requests", ["descriptions", "min_score", "test requests kept"], table)
        mm.close()

        if args.tools <= 0:
            write_json(args.json, results)
            return
        # 3. Latency over --tools registered tools, fresh embedding cache (requests are embedded).
        mm = open_manager(uri, embedder=minilm, schema="latency")  # a new embedding cache
        big = Toolbox(mm, namespace="big")
        with Timer() as t_reg:
            big.register_tools(synthetic_tools(tools, args.tools))
        log(f"registered {len(big)} tools in {t_reg.seconds:.1f}s")
        requests = (test_q + dev_q)[:args.latency_queries]
        big.retrieve("warm up the connection pool and model", 5)
        total, embed = [], []
        for q in requests:
            start = time.perf_counter()
            big.mm.embeddings.embed([q + " "])  # the embedding part alone (distinct text, not cached)
            mid = time.perf_counter()
            big.retrieve(q, 5)
            end = time.perf_counter()
            embed.append(mid - start)
            total.append(end - mid)
        lat, emb = percentiles(total), percentiles(embed)
        print_table(f"Retrieval latency, {len(big)} registered tools, k=5, hybrid ({len(requests)} distinct requests)",
                    ["part", "p50 ms", "p95 ms", "mean ms"],
                    [["retrieve() end to end (embed + vector + keyword + fuse)", lat["p50_ms"], lat["p95_ms"],
                      lat["mean_ms"]],
                     ["of which: query embedding (MiniLM, CPU)", emb["p50_ms"], emb["p95_ms"], emb["mean_ms"]]])
        results["latency"] = {"tools": len(big), "retrieve": lat, "embed": emb, "register_s": t_reg.seconds}
        mm.close()
    write_json(args.json, results)


if __name__ == "__main__":
    main()
