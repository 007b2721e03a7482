"""Concurrent agents through one pool: throughput, turn latency and correctness.

Runs the workload of ``tests/load_workload.py`` (each agent per turn: write the
turn, build the context, consolidate every ``--consolidate-every`` turns) on a
throwaway embedded server and prints throughput and turn-latency percentiles, then
the correctness checks (lost, duplicated, reordered messages; orphaned or miscounted
summaries; contexts showing another agent's rows), which must all be zero.

    python bench/agents_load.py                      # 16 agents x 100 turns, hash embedder
    python bench/agents_load.py --agents 32 --turns 300 --minilm --json /tmp/load.json
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from _common import base_parser, embedded_server, log, print_load, write_json  # noqa: E402
from load_workload import run_load, verify  # noqa: E402

import psycopg  # noqa: E402
from psycopg import sql  # noqa: E402

from memory import HashEmbedder, MemoryManager, MiniLMEmbedder, Settings  # noqa: E402


def main() -> int:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=16)
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--consolidate-every", type=int, default=10)
    parser.add_argument("--minilm", action="store_true", help="real MiniLM embeddings (default: hash embedder)")
    args = parser.parse_args()
    with embedded_server() as uri:
        settings = Settings.from_env(database_url=uri, pool_max_size=max(4, args.agents + 2))
        with MemoryManager.open(settings, embedder=MiniLMEmbedder() if args.minilm else HashEmbedder()) as mm:
            log(f"running {args.agents} agents x {args.turns} turns")
            report = run_load(mm, agents=args.agents, turns=args.turns, consolidate_every=args.consolidate_every)
            with psycopg.connect(uri) as conn:
                conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(mm.db.schema)))
                problems = verify(conn, report)
    print(report.summary())
    print("correctness:", ", ".join(f"{k}={v}" for k, v in problems.items()), f"leaks={len(report.leaks)}")
    print_load()
    write_json(args.json, {
        "agents": args.agents, "turns": args.turns, "seconds": report.seconds,
        "turns_per_second": report.turns_per_second, "p50_ms": report.percentile(50) * 1000,
        "p95_ms": report.percentile(95) * 1000, "p99_ms": report.percentile(99) * 1000,
        "consolidations": report.consolidations, "problems": problems, "leaks": len(report.leaks)})
    return 0 if not any(problems.values()) and not report.leaks else 1


if __name__ == "__main__":
    sys.exit(main())
