"""The two MiniLM backends side by side: throughput, one-query latency, agreement.

    python bench/embed_backends.py [--rounds 3] [--queries 200] [--json out.json]

Same packaged weights, two runtimes: torch fp32 (sentence-transformers) and ONNX
Runtime int8 (memory.retrieval.onnx_minilm, exported on first use into a temp cache here).
Printed, in interleaved rounds so both see the same machine load:

* throughput (texts/s) of all LoCoMo turns in one ``embed`` call, at 1 and 2 threads;
* one-query latency p50/p95 (LoCoMo questions, one ``embed`` call each, 1 thread);
* agreement of int8 with fp32: per-text cosine (mean, 1st percentile, min) over the
  LoCoMo turns and the ToolBench API texts, and the top-10 neighbour overlap of the
  two (LoCoMo questions against the turns, ToolBench queries against the APIs):
  the share of fp32's 10 nearest that int8 also ranks in its 10 nearest.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import environment, percentiles, print_table, write_json  # noqa: E402
from _public_data import locomo_questions, locomo_turns, toolbench  # noqa: E402

from memory.retrieval.embeddings import MiniLMEmbedder  # noqa: E402
from memory.retrieval.onnx_minilm import OnnxMiniLMEmbedder  # noqa: E402


def topk(q: np.ndarray, docs: np.ndarray, k: int = 10) -> np.ndarray:
    return np.argsort(-(q @ docs.T), axis=1)[:, :k]


def overlap(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.mean([len(set(x) & set(y)) / len(x) for x, y in zip(a, b)]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    import torch

    turns = [t.text for t in locomo_turns()]
    questions = [q.text for q in locomo_questions()]
    apis, tool_queries = toolbench()
    with tempfile.TemporaryDirectory(prefix="amonnx") as cache:
        t0 = time.perf_counter()
        onnx1 = OnnxMiniLMEmbedder(Path(cache), threads=1)
        export_s = time.perf_counter() - t0
        onnx2 = OnnxMiniLMEmbedder(Path(cache), threads=2)
        fp32 = MiniLMEmbedder()
        print(f"export + quantise (first use): {export_s:.1f} s, file {onnx1.path.stat().st_size / 1e6:.1f} MB")

        def torch_at(n: int):  # one torch model, its thread count set per call
            def run(texts: list[str]) -> np.ndarray:
                torch.set_num_threads(n)
                return fp32.embed(texts)
            return run

        runners = {"torch fp32": {1: torch_at(1), 2: torch_at(2)}, "onnx int8": {1: onnx1.embed, 2: onnx2.embed}}
        through: dict[tuple[str, int], list[float]] = {}
        lat: dict[str, list[float]] = {name: [] for name in runners}
        for _ in range(args.rounds):
            for threads in (1, 2):
                for name, by in runners.items():
                    t0 = time.perf_counter()
                    by[threads](turns)
                    through.setdefault((name, threads), []).append(len(turns) / (time.perf_counter() - t0))
            for name, by in runners.items():
                for q in questions[:args.queries // args.rounds]:
                    t0 = time.perf_counter()
                    by[1]([q])
                    lat[name].append(time.perf_counter() - t0)
        rows = []
        for name in runners:
            p = percentiles(lat[name])
            rows.append([name, f"{statistics.median(through[(name, 1)]):.1f}",
                         f"{statistics.median(through[(name, 2)]):.1f}", f"{p['p50_ms']:.1f}", f"{p['p95_ms']:.1f}"])
        t1 = statistics.median(through[("onnx int8", 1)]) / statistics.median(through[("torch fp32", 1)])
        t2 = statistics.median(through[("onnx int8", 2)]) / statistics.median(through[("torch fp32", 2)])
        rows.append(["int8 / fp32", f"{t1:.2f}x", f"{t2:.2f}x", "", ""])
        print_table("throughput and one-query latency", ["backend", "texts/s 1 thread", "texts/s 2 threads", "1 query p50 ms", "p95 ms"], rows)

        torch.set_num_threads(2)
        agree = []
        result: dict = {"throughput": {f"{k[0]} {k[1]}t": v for k, v in through.items()}, "latency_ms": lat}
        for label, docs, qs in (("LoCoMo", turns, questions), ("ToolBench", apis, tool_queries)):
            d32, d8 = fp32.embed(docs), onnx2.embed(docs)
            q32, q8 = fp32.embed(qs), onnx2.embed(qs)
            cos = np.concatenate([np.sum(d32 * d8, axis=1), np.sum(q32 * q8, axis=1)])
            ov = overlap(topk(q32, d32), topk(q8, d8))
            agree.append([label, len(docs) + len(qs), f"{cos.mean():.5f}", f"{np.percentile(cos, 1):.5f}",
                          f"{cos.min():.5f}", f"{ov * 100:.1f} %"])
            result[label] = {"mean_cos": float(cos.mean()), "p1_cos": float(np.percentile(cos, 1)),
                             "min_cos": float(cos.min()), "top10_overlap": ov}
        print_table("int8 vs fp32 agreement", ["texts", "n", "mean cos", "p1 cos", "min cos", "top-10 overlap"], agree)
    print(f"load average at end: {environment()['loadavg_at_end']}")
    write_json(str(args.json) if args.json else None, result)


if __name__ == "__main__":
    main()
