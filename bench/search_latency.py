"""Knowledge search latency: MemoryManager vs langchain-postgres on the same rows.

For each size in ``--sizes`` (default 10k and 100k rows of ``knowledge_memory``) it
times, per query, and side by side in one run:

* ``mm.read_knowledge(q, user, k)``, hybrid (vector + full text, fused);
* ``mm.read_knowledge(q, user, k, hybrid=False)``, vector only;
* ``mm.as_vectorstore("knowledge").similarity_search(q, k, filter={"user_id": user})``,
  langchain-postgres ``PGVectorStore`` over the same table;

and reports p50/p95, the ratio to PGVectorStore, and recall@k of the vector-only
paths against exact search (the same filter with index scans disabled). Finally it
prints EXPLAIN (ANALYZE, BUFFERS) of the one statement ``read_knowledge`` sends
(captured from the driver, not rewritten), vector-only and hybrid, to show the HNSW
index and the bounded keyword candidates (a gin bitmap scan per query word, each
under a LIMIT) at work.

The rows. Embedding 100k texts with MiniLM takes many minutes on two cores, so rows
are built from ``--base`` real sentences (harvested from installed docstrings, see
``_corpus``) embedded once with MiniLM and cached: row i's content is two random
base sentences joined, its vector the normalised sum of their two MiniLM vectors plus
Gaussian noise (10 % of the norm), loaded with binary COPY into the real table (the
HNSW index is dropped for the load and re-created with its own definition).
Queries are real MiniLM embeddings of text: half are held-out sentences (never in a
row), half are three-keyword queries drawn from base sentences. Query vectors are
embedded once before timing (the embedding cache serves both sides equally); the
cost of embedding one query is reported on its own line.

With ``--switch 250,500,...`` it measures instead where the similarity reads should
switch from the exact shape (every row under the filter read once) to the indexed one
(HNSW and bounded gin probes; ``memory.tables.base``): one user per size, among
``--switch-others`` rows of 100 other users (a shared table), each user's reads timed in
both shapes interleaved (``Table._similar(shape=...)``), with the top-k overlap of the
indexed shape with the exact one; it prints the smallest size from which the indexed
shape is faster (the value of ``Settings.similar_exact_max_rows``).

With ``--write-cost ROUNDS`` it measures what a trigger on ``knowledge_memory``
(``--write-trigger``: the postings of migration 013, ``knowledge_terms_insert``, or the
passage counts of migration 014, ``knowledge_stats_insert``) costs
``write_knowledge_batch``: the trigger on vs off, interleaved, one writer and then
``--writers`` concurrent writers of one user (throughput).

The server gets ``shared_buffers`` = 2 GB (``--shared-buffers``): under PostgreSQL's 128 MB
default the 100k-row tables do not fit and every search copies pages in from the OS cache
(``_common.LARGE_SHARED_BUFFERS``).

    python bench/search_latency.py --json /tmp/search.json
    python bench/search_latency.py --sizes 2000 --queries 20      # quick check
    python bench/search_latency.py --switch 250,500,1000,2000,4000,8000,16000 --queries 40
    python bench/search_latency.py --write-cost 20     # what migration 013's trigger costs writes
    python bench/search_latency.py --write-cost 20 --write-trigger knowledge_stats_insert    # 014's
"""

from __future__ import annotations

import hashlib
import re
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _corpus  # noqa: E402
from _common import (  # noqa: E402
    Timer, add_shared_buffers, apply_torch_threads, base_parser, embedded_server, log, open_manager, percentiles,
    print_load, print_table, write_json)

from memory import MiniLMEmbedder  # noqa: E402

USER = "bench-user-0"


def make_rows(rng: np.random.Generator, base: list[str], vecs: np.ndarray, n: int, users: list[str],
              start: int, noise: float) -> list[tuple[Any, ...]]:
    a = rng.integers(0, len(base), n)
    b = rng.integers(0, len(base), n)
    v = vecs[a] + vecs[b]
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    g = rng.standard_normal(v.shape).astype(np.float32)
    v = v + noise * norms * g / np.linalg.norm(g, axis=1, keepdims=True)
    v = (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)
    rows = []
    for i in range(n):
        content = f"{base[a[i]]} {base[b[i]]}"
        rows.append((users[(start + i) % len(users)], content, f"bench/{start + i}", Jsonb({}),
                     hashlib.sha256(content.encode()).hexdigest(), v[i]))
    return rows


