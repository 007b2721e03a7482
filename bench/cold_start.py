"""CLI cold start and memory per embedding backend: `agentmem search` end to end, RSS after open.

    python bench/cold_start.py [--rounds 5] [--before DIR] [--drop-caches] [--json out.json]

Against a throwaway embedded server holding a few messages, in interleaved rounds
(torch, onnx, torch, ...), each in a fresh process as a user would run it:

* ``agentmem search QUERY --user U``: wall time from process start to exit (imports,
  connecting, loading the model, embedding the query, searching, printing);
* a process that opens ``MemoryManager.open()`` (the library's default path, which
  loads the model at open) and reads its resident set size (VmRSS) right after, and
  again after embedding one query; it also reports whether torch was imported.

``AGENTMEM_EMBEDDING_BACKEND=torch`` is the behaviour before the ONNX backend (the
sentence-transformers model); ``onnx`` uses the int8 file, exported into a temp cache
before the first round (its one-off export time is printed separately).

``--drop-caches`` (root only) empties the kernel's page cache before every ``agentmem
search``, so each start reads its interpreter modules, libraries and model file from disk,
as the first start after a reboot does, or after the files sat unused on a machine that
pages idle cache out (this one: DAMON ``pageout`` of memory idle for a minute). Without
it the files are in the page cache from the previous round, and the figures are a warm
start of a new process.

``--before DIR`` compares two checkouts instead of two backends: DIR (e.g. ``git worktree
add ../before f489194``) and this tree, both on their default backend, interleaved the
same way; each runs ``python -m memory.cli`` from its own tree (PYTHONPATH) against its
own schema, seeded by its own code.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import base_parser, embedded_server, environment, print_table, write_json  # noqa: E402

from memory import MemoryManager, Settings  # noqa: E402
from memory.retrieval.onnx_minilm import OnnxMiniLMEmbedder  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
_script = Path(sys.executable).parent / "agentmem"  # the installed entry point, as a user runs it
CLI = [str(_script)] if _script.exists() else [sys.executable, "-m", "memory.cli.main"]
MODULE_CLI = [sys.executable, "-m", "memory.cli"]  # any checkout's CLI (a package or a module)
SEED = """
from memory import MemoryManager
with MemoryManager.open() as mm:
    mm.write_messages([{'role': 'user', 'content': f'Note {i}: the quarterly report is late.'} for i in range(20)],
                      user_id='u', thread_id='t')
"""
OPEN_PROBE = """
import json, sys, time
t0 = time.perf_counter()
from memory import MemoryManager
def rss():
    for line in open('/proc/self/status'):
        if line.startswith('VmRSS:'):
            return int(line.split()[1]) / 1024
