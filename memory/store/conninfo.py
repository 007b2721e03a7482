"""Connection strings: checked once, opened with a connect timeout, failures made clear.

A connection string is a URL (``postgresql://user@host:5432/db``) or a libpq conninfo
(``host=... dbname=...``). One that is neither is a :class:`ConfigurationError` before
anything tries to connect, and its text never appears in the message (it may hold a
password). The connections of the migration runner and of the pool wait at most
``connect_timeout`` seconds for the server (setting ``AGENTMEM_CONNECT_TIMEOUT``) unless
the string itself (or ``PGCONNECT_TIMEOUT``) says otherwise: without it psycopg waits
130 s for an address that never answers.
"""

from __future__ import annotations

import os
from typing import Any

import psycopg

from memory.errors import ConfigurationError, DatabaseUnavailableError


def check_conninfo(conninfo: str) -> dict[str, Any]:
    """The parameters of ``conninfo``; a clear error if it is no URL or conninfo string."""
    if not isinstance(conninfo, str) or not conninfo.strip():
        raise ConfigurationError("the database URL is empty: set AGENTMEM_DATABASE_URL to a PostgreSQL URL "
                                 "(postgresql://user:password@host:5432/dbname), or unset it to use the embedded "
                                 "server")
    try:
        params = psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError:
        raise ConfigurationError(
            "the database URL is neither a PostgreSQL URL (postgresql://user:password@host:5432/dbname) nor a "
            "conninfo string (host=... port=... dbname=... user=...): fix AGENTMEM_DATABASE_URL (or DATABASE_URL), "
            "or unset it to use the embedded server"
        ) from None
    for port in str(params.get("port") or "").split(","):
        if port and not (port.isdigit() and 0 < int(port) < 65536):
            raise ConfigurationError(f"the database URL has port {port[:20]!r}: use a number from 1 to 65535 "
                                     "(fix AGENTMEM_DATABASE_URL or DATABASE_URL)")
    return params


def timeout_kwargs(conninfo: str, seconds: int) -> dict[str, Any]:
    """``{"connect_timeout": seconds}`` unless the connection string or PGCONNECT_TIMEOUT sets one."""
    if "connect_timeout" in check_conninfo(conninfo) or os.environ.get("PGCONNECT_TIMEOUT"):
        return {}
    return {"connect_timeout": seconds}


def redact(conninfo: str) -> str:
    """``conninfo`` without its password, for messages."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError:
        return "<database>"
    params.pop("password", None)
    return psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in params.items() if v is not None})


def connect(conninfo: str, connect_timeout: int, **kwargs: Any) -> psycopg.Connection:
    """A psycopg connection, or :class:`DatabaseUnavailableError` saying where and why not."""
    extra = timeout_kwargs(conninfo, connect_timeout)
    try:
        return psycopg.connect(conninfo, **extra, **kwargs)
    except psycopg.OperationalError as exc:
        waited = (f" (gave up after AGENTMEM_CONNECT_TIMEOUT={connect_timeout} s)"
                  if extra and "timeout" in str(exc).lower() else "")
        raise DatabaseUnavailableError(
            f"cannot connect to PostgreSQL at {redact(conninfo)}{waited}: {str(exc).strip()}. "
            "Check that the server is running and reachable from here, or unset AGENTMEM_DATABASE_URL "
            "to use the embedded server."
        ) from exc
