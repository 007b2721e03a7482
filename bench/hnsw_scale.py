"""HNSW at scale: build time, query latency and recall@10 against exact search.

Loads ``--rows`` synthetic 384-dimensional unit vectors (default 1,000,000) into a
fresh embedded server with binary COPY, builds the same index agentmem's migrations
build on every embedding column (``hnsw (embedding vector_cosine_ops)``, pgvector's
defaults m=16, ef_construction=64, unless overridden), then runs ``--queries``
queries at each ``--ef`` value and compares the top 10 with the exact top 10 (the
same query with index scans disabled, i.e. a parallel sequential scan + top-N sort).
Besides recall it reports the "d10 ratio": the cosine distance of the 10th hit
found over the exact 10th distance (1.0 = as close as exact; near ties among many
equally close rows lower recall without making the answer worse).

Synthetic data (``--data``), never uniform noise (uniformly random vectors in 384
dimensions have no near neighbours at all and say nothing about real embeddings):

* ``minilm-mix`` (default): each row is a noisy weighted mix of three real MiniLM
  sentence vectors (4000 sentences harvested from installed docstrings, embedded once
  and cached, see ``_corpus``); queries are MiniLM vectors of held-out sentences;
* ``gaussian-mixture``: topics, then sub-topics, then per-row noise on the unit
  sphere; queries are fresh draws from the same mixture. Tight, well separated
  clusters: the hard case for HNSW's greedy graph search.

``--opclass halfvec`` indexes ``embedding::halfvec(384)`` instead (half the index) and
re-ranks ``--candidates`` rows by the float4 distance. ``--data-dir`` keeps the server,
rows, indexes and exact answers, so a second run with other ``--ef`` values only
queries; ``--build-timeout`` bounds the build. Latency is printed as wall time and as
the server backend's on-CPU time (``/proc/PID/schedstat``), which a busy shared machine
does not inflate.

    python bench/hnsw_scale.py                       # 1M rows (10-30 min on 2 idle cores)
    python bench/hnsw_scale.py --rows 50000 --json /tmp/hnsw.json
    python bench/hnsw_scale.py --opclass halfvec --ef-construction 128 --ef 100,150,200,300 \
        --data-dir /tmp/hs1m --shared-buffers 3GB --maintenance-work-mem 3GB   # the README's 1M figures
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import numpy as np
import psycopg
from psycopg import sql
from pgvector.psycopg import register_vector
from psycopg.types.json import Jsonb

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (Timer, _restart, base_parser, embedded_server, log, percentiles, print_load,  # noqa: E402
                     print_table, server_settings, write_json)

from memory.store.embedded import start_server, stop_server  # noqa: E402

DIM = 384
K = 10


class MixtureSampler:
    """Unit vectors from topics -> sub-topics -> noise, reproducible from a seed."""

    def __init__(self, seed: int, topics: int = 1000, subtopics: int = 20) -> None:
        rng = np.random.default_rng(seed)
        self.topics = _unit(rng.standard_normal((topics, DIM), dtype=np.float32))
        self.sub = _unit(rng.standard_normal((topics, subtopics, DIM), dtype=np.float32))
        self.n_topics, self.n_sub = topics, subtopics

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        t = rng.integers(0, self.n_topics, n)
        s = rng.integers(0, self.n_sub, n)
        noise = _unit(rng.standard_normal((n, DIM), dtype=np.float32))
        return _unit(self.topics[t] + 0.7 * self.sub[t, s] + 0.6 * noise)


class MiniLMMixSampler:
    """Noisy mixtures of real MiniLM sentence vectors (the geometry of real embeddings).

    Each row is the normalised weighted sum of 3 random base-sentence vectors
    (weights uniform in [0.2, 1]) plus Gaussian noise of 10 % of the norm. Queries
    are MiniLM vectors of held-out sentences that are in no row.
    """

    def __init__(self, base: np.ndarray, held_out: np.ndarray) -> None:
        self.base, self.held_out = base, held_out

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        idx = rng.integers(0, len(self.base), (n, 3))
        w = rng.uniform(0.2, 1.0, (n, 3, 1)).astype(np.float32)
        v = (self.base[idx] * w).sum(axis=1)
        g = _unit(rng.standard_normal(v.shape, dtype=np.float32))
        return _unit(v + 0.1 * np.linalg.norm(v, axis=1, keepdims=True) * g)

    def queries(self, n: int) -> np.ndarray:
        return self.held_out[:n]


def minilm_sampler(n_base: int, n_queries: int) -> MiniLMMixSampler:
    import _corpus

    from memory import MiniLMEmbedder

    pool = _corpus.sentences(n_base + n_queries)
    embedder = MiniLMEmbedder()
    base = _corpus.embed_cached(pool[:n_base], embedder, "base")
    held = _corpus.embed_cached(pool[n_base:n_base + n_queries], embedder, "heldout")
    return MiniLMMixSampler(base, held)


def _unit(a: np.ndarray) -> np.ndarray:
    return (a / np.linalg.norm(a, axis=-1, keepdims=True)).astype(np.float32)


_ROW = np.dtype([("nfields", ">i2"), ("id_len", ">i4"), ("id", ">i8"), ("vec_len", ">i4"),
                 ("dim", ">i2"), ("unused", ">i2"), ("vec", ">f4", (DIM,))])


def copy_binary_chunk(start_id: int, vectors: np.ndarray) -> bytes:
    """Rows (id bigint, embedding vector) in PostgreSQL's binary COPY tuple format."""
    rows = np.empty(len(vectors), dtype=_ROW)
    rows["nfields"] = 2
    rows["id_len"] = 8
    rows["id"] = np.arange(start_id, start_id + len(vectors))
    rows["vec_len"] = 4 + 4 * DIM
    rows["dim"] = DIM
    rows["unused"] = 0
    rows["vec"] = vectors
    return rows.tobytes()


