"""Sizing for scale-out: bytes per message, summary and fact (table + indexes), projected.

A real embedded PostgreSQL is filled through the library's own write paths with
``--messages`` messages (default 100,000): ``--users`` users, threads of
``--thread-length`` messages alternating user / assistant (assistant answers longer),
text made of real English sentences (bench/_corpus.py). Every thread is then
consolidated once with the extractive summariser (``summarize_conversation``, which
writes the summary and marks the rows, as in production: the marked rows are updated
once), and each user remembers ``--facts-per-user`` facts. Vectors come from the
deterministic hash embedder: a 384-dimension vector takes the same bytes whatever
its values, and the HNSW graph the same shape. After ``VACUUM ANALYZE`` the script
prints, per table, the rows, the heap + TOAST bytes and every index's bytes, then
bytes per row; then the cost of one message (its row, its window row in
conversational_context and the postings of its window's words in conversational_terms,
migration 015; the per-user count row is shared by all of a user's messages), of one
summary and of one fact.

The projection multiplies those by 1M, 100M and 1B messages, with one summary per
``--thread-length`` messages and ``--facts-per-user`` facts per ``--messages-per-user``
messages, and sizes a Citus cluster: shards so that each shard's HNSW indexes stay
under ``--hnsw-per-shard-gib``, at least ``--min-shards`` (Citus's default is 32),
rounded up to a power of two; workers so that the HNSW indexes and the B-tree
indexes fit in ``--ram-fraction`` of ``--worker-ram-gib`` per worker (vector search
that reads an HNSW index from disk is an order of magnitude slower).

    python bench/sizing.py                          # 100k messages, ~15 min on 2 busy cores
    python bench/sizing.py --messages 20000 --json /tmp/sizing.json
"""

from __future__ import annotations

import math
import random
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import Timer, base_parser, embedded_server, log, open_manager, print_load, print_table, write_json  # noqa: E402
from _corpus import sentences  # noqa: E402
import psycopg  # noqa: E402
from psycopg import sql  # noqa: E402

from memory import HashEmbedder  # noqa: E402

GIB = 1024 ** 3

_SIZES = """
SELECT c.relname, c.reltuples::bigint,
       (SELECT count(*) FROM pg_index x WHERE x.indrelid = c.oid),
       pg_relation_size(c.oid) + pg_relation_size(c.oid, 'fsm') + pg_relation_size(c.oid, 'vm'),
       coalesce(pg_total_relation_size(nullif(c.reltoastrelid, 0)), 0),
       pg_indexes_size(c.oid)
FROM pg_class c WHERE c.relnamespace = %s::regnamespace AND c.relkind = 'r' ORDER BY c.relname
"""

_INDEXES = """
SELECT t.relname, i.relname, am.amname, pg_relation_size(i.oid)
FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid
JOIN pg_am am ON am.oid = i.relam
WHERE t.relnamespace = %s::regnamespace ORDER BY t.relname, pg_relation_size(i.oid) DESC
"""


