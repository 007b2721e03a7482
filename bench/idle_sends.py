"""Searches after idle time: whether the caller or a helper thread sends a search's first statements.

    python bench/idle_sends.py                        # both parts, ~5 min
    python bench/idle_sends.py --part sweep --pauses 0,2,5,10,20,50
    python bench/idle_sends.py --part regimes --async

A ``search_memory`` whose query is still to embed sends its keyword statement before the model
runs (``memory.store.ops.execute_ahead``). After ``ops.IDLE_S`` (6 ms) without a search in the
process a helper thread sends it while the caller runs the model; back to back the caller sends
it itself. This bench measures both ways side by side.

The three LoCoMo conversations of ``../shared/data`` are written as ``bench/peers.py`` writes
them (one user per conversation, turns alternating user/assistant in one thread), embedded by
the default ONNX int8 MiniLM on one thread, with the vector cache off, so every search embeds
its query as an agent's does. Then ``--queries`` LoCoMo questions (the same sample as
``peers.py``: seed 7) are searched (k=10), ``--rounds`` times in every cell. The modes take
turns within each round, their order reversed every other round, and each mode's block starts
with 3 untimed searches.

* ``--part sweep``: S ms of sleep before each search (``--pauses``), the first statements always
  sent by the caller (``IDLE_S`` infinite) and always by the helper thread (``IDLE_S`` 0). Where
  the two cross is what ``IDLE_S`` is set from.
* ``--part regimes``: back to back, 50 ms of sleep before each search, and a CPU-bound process
  beside (one core busy), the caller always sending against the library as shipped;
  ``--async`` adds ``AsyncMemoryManager`` as shipped (the model in a worker thread while the
  event loop sends).

Times are whole calls (the query's embedding included), in ms.

What idle time costs the process itself, outside any database: ``bench/idle_wake.py``.
"""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import base_parser, bench_embedder, embedded_server, print_load, print_table, write_json  # noqa: E402
from _public_data import locomo_questions, locomo_turns  # noqa: E402

from memory import MemoryManager, Settings  # noqa: E402
from memory.aio import AsyncMemoryManager  # noqa: E402
from memory.store import ops  # noqa: E402

SHIPPED = ops.IDLE_S
REGIMES = ("back to back", "50 ms idle before each", "a CPU burner beside")


def pick(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@contextmanager
def burner(on: bool) -> Iterator[None]:
    """A process keeping one core busy while the block runs (``on``), killed after it."""
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if on else None
    try:
        yield
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()


def main() -> None:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("sweep", "regimes", "both"), default="both")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument("--pauses", default="0,2,5,10,20,50", help="ms of sleep before each search (sweep)")
    parser.add_argument("--async", dest="with_async", action="store_true",
                        help="regimes: add AsyncMemoryManager as shipped")
    args = parser.parse_args()
    turns, questions = locomo_turns(), locomo_questions()
    convs = sorted({t.conversation for t in turns})
    results: dict[str, dict[str, list[float]]] = {}
    loop = asyncio.new_event_loop()
    with embedded_server() as uri:
        settings = Settings.from_env(database_url=uri, schema="agentmem", embedding_cache_size=0, pool_max_size=2)
        embedder = bench_embedder("onnx", 1)
        mm = MemoryManager.open(settings, embedder=embedder)
        amm = loop.run_until_complete(AsyncMemoryManager.open(settings, embedder=embedder)) if args.with_async else None
        try:
            for c in convs:
                conv = [t for t in turns if t.conversation == c]
                mm.write_messages([{"role": "user" if i % 2 == 0 else "assistant", "content": t.text}
                                   for i, t in enumerate(conv)], user_id=c, thread_id="t")
            asks = [(q.conversation, q.text) for q in random.Random(args.seed).sample(questions, args.queries)]

            def sync_search(user: str, query: str) -> float:
                t0 = time.perf_counter()
                mm.search_memory(query, user_id=user, k=10)
                return (time.perf_counter() - t0) * 1e3

            async def timed_async(user: str, query: str) -> float:
                assert amm is not None
                t0 = time.perf_counter()
                await amm.search_memory(query, user_id=user, k=10)
                return (time.perf_counter() - t0) * 1e3

            def async_search(user: str, query: str) -> float:
                return loop.run_until_complete(timed_async(user, query))

            def cell(key: str, mode: str, idle_s: float, search: Callable[[str, str], float], pause_s: float) -> None:
                ops.IDLE_S = idle_s
                try:
                    for user, query in asks[:3]:
                        search(user, query)
                    for user, query in asks:
                        if pause_s:
                            time.sleep(pause_s)
                        results.setdefault(key, {}).setdefault(mode, []).append(search(user, query))
                finally:
                    ops.IDLE_S = SHIPPED

            for user, query in asks:  # every statement prepared, every page read in
                sync_search(user, query)
                if amm is not None:
                    async_search(user, query)
            if args.part in ("sweep", "both"):
                sweep = {"caller sends": float("inf"), "helper thread sends": 0.0}
                for r in range(args.rounds):
                    for pause_ms in (float(p) for p in args.pauses.split(",")):
                        for mode in (list(sweep) if r % 2 == 0 else list(sweep)[::-1]):
                            cell(f"sleep {pause_ms:g} ms", mode, sweep[mode], sync_search, pause_ms / 1e3)
            if args.part in ("regimes", "both"):
                modes: dict[str, tuple[float, Callable[[str, str], float]]] = {
                    "caller sends": (float("inf"), sync_search), "as shipped": (SHIPPED, sync_search)}
                if amm is not None:
                    modes["async, as shipped"] = (SHIPPED, async_search)
                for regime in REGIMES:
                    with burner(regime == "a CPU burner beside"):
                        for r in range(args.rounds):
                            for mode in (list(modes) if r % 2 == 0 else list(modes)[::-1]):
                                cell(regime, mode, *modes[mode], 0.05 if regime.startswith("50 ms") else 0.0)
        finally:
            if amm is not None:
                loop.run_until_complete(amm.close())
            loop.close()
            mm.close()
    rows = [[key, mode, pick(v, 0.5), pick(v, 0.95), pick(v, 0.99), len(v)]
            for key, by_mode in results.items() for mode, v in by_mode.items()]
    print_table(f"search_memory at LoCoMo size, whole call ms (query embedded every time, ONNX int8, 1 thread); "
                f"ops.IDLE_S as shipped: {SHIPPED * 1e3:g} ms", ["cell", "mode", "p50", "p95", "p99", "n"], rows)
    print_load()
    write_json(args.json, {"idle_s_shipped": SHIPPED, "ms": results})


if __name__ == "__main__":
    main()