def load_rows(conn: psycopg.Connection, rows: list[tuple[Any, ...]]) -> tuple[float, float]:
    """COPY rows into knowledge_memory with the HNSW index dropped, then rebuild it."""
    indexdef = conn.execute(
        "SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() AND indexname = %s",
        ("knowledge_memory_embedding",)).fetchone()[0]
    conn.execute("DROP INDEX knowledge_memory_embedding")
    with Timer() as load:
        with conn.cursor().copy(
            "COPY knowledge_memory (user_id, content, source, metadata, content_hash, embedding) "
            "FROM STDIN WITH (FORMAT BINARY)"
        ) as copy:
            copy.set_types(["text", "text", "text", "jsonb", "text", "vector"])
            for row in rows:
                copy.write_row(row)
    conn.execute("SET maintenance_work_mem = '1GB'")
    with Timer() as build:
        conn.execute(indexdef)  # the index's own definition, read from the catalog
    conn.execute("ANALYZE knowledge_memory")
    return load.seconds, build.seconds


def vacuum(uri: str, schema: str = "agent_memory") -> None:
    """VACUUM ANALYZE the loaded tables, as autovacuum does after a bulk of inserts: it sets the
    visibility map, so index-only scans (the postings of migration 013) skip the heap."""
    with psycopg.connect(uri, autocommit=True) as conn:
        for table in ("knowledge_memory", "knowledge_terms"):
            conn.execute(sql.SQL("VACUUM (ANALYZE) {}").format(sql.Identifier(schema, table)))


def exact_ids(conn: psycopg.Connection, qvec: np.ndarray, k: int) -> list[Any]:
    conn.execute("SET LOCAL enable_indexscan = off")
    return [r[0] for r in conn.execute(
        "SELECT id FROM knowledge_memory WHERE user_id = %s ORDER BY embedding <=> %s LIMIT %s", (USER, qvec, k))]


class QueryCapture:
    """Record the SQL psycopg sends while active (to EXPLAIN exactly what agentmem runs)."""

    def __init__(self) -> None:
        self.seen: list[tuple[Any, Any]] = []

    def __enter__(self) -> "QueryCapture":
        self._orig = psycopg.Cursor.execute
        capture = self

        def spy(cur: psycopg.Cursor, query: Any, params: Any = None, **kw: Any) -> Any:
            capture.seen.append((query, params))
            return capture._orig(cur, query, params, **kw)

        psycopg.Cursor.execute = spy  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        psycopg.Cursor.execute = self._orig  # type: ignore[method-assign]

    def find(self, conn: psycopg.Connection, pattern: str) -> tuple[Any, Any]:
        for query, params in self.seen:
            text = query.as_string(conn) if isinstance(query, sql.Composable) else str(query)
            if re.search(pattern, text):
                return query, params
        raise LookupError(pattern)


def explain(mm: Any, query_text: str, pattern: str, *, hybrid: bool) -> str:
    with QueryCapture() as cap:
        mm.read_knowledge(query_text, user_id=USER, k=5, hybrid=hybrid)
    with mm.db.connection() as conn:
        query, params = cap.find(conn, pattern)
        conn.execute("SET LOCAL hnsw.iterative_scan = strict_order")
        if isinstance(query, str):  # sent as it is, with PostgreSQL's own placeholders ($1...)
            lines = [r[0] for r in psycopg.RawCursor(conn).execute("EXPLAIN (ANALYZE, BUFFERS) " + query, params)]
        else:
            lines = [r[0] for r in conn.execute(sql.SQL("EXPLAIN (ANALYZE, BUFFERS) ") + query, params)]
        conn.rollback()
    return re.sub(r"'\[[^\]]*\]'::vector", "'[query vector]'::vector", "\n".join(lines))


