"""Driver errors as agentmem errors: :func:`translate` is the one mapping from ``psycopg.Error``.

Used by the transaction helper (``Database.connection``) and the migration runner, so
nothing but :class:`~memory.errors.AgentMemError` leaves the public API. Each message
says what happened and what to do; the caller raises it ``from`` the driver error, so
``__cause__`` keeps the SQLSTATE and the server's text.
"""

from __future__ import annotations

import psycopg

from memory.errors import (AccessDeniedError, AgentMemError, DatabaseError, DatabaseUnavailableError,
                           QueryTimeoutError)

#: SQLSTATEs that mean the connection or the server went away (class 08, shutdowns).
_LOST_STATES = ("57P01", "57P02", "57P03")


def connection_lost(exc: BaseException, conn: psycopg.Connection | None = None) -> bool:
    """Whether ``exc`` says the server or the connection is gone (not a bad statement)."""
    if isinstance(exc, psycopg.InterfaceError):
        return True
    if not isinstance(exc, psycopg.OperationalError):
        return False
    state = exc.sqlstate
    if state is None or state.startswith("08") or state in _LOST_STATES:
        return True
    return bool(conn is not None and conn.broken)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def translate(exc: psycopg.Error, *, user_id: str | None = None,
              conn: psycopg.Connection | None = None) -> AgentMemError:
    """The :class:`AgentMemError` for a driver error (raise it ``from exc``): what happened and what to do."""
    state = getattr(exc, "sqlstate", None)
    if isinstance(exc, (psycopg.errors.InsufficientPrivilege, psycopg.errors.ReadOnlySqlTransaction)):
        who = f" for user {user_id[:60]!r}" if user_id is not None else ""
        return AccessDeniedError(f"the database refused this{who}: {_first_line(exc)}. Connect as a role allowed to "
                                 "do it (the schema owner, or one made by `agentmem create-app-role`)")
    if connection_lost(exc, conn):
        return DatabaseUnavailableError(
            f"lost the connection to PostgreSQL: {_first_line(exc)}. The call's transaction did not complete; "
            "retry it once the server is back (agentmem reconnects by itself).")
    if isinstance(exc, psycopg.errors.QueryCanceled):
        return QueryTimeoutError(
            f"PostgreSQL cancelled the statement ({_first_line(exc)}); nothing of the call was kept. Retry it, "
            "or raise the role's or database's statement_timeout if this call is expected to take that long.")
    if isinstance(exc, psycopg.errors.LockNotAvailable):
        return QueryTimeoutError(
            f"PostgreSQL gave up waiting for a lock ({_first_line(exc)}); nothing of the call was kept. Another "
            "transaction holds the rows or table (see pg_locks); retry once it ends, or raise lock_timeout.")
    return DatabaseError(
        f"PostgreSQL refused a statement (SQLSTATE {state or 'none'}: {_first_line(exc)}); the call's transaction "
        "was rolled back and nothing of it was kept. If the schema was changed by hand, check it with "
        "`agentmem init --status`; otherwise report it with this message.")
