"""One definition of each hot-path operation, run by a sync or an async driver.

The hot path (write messages, read the working set, search, build the context,
consolidate, expand, facts) is written once, as generators that *describe* their I/O
instead of doing it ("sans-IO"): an operation yields

- :class:`Sql` - one statement (its text, parameters, row type and what to fetch), run
  in the operation's current transaction, which the first statement opens for
  ``Sql.user`` (``Database.connection(user)``); ``Sql.last`` ends the transaction with it;
- :class:`Call` - work that is not SQL and may be slow (embedding, summarising), run
  inline by the sync driver and in a worker thread by the async one, so the event
  loop never waits for a model;
- :class:`Ahead` - statements sent at once and a call made while the server runs them
  (a search's keyword half while its query is embedded), then, in the same pipeline, the
  statements made from the call's result (``then``: the rest of the search), then every
  row read back;
- :data:`COMMIT` - end the current transaction (the next statement opens another);
  :data:`ROLLBACK` - undo it instead,

and receives each result back. :func:`run` drives an operation on a sync
``Database`` (``MemoryManager``); ``memory.aio`` drives the very same generator on an
``AsyncConnectionPool`` (``AsyncMemoryManager``). Every statement, validation and
result shaping therefore exists once; only these two small drivers differ.

Round trips: statements that open a transaction and return nothing (``fetch="none"``, no
parameters: a search's ``SET LOCAL`` settings) are held back until the statement they
are for. When that one is ``last``, BEGIN, the user scope, the held statements, the
statement and COMMIT go out together in psycopg's pipeline mode: one round trip for the
whole transaction (:func:`execute_last`). Otherwise the held statements and the user scope
go out as one simple-protocol query before it. An :class:`Ahead` step opening a transaction
sends BEGIN, the user scope and the held statements in its own pipeline, in front of its
statements, and its ``then`` statements (held ones among them in their place, and COMMIT
after a ``last`` one) behind the call: a search whose query is still to embed is one round
trip (:func:`execute_ahead`). A ``last`` statement in an open transaction goes out with its
COMMIT (:func:`execute_committing`). In an open transaction such statements are held too,
and go out in front of the statement after them: in its pipeline where it has one.

An exception raised by the operation, by a statement or by a call ends the current
transaction with a rollback (and the database's errors are translated exactly as
``Database.connection`` translates them); the operation's generator is closed.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack, nullcontext, suppress
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar
from collections.abc import Callable, Generator, Sequence

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
    as the search statement is. A raw statement is prepared on its connection the first time it
    runs there (psycopg's ``prepare=True``), so every later run skips parsing and planning.
    ``last``: the statement ends its transaction (the driver commits right after it, in the
    same round trip where it can: see the module docstring).
    """

    stmt: Any
    params: Any = None
    row: Any = None
    fetch: Fetch = "all"
    user: str | None = None
    raw: bool = False
    last: bool = False


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


@dataclass(frozen=True)
class Ahead:
    """Statements that do not wait for ``call``: they go out at once (psycopg's pipeline mode),
    the server runs them while ``call`` runs here, and their rows are read after it. The
    statements are in the operation's current transaction (opened for their ``user`` if none
    is, with any held statements in front, in the same send), which stays open for the steps
    after them.

    ``then``: the statements that need the call's result, made from it (``then(result)``) and
    sent right behind the call, in the same pipeline, before any row is read: the server goes
    from the first statements to these without waiting for the client to read and answer
    (one round trip for the whole search). Held statements among them go out in their place;
    a ``last`` one (the last of them) commits there, ending the transaction.

    The step's result is ``(call's result, [each statement's result])``: ``steps``' then
    ``then``'s (held ones have none)."""

    steps: tuple[Sql, ...]
    call: Call
    then: Callable[[Any], Sequence[Sql]] | None = None


Step = Sql | Call | Commit | Ahead
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


def prepare(q: Sql) -> bool | None:
    """psycopg's ``prepare`` for ``q``: a raw (hot-path) statement at once, the rest by its threshold."""
    return True if q.raw else None


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
        cur.execute(q.stmt, q.params, prepare=prepare(q))
        return fetched(cur, q)