mm = MemoryManager.open()
opened = time.perf_counter() - t0
after_open = rss()
mm.embeddings.embed_one('what did I say about the report?')
print(json.dumps({'open_s': opened, 'rss_open': after_open, 'rss_query': rss(), 'torch': 'torch' in sys.modules}))
mm.close()
"""


DROP_CACHES = "/proc/sys/vm/drop_caches"


def drop_page_cache() -> None:
    """Write dirty pages out, then have the kernel drop its clean page cache (and dentries, inodes)."""
    os.sync()
    with open(DROP_CACHES, "w") as f:
        f.write("3\n")


def main() -> None:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--before", metavar="DIR", help="a checkout to compare this tree with (default backends)")
    parser.add_argument("--drop-caches", action="store_true",
                        help="empty the page cache before every search (root only): a start from disk")
    args = parser.parse_args()
    if args.drop_caches and not os.access(DROP_CACHES, os.W_OK):
        raise SystemExit(f"--drop-caches writes {DROP_CACHES}: run as root, or leave the flag out")
    result: dict = {"search_s": {}, "open": {}}
    # label -> (PYTHONPATH, backend, schema, CLI command)
    if args.before:
        before = Path(args.before).resolve()
        configs = {f"before ({before.name})": (before, "onnx", "cold_before", MODULE_CLI),
                   "after (this tree)": (ROOT, "onnx", "cold_after", MODULE_CLI)}
    else:
        configs = {b: (ROOT, b, "cold", CLI) for b in ("torch", "onnx")}
    with embedded_server() as uri, tempfile.TemporaryDirectory(prefix="amcold") as cache:
        t0 = time.perf_counter()
        onnx = OnnxMiniLMEmbedder(Path(cache))
        print(f"one-off ONNX export + quantisation: {time.perf_counter() - t0:.1f} s")
        base = {k: v for k, v in os.environ.items() if not k.startswith("AGENTMEM_")}
        base.update(AGENTMEM_DATABASE_URL=uri, AGENTMEM_MODEL_CACHE_DIR=cache, AGENTMEM_EMBEDDING_THREADS="1")
        envs = {label: dict(base, PYTHONPATH=str(path), AGENTMEM_EMBEDDING_BACKEND=backend, AGENTMEM_SCHEMA=schema)
                for label, (path, backend, schema, _) in configs.items()}
        if args.before:  # each tree migrates and fills its own schema (and exports its model if its recipe differs)
            for label, env in envs.items():
                seeded = subprocess.run([sys.executable, "-c", SEED], env=env, capture_output=True, text=True)
                if seeded.returncode != 0:
                    raise SystemExit(f"seeding {label} failed: {seeded.stderr[-2000:]}")
        else:
            with MemoryManager.open(Settings.from_env(database_url=uri, schema="cold"), embedder=onnx) as mm:
                mm.write_messages([{"role": "user", "content": f"Note {i}: the quarterly report is late."}
                                   for i in range(20)], user_id="u", thread_id="t")
        for r in range(args.rounds):
            for label in (list(configs) if r % 2 == 0 else list(configs)[::-1]):
                env, cli = envs[label], configs[label][3]
                if args.drop_caches:
                    drop_page_cache()
                t0 = time.perf_counter()
                out = subprocess.run([*cli, "search", "late report", "--user", "u", "--json"], env=env,
                                     capture_output=True, text=True)
                took = time.perf_counter() - t0
                if out.returncode != 0 or not json.loads(out.stdout):  # e.g. the 120 s embedding timeout
                    print(f"agentmem search failed ({label}) after {took:.1f} s: {out.stderr.strip()[-300:]}")
                    result.setdefault("failed", []).append([label, took, out.stderr[-2000:]])
                    continue
                result["search_s"].setdefault(label, []).append(took)
                probe = subprocess.run([sys.executable, "-c", OPEN_PROBE], env=env, capture_output=True, text=True)
                if probe.returncode != 0:
                    raise SystemExit(f"open probe failed ({label}): {probe.stderr[-2000:]}")
                result["open"].setdefault(label, []).append(json.loads(probe.stdout.strip().splitlines()[-1]))
    rows = []
    for label in configs:
        s, o = result["search_s"].get(label), result["open"].get(label)
        if not s or not o:
            rows.append([label, "failed", "", "", "", "", ""])
            continue
        rows.append([label, f"{statistics.median(s):.2f}", f"{min(s):.2f}",
                     f"{statistics.median(x['open_s'] for x in o):.2f}",
                     f"{statistics.median(x['rss_open'] for x in o):.0f}",
                     f"{statistics.median(x['rss_query'] for x in o):.0f}", str(o[0]["torch"])])
    cache = "page cache emptied before each search" if args.drop_caches else "files in the page cache"
    print_table(f"cold start, median of {args.rounds} interleaved rounds (1 embedding thread; {cache})",
                ["configuration", "agentmem search s", "min s", "MemoryManager.open s", "RSS after open MiB",
                 "RSS after 1 query MiB", "imports torch"], rows)
    print(f"\nload average at end: {environment()['loadavg_at_end']}")
    write_json(args.json, result)


if __name__ == "__main__":
    main()
