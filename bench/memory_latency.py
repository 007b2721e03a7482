"""search_memory and read_knowledge latency of this tree against another checkout, interleaved.

The memory half of ``bench/tool_latency.py`` (same harness, same reasons): each tree
runs in its own worker process with its own ``PYTHONPATH`` and embedded PostgreSQL and
its default embedding backend; both store the same three LoCoMo conversations from
``../shared/data`` (one user per conversation, every turn as ``speaker: text`` in one
thread, and the same turns again as knowledge passages), then the parent sends both the
same LoCoMo questions one by one, alternating which tree goes first. Each worker times
``search_memory(question, k=10)`` and ``read_knowledge(question, k=10)`` of the
conversation's user end to end (the question's embedding included; the embedding
cache is off where the tree has the setting).

Only keyword arguments are used, so the calls are the same in trees from before and
after ``user_id`` became keyword-only.

    python bench/memory_latency.py --compare-with /work/wt/t13before     # ~5-10 min on 2 loaded cores
    python bench/memory_latency.py --compare-with ../old --queries 100
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
READS = ("search_memory", "read_knowledge")


def worker(uri: str, data_path: str) -> None:
    from memory import MemoryManager, Settings

    from tool_latency import _reply

    data = json.loads(Path(data_path).read_text())
    try:
        settings = Settings.from_env(database_url=uri, schema="latency", pool_max_size=4, embedding_cache_size=0)
    except TypeError:  # a tree without the setting
        settings = Settings.from_env(database_url=uri, schema="latency", pool_max_size=4)
    mm = MemoryManager.open(settings)
    start = time.perf_counter()
    for user, texts in data.items():
        mm.write_messages(messages=[{"role": "user", "content": t} for t in texts], user_id=user, thread_id="t")
        mm.write_knowledge_batch(items=[{"content": t} for t in texts], user_id=user)
    first = next(iter(data))
    for read in READS:
        getattr(mm, read)(query="warm up the model and the pool", user_id=first, k=10)
    _reply({"ready": True, "rows": sum(map(len, data.values())), "write_s": time.perf_counter() - start})
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("stop"):
            break
        t0 = time.perf_counter()
        hits = getattr(mm, request["read"])(query=request["q"], user_id=request["user"], k=request["k"])
        _reply({"ms": (time.perf_counter() - t0) * 1000.0, "n": len(hits)})
    mm.close()


def main() -> None:
    sys.path.insert(0, str(HERE))
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3])
        return
    from _common import base_parser, embedded_server, log, percentiles, print_load, print_table, write_json
    from _public_data import ROOT as DATA, locomo_questions, locomo_turns
    from tool_latency import Worker

    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--compare-with", metavar="PATH", required=True, type=Path,
                        help="another checkout of the project (e.g. a detached worktree of the 'before' commit)")
    parser.add_argument("--queries", type=int, default=0, help="questions timed (0: all of categories 1-4)")
    args = parser.parse_args()
    old_tree = args.compare_with.resolve()
    if not (old_tree / "memory").is_dir():
        raise SystemExit(f"{old_tree} is not a checkout of this project (no memory/)")
    if not (DATA / "locomo").is_dir():
        raise SystemExit(f"{DATA / 'locomo'} not found: the LoCoMo dev data is read from ../shared/data "
                         "(see its README); nothing was measured")
    data: dict[str, list[str]] = {}
    for t in locomo_turns():
        data.setdefault(t.conversation, []).append(f"{t.speaker}: {t.text}")
    questions = [(q.conversation, q.text) for q in locomo_questions()]
    if args.queries:
        questions = questions[:args.queries]
    data_path = Path(f"/tmp/memory_latency_{os.getpid()}.json")
    data_path.write_text(json.dumps(data))
    lat: dict[tuple[str, str], list[float]] = {}
    script = Path(__file__).resolve()
    try:
        with embedded_server() as uri_new, embedded_server() as uri_old:
            workers = {"new": Worker("new", ROOT, uri_new, data_path, script),
                       "old": Worker("old", old_tree, uri_old, data_path, script)}
            try:
                for label, w in workers.items():
                    r = w.read()
                    log(f"{label} ({w.tree}): {r['rows']} turns written twice in {r['write_s']:.0f}s")
                for i, (user, q) in enumerate(questions):
                    for read in READS:
                        order = ("new", "old") if i % 2 == 0 else ("old", "new")
                        for label in order:
                            a = workers[label].ask(q, 10, user=user, read=read)
                            lat.setdefault((read, label), []).append(a["ms"] / 1000.0)
            finally:
                for w in workers.values():
                    w.stop()
    finally:
        data_path.unlink(missing_ok=True)
    stats = {key: percentiles(v) for key, v in lat.items()}
    rows, ratios = [], {}
    for read in READS:
        new, old = stats[(read, "new")], stats[(read, "old")]
        ratios[read] = {key: new[key] / old[key] for key in ("p50_ms", "p95_ms", "mean_ms")}
        rows += [[f"{read} new", new["p50_ms"], new["p95_ms"], new["mean_ms"]],
                 [f"{read} old", old["p50_ms"], old["p95_ms"], old["mean_ms"]],
                 [f"{read} ratio new / old", *ratios[read].values()]]
    print_table(f"per question, k=10, embedding included: {len(questions)} LoCoMo questions, interleaved "
                f"(new: {ROOT}; old: {old_tree})", ["read", "p50 ms", "p95 ms", "mean ms"], rows)
    print_load()
    write_json(args.json, {"queries": len(questions), "ratio": ratios,
                           "stats": {f"{r} {t}": s for (r, t), s in stats.items()},
                           "trees": {"new": str(ROOT), "old": str(old_tree)}})


if __name__ == "__main__":
    main()