def switch_point(mm: Any, rng: np.random.Generator, base: list[str], vecs: np.ndarray,
                 queries: list[tuple[str, str]], sizes: list[int], others: int, k: int,
                 noise: float) -> dict[str, Any]:
    """Exact vs indexed shape of the similarity read, per number of rows of one user."""
    from memory.store.rows import KnowledgeItem

    owners = [f"switch-{n}" for n in sizes]
    rows = make_rows(rng, base, vecs, others, [f"other-{i}" for i in range(100)], 0, noise) if others else []
    for n, owner in zip(sizes, owners):
        rows += make_rows(rng, base, vecs, n, [owner], len(rows), noise)
    with mm.db.connection() as conn:
        load_s, build_s = load_rows(conn, rows)
    vacuum(mm.settings.database_url)
    log(f"{len(rows):,} rows loaded in {load_s:.1f}s, HNSW rebuilt in {build_s:.1f}s")
    where = sql.SQL("user_id = %(uid)s")

    def read(q: str, owner: str, shape: str) -> list[Any]:  # what read_knowledge runs, in the shape given
        return mm.knowledge._similar("knowledge_memory", KnowledgeItem, q, where, {"uid": owner}, k=k, shape=shape,
                                     postings="knowledge_terms")

    table, out = [], []
    for n, owner in zip(sizes, owners):
        for _, q in queries[:10]:  # warm-up
            read(q, owner, "exact"), read(q, owner, "indexed")
        lat: dict[str, list[float]] = {"exact": [], "indexed": []}
        overlap: dict[str, list[float]] = {"sentence": [], "keywords": []}
        for kind, q in queries:
            ids = {}
            for shape in ("exact", "indexed"):  # interleaved
                t0 = time.perf_counter()
                ids[shape] = {h.item.id for h in read(q, owner, shape)}
                lat[shape].append(time.perf_counter() - t0)
            overlap[kind].append(len(ids["exact"] & ids["indexed"]) / max(1, len(ids["exact"])))
        ex, ix = percentiles(lat["exact"]), percentiles(lat["indexed"])
        by_kind = {kind: float(np.mean(v)) for kind, v in overlap.items()}
        entry = {"user_rows": n, "exact": ex, "indexed": ix, "p50_ratio_indexed_to_exact": ix["p50_ms"] / ex["p50_ms"],
                 "topk_overlap": float(np.mean(overlap["sentence"] + overlap["keywords"])),
                 "topk_overlap_by_query_kind": by_kind}
        out.append(entry)
        table.append([f"{n:,}", ex["p50_ms"], ex["p95_ms"], ix["p50_ms"], ix["p95_ms"],
                      entry["p50_ratio_indexed_to_exact"], entry["topk_overlap"], by_kind["sentence"],
                      by_kind["keywords"]])
    faster = [e["user_rows"] for e in out if e["p50_ratio_indexed_to_exact"] < 1.0]
    switch = next((n for n in sizes if all(m in faster for m in sizes if m >= n)), None)
    print_table(f"Similarity read, exact vs indexed shape, top {k}, {len(queries)} queries, one user among "
                f"{others:,} rows of 100 others", ["user rows", "exact p50", "exact p95", "indexed p50",
                                                   "indexed p95", "p50 indexed/exact", f"top-{k} overlap",
                                                   "sentences", "keywords"], table)
    print(f"switch point: the indexed shape is faster from {switch:,} rows of a user on"
          if switch is not None else "switch point: the indexed shape was not faster at any size measured")
    return {"switch": out, "switch_point_rows": switch, "others": others}


def set_trigger(mm: Any, trigger: str, on: bool) -> None:
    with mm.db.connection() as conn:
        conn.execute(sql.SQL("ALTER TABLE knowledge_memory {} TRIGGER {}").format(
            sql.SQL("ENABLE" if on else "DISABLE"), sql.Identifier(trigger)))