def fill(mm: Any, args: Any, rng: random.Random) -> dict[str, int]:
    pool = sentences(4000)
    users = [f"user-{i:05d}" for i in range(args.users)]
    per_user = args.messages // args.users
    threads = max(1, per_user // args.thread_length)
    written = 0
    for n, user in enumerate(users):
        for t in range(threads):
            batch = []
            for i in range(args.thread_length):
                role = "user" if i % 2 == 0 else "assistant"
                k = rng.randint(1, 2) if role == "user" else rng.randint(2, 5)
                batch.append({"role": role, "content": " ".join(rng.sample(pool, k))})
            mm.write_messages(batch, user_id=user, thread_id=f"thread-{t:03d}")
            written += len(batch)
        if n % max(1, len(users) // 10) == 0:
            log(f"messages: {written:,} of {args.users * threads * args.thread_length:,}")
    summarizer = mm.summarizer()  # extractive
    for n, user in enumerate(users):
        for t in range(threads):
            result = mm.summarize_conversation(thread_id=f"thread-{t:03d}", user_id=user, summarizer=summarizer)
            assert result.summarized, result.message
        for f in range(args.facts_per_user):
            mm.remember(("preference", "constraint", "stable_fact")[f % 3], rng.choice(pool)[:170], user_id=user)
        if n % max(1, len(users) // 10) == 0:
            log(f"consolidated and remembered for {n + 1} of {len(users)} users")
    return {"messages": written, "threads": len(users) * threads}


def measure(conn: Any, schema: str) -> tuple[dict[str, dict[str, int]], list[tuple[str, str, str, int]]]:
    tables = {}
    for name, rows, nidx, heap, toast, indexes in conn.execute(_SIZES, (schema,)):
        exact = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(schema, name))).fetchone()[0]
        tables[name] = {"rows": int(exact), "indexes": int(nidx), "heap": int(heap), "toast": int(toast),
                        "index_bytes": int(indexes), "total": int(heap + toast + indexes)}
    return tables, [tuple(r) for r in conn.execute(_INDEXES, (schema,))]  # type: ignore[misc]


def per_row(t: dict[str, int]) -> float:
    return t["total"] / t["rows"] if t["rows"] else float("nan")


def hnsw_per_row(indexes: list[tuple[str, str, str, int]], tables: dict[str, dict[str, int]], table: str) -> float:
    size = sum(b for t, _, am, b in indexes if t == table and am == "hnsw")
    return size / tables[table]["rows"] if tables[table]["rows"] else 0.0


def project(args: Any, cost: dict[str, float], hnsw: dict[str, float], btree: dict[str, float]) -> list[list[Any]]:
    rows = []
    for messages in (1_000_000, 100_000_000, 1_000_000_000):
        summaries = messages / args.thread_length
        facts = messages / args.messages_per_user * args.facts_per_user
        storage = messages * cost["message"] + summaries * cost["summary"] + facts * cost["fact"]
        hnsw_total = messages * hnsw["message"] + summaries * hnsw["summary"] + facts * hnsw["fact"]
        btree_total = messages * btree["message"] + summaries * btree["summary"] + facts * btree["fact"]
        shards = max(args.min_shards, 2 ** math.ceil(math.log2(max(1.0, hnsw_total / (args.hnsw_per_shard_gib * GIB)))))
        hot = hnsw_total + btree_total
        workers = max(1, math.ceil(hot / (args.worker_ram_gib * args.ram_fraction * GIB)))
        rows.append([f"{messages:,}", storage / GIB, hnsw_total / GIB, shards, hnsw_total / shards / GIB * 1024,
                     workers, storage / workers / GIB])
    return rows


def main() -> int:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--users", type=int, default=100)
    parser.add_argument("--thread-length", type=int, default=50, help="messages per thread (one summary each)")
    parser.add_argument("--facts-per-user", type=int, default=20, help="the default cap of active facts")
    parser.add_argument("--messages-per-user", type=int, default=1000, help="for the projection: facts per messages")
    parser.add_argument("--min-shards", type=int, default=32)
    parser.add_argument("--hnsw-per-shard-gib", type=float, default=2.0)
    parser.add_argument("--worker-ram-gib", type=float, default=64.0)
    parser.add_argument("--ram-fraction", type=float, default=0.5, help="of a worker's RAM kept for hot indexes")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    schema = "agent_memory"
    with embedded_server() as uri:
        mm = open_manager(uri, schema=schema, embedder=HashEmbedder())
        with Timer() as t:
            counts = fill(mm, args, rng)
        log(f"filled in {t.seconds:.0f} s")
        mm.close()
        with psycopg.connect(uri, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE")
            tables, indexes = measure(conn, schema)
            avg = conn.execute(sql.SQL("SELECT avg(length(content)) FROM {}").format(
                sql.Identifier(schema, "conversational_memory"))).fetchone()[0]
    print(f"\n{counts['messages']:,} messages in {counts['threads']:,} threads of {args.thread_length} "
          f"({args.users} users), mean content {float(avg):.0f} characters; one summary per thread, "
          f"{args.facts_per_user} facts per user; hash-embedder vectors (384 dimensions); after VACUUM ANALYZE")
    print_table("per table", ["table", "rows", "heap+toast MiB", "indexes MiB", "total MiB", "bytes/row"],
                [[n, t["rows"], (t["heap"] + t["toast"]) / 2**20, t["index_bytes"] / 2**20, t["total"] / 2**20,
                  per_row(t)] for n, t in tables.items()])
    print_table("per index", ["table", "index", "method", "MiB", "bytes/row"],
                [[t, i, am, b / 2**20, b / tables[t]["rows"] if tables[t]["rows"] else float("nan")]
                 for t, i, am, b in indexes if tables[t]["rows"]])

    def bytes_of(names: list[str], per: str, only: str | None = None) -> float:
        n = tables[per]["rows"]
        if only == "hnsw":
            return sum(b for t, _, am, b in indexes if t in names and am == "hnsw") / n
        if only == "other":
            return sum(b for t, _, am, b in indexes if t in names and am != "hnsw") / n
        return sum(tables[x]["total"] for x in names) / n

    groups = {"message": (["conversational_memory", "conversational_context", "conversational_terms",
                           "conversational_stats"], "conversational_memory"),
              "summary": (["summary_memory"], "summary_memory"), "fact": (["fact_memory"], "fact_memory")}
    cost = {k: bytes_of(names, per) for k, (names, per) in groups.items()}
    hnsw = {k: bytes_of(names, per, "hnsw") for k, (names, per) in groups.items()}
    btree = {k: bytes_of(names, per, "other") for k, (names, per) in groups.items()}
    print_table("bytes per stored item (table + TOAST + every index)", ["item", "bytes", "of which HNSW",
                                                                      "other indexes"],
                [[k, cost[k], hnsw[k], btree[k]] for k in cost])
    projection = project(args, cost, hnsw, btree)
    print_table(f"projection: one summary per {args.thread_length} messages, {args.facts_per_user} facts per "
                f"{args.messages_per_user:,} messages; shards >= {args.min_shards} with <= {args.hnsw_per_shard_gib} "
                f"GiB HNSW each; workers hold HNSW + other indexes in {args.ram_fraction:.0%} of "
                f"{args.worker_ram_gib:.0f} GiB",
                ["messages", "storage GiB", "HNSW GiB", "shards", "HNSW MiB/shard", "workers", "storage GiB/worker"],
                projection)
    print_load()
    write_json(args.json, {"counts": counts, "tables": tables, "indexes": indexes, "cost": cost, "hnsw": hnsw,
                           "other_indexes": btree, "projection": projection, "args": vars(args)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