def load(conn: psycopg.Connection, sampler: MixtureSampler | MiniLMMixSampler, rows: int, seed: int,
         chunk: int = 50_000) -> tuple[float, float]:
    """Generate the vectors (timed apart), then COPY them in; returns (generate_s, copy_s)."""
    rng = np.random.default_rng(seed + 1)
    conn.execute(sql.SQL("CREATE TABLE items (id bigint PRIMARY KEY, embedding vector({}) NOT NULL)")
                 .format(sql.Literal(DIM)))
    with Timer() as gen:
        chunks = [copy_binary_chunk(start + 1, sampler.sample(rng, min(chunk, rows - start)))
                  for start in range(0, rows, chunk)]
    with Timer() as t:
        with conn.cursor().copy("COPY items (id, embedding) FROM STDIN WITH (FORMAT BINARY)") as copy:
            copy.write(b"PGCOPY\n\xff\r\n\x00" + (0).to_bytes(4, "big") + (0).to_bytes(4, "big"))
            for data in chunks:
                copy.write(data)
            copy.write((-1).to_bytes(2, "big", signed=True))
        conn.commit()
    return gen.seconds, t.seconds


def watch_progress(uri: str, stop: threading.Event, every_s: float = 60.0) -> None:
    """Log pg_stat_progress_create_index while the index builds."""
    with psycopg.connect(uri, autocommit=True) as conn:
        while not stop.wait(every_s):
            row = conn.execute(
                "SELECT phase, tuples_done, tuples_total, blocks_done, blocks_total "
                "FROM pg_stat_progress_create_index").fetchone()
            if row:
                log(f"  build: {row[0]}; tuples {row[1]:,}/{row[2]:,}; blocks {row[3]:,}/{row[4]:,}")


def short_plan(lines: object) -> str:
    """EXPLAIN text with the 384 numbers of the query vector elided."""
    return re.sub(r"'\[[^\]]*\]'::(vector|halfvec)", r"'[query vector]'::\1", "\n".join(r[0] for r in lines))


def set_guc(conn: psycopg.Connection, name: str, value: object) -> None:
    conn.execute("SELECT set_config(%s, %s, false)", (name, str(value)))


