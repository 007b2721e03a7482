"""search_memory at growing history: the exact shape vs the indexed shape, and the switch.

One user's history grows through ``--sizes`` messages (default 1k .. 100k). At each size
every query runs through ``search_memory(..., scope="messages")`` with both execution
shapes, interleaved: ``exact`` (every row of the user scored: exact cosine and IDF
keyword coverage) and ``indexed`` (HNSW for the vector half, at most
``search_term_candidates`` rows per query word from the gin index, IDF of common words
estimated from a sample). It prints p50/p95 of each, the top-10 agreement of indexed
with exact, and the smallest size where indexed is faster: the switch point
(``Settings.search_exact_max_rows``). Finally EXPLAIN (ANALYZE) of both statements at the
largest size.

Rows: like ``search_latency.py``, each message is two of ``--base`` real sentences
(docstrings of installed packages) and its vector the normalised sum of their cached
MiniLM vectors plus 10 % noise, written through ``write_messages`` (the embedder serves
the precomputed vectors; the HNSW index is dropped for the load and rebuilt from its
own definition). Queries are MiniLM vectors of held-out sentences and three-keyword
queries; the query embedding is cached, so the figures are the database's work.

The server gets ``shared_buffers`` = 2 GB (``--shared-buffers``): under PostgreSQL's 128 MB
default the 100k-row tables do not fit and every search copies pages in from the OS cache
(``_common.LARGE_SHARED_BUFFERS``).

    python bench/search_memory_scale.py --json /tmp/smscale.json
    python bench/search_memory_scale.py --sizes 1000,5000 --queries 20     # quick
"""

from __future__ import annotations

import re
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _corpus  # noqa: E402
from _common import (Timer, add_shared_buffers, apply_torch_threads, base_parser, embedded_server, log, open_manager,  # noqa: E402
                     percentiles, print_load, print_table, write_json)
from search_latency import QueryCapture  # noqa: E402

from memory import MiniLMEmbedder  # noqa: E402
from memory.tables.conversation import embedding_text  # noqa: E402

USER = "scale-user"
START = datetime(2025, 1, 1, tzinfo=timezone.utc)


class CorpusEmbedder:
    """Precomputed vectors for the generated messages, MiniLM for anything else (queries)."""

    def __init__(self, minilm: Any) -> None:
        self.minilm, self.known = minilm, {}
        self.dimension, self.name = minilm.dimension, minilm.name
        self.in_process = getattr(minilm, "in_process", False)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        missing = [t for t in texts if t not in self.known]
        if missing:
            for t, v in zip(missing, self.minilm.embed(missing)):
                self.known[t] = np.asarray(v, dtype=np.float32)
        return np.stack([self.known[t] for t in texts])


def add_rows(mm: Any, emb: CorpusEmbedder, rng: np.random.Generator, base: list[str], vecs: np.ndarray,
             start: int, n: int) -> float:
    a, b = rng.integers(0, len(base), n), rng.integers(0, len(base), n)
    v = vecs[a] + vecs[b]
    g = rng.standard_normal(v.shape).astype(np.float32)
    v = v + 0.1 * np.linalg.norm(v, axis=1, keepdims=True) * g / np.linalg.norm(g, axis=1, keepdims=True)
    v = (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)
    msgs = []
    for i in range(n):
        role = "user" if (start + i) % 2 == 0 else "assistant"
        content = f"{base[a[i]]} {base[b[i]]}"
        emb.known[embedding_text(role, content)] = v[i]
        msgs.append(dict(role=role, content=content, created_at=START + timedelta(minutes=start + i)))
    with mm.db.connection() as conn:
        indexdef = conn.execute("SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema()"
                                " AND indexname = 'conversational_memory_embedding'").fetchone()[0]
        conn.execute("DROP INDEX conversational_memory_embedding")
    with Timer() as t:
        for j in range(0, n, 2000):
            thread = f"t{(start + j) // 200}"
            mm.write_messages(msgs[j:j + 2000], user_id=USER, thread_id=thread)
    with mm.db.connection() as conn:
        conn.execute("SET maintenance_work_mem = '1GB'")
        conn.execute(indexdef)
        conn.execute("ANALYZE conversational_memory")
        conn.execute("ANALYZE conversational_context")
    return t.seconds


