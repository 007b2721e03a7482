"""Embeddings in the row or out of line (TOAST): what migration 016 changes, at LoCoMo size.

The three LoCoMo conversations of ``../shared/data`` are written as ``bench/peers.py``
writes them (one user per conversation, turns alternating user/assistant in one thread;
the same turns as knowledge passages), embedded by the default ONNX int8 MiniLM. Then,
``--pairs`` times, the tables with an embedding column are rewritten (``VACUUM FULL``)
first with PostgreSQL's default ``toast_tuple_target`` (2032 bytes: a row's embedding goes
out of line once the row passes it) and then with migration 016's (the largest: the
embedding stays in the row), and each time ``--queries`` LoCoMo questions (seed 7, as
``peers.py``) run ``--rounds`` times through ``search_memory`` and ``read_knowledge``
(k=10). Each query's vector is computed once and cached, so the times are agentmem's
own part of the call. The two settings alternate, so a drift of the machine's speed
falls on both; each pair's ratio is printed.

Also printed: the share of rows whose embedding is out of line, and the tables' size
(table, TOAST and indexes) under each setting.

    python bench/inline_embeddings.py              # ~2 min
    python bench/inline_embeddings.py --pairs 5
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import base_parser, bench_embedder, embedded_server, print_load, print_table  # noqa: E402
from _public_data import locomo_questions, locomo_turns  # noqa: E402
from search_memory_profile import Cached  # noqa: E402

from memory import MemoryManager, Settings  # noqa: E402

SCHEMA = "agentmem"
TABLES = ("conversational_memory", "knowledge_memory")
#: PostgreSQL's own toast_tuple_target (TOAST_TUPLE_TARGET on an 8 KB block).
DEFAULT_TARGET = 2032


def rewrite(uri: str, target: int | None) -> None:
    """Set ``toast_tuple_target`` (None: the migration's, as it stands) and rewrite the tables."""
    with psycopg.connect(uri, autocommit=True) as conn:
        for table in TABLES:
            name = sql.Identifier(SCHEMA, table)
            if target is not None:
                conn.execute(sql.SQL("ALTER TABLE {} SET (toast_tuple_target = {})").format(name, sql.Literal(target)))
            conn.execute(sql.SQL("VACUUM FULL {}").format(name))
            conn.execute(sql.SQL("VACUUM ANALYZE {}").format(name))


def layout(uri: str) -> list[list[Any]]:
    """Per table: rows, the share with the embedding out of line, table / TOAST / index MB."""
    out = []
    with psycopg.connect(uri) as conn:
        for table in TABLES:
            name = sql.Identifier(SCHEMA, table)
            rows, outside = conn.execute(sql.SQL(
                "SELECT count(*), count(*) FILTER (WHERE pg_column_toast_chunk_id(embedding) IS NOT NULL)"
                " FROM {}").format(name)).fetchone() or (0, 0)
            heap, toast, index = conn.execute(
                "SELECT pg_relation_size(c.oid), coalesce(pg_relation_size(c.reltoastrelid), 0),"
                " pg_indexes_size(c.oid) FROM pg_class c WHERE c.oid = %s::regclass",
                (f"{SCHEMA}.{table}",)).fetchone() or (0, 0, 0)
            target = conn.execute("SELECT coalesce((SELECT option_value FROM pg_options_to_table(reloptions)"
                                  " WHERE option_name = 'toast_tuple_target'), 'default') FROM pg_class"
                                  " WHERE oid = %s::regclass", (f"{SCHEMA}.{table}",)).fetchone()
            out.append([table, target[0] if target else "?", rows, f"{100 * outside / max(rows, 1):.0f} %",
                        heap / 2**20, toast / 2**20, index / 2**20, (heap + toast + index) / 2**20])
    return out


def own_ms(mm: MemoryManager, which: str, asks: list[tuple[str, str]], rounds: int) -> list[float]:
    call = mm.search_memory if which == "search_memory" else mm.read_knowledge
    for user, q in asks[:10]:  # statements prepared again after the rewrite
        call(q, user_id=user, k=10)
    samples = []
    for _ in range(rounds):
        for user, q in asks:
            t0 = time.perf_counter()
            call(q, user_id=user, k=10)
            samples.append((time.perf_counter() - t0) * 1000)
    return samples


def main() -> None:
    ap = base_parser(__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--queries", type=int, default=40)
    args = ap.parse_args()
    turns, questions = locomo_turns(), locomo_questions()
    convs = sorted({t.conversation for t in turns})
    with embedded_server() as uri:
        encoder = Cached(bench_embedder("onnx", args.torch_threads))
        settings = Settings.from_env(database_url=uri, schema=SCHEMA, embedding_cache_size=0, pool_max_size=2)
        mm = MemoryManager.open(settings, embedder=encoder)
        for c in convs:
            conv = [x for x in turns if x.conversation == c]
            mm.write_messages([{"role": "user" if i % 2 == 0 else "assistant", "content": t.text}
                               for i, t in enumerate(conv)], user_id=f"r0-{c}", thread_id="t")
            mm.write_knowledge_batch([{"content": t.text} for t in conv], user_id=f"r0-{c}")
        with psycopg.connect(uri) as conn:
            (migrated,) = conn.execute("SELECT option_value FROM pg_class, pg_options_to_table(reloptions)"
                                       " WHERE oid = %s::regclass AND option_name = 'toast_tuple_target'",
                                       (f"{SCHEMA}.knowledge_memory",)).fetchone() or (None,)
        if migrated is None:
            sys.exit("knowledge_memory has no toast_tuple_target: is migration 016 applied?")
        asks = [(f"r0-{q.conversation}", q.text) for q in random.Random(7).sample(questions, args.queries)]
        for user, q in asks:
            encoder.embed([q])
        targets = {"default": DEFAULT_TARGET, "016": int(migrated)}
        sizes: dict[str, list[list[Any]]] = {}
        rows: list[list[Any]] = []
        for pair in range(args.pairs):
            p50: dict[tuple[str, str], float] = {}
            for label, target in targets.items():
                rewrite(uri, target)
                sizes.setdefault(label, layout(uri))
                for which in ("search_memory", "read_knowledge"):
                    samples = sorted(own_ms(mm, which, asks, args.rounds))
                    p50[label, which] = statistics.median(samples)
                    rows.append([pair + 1, label, which, p50[label, which], samples[int(0.95 * (len(samples) - 1))],
                                 statistics.fmean(samples)])
            for which in ("search_memory", "read_knowledge"):
                rows.append([pair + 1, "016 / default", which, p50["016", which] / p50["default", which], "", ""])
        mm.close()
        print_table("Tables under each toast_tuple_target (rewritten by VACUUM FULL); MB",
                    ["table", "toast_tuple_target", "rows", "embedding out of line", "table", "TOAST", "indexes",
                     "total"], [r for label in targets for r in sizes[label]])
        print_table(f"Own time of a call, ms (query vectors cached; {args.queries} questions x {args.rounds} rounds"
                    " per line; the ratio line: p50 under 016 over p50 under the default)",
                    ["pair", "toast_tuple_target", "call", "p50", "p95", "mean"], rows)
        print_load()


if __name__ == "__main__":
    main()
