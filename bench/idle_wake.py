"""What time without work costs the next call in this process, outside any database.

    python bench/idle_wake.py                       # ~40 s
    python bench/idle_wake.py --pauses 0,50 --rounds 20

Searches right after idle time are slower in every system ``bench/peers.py --pause`` and
``bench/idle_sends.py`` measure, and on some hosts the query's embedding is much slower too
(docs/benchmarks.md, Sessions 30 and 31). This bench takes the search apart from the
machine: after ``S`` ms of sleep (``--pauses``) it times one call of

* ``one byte``: reading one byte of a 64 MB array that the previous call read too;
* ``tokenize``: the query's token ids (``OnnxMiniLMEmbedder.tokenize``);
* ``model``: one run of the default ONNX int8 MiniLM on those ids, one thread;

each right after an untimed call of the same, so only the sleep differs. Then, after
``--warm`` ms of sleep, two ways of warming the model from a helper thread (free to run on the other core)
before the caller's run:

* ``model after a helper's run``: the helper runs the model on a two-token input and the
  caller waits for it (``helper's run`` is that run's own time), then runs it itself;
* ``model beside a helper's run``: both at once, the caller's time.

The queries are LoCoMo-like questions written here (no data set is read). Times in ms.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import Timer, base_parser, bench_embedder, percentiles, print_load, print_table, write_json  # noqa: E402

QUERIES = ("When did the two friends last go hiking together?", "What did she paint for the art show?",
           "How long has he been learning to play the violin?", "Which city did they move to after the wedding?")


def timed(fn: Callable[..., object], *args: object) -> float:
    """Seconds of one call of ``fn(*args)``."""
    with Timer() as t:
        fn(*args)
    return t.seconds


def main() -> int:
    ap = base_parser(__doc__.splitlines()[0])
    ap.add_argument("--pauses", default="0,5,20,50,200", help="ms of sleep before each timed call")
    ap.add_argument("--warm", type=float, default=50.0, help="ms of sleep before the helper-thread runs")
    ap.add_argument("--rounds", type=int, default=30)
    args = ap.parse_args()
    pauses = [float(p) for p in args.pauses.split(",")]

    embedder = bench_embedder("onnx", threads=1)
    if not hasattr(embedder, "embed_tokens"):
        raise SystemExit("the ONNX backend is needed (onnxruntime and tokenizers)")
    ids = [embedder.tokenize([q])[0] for q in QUERIES]
    block = np.ones(64 * 2**20, dtype=np.uint8)
    helper = ThreadPoolExecutor(1, thread_name_prefix="warm")
    helper.submit(embedder.embed_tokens, [ids[0][:2]]).result()
    calls: dict[str, Callable[[int], object]] = {
        "one byte": lambda i: int(block[i % 4096 * 4096]),
        "tokenize": lambda i: embedder.tokenize([QUERIES[i % len(QUERIES)]]),
        "model": lambda i: embedder.embed_tokens([ids[i % len(ids)]]),
    }
    samples: dict[tuple[str, float], list[float]] = {(c, p): [] for c in calls for p in pauses}
    warm: dict[str, list[float]] = {"model after a helper's run": [], "helper's run": [],
                                    "model beside a helper's run": []}
    for i in range(args.rounds):
        for pause in pauses:
            for name, call in calls.items():
                call(i)
                time.sleep(pause / 1000)
                samples[name, pause].append(timed(call, i))
        query = [ids[i % len(ids)]]
        embedder.embed_tokens(query)
        time.sleep(args.warm / 1000)
        warm["helper's run"].append(timed(helper.submit(embedder.embed_tokens, [ids[0][:2]]).result))
        warm["model after a helper's run"].append(timed(embedder.embed_tokens, query))
        time.sleep(args.warm / 1000)
        with Timer() as t:
            beside = helper.submit(embedder.embed_tokens, [ids[0][:2]])
            embedder.embed_tokens(query)
        warm["model beside a helper's run"].append(t.seconds)
        beside.result()
    helper.shutdown()

    rows = [[name, f"{pause:g} ms", *(percentiles(samples[name, pause])[k] for k in ("p50_ms", "p95_ms")),
             len(samples[name, pause])] for name in calls for pause in pauses]
    print_table(f"One call after S ms of sleep ({args.rounds} rounds; ms)",
                ["call", "sleep S", "p50", "p95", "n"], rows)
    warm_rows = [[name, f"{args.warm:g} ms", p["p50_ms"], p["p95_ms"], len(xs)]
                 for name, xs in warm.items() for p in [percentiles(xs)]]
    print_table("Warming the model from a helper thread", ["call", "sleep S", "p50", "p95", "n"], warm_rows)
    print_load()
    write_json(args.json, {"calls": rows, "warm": warm_rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