@contextlib.contextmanager
def server(data_dir: str | None, conf: dict[str, str]) -> Iterator[str]:
    """A throwaway server, or (``--data-dir``) a kept one whose table and indexes are reused."""
    if not data_dir:
        with embedded_server(conf) as uri:
            yield uri
        return
    pg = Path(data_dir) / "pg"
    uri = start_server(pg)
    try:
        with psycopg.connect(uri, autocommit=True) as conn:
            stale = [n for n, v in conf.items()
                     if conn.execute("SELECT current_setting(%s)", (n,)).fetchone()[0] != v]
            for name in stale:
                conn.execute(sql.SQL("ALTER SYSTEM SET {} = {}").format(sql.Identifier(name), sql.Literal(conf[name])))
        if stale:
            _restart(pg)
        yield uri
    finally:
        stop_server(pg)


def index_name(opclass: str, m: int, efc: int) -> str:
    return f"items_{opclass}_m{m}_efc{efc}"


def index_ddl(opclass: str, m: int, efc: int) -> sql.Composed:
    target = ("(embedding::halfvec(384)) halfvec_cosine_ops" if opclass == "halfvec"
              else "embedding vector_cosine_ops")
    return sql.SQL("CREATE INDEX {} ON items USING hnsw (" + target + ") WITH (m = {}, ef_construction = {})").format(
        sql.Identifier(index_name(opclass, m, efc)), sql.Literal(m), sql.Literal(efc))


def search_sql(opclass: str, candidates: int) -> str:
    """Top K by cosine distance; with halfvec, the index's ``candidates`` re-ranked exactly."""
    if opclass == "vector":
        return "SELECT id, embedding <=> %(q)s AS d FROM items ORDER BY embedding <=> %(q)s LIMIT %(k)s"
    return ("SELECT id, embedding <=> %(q)s AS d FROM ("
            " SELECT id, embedding FROM items ORDER BY embedding::halfvec(384) <=> %(q)s::halfvec(384)"
            " LIMIT %(cand)s) c ORDER BY embedding <=> %(q)s LIMIT %(k)s")


def top_ids(conn: psycopg.Connection, qvec: np.ndarray, query: str = search_sql("vector", K),
            candidates: int = K) -> tuple[list[int], float, float]:
    """Top-K ids, the query's wall time, and the K-th cosine distance."""
    t0 = time.perf_counter()
    rows = conn.execute(query, {"q": qvec, "k": K, "cand": candidates}).fetchall()  # type: ignore[arg-type]
    return [r[0] for r in rows], time.perf_counter() - t0, float(rows[-1][1]) if rows else float("nan")


class BackendCPU:
    """On-CPU time of the server process serving ``conn`` (``/proc/PID/schedstat``, ns).

    On a shared machine wall time counts the time a query waits for a core; the CPU
    time the backend spent is the work itself. None where /proc is not readable.
    """

    def __init__(self, conn: psycopg.Connection) -> None:
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        self.path = Path(f"/proc/{pid}/schedstat")
        self.ok = self.path.exists()

    def now(self) -> float:
        return int(self.path.read_text().split()[0]) / 1e9 if self.ok else float("nan")


def ensure_table(conn: psycopg.Connection, sampler: MixtureSampler | MiniLMMixSampler, rows: int,
                 seed: int, data: str) -> tuple[float, float]:
    """Load the rows unless a kept data dir already has them; returns (generate_s, copy_s)."""
    conn.execute("CREATE TABLE IF NOT EXISTS bench_runs (key text PRIMARY KEY, value jsonb NOT NULL)")
    want = {"rows": rows, "seed": seed, "data": data}
    have = conn.execute("SELECT value FROM bench_runs WHERE key = 'table'").fetchone()
    if have and have[0].get("rows") == rows and have[0].get("seed") == seed and have[0].get("data") == data:
        log(f"reusing the {rows:,} loaded rows (loaded earlier in {have[0]['copy_s']:.0f}s)")
        conn.commit()
        return float(have[0]["generate_s"]), float(have[0]["copy_s"])
    if have:
        raise SystemExit(f"--data-dir holds another table ({have[0]}); use a fresh directory")
    gen_s, load_s = load(conn, sampler, rows, seed)
    conn.execute("INSERT INTO bench_runs VALUES ('table', %s)",
                 (Jsonb(dict(want, generate_s=gen_s, copy_s=load_s)),))
    conn.commit()
    return gen_s, load_s