def write_cost(mm: Any, texts: list[str], rounds: int, batch: int, trigger: str) -> dict[str, Any]:
    """``write_knowledge_batch`` with one trigger on ``knowledge_memory`` on vs off.

    ``trigger``: ``knowledge_terms_insert`` (the postings of migration 013) or
    ``knowledge_stats_insert`` (the passage counts of migration 014). Interleaved rounds of
    ``batch`` new passages each, the order of on/off alternating per round; every text is
    new to the table (a round number in it). ``embedded``: the texts' vectors computed in
    the call (MiniLM, what a caller pays); ``cached``: embedded before timing (the
    embedding cache serves them), so only the database work and the library's own remain,
    the worst case for the trigger's share."""
    out: dict[str, Any] = {}
    for mode in ("cached", "embedded"):
        lat: dict[str, list[float]] = {"on": [], "off": []}
        for r in range(rounds + 1):  # round 0 warms up
            for state in (("on", "off") if r % 2 else ("off", "on")):
                items = [{"content": f"{t} (note {mode} {r} {state} {trigger})"} for t in texts[:batch]]
                if mode == "cached":
                    mm.embeddings.embed([i["content"] for i in items])
                set_trigger(mm, trigger, state == "on")
                t0 = time.perf_counter()
                mm.write_knowledge_batch(items, user_id=f"writer-{mode}-{state}")
                if r:
                    lat[state].append(time.perf_counter() - t0)
        set_trigger(mm, trigger, True)
        on, off = percentiles(lat["on"]), percentiles(lat["off"])
        out[mode] = {"on": on, "off": off, "p50_ratio_on_to_off": on["p50_ms"] / off["p50_ms"],
                     "mean_ratio_on_to_off": on["mean_ms"] / off["mean_ms"]}
    print_table(f"write_knowledge_batch of {batch} passages, {trigger} on vs off, {rounds} interleaved rounds",
                ["vectors", "on p50 ms", "off p50 ms", "on mean ms", "off mean ms", "p50 on/off", "mean on/off"],
                [[m, e["on"]["p50_ms"], e["off"]["p50_ms"], e["on"]["mean_ms"], e["off"]["mean_ms"],
                  e["p50_ratio_on_to_off"], e["mean_ratio_on_to_off"]] for m, e in out.items()])
    return out


def concurrent_write_cost(mm: Any, texts: list[str], rounds: int, batch: int, writers: int,
                          trigger: str) -> dict[str, Any]:
    """Knowledge write throughput of ``writers`` concurrent writers of one user, ``trigger`` on vs off.

    Each round, every writer (a thread with its own pooled connection) writes ``batch``
    new passages of the same user at once (vectors cached before timing: the database's
    share, where a row every writer updates would make them queue); passages/s = all the
    round's passages / its wall time, on/off interleaved as in :func:`write_cost`."""
    import threading

    rate: dict[str, list[float]] = {"on": [], "off": []}
    for r in range(rounds + 1):
        for state in (("on", "off") if r % 2 else ("off", "on")):
            work = [[{"content": f"{t} (writer {w} round {r} {state} {trigger})"} for t in texts[:batch]]
                    for w in range(writers)]
            mm.embeddings.embed([i["content"] for items in work for i in items])
            set_trigger(mm, trigger, state == "on")
            start = threading.Barrier(writers + 1)

            def write(items: list[dict[str, str]]) -> None:
                start.wait()
                mm.write_knowledge_batch(items, user_id="concurrent-writer")

            threads = [threading.Thread(target=write, args=(items,)) for items in work]
            for t in threads:
                t.start()
            start.wait()
            t0 = time.perf_counter()
            for t in threads:
                t.join()
            if r:
                rate[state].append(writers * batch / (time.perf_counter() - t0))
    set_trigger(mm, trigger, True)
    on, off = float(np.median(rate["on"])), float(np.median(rate["off"]))
    print_table(f"{writers} concurrent writers of one user, {batch} passages each, {trigger} on vs off, "
                f"{rounds} interleaved rounds (vectors cached)",
                ["on passages/s", "off passages/s", "on/off"], [[on, off, on / off]])
    return {"writers": writers, "on_passages_per_s": on, "off_passages_per_s": off, "ratio_on_to_off": on / off}