def fetched(cur: Any, q: Sql) -> Any:
    """What ``q`` returns from its executed (sync) cursor."""
    if q.fetch == "all":
        return cur.fetchall()
    if q.fetch == "one":
        return cur.fetchone()
    if q.fetch == "rowcount":
        return cur.rowcount
    return None


async def fetched_async(cur: Any, q: Sql) -> Any:
    """:func:`fetched` from an async cursor."""
    if q.fetch == "all":
        return await cur.fetchall()
    if q.fetch == "one":
        return await cur.fetchone()
    if q.fetch == "rowcount":
        return cur.rowcount
    return None


#: Whether the client library can pipeline (libpq >= 14); without it, every statement waits for its reply.
PIPELINE = psycopg.Pipeline.is_supported()


def held(step: Sql) -> bool:
    """Whether ``step`` waits to go out with the statement after it (see the module docstring): it
    goes out before that statement, in the same transaction, but after any call the operation
    makes in between."""
    return step.fetch == "none" and step.params is None and not step.raw


def pipelined(steps: Sequence[Sql]) -> bool:
    """Whether ``steps`` (held statements, then the one they wait for) go out as one pipelined transaction."""
    return PIPELINE and steps[-1].last and steps[-1].fetch != "many"


def _open(db: Any, waiting: Sequence[Sql], user: str | None) -> tuple[ExitStack, Any]:
    """Open a transaction for ``user`` and send its held statements (``waiting``) with the user scope
    in front, in one simple-protocol query; the transaction and its connection."""
    tx = ExitStack()
    try:
        conn = tx.enter_context(db.connection(user, scope=not waiting))
        if waiting:
            execute(conn, together(waiting, user))
    except BaseException:
        tx.__exit__(*sys.exc_info())  # rollback; raises the translated error where there is one
        raise
    return tx, conn


def together(waiting: Sequence[Sql], user: str | None) -> Sql:
    """The held statements of a transaction for ``user``, its user scope in front, as one statement."""
    parts = ([user_scope(user)] if user is not None else []) + [
        q.stmt if isinstance(q.stmt, sql.Composable) else sql.SQL(q.stmt) for q in waiting]
    return Sql(sql.SQL("; ").join(parts), fetch="none", user=user)


COMMIT_SQL = sql.SQL("COMMIT")


def pipeline_head(steps: Sequence[Sql]) -> list[Any]:
    """The statements of a pipelined transaction before its last one: BEGIN, the user scope, the held
    statements. None is prepared (a user scope's text differs per user: it must not take the place
    of the hot-path statements among the connection's prepared ones)."""
    user = steps[0].user
    return [sql.SQL("BEGIN")] + ([user_scope(user)] if user is not None else []) + [q.stmt for q in steps[:-1]]


def execute_committing(conn: Any, q: Sql, head: Sequence[Sql] = ()) -> Any:
    """Run ``q``, the last statement of a transaction already open on a sync connection, and
    commit, in one round trip where the client can pipeline (``head``: statements held for it,
    sent in front); its result."""
    if not pipelined([q]):
        execute_held(conn, head)
        result = execute(conn, q)
        conn.commit()
        return result
    with cursor(conn, q) as cur:
        with conn.pipeline():
            for h in head:
                conn.execute(h.stmt, prepare=False)
            cur.execute(q.stmt, q.params, prepare=prepare(q))
            conn.execute(COMMIT_SQL, prepare=False)  # a statement of the pipeline: synced once, at its end
        return fetched(cur, q)


def execute_held(conn: Any, head: Sequence[Sql]) -> None:
    """Send the statements held in an open transaction (``head``; none: nothing), as one query."""
    if head:
        execute(conn, together(head, None))


#: How long the process must have made no search (no :class:`Ahead` step) for the next one to send
#: its statements from a helper thread (:func:`execute_ahead`). Measured on a 2-vCPU KVM guest
#: (``bench/idle_sends.py --part sweep``; docs/benchmarks.md, Session 29): after 2 ms of sleep the
#: caller's own sends were the faster way in four sittings out of four, after 5 ms in three out of
#: four, after 7 ms in none of one, after 10 ms in none of four.
IDLE_S = 0.006


