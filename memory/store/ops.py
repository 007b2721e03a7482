"""One definition of each hot-path operation, run by a sync or an async driver.

The hot path (write messages, read the working set, search, build the context,
consolidate, expand, facts) is written once, as generators that *describe* their I/O
instead of doing it ("sans-IO"): an operation yields

- :class:`Sql` - one statement (its text, parameters, row type and what to fetch), run
  in the operation's current transaction, which the first statement opens for
  ``Sql.user`` (``Database.connection(user)``);
- :class:`Call` - work that is not SQL and may be slow (embedding, summarising), run
  inline by the sync driver and in a worker thread by the async one, so the event
  loop never waits for a model;
- :data:`COMMIT` - end the current transaction (the next statement opens another);
  :data:`ROLLBACK` - undo it instead,

and receives each result back. :func:`run` drives an operation on a sync
``Database`` (``MemoryManager``); ``memory.aio`` drives the very same generator on an
``AsyncConnectionPool`` (``AsyncMemoryManager``). Every statement, validation and
result shaping therefore exists once; only these two small drivers differ.

An exception raised by the operation, by a statement or by a call ends the current
transaction with a rollback (and the database's errors are translated exactly as
``Database.connection`` translates them); the operation's generator is closed.
"""

from __future__ import annotations

import sys
from contextlib import ExitStack, suppress
import re
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeVar
from collections.abc import Callable, Generator

import psycopg
from psycopg import sql
from psycopg.rows import class_row, dict_row

from memory.store.db import user_scope

T = TypeVar("T")

Fetch = Literal["all", "one", "none", "rowcount", "many"]


@dataclass(frozen=True)
class Sql:
    """One statement. ``row``: a dataclass (``class_row``), ``dict`` (``dict_row``) or None (tuples).

    ``fetch``: "all" rows, "one" row (or None), "none", the "rowcount", or "many":
    ``executemany`` over ``params`` (a list) with RETURNING, every returned row in order.
    ``raw``: ``stmt`` is a string with PostgreSQL's own placeholders (``$1``, ``$2``...) and
    ``params`` a sequence, sent as they are (``psycopg.RawCursor``): psycopg parses a
    statement's ``%s`` placeholders again on every execution once it is longer than 4 KB,
    as the search statement is.
    """

    stmt: Any
    params: Any = None
    row: Any = None
    fetch: Fetch = "all"
    user: str | None = None
    raw: bool = False


@dataclass(frozen=True)
class Call:
    """Work outside the database (embedding, summarising): ``fn(*args, **kwargs)``."""

    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


class Commit:
    """End the operation's current transaction (``rollback``: undo it instead)."""

    def __init__(self, rollback: bool = False) -> None:
        self.rollback = rollback


COMMIT = Commit()
ROLLBACK = Commit(rollback=True)

Step = Sql | Call | Commit
Op = Generator[Step, Any, T]


def numbered(stmt: sql.Composable) -> tuple[str, tuple[str, ...]]:
    """``stmt`` (named ``%(name)s`` placeholders, values bound) as text with PostgreSQL's own
    placeholders (``$1``, ``$2``...), and the parameter names in that order: what a
    ``Sql(..., raw=True)`` sends, params given as ``[args[n] for n in names]``."""
    names: list[str] = []

    def number(m: re.Match[str]) -> str:
        if m.group(1) not in names:
            names.append(m.group(1))
        return f"${names.index(m.group(1)) + 1}"

    return re.sub(r"%\((\w+)\)s", number, stmt.as_string()), tuple(names)


def row_factory(row: Any) -> Any:
    if row is None:
        return None
    if row is dict:
        return dict_row
    return class_row(row)


def cursor(conn: Any, q: Sql) -> Any:
    """The cursor ``q`` runs on (sync or async connection alike: psycopg's own classes)."""
    factory = row_factory(q.row)
    if q.raw:
        raw = psycopg.AsyncRawCursor if isinstance(conn, psycopg.AsyncConnection) else psycopg.RawCursor
        return raw(conn, row_factory=factory) if factory is not None else raw(conn)
    return conn.cursor(row_factory=factory) if factory is not None else conn.cursor()


def execute(conn: Any, q: Sql) -> Any:
    """Run ``q`` on a sync connection; the result the operation receives."""
    with cursor(conn, q) as cur:
        if q.fetch == "many":
            out: list[Any] = []
            cur.executemany(q.stmt, q.params, returning=True)
            while True:
                out.extend(cur.fetchall())
                if not cur.nextset():
                    break
            return out
        cur.execute(q.stmt, q.params)
        if q.fetch == "all":
            return cur.fetchall()
        if q.fetch == "one":
            return cur.fetchone()
        if q.fetch == "rowcount":
            return cur.rowcount
        return None


def run(db: Any, op: Op[T]) -> T:
    """Drive ``op`` on a sync ``Database``: statements in its transactions, calls inline."""
    tx: ExitStack | None = None
    conn: Any = None
    result: Any = None
    try:
        while True:
            try:
                step = op.send(result)
            except StopIteration as done:
                finishing, tx = tx, None
                if finishing is not None:
                    finishing.__exit__(None, None, None)  # commit
                return done.value  # type: ignore[no-any-return]
            if isinstance(step, Call):
                result = step.fn(*step.args, **step.kwargs)
            elif isinstance(step, Commit):
                finishing, tx, conn, result = tx, None, None, None
                if finishing is not None:
                    _end(finishing, step.rollback)
            else:
                if tx is None:
                    tx = ExitStack()
                    together = with_user_scope(step)
                    conn = tx.enter_context(db.connection(step.user, scope=together is None))
                    step = together or step
                result = execute(conn, step)
    except BaseException:
        op.close()
        if tx is not None:
            tx.__exit__(*sys.exc_info())  # rollback; raises the translated error where there is one
        raise


def with_user_scope(step: Sql) -> Sql | None:
    """A transaction's first statement with its user scope in front, when both fit in one
    simple-protocol round trip (a statement without parameters or rows, such as a
    search's ``SET LOCAL`` settings); None otherwise (the scope is sent on its own)."""
    if step.user is None or step.params is not None or step.fetch != "none":
        return None
    stmt = step.stmt if isinstance(step.stmt, sql.Composable) else sql.SQL(step.stmt)
    return replace(step, stmt=user_scope(step.user) + sql.SQL("; ") + stmt)


class _Rollback(Exception):
    pass


def _end(tx: ExitStack, rollback: bool) -> None:
    if not rollback:
        tx.__exit__(None, None, None)
        return
    try:  # the transaction context rolls back on an exception; this one is ours and stops here
        raise _Rollback
    except _Rollback:
        exc_info = sys.exc_info()
    with suppress(_Rollback):
        tx.__exit__(*exc_info)


def run_on(conn: Any, op: Op[T]) -> T:
    """Drive ``op`` inside a transaction the caller already holds (no COMMIT allowed)."""
    result: Any = None
    try:
        while True:
            try:
                step = op.send(result)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            if isinstance(step, Call):
                result = step.fn(*step.args, **step.kwargs)
            elif isinstance(step, Commit):
                raise RuntimeError("an operation run inside the caller's transaction cannot end it")
            else:
                result = execute(conn, step)
    except BaseException:
        op.close()
        raise
