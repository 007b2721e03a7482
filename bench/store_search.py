"""AgentMemStore (LangGraph store) latency per operation, by how many items the user has.

For each size in ``--sizes`` (items of one user, all in one namespace with 20
sub-namespaces, and as many items of a second user beside them) it writes the items
with ``batch`` of ``PutOp`` (one indexed field each), then times, per call:

* ``get`` of one item;
* ``search`` with a semantic ``query`` over the user's namespace (exact cosine over the
  user's item vectors, limit 10);
* ``search`` with a ``filter`` and no query (limit 10, most recently updated first);
* ``list_namespaces`` with the user's prefix.

The vectors come from the deterministic hash embedder by default (the SQL's cost does not
depend on what the vectors mean, and embedding 10k texts with MiniLM takes minutes on two
cores); ``--embedder minilm`` uses the real model. The query is embedded once before the
timings (the cache serves it), so the figures are the database round trips.

    python bench/store_search.py
    python bench/store_search.py --sizes 500 --queries 20      # quick check
"""

from __future__ import annotations

import random
import sys
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    Timer, base_parser, bench_embedder, embedded_server, log, open_manager, percentiles, print_load, print_table,
    write_json)

from langgraph.store.base import PutOp  # noqa: E402

from memory import HashEmbedder  # noqa: E402
from memory.integrations.langgraph_store import AgentMemStore  # noqa: E402

WORDS = ("invoice tea garden travel python export backup printer lease flight recipe budget meeting "
         "report coffee bicycle weather contract holiday password").split()


def fill(store: AgentMemStore, user: str, n: int, rng: random.Random) -> float:
    ops = [PutOp((user, "memories", f"topic{i % 20}"), f"k{i}",
                 {"text": " ".join(rng.choices(WORDS, k=8)), "n": i % 7, "tag": rng.choice(["a", "b"])})
           for i in range(n)]
    with Timer() as t:
        for start in range(0, n, 500):
            store.batch(ops[start:start + 500])
    return t.seconds


def main() -> None:
    parser = base_parser(__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000], help="items per user")
    parser.add_argument("--queries", type=int, default=50, help="timed calls per operation and size")
    parser.add_argument("--embedder", choices=("hash", "minilm"), default="hash")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    embedder = HashEmbedder() if args.embedder == "hash" else bench_embedder(args.backend, args.torch_threads)
    rows, results = [], []
    with embedded_server() as uri:
        mm = open_manager(uri, embedder=embedder)
        store = AgentMemStore(mm, index={"fields": ["text"]})
        for size in args.sizes:
            user, other = f"u-{uuid.uuid4().hex[:8]}", f"o-{uuid.uuid4().hex[:8]}"
            log(f"writing {size:,} items for each of two users")
            put_s = fill(store, user, size, rng) + fill(store, other, size, rng)
            query = "a holiday flight and the travel budget"
            mm.embeddings.embed([query])
            timings: dict[str, list[float]] = {"get": [], "search (query)": [], "search (filter)": [],
                                               "list_namespaces": []}
            for i in range(args.queries):
                key = f"k{rng.randrange(size)}"
                with Timer() as t:
                    store.get((user, "memories", f"topic{int(key[1:]) % 20}"), key)
                timings["get"].append(t.seconds)
                with Timer() as t:
                    store.search((user, "memories"), query=query, limit=10)
                timings["search (query)"].append(t.seconds)
                with Timer() as t:
                    store.search((user, "memories"), filter={"n": i % 7, "tag": "a"}, limit=10)
                timings["search (filter)"].append(t.seconds)
                with Timer() as t:
                    store.list_namespaces(prefix=(user,), max_depth=3)
                timings["list_namespaces"].append(t.seconds)
            for op, samples in timings.items():
                p = percentiles(samples)
                rows.append([f"{size:,}", op, p["p50_ms"], p["p95_ms"]])
                results.append({"items_per_user": size, "operation": op, **p})
            rows.append([f"{size:,}", "put (per item, batches of 500)", put_s * 1000 / (2 * size), float("nan")])
        mm.close()
    print_table("AgentMemStore latency (ms)", ["items/user", "operation", "p50", "p95"], rows)
    print_load()
    write_json(args.json, {"results": results, "embedder": args.embedder, "queries": args.queries})


if __name__ == "__main__":
    main()