class _Sender:
    """The helper thread that sends an :class:`Ahead` step's statements after idle time, and when the
    process's last step ended.

    Why: a send does not wait for the server, but after the machine has idled, the server process
    the send wakes can be run on the sender's own CPU, in place of the caller (measured on a KVM
    guest; most likely the socket's "the sender sleeps next" wake-up hint): the statement that was
    to run beside the model runs before it. Sent from another thread, it runs beside the model
    again. Back to back (both CPUs awake) the caller's own sends cost nothing and the hand-over
    would cost more, so they stay the caller's."""

    def __init__(self) -> None:
        self.ended = float("-inf")  # time.monotonic() when the last Ahead step ended, in any thread
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._pid = 0

    def submit(self, fn: Callable[[], None]) -> Future[None] | None:
        """``fn`` running in a helper thread, or None where none can run (the interpreter is exiting)."""
        with self._lock:
            if self._pool is None or self._pid != os.getpid():  # a forked child has none of its parent's threads
                self._pool, self._pid = ThreadPoolExecutor(2, thread_name_prefix="agentmem-send"), os.getpid()
            try:
                return self._pool.submit(fn)
            except RuntimeError:
                return None

    def call_after(self, send: Callable[[], None], call: Call) -> Any:
        """``send`` (statements on the caller's connection), then ``call``'s result. After
        :data:`IDLE_S` without a step, ``send`` runs in the helper thread while the call runs; then
        this returns only once ``send`` is done (the connection is the caller's again) and raises
        ``send``'s error if it failed and the call did not."""
        sending = self.submit(send) if time.monotonic() - self.ended > IDLE_S else None
        if sending is None:
            send()
            return call.fn(*call.args, **call.kwargs)
        try:
            done = call.fn(*call.args, **call.kwargs)
        except BaseException:
            sending.exception()  # waits for the sends; the call's error is the one raised
            raise
        sending.result()
        return done


SENDER = _Sender()


def execute_ahead(conn: Any, ahead: Ahead, head: Sequence[Any] = ()) -> tuple[Any, list[Any], bool]:
    """Run ``ahead`` on a sync connection (in a transaction): ``head`` (statements returning nothing:
    a new transaction's user scope and held statements, not prepared) and the statements are sent,
    the call is made while the server runs them, ``then``'s statements are sent behind them, then
    every result is read (without pipelining, in the client library: each statement waits for its
    reply, the call between). The step's result, and whether a ``last`` statement ended the
    transaction.

    After :data:`IDLE_S` without a step, the first statements are sent from a helper thread while
    the call runs (:class:`_Sender`)."""
    try:
        with ExitStack() as cursors:
            sent = [(cursors.enter_context(cursor(conn, q)), q) for q in ahead.steps]
            with conn.pipeline() if PIPELINE else nullcontext():
                def send() -> None:
                    for stmt in head:
                        conn.execute(stmt, prepare=False)
                    for cur, q in sent:
                        cur.execute(q.stmt, q.params, prepare=prepare(q))

                done = SENDER.call_after(send, ahead.call)
                later = list(ahead.then(done)) if ahead.then is not None else []
                for q in later:
                    if held(q):
                        conn.execute(q.stmt, prepare=False)
                    else:
                        sent.append((cursors.enter_context(cursor(conn, q)), q))
                        sent[-1][0].execute(q.stmt, q.params, prepare=prepare(q))
                ended = bool(later) and later[-1].last
                if ended:
                    conn.execute(COMMIT_SQL, prepare=False)
            return done, [fetched(cur, q) for cur, q in sent], ended
    finally:
        SENDER.ended = time.monotonic()


def execute_last(conn: Any, steps: Sequence[Sql]) -> Any:
    """Run ``steps`` (held statements, then a ``last`` one) as one transaction in one round trip
    on a sync connection that has none open; the last statement's result.

    psycopg's pipeline mode sends everything before reading any reply; BEGIN and COMMIT are
    sent as statements of the pipeline (the connection is in autocommit mode meanwhile, so
    psycopg adds no BEGIN of its own that would need its own round trip). If a statement
    fails, the server skips the rest up to the pipeline's end, the error is raised, and the
    failed transaction is rolled back before the connection is given back.
    """
    last = steps[-1]
    conn.autocommit = True
    try:
        with cursor(conn, last) as cur:
            with conn.pipeline():
                for stmt in pipeline_head(steps):
                    conn.execute(stmt, prepare=False)
                cur.execute(last.stmt, last.params, prepare=prepare(last))
                conn.execute(COMMIT_SQL, prepare=False)
            return fetched(cur, last)
    finally:
        _restore(conn)