def main() -> None:
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--sizes", default="10000,100000", help="comma-separated row counts (ascending)")
    p.add_argument("--queries", type=int, default=100)
    p.add_argument("--k", type=int, default=5)
    p.add_argument("--base", type=int, default=4000, help="real sentences embedded with MiniLM")
    p.add_argument("--users", type=int, default=1, help="spread rows over this many users (search is user 0's)")
    p.add_argument("--noise", type=float, default=0.10)
    p.add_argument("--switch", default="", help="comma-separated rows of one user: measure the exact/indexed switch")
    p.add_argument("--switch-others", type=int, default=50_000, help="rows of 100 other users in the switch phase")
    p.add_argument("--write-cost", type=int, default=0, metavar="ROUNDS",
                   help="measure instead what the postings trigger (migration 013) costs knowledge writes")
    p.add_argument("--write-batch", type=int, default=50, help="passages per write in the --write-cost phase")
    p.add_argument("--write-trigger", default="knowledge_terms_insert",
                   help="the trigger --write-cost turns off and on: knowledge_terms_insert (migration 013) or "
                        "knowledge_stats_insert (014)")
    add_shared_buffers(p)
    p.add_argument("--writers", type=int, default=4, help="concurrent writers of one user in the --write-cost phase")
    args = p.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    rng = np.random.default_rng(args.seed)

    log("loading MiniLM and the sentence corpus")
    minilm = MiniLMEmbedder()
    threads = apply_torch_threads(args.torch_threads)
    log(f"torch intra-op threads: {threads}")
    pool = _corpus.sentences(args.base + args.queries)
    base, held_out = pool[:args.base], pool[args.base:]
    with Timer() as t_embed:
        vecs = _corpus.embed_cached(base, minilm, "base")
    log(f"{len(base)} base sentences embedded (or read from cache) in {t_embed.seconds:.1f}s")
    n_sent = args.queries // 2
    queries = [("sentence", s) for s in held_out[:n_sent]]
    queries += [("keywords", _corpus.keywords(base[i]))
                for i in rng.choice(len(base), args.queries - n_sent, replace=False)]

    one_query = []
    for _, q in queries[:20]:
        with Timer() as t:
            minilm.embed([q])
        one_query.append(t.seconds)

    if args.write_cost:
        with embedded_server({"shared_buffers": args.shared_buffers}) as uri:
            mm = open_manager(uri, embedder=minilm)
            found = write_cost(mm, base, args.write_cost, args.write_batch, args.write_trigger)
            together = concurrent_write_cost(mm, base, args.write_cost, args.write_batch, args.writers,
                                             args.write_trigger)
            mm.close()
        print_load()
        write_json(args.json, {"write_cost": found, "concurrent": together, "trigger": args.write_trigger,
                               "batch": args.write_batch, "rounds": args.write_cost})
        return

    if args.switch:
        with embedded_server({"shared_buffers": args.shared_buffers}) as uri:
            mm = open_manager(uri, embedder=minilm)
            mm.embeddings.embed([q for _, q in queries])  # query vectors once (the cache serves both shapes)
            found = switch_point(mm, rng, base, vecs, queries, sorted(int(s) for s in args.switch.split(",")),
                                 args.switch_others, args.k, args.noise)
            mm.close()
        print_load()
        write_json(args.json, {"k": args.k, "queries": args.queries, **found})
        return

    users = [USER] + [f"bench-user-{i}" for i in range(1, args.users)]
    results: list[dict[str, Any]] = []
    table: list[list[Any]] = []
    plans: dict[str, str] = {}
    loads: list[dict[str, Any]] = []
    with embedded_server({"shared_buffers": args.shared_buffers}) as uri:
        mm = open_manager(uri, embedder=minilm)
        store = mm.as_vectorstore("knowledge")
        mm.embeddings.embed([q for _, q in queries])  # query vectors once; both sides hit this cache
        qvecs = [mm.embeddings.embed_one(q) for _, q in queries]
        loaded = 0
        for size in sizes:
            rows = make_rows(rng, base, vecs, size - loaded, users, loaded, args.noise)
            with mm.db.connection() as conn:
                load_s, build_s = load_rows(conn, rows)
            vacuum(uri)
            loaded = size
            user_rows = -(-size // len(users))
            log(f"{size:,} rows loaded in {load_s:.1f}s, HNSW rebuilt in {build_s:.1f}s")
            loads.append({"rows": size, "copy_s": load_s, "hnsw_build_s": build_s})

            methods: dict[str, Callable[[str], list[Any]]] = {
                "mm.read_knowledge hybrid": lambda q: [h.item.id for h in mm.read_knowledge(q, user_id=USER, k=args.k)],
                "mm.read_knowledge vector-only":
                    lambda q: [h.item.id for h in mm.read_knowledge(q, user_id=USER, k=args.k, hybrid=False)],
                "PGVectorStore.similarity_search":
                    lambda q: [d.id for d in store.similarity_search(q, k=args.k, filter={"user_id": USER})],
            }
            with mm.db.connection() as conn:
                truth = [{str(i) for i in exact_ids(conn, v, args.k)} for v in qvecs]
            for fn in methods.values():  # warm-up: index pages and plans cached
                for _, q in queries[:20]:
                    fn(q)
            lat: dict[str, list[float]] = {m: [] for m in methods}
            lat_kind: dict[tuple[str, str], list[float]] = {}
            recall: dict[str, list[float]] = {m: [] for m in methods}
            for (kind, q), exact in zip(queries, truth):
                for name, fn in methods.items():  # interleaved, so CPU noise hits every side alike
                    t0 = time.perf_counter()
                    ids = fn(q)
                    dt = time.perf_counter() - t0
                    lat[name].append(dt)
                    lat_kind.setdefault((name, kind), []).append(dt)
                    recall[name].append(len(exact & {str(i) for i in ids}) / args.k)
            ref = percentiles(lat["PGVectorStore.similarity_search"])
            for name in methods:
                pct = percentiles(lat[name])
                by_kind = {kind: percentiles(lat_kind[(name, kind)]) for kind in ("sentence", "keywords")}
                entry = {"rows": size, "user_rows": user_rows, "method": name, **pct,
                         "p50_ratio_to_pgvectorstore": pct["p50_ms"] / ref["p50_ms"],
                         "p95_ratio_to_pgvectorstore": pct["p95_ms"] / ref["p95_ms"],
                         "recall_at_k_vs_exact": float(np.mean(recall[name])), "by_query_kind": by_kind}
                results.append(entry)
                table.append([f"{size:,}", name, pct["p50_ms"], pct["p95_ms"], by_kind["sentence"]["p50_ms"],
                              by_kind["keywords"]["p50_ms"], entry["p50_ratio_to_pgvectorstore"],
                              entry["p95_ratio_to_pgvectorstore"],
                              entry["recall_at_k_vs_exact"] if "hybrid" not in name else "-"])
        # read_knowledge sends one statement (vector half, bounded keyword half, fusion);
        # hybrid=False switches its keyword half off inside the same statement.
        one = r"WITH terms AS"
        plans["read_knowledge, vector only"] = explain(mm, queries[0][1], one, hybrid=False)
        kw_q = next(q for kind, q in queries if kind == "keywords")
        plans["read_knowledge hybrid, a keyword query"] = explain(mm, kw_q, one, hybrid=True)
        plans["read_knowledge hybrid, a sentence query"] = explain(mm, queries[0][1], one, hybrid=True)
        store_sql_note = "PGVectorStore sends: SELECT id, content, embedding, <metadata cols> ... " \
                         "WHERE user_id = :p ORDER BY embedding <=> :query_embedding LIMIT :k"
        mm.close()

    one = percentiles(one_query)
    print_table(f"Knowledge search, top {args.k}, {args.queries} queries ({n_sent} sentences, "
                f"{args.queries - n_sent} keyword), users={args.users}",
                ["rows", "method", "p50 ms", "p95 ms", "p50 sent.", "p50 kw", "p50 ratio", "p95 ratio",
                 f"recall@{args.k}"], table)
    print(f"(ratio = method / PGVectorStore.similarity_search; embedding one query with MiniLM, not included "
          f"above: p50 {one['p50_ms']:.1f} ms, p95 {one['p95_ms']:.1f} ms)")
    print_table("Loading", ["rows", "COPY s", "HNSW build s"],
                [[f"{x['rows']:,}", x["copy_s"], x["hnsw_build_s"]] for x in loads])
    for title, plan in plans.items():
        print(f"\nEXPLAIN ANALYZE, {title}, at {sizes[-1]:,} rows "
              f"(hnsw.iterative_scan = strict_order, as agentmem sets it):\n{plan}")
    print("\n" + store_sql_note)
    print_load()
    write_json(args.json, {"torch_threads": threads, "sizes": sizes, "k": args.k, "queries": args.queries,
                           "users": args.users,
                           "base_sentences": len(base), "noise": args.noise, "results": results, "loads": loads,
                           "embed_one_query": one, "plans": plans})


if __name__ == "__main__":
    main()