def ensure_index(conn: psycopg.Connection, uri: str, opclass: str, m: int, efc: int, timeout_s: float) -> float:
    """Build the index unless it exists; drop the other HNSW indexes (one per run is measured)."""
    name = index_name(opclass, m, efc)
    for (other,) in conn.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'items' AND indexname <> %s"
                                 " AND indexdef LIKE '%%USING hnsw%%'", (name,)).fetchall():
        log(f"dropping {other} (one HNSW index per run)")
        conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(other)))
    built = conn.execute("SELECT value FROM bench_runs WHERE key = %s", (name,)).fetchone()
    exists = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (name,)).fetchone()[0]
    if built and exists:
        log(f"reusing {name} (built earlier in {built[0]['build_s']:.0f}s)")
        return float(built[0]["build_s"])
    stop = threading.Event()
    watcher = threading.Thread(target=watch_progress, args=(uri, stop), daemon=True)
    watcher.start()
    log(f"building {name} (statement_timeout {timeout_s:.0f}s) ...")
    set_guc(conn, "statement_timeout", int(timeout_s * 1000))
    try:
        with Timer() as build:
            conn.execute(index_ddl(opclass, m, efc))
    except psycopg.errors.QueryCanceled:
        raise SystemExit(f"the build of {name} did not finish within --build-timeout {timeout_s:.0f}s") from None
    finally:
        stop.set()
        conn.execute("RESET statement_timeout")
    conn.execute("INSERT INTO bench_runs VALUES (%s, %s) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                 (name, Jsonb({"build_s": build.seconds})))
    log(f"built in {build.seconds:.1f}s")
    return build.seconds


def exact_answers(conn: psycopg.Connection, queries: np.ndarray) -> tuple[list[set[int]], list[float], list[float]]:
    """The exact top K of every query (index scans off), cached in a kept data dir."""
    key = "exact:" + hashlib.sha256(queries.tobytes()).hexdigest()[:16]
    have = conn.execute("SELECT value FROM bench_runs WHERE key = %s", (key,)).fetchone()
    if have:
        return [set(x) for x in have[0]["ids"]], list(have[0]["seconds"]), list(have[0]["dist"])
    set_guc(conn, "enable_indexscan", "off")
    exact, exact_t, exact_d = [], [], []
    for q in queries:
        ids, s, dist = top_ids(conn, q)
        exact.append(set(ids))
        exact_t.append(s)
        exact_d.append(dist)
    conn.execute("RESET enable_indexscan")
    conn.execute("INSERT INTO bench_runs VALUES (%s, %s)",
                 (key, Jsonb({"ids": [sorted(x) for x in exact], "seconds": exact_t, "dist": exact_d})))
    return exact, exact_t, exact_d


def main() -> None:
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--queries", type=int, default=100)
    p.add_argument("--ef", default="40,100,200", help="comma-separated hnsw.ef_search values")
    p.add_argument("--m", type=int, default=16)
    p.add_argument("--ef-construction", type=int, default=64)
    p.add_argument("--opclass", choices=["vector", "halfvec"], default="vector",
                   help="vector: index the float4 column; halfvec: index embedding::halfvec(384) (half the size), "
                        "take --candidates from it and re-rank them by the exact float4 distance")
    p.add_argument("--candidates", default="10", help="halfvec only: comma-separated candidate counts to re-rank")
    p.add_argument("--iterative", default="off", help="comma-separated hnsw.iterative_scan modes")
    p.add_argument("--maintenance-work-mem", default="4GB")
    p.add_argument("--parallel-workers", type=int, default=1, help="max_parallel_maintenance_workers")
    p.add_argument("--shared-buffers", default="4GB")
    p.add_argument("--build-timeout", type=float, default=7200, help="give up the index build after this many s")
    p.add_argument("--data-dir", help="keep the server here (e.g. /tmp/hs1m) and reuse its rows, index and exact "
                                      "answers on the next run with the same --rows/--seed/--data")
    p.add_argument("--data", choices=["minilm-mix", "gaussian-mixture"], default="minilm-mix",
                   help="minilm-mix: noisy mixtures of 4000 real MiniLM sentence vectors (queries: held-out "
                        "sentences); gaussian-mixture: 1000 topics x 20 sub-topics + noise")
    args = p.parse_args()
    efs = [int(x) for x in args.ef.split(",")]
    cands = [int(x) for x in args.candidates.split(",")] if args.opclass == "halfvec" else [K]
    modes = args.iterative.split(",")

    conf = {"shared_buffers": args.shared_buffers, "max_wal_size": "8GB"}
    sampler: MixtureSampler | MiniLMMixSampler
    if args.data == "minilm-mix":
        sampler = minilm_sampler(4000, args.queries)
        queries = sampler.queries(args.queries)
        data = ("each row: normalised weighted sum of 3 of 4000 real MiniLM sentence vectors + 10% noise; "
                "queries: MiniLM vectors of held-out sentences")
    else:
        sampler = MixtureSampler(args.seed)
        queries = sampler.sample(np.random.default_rng(args.seed + 2), args.queries)
        data = "two-level Gaussian mixture on the unit sphere (1000 topics x 20 sub-topics + noise)"
    result: dict = {"rows": args.rows, "dim": DIM, "queries": args.queries, "k": K, "data": data,
                    "opclass": args.opclass}
    log(f"starting embedded server; {args.rows:,} rows x {DIM} dims")
    with server(args.data_dir, conf) as uri, psycopg.connect(uri) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        conn.commit()
        register_vector(conn)
        gen_s, load_s = ensure_table(conn, sampler, args.rows, args.seed, args.data)
        log(f"generated in {gen_s:.1f}s, COPY in {load_s:.1f}s ({args.rows / load_s:,.0f} rows/s)")
        conn.autocommit = True
        conn.execute("VACUUM ANALYZE items")
        set_guc(conn, "maintenance_work_mem", args.maintenance_work_mem)
        set_guc(conn, "max_parallel_maintenance_workers", args.parallel_workers)
        settings = server_settings(conn, ["server_version", "shared_buffers", "maintenance_work_mem",
                                          "max_parallel_maintenance_workers", "max_parallel_workers_per_gather",
                                          "work_mem", "max_wal_size"])
        settings["pgvector"] = conn.execute("SELECT extversion FROM pg_extension WHERE extname='vector'").fetchone()[0]
        log(f"settings: {settings}")
        build_s = ensure_index(conn, uri, args.opclass, args.m, args.ef_construction, args.build_timeout)
        name = index_name(args.opclass, args.m, args.ef_construction)
        sizes = conn.execute("SELECT pg_size_pretty(pg_relation_size('items')), "
                             "pg_size_pretty(pg_relation_size(%s::regclass)), pg_relation_size(%s::regclass)",
                             (name, name)).fetchone()

        set_guc(conn, "enable_indexscan", "off")
        plan_exact = short_plan(conn.execute(
            "EXPLAIN SELECT id FROM items ORDER BY embedding <=> %s LIMIT 10", (queries[0],)))
        conn.execute("RESET enable_indexscan")
        exact, exact_t, exact_d = exact_answers(conn, queries)
        log(f"exact answers ready (p50 {percentiles(exact_t)['p50_ms']:.0f} ms)")

        # Warm the index into shared buffers so the first setting is not penalised.
        set_guc(conn, "hnsw.ef_search", max(efs))
        for q in queries:
            top_ids(conn, q, search_sql(args.opclass, max(cands)), max(cands))
        set_guc(conn, "hnsw.ef_search", efs[0])
        plan_hnsw = short_plan(conn.execute(
            sql.SQL("EXPLAIN (ANALYZE, BUFFERS) ") + sql.SQL(search_sql(args.opclass, cands[-1])),  # type: ignore[arg-type]
            {"q": queries[0], "k": K, "cand": cands[-1]}))
        # Every setting runs each query in turn (interleaved), so a busy moment on the
        # shared machine hits all settings alike rather than one.
        configs = [(mode, ef, c) for mode in modes for ef in efs for c in cands]
        cpu_clock = BackendCPU(conn)
        cpu: dict[tuple[str, int, int], list[float]] = {c: [] for c in configs}
        lat: dict[tuple[str, int, int], list[float]] = {c: [] for c in configs}
        rec: dict[tuple[str, int, int], list[float]] = {c: [] for c in configs}
        ratio: dict[tuple[str, int, int], list[float]] = {c: [] for c in configs}
        for i, (q, truth, true_d) in enumerate(zip(queries, exact, exact_d)):
            # rotate the order per query: whichever setting runs first meets colder CPU caches
            for mode, ef, c in configs[i % len(configs):] + configs[:i % len(configs)]:
                set_guc(conn, "hnsw.iterative_scan", mode)
                set_guc(conn, "hnsw.ef_search", max(ef, c))
                c0 = cpu_clock.now()
                ids, s, dist = top_ids(conn, q, search_sql(args.opclass, c), c)
                cpu[(mode, ef, c)].append(cpu_clock.now() - c0)
                lat[(mode, ef, c)].append(s)
                rec[(mode, ef, c)].append(len(truth & set(ids)) / K)
                ratio[(mode, ef, c)].append(dist / true_d if true_d > 0 else 1.0)
        rows = []
        per_ef = []
        for mode, ef, c in configs:
            pct = percentiles(lat[(mode, ef, c)])
            cpct = percentiles(cpu[(mode, ef, c)])
            recall = rec[(mode, ef, c)]
            entry = {"ef_search": max(ef, c), "candidates": c, "iterative_scan": mode,
                     "recall_at_10": float(np.mean(recall)), "min_recall_at_10": float(np.min(recall)),
                     "kth_distance_ratio_mean": float(np.mean(ratio[(mode, ef, c)])),
                     "kth_distance_ratio_max": float(np.max(ratio[(mode, ef, c)])), **pct,
                     "backend_cpu_p50_ms": cpct["p50_ms"], "backend_cpu_p95_ms": cpct["p95_ms"]}
            per_ef.append(entry)
            label = f"{args.opclass} ef_search={max(ef, c)}" + (f" re-rank {c}" if args.opclass == "halfvec" else "")
            rows.append([label + f" iterative={mode}", pct["p50_ms"], pct["p95_ms"], cpct["p50_ms"], cpct["p95_ms"],
                         entry["recall_at_10"], entry["min_recall_at_10"], entry["kth_distance_ratio_mean"],
                         entry["kth_distance_ratio_max"]])
        ex = percentiles(exact_t)
        rows.append(["exact (enable_indexscan=off)", ex["p50_ms"], ex["p95_ms"], "", "", 1.0, 1.0, 1.0, 1.0])

    print_table(f"HNSW build, {args.rows:,} rows x {DIM} dims", ["step", "seconds", "rows/s"],
                [["generate vectors (numpy)", gen_s, args.rows / gen_s],
                 ["load (binary COPY)", load_s, args.rows / load_s],
                 [f"CREATE INDEX hnsw {args.opclass} m={args.m} ef_construction={args.ef_construction}", build_s,
                  args.rows / build_s]])
    print(f"table {sizes[0]}, index {sizes[1]}; settings: {settings}")
    print_table(f"Search, top {K}, {args.queries} queries", ["query", "p50 ms", "p95 ms", "cpu p50", "cpu p95", "recall@10", "min recall", "d10 ratio", "max d10 ratio"],
                rows)
    print("(p50/p95: wall time per query as the client sees it; cpu: on-CPU time of the server backend for the "
          "query, from /proc/PID/schedstat, which leaves out the time spent waiting for a core on a busy machine)")
    print("\nPlan (HNSW):\n" + plan_hnsw)
    print("\nPlan (exact):\n" + plan_exact)
    result.update(generate_s=gen_s, load_s=load_s, build_s=build_s, table_size=sizes[0], index_size=sizes[1],
                  index_bytes=sizes[2], m=args.m, ef_construction=args.ef_construction, settings=settings,
                  search=per_ef, exact=ex, plan_hnsw=plan_hnsw, plan_exact=plan_exact)
    print_load()
    write_json(args.json, result)


if __name__ == "__main__":
    main()
