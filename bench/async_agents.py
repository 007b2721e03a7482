"""N concurrent agents: AsyncMemoryManager tasks on one event loop vs MemoryManager in N threads.

Each agent runs the memory side of a chat turn ``--turns`` times: write the user's message, build the context for it, monitor it, write a canned
answer, and every ``--consolidate-every`` turns consolidate the thread (keeping the
last turn live). No chat model is called: the figure is the memory layer's own cost.
``async``: N tasks on one event loop over one ``AsyncConnectionPool``; ``threads``: N
threads over one ``ConnectionPool``; both pools of ``--pool`` connections, both the
same embedder. Rounds alternate the two modes, each on a fresh schema. Reported per
mode: turns per second (all agents together) and the p50 / p95 turn latency.

    python bench/async_agents.py                              # 16 agents x 20 turns, MiniLM (onnx)
    python bench/async_agents.py --agents 64 --embedder hash  # the memory layer without the model
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import base_parser, bench_embedder, embedded_server, log, percentiles, print_load, print_table, write_json  # noqa: E402

import psycopg  # noqa: E402
from psycopg import sql  # noqa: E402

from memory import HashEmbedder, MemoryManager, Settings  # noqa: E402
from memory.aio import AsyncMemoryManager  # noqa: E402

ANSWER = "Noted. The export job failed because the volume was full; I cleaned old snapshots and reran it."


def question(agent: int, turn: int) -> str:
    return (f"Agent {agent}, turn {turn}: the nightly export EXP-{1000 + turn} on volume vol-{agent} failed "
            "with disk quota exceeded again, what should I check first?")


def sync_turn(mm: MemoryManager, user: str, thread: str, agent: int, turn: int, every: int) -> None:
    text = question(agent, turn)
    mm.write_conversational_memory("user", text, user_id=user, thread_id=thread)
    context = mm.build_context(text, user_id=user, thread_id=thread)
    mm.monitor_context_window(context)
    mm.write_conversational_memory("assistant", ANSWER, user_id=user, thread_id=thread)
    if every and (turn + 1) % every == 0:
        mm.summarize_conversation(user_id=user, thread_id=thread, keep_recent=1)


async def async_turn(amm: AsyncMemoryManager, user: str, thread: str, agent: int, turn: int, every: int) -> None:
    text = question(agent, turn)
    await amm.write_conversational_memory("user", text, user_id=user, thread_id=thread)
    context = await amm.build_context(text, user_id=user, thread_id=thread)
    await amm.monitor_context_window(context)
    await amm.write_conversational_memory("assistant", ANSWER, user_id=user, thread_id=thread)
    if every and (turn + 1) % every == 0:
        await amm.summarize_conversation(user_id=user, thread_id=thread, keep_recent=1)


def run_threads(settings: Settings, embedder: Any, agents: int, turns: int, every: int) -> tuple[float, list[float]]:
    latencies: list[float] = []
    lock = threading.Lock()
    with MemoryManager.open(settings, embedder=embedder) as mm:
        def agent(a: int) -> None:
            user, mine = f"agent-{a}-{uuid.uuid4().hex[:6]}", []
            for t in range(turns):
                start = time.perf_counter()
                sync_turn(mm, user, "chat", a, t, every)
                mine.append(time.perf_counter() - start)
            with lock:
                latencies.extend(mine)

        threads = [threading.Thread(target=agent, args=(a,)) for a in range(agents)]
        start = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        return time.perf_counter() - start, latencies


def run_async(settings: Settings, embedder: Any, agents: int, turns: int, every: int) -> tuple[float, list[float]]:
    latencies: list[float] = []

    async def main() -> float:
        async with await AsyncMemoryManager.open(settings, embedder=embedder) as amm:
            async def agent(a: int) -> None:
                user = f"agent-{a}-{uuid.uuid4().hex[:6]}"
                for t in range(turns):
                    start = time.perf_counter()
                    await async_turn(amm, user, "chat", a, t, every)
                    latencies.append(time.perf_counter() - start)

            start = time.perf_counter()
            await asyncio.gather(*(agent(a) for a in range(agents)))
            return time.perf_counter() - start

    return asyncio.run(main()), latencies


def main() -> int:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=16)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--consolidate-every", type=int, default=10, help="turns between consolidations (0: never)")
    parser.add_argument("--pool", type=int, default=10, help="connections in each mode's pool")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per mode, interleaved")
    parser.add_argument("--embedder", choices=("minilm", "hash"), default="minilm",
                        help="MiniLM on --backend (default), or the hash embedder (the memory layer alone)")
    args = parser.parse_args()
    embedder = bench_embedder(args.backend, args.torch_threads) if args.embedder == "minilm" else HashEmbedder()
    embedder.embed(["warm up the model"])
    runners = {"async": run_async, "threads": run_threads}
    results: dict[str, dict[str, list[float]]] = {m: {"seconds": [], "latencies": []} for m in runners}
    with embedded_server() as uri:
        for r in range(args.rounds):
            for mode in (("async", "threads") if r % 2 == 0 else ("threads", "async")):
                schema = f"bench_{mode}_{uuid.uuid4().hex[:6]}"
                settings = Settings.from_env(database_url=uri, schema=schema, pool_min_size=1,
                                             pool_max_size=args.pool)
                log(f"round {r + 1}: {mode}, {args.agents} agents x {args.turns} turns")
                seconds, latencies = runners[mode](settings, embedder, args.agents, args.turns, args.consolidate_every)
                results[mode]["seconds"].append(seconds)
                results[mode]["latencies"].extend(latencies)
                with psycopg.connect(uri, autocommit=True) as conn:
                    conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
    rows, payload = [], {}
    turns_total = args.agents * args.turns
    for mode, res in results.items():
        rate = turns_total * len(res["seconds"]) / sum(res["seconds"])
        pct = percentiles(res["latencies"])
        rows.append((mode, turns_total * len(res["seconds"]), sum(res["seconds"]), rate, pct["p50_ms"], pct["p95_ms"]))
        payload[mode] = {"turns_per_second": rate, **pct, "seconds": res["seconds"]}
    print_table(f"{args.agents} agents x {args.turns} turns, pool {args.pool}, embedder {args.embedder}"
                f"{' (' + args.backend + ')' if args.embedder == 'minilm' else ''}, consolidate every "
                f"{args.consolidate_every}, {args.rounds} rounds per mode",
                ["mode", "turns", "seconds", "turns/s", "p50 ms", "p95 ms"], rows)
    print(f"\nasync / threads: {payload['async']['turns_per_second'] / payload['threads']['turns_per_second']:.2f}x "
          f"the turns/s, {payload['async']['p95_ms'] / payload['threads']['p95_ms']:.2f}x the p95")
    print_load()
    write_json(args.json, {"agents": args.agents, "turns": args.turns, "pool": args.pool, "embedder": args.embedder,
                           "backend": args.backend, "results": payload})
    return 0


if __name__ == "__main__":
    sys.exit(main())