def _leaving(conn: Any) -> Callable[..., bool]:
    """The exit of a transaction opened by a BEGIN statement on ``conn`` in autocommit mode: a
    COMMIT statement if it is still open and nothing failed (psycopg's rollback would drop the
    connection's prepared statements), then the connection as the pool expects it."""
    def leave(exc_type: Any, *_: Any) -> bool:
        try:
            if exc_type is None and conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS:
                conn.execute(COMMIT_SQL, prepare=False)
        finally:
            _restore(conn)
        return False
    return leave


def _restore(conn: Any) -> None:
    """Give ``conn`` back as the pool expects it (no transaction, autocommit off), or close it (the pool
    then replaces it) when it cannot be."""
    try:
        if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            conn.rollback()
        conn.autocommit = False
    except psycopg.Error:
        conn.close()


def run(db: Any, op: Op[T]) -> T:
    """Drive ``op`` on a sync ``Database``: statements in its transactions, calls inline."""
    tx: ExitStack | None = None
    conn: Any = None
    result: Any = None
    waiting: list[Sql] = []  # held statements, not sent yet: they go out with the next statement
    try:
        while True:
            try:
                step = op.send(result)
            except StopIteration as done:
                if waiting and tx is None:
                    tx, conn = _open(db, waiting, waiting[0].user)
                elif waiting:
                    execute_held(conn, waiting)
                finishing, tx = tx, None
                if finishing is not None:
                    finishing.__exit__(None, None, None)  # commit
                return done.value  # type: ignore[no-any-return]
            if isinstance(step, Call):
                result = step.fn(*step.args, **step.kwargs)
            elif isinstance(step, Ahead):
                if tx is None:
                    user = waiting[0].user if waiting else step.steps[0].user
                    tx = ExitStack()
                    conn = tx.enter_context(db.connection(user, scope=False))
                    conn.autocommit = True  # BEGIN is sent as a statement: psycopg's own waits for its reply
                    tx.push(_leaving(conn))
                    head = pipeline_head(waiting + [step.steps[0]])
                else:
                    head = [q.stmt for q in waiting]
                waiting = []
                called, rows, ended = execute_ahead(conn, step, head)
                result = (called, rows)
                if ended:
                    finishing, tx, conn = tx, None, None
                    finishing.__exit__(None, None, None)  # committed: gives the connection back
            elif isinstance(step, Commit):
                if waiting and tx is None:
                    tx, conn = _open(db, waiting, waiting[0].user)
                elif waiting:
                    execute_held(conn, waiting)
                waiting = []
                finishing, tx, conn, result = tx, None, None, None
                if finishing is not None:
                    _end(finishing, step.rollback)
            elif held(step):
                waiting.append(step)
                result = None
            elif tx is None and pipelined(waiting + [step]):
                steps, waiting = waiting + [step], []
                with db.connection(steps[0].user, scope=False) as one:
                    result = execute_last(one, steps)
            else:
                if tx is None:
                    tx, conn = _open(db, waiting, waiting[0].user if waiting else step.user)
                    waiting = []
                if step.last:
                    result = execute_committing(conn, step, waiting)
                else:
                    execute_held(conn, waiting)
                    result = execute(conn, step)
                waiting = []
                if step.last:
                    finishing, tx, conn = tx, None, None
                    finishing.__exit__(None, None, None)  # committed: gives the connection back
    except BaseException:
        op.close()
        if tx is not None:
            tx.__exit__(*sys.exc_info())  # rollback; raises the translated error where there is one
        raise


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
            elif isinstance(step, Ahead):
                result = execute_ahead(conn, step)
            elif isinstance(step, Commit):
                raise RuntimeError("an operation run inside the caller's transaction cannot end it")
            else:
                result = execute(conn, step)
    except BaseException:
        op.close()
        raise