def explain(mm: Any, query: str, shape: str) -> str:
    with QueryCapture() as cap:
        mm.search_memory(query, user_id=USER, k=10, scope="messages", shape=shape)
    with mm.db.connection(USER) as conn:
        stmt, params = cap.find(conn, r"WITH terms AS")  # sent with $n placeholders (a RawCursor)
        cur = psycopg.RawCursor(conn)
        lines = [r[0] for r in cur.execute("EXPLAIN (ANALYZE, BUFFERS) " + stmt, params)]
        conn.rollback()
    return re.sub(r"'\[[^\]]*\]'::vector", "'[query vector]'::vector", "\n".join(lines))


def main() -> None:
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1000,5000,20000,50000,100000", help="history sizes (ascending)")
    p.add_argument("--queries", type=int, default=40)
    p.add_argument("--base", type=int, default=4000)
    add_shared_buffers(p)
    args = p.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    rng = np.random.default_rng(args.seed)
    minilm = MiniLMEmbedder()
    threads = apply_torch_threads(args.torch_threads)
    pool = _corpus.sentences(args.base + args.queries)
    base, held = pool[:args.base], pool[args.base:]
    vecs = _corpus.embed_cached(base, minilm, "base")
    half = args.queries // 2
    queries = held[:half] + [_corpus.keywords(base[i]) for i in rng.choice(len(base), args.queries - half,
                                                                          replace=False)]
    emb = CorpusEmbedder(minilm)
    emb.embed(queries)
    table, results = [], []
    switch = None
    plans: dict[str, str] = {}
    with embedded_server({"shared_buffers": args.shared_buffers}) as uri:
        mm = open_manager(uri, embedder=emb)
        loaded = 0
        for size in sizes:
            load_s = add_rows(mm, emb, rng, base, vecs, loaded, size - loaded)
            loaded = size
            log(f"{size:,} messages (added in {load_s:.0f}s)")
            for q in queries[:5]:  # warm-up
                for shape in ("exact", "indexed"):
                    mm.search_memory(q, user_id=USER, k=10, scope="messages", shape=shape)
            lat: dict[str, list[float]] = {"exact": [], "indexed": []}
            agree = []
            for i, q in enumerate(queries):
                got = {}
                for shape in (("exact", "indexed") if i % 2 == 0 else ("indexed", "exact")):
                    t0 = time.perf_counter()
                    got[shape] = [h.item.id for h in mm.search_memory(q, user_id=USER, k=10, scope="messages", shape=shape)]
                    lat[shape].append(time.perf_counter() - t0)
                agree.append(len(set(got["exact"]) & set(got["indexed"])) / max(1, len(got["exact"])))
            ex, ix = percentiles(lat["exact"]), percentiles(lat["indexed"])
            if switch is None and ix["p50_ms"] < ex["p50_ms"]:
                switch = size
            results.append({"messages": size, "exact": ex, "indexed": ix, "top10_agreement": float(np.mean(agree))})
            table.append([f"{size:,}", ex["p50_ms"], ex["p95_ms"], ix["p50_ms"], ix["p95_ms"],
                          ix["p50_ms"] / ex["p50_ms"], float(np.mean(agree))])
        plans["exact"] = explain(mm, queries[0], "exact")
        plans["indexed"] = explain(mm, queries[0], "indexed")
        mm.close()
    print_table(f"search_memory over one user's messages, k=10, {len(queries)} queries ({half} sentences, "
                f"{len(queries) - half} keyword), query embedding cached",
                ["messages", "exact p50", "exact p95", "indexed p50", "indexed p95", "p50 ratio", "top-10 agreement"],
                table)
    print(f"switch point: the indexed shape is faster from {switch:,} messages" if switch else
          "switch point: the exact shape was faster at every size measured")
    for shape, plan in plans.items():
        print(f"\nEXPLAIN ANALYZE, {shape} shape, {sizes[-1]:,} messages:\n{plan}")
    print_load()
    write_json(args.json, {"sizes": sizes, "queries": len(queries), "torch_threads": threads, "results": results,
                           "switch_point": switch, "plans": plans})


if __name__ == "__main__":
    main()
