"""``AsyncMemoryManager``: the hot path of ``MemoryManager`` for asyncio, on psycopg's ``AsyncConnectionPool``.

Same front door, awaited: write messages, read the working set and threads, search_memory,
build the context, monitor, consolidate, expand, facts (and the similarity reads the
context is made of), with ``user_id`` / ``thread_id`` keyword-only as on ``MemoryManager``.

**One definition of every statement.** The table objects describe each of these
operations once, as generators of steps (``memory.store.ops``: statements, calls,
commits). ``MemoryManager`` drives them with ``memory.store.ops.run`` on its sync pool;
this module drives the very same generators with :func:`arun` on an async pool. There is
no second copy of any SQL, validation or result shaping, only a second driver.

**Off the event loop.** Every ``Call`` step (embedding, summarising with a model or the
extractive summariser, token counting of a context) runs in a worker thread
(``asyncio.to_thread``), so a slow model never blocks the loop; statements run on the
async pool.

**Cancellation.** Cancelling a task mid-operation raises ``CancelledError`` at its
current await: the transaction in progress rolls back (the async connection context
does that on any exception) and the operation's generator is closed. A consolidation
reads in one transaction, summarises with none held, and writes the summary and every
mark in one more, so a cancelled consolidation leaves the thread as it was, or (when
cancellation arrives while COMMIT is already on its way) fully consolidated, never half.
A summariser thread that is running when its task is cancelled finishes on its own; its
result is dropped.

The manager also keeps a small sync ``MemoryManager`` (at most two connections, opened
lazily) for what is not on the hot path: migrations at open, and the rare backfill of
message embeddings that ``search_memory`` may need (run in a worker thread).
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
import uuid
from contextlib import AsyncExitStack, asynccontextmanager, nullcontext, suppress
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence

import psycopg
from pgvector.psycopg import register_vector_async
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from memory.aio_scoped import AsyncThreadMemory, AsyncUserMemory
from memory.consolidation.monitor import ContextStatus, ContextUsage
from memory.consolidation.summarizer import Summarizer
from memory.consolidation.writeback import ConsolidationResult, ExpandedSummary
from memory.context.plain import build_context_op
from memory.errors import DatabaseUnavailableError
from memory.retrieval.embeddings import Embedder, EmbeddingService
from memory.retrieval.hits import Hit
from memory.settings import Settings
from memory.store import conninfo as _conninfo
from memory.store.dates import register_clamping_loaders
from memory.store.db import (READABLE_TABLES, VECTOR_SCHEMA, WARM_FUNCTIONS, _PoolHealth, search_path, translate,
                             user_scope, warm_tables)
from memory.store.ops import (COMMIT_SQL, PIPELINE, Ahead, Call, Commit, Op, Sql, T, cursor, fetched_async, held,
                              pipeline_head, pipelined, prepare, together)
from memory.store.rows import Entity, Fact, KnowledgeItem, Message, Summary, Workflow
from memory.tables.conversation import NewMessage
from memory.tables.facts import Remembered
from memory.tables.search import MemoryHit, SearchWeights

if TYPE_CHECKING:
    from memory.manager import MemoryManager

__all__ = ["AsyncDatabase", "AsyncMemoryManager", "AsyncThreadMemory", "AsyncUserMemory", "aexecute", "arun"]


log = logging.getLogger(__name__)


async def _warm(conn: psycopg.AsyncConnection[Any]) -> None:
    """``memory.store.db._warm`` on an async connection."""
    try:
        await conn.execute(WARM_FUNCTIONS)
        cur = await conn.execute(READABLE_TABLES)
        stmt = warm_tables([r[0] for r in await cur.fetchall()])
        if stmt is not None:
            await conn.execute(stmt)
        await conn.commit()
    except psycopg.Error as exc:
        log.debug("a new connection was not warmed: %s", exc)
        await conn.rollback()


@dataclass
class AsyncDatabase:
    """An ``AsyncConnectionPool`` configured like ``Database``'s pool, with the same transactions."""

    conninfo: str
    schema: str
    pool: AsyncConnectionPool
    health: _PoolHealth = field(default_factory=_PoolHealth)

    @classmethod
    async def open(cls, conninfo: str, settings: Settings) -> AsyncDatabase:
        """A pool on an already migrated schema (``AsyncMemoryManager.open`` migrates first)."""
        health = _PoolHealth()
        schema = settings.schema

        async def configure(conn: psycopg.AsyncConnection) -> None:
            cur = await conn.execute(VECTOR_SCHEMA)
            ext = await cur.fetchone()
            await conn.execute(search_path(schema, ext[0] if ext else None))
            await register_vector_async(conn)
            register_clamping_loaders(conn)
            await conn.commit()
            await _warm(conn)
            health.configured(conn)  # type: ignore[arg-type]

        async def check(conn: psycopg.AsyncConnection) -> None:
            if health.good_at.get(conn, 0.0) <= health.lost_at:  # type: ignore[call-overload]
                await AsyncConnectionPool.check_connection(conn)
                health.good_at[conn] = time.monotonic()  # type: ignore[index]

        pool = AsyncConnectionPool(conninfo, kwargs=_conninfo.timeout_kwargs(conninfo, settings.connect_timeout),
                                   min_size=settings.pool_min_size, max_size=settings.pool_max_size,
                                   configure=configure, check=check, open=False, name="agentmem-async")
        try:
            await pool.open(wait=True, timeout=30)
        except PoolTimeout as exc:
            await pool.close()
            raise DatabaseUnavailableError(
                f"could not open connections to {_conninfo.redact(conninfo)}: {exc}") from exc
        return cls(conninfo, schema, pool, health)

    @asynccontextmanager
    async def connection(self, user_id: str | None = None, *,
                         scope: bool = True) -> AsyncIterator[psycopg.AsyncConnection]:
        """``async with adb.connection(user) as conn:`` is one transaction, scoped like ``Database.connection``
        (``scope=False``: the caller sends the user scope itself, in its first statement)."""
        used: psycopg.AsyncConnection | None = None
        try:
            async with self.pool.connection() as conn:
                used = conn
                if user_id is not None and scope:
                    await conn.execute(user_scope(user_id))
                yield conn
        except (PoolTimeout, psycopg.Error) as exc:  # mapped as the sync transaction maps them
            mapped = translate(exc, user_id, used, self.health)
            if mapped is None:
                raise
            raise mapped from exc

    async def close(self) -> None:
        await self.pool.close()


async def aexecute(conn: psycopg.AsyncConnection, q: Sql) -> Any:
    """``memory.store.ops.execute`` on an async connection."""
    async with cursor(conn, q) as cur:
        if q.fetch == "many":
            out: list[Any] = []
            await cur.executemany(q.stmt, q.params, returning=True)
            while True:
                out.extend(await cur.fetchall())
                if not cur.nextset():
                    break
            return out
        await cur.execute(q.stmt, q.params, prepare=prepare(q))
        return await fetched_async(cur, q)


async def aexecute_last(conn: psycopg.AsyncConnection, steps: list[Sql]) -> Any:
    """``memory.store.ops.execute_last`` on an async connection: one round trip for the transaction."""
    last = steps[-1]
    await conn.set_autocommit(True)
    try:
        async with cursor(conn, last) as cur:
            async with conn.pipeline():
                for stmt in pipeline_head(steps):
                    await conn.execute(stmt, prepare=False)
                await cur.execute(last.stmt, last.params, prepare=prepare(last))
                await conn.execute(COMMIT_SQL, prepare=False)
            return await fetched_async(cur, last)
    finally:
        await _restore(conn)


async def aexecute_committing(conn: psycopg.AsyncConnection, q: Sql, head: Sequence[Sql] = ()) -> Any:
    """``memory.store.ops.execute_committing`` on an async connection."""
    if not pipelined([q]):
        await aexecute_held(conn, head)
        result = await aexecute(conn, q)
        await conn.commit()
        return result
    async with cursor(conn, q) as cur:
        async with conn.pipeline():
            for h in head:
                await conn.execute(h.stmt, prepare=False)
            await cur.execute(q.stmt, q.params, prepare=prepare(q))
            await conn.execute(COMMIT_SQL, prepare=False)
        return await fetched_async(cur, q)


async def aexecute_held(conn: psycopg.AsyncConnection, head: Sequence[Sql]) -> None:
    """``memory.store.ops.execute_held`` on an async connection."""
    if head:
        await aexecute(conn, together(head, None))


async def aexecute_ahead(conn: psycopg.AsyncConnection, ahead: Ahead,
                         head: list[Any] | None = None) -> tuple[Any, list[Any], bool]:
    """``memory.store.ops.execute_ahead`` on an async connection (the call in a worker thread)."""
    async with AsyncExitStack() as cursors:
        sent = [(await cursors.enter_async_context(cursor(conn, q)), q) for q in ahead.steps]
        async with conn.pipeline() if PIPELINE else nullcontext():
            for stmt in head or ():
                await conn.execute(stmt, prepare=False)
            for cur, q in sent:
                await cur.execute(q.stmt, q.params, prepare=prepare(q))
            done = await asyncio.to_thread(ahead.call.fn, *ahead.call.args, **ahead.call.kwargs)
            later = list(ahead.then(done)) if ahead.then is not None else []
            for q in later:
                if held(q):
                    await conn.execute(q.stmt, prepare=False)
                else:
                    sent.append((await cursors.enter_async_context(cursor(conn, q)), q))
                    await sent[-1][0].execute(q.stmt, q.params, prepare=prepare(q))
            ended = bool(later) and later[-1].last
            if ended:
                await conn.execute(COMMIT_SQL, prepare=False)
        return done, [await fetched_async(cur, q) for cur, q in sent], ended


def _leaving(conn: psycopg.AsyncConnection) -> Any:
    """``memory.store.ops._leaving`` for an async connection."""
    async def leave(exc_type: Any, *_: Any) -> bool:
        try:
            if exc_type is None and conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS:
                await conn.execute(COMMIT_SQL, prepare=False)
        finally:
            await _restore(conn)
        return False
    return leave


async def _restore(conn: psycopg.AsyncConnection) -> None:
    try:
        if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            await conn.rollback()
        await conn.set_autocommit(False)
    except psycopg.Error:
        await conn.close()


async def _open(adb: AsyncDatabase, waiting: list[Sql], user: str | None) -> tuple[AsyncExitStack, Any]:
    """``memory.store.ops._open`` on ``adb``."""
    tx = AsyncExitStack()
    try:
        conn = await tx.enter_async_context(adb.connection(user, scope=not waiting))
        if waiting:
            await aexecute(conn, together(waiting, user))
    except BaseException:
        await tx.__aexit__(*sys.exc_info())
        raise
    return tx, conn


class _Rollback(Exception):
    pass


async def _end(tx: AsyncExitStack, rollback: bool) -> None:
    if not rollback:
        await tx.__aexit__(None, None, None)
        return
    try:
        raise _Rollback
    except _Rollback:
        exc_info = sys.exc_info()
    with suppress(_Rollback):
        await tx.__aexit__(*exc_info)


async def arun(adb: AsyncDatabase, op: Op[T]) -> T:
    """Drive ``op`` on ``adb``: ``memory.store.ops.run`` with awaits, and calls in worker threads."""
    tx: AsyncExitStack | None = None
    conn: Any = None
    result: Any = None
    waiting: list[Sql] = []
    try:
        while True:
            try:
                step = op.send(result)
            except StopIteration as done:
                if waiting and tx is None:
                    tx, conn = await _open(adb, waiting, waiting[0].user)
                elif waiting:
                    await aexecute_held(conn, waiting)
                finishing, tx = tx, None
                if finishing is not None:
                    await finishing.__aexit__(None, None, None)  # commit
                return done.value  # type: ignore[no-any-return]
            if isinstance(step, Call):
                result = await asyncio.to_thread(step.fn, *step.args, **step.kwargs)
            elif isinstance(step, Ahead):
                if tx is None:
                    user = waiting[0].user if waiting else step.steps[0].user
                    tx = AsyncExitStack()
                    conn = await tx.enter_async_context(adb.connection(user, scope=False))
                    await conn.set_autocommit(True)  # BEGIN is sent as a statement, as in the sync driver
                    tx.push_async_exit(_leaving(conn))
                    head = pipeline_head(waiting + [step.steps[0]])
                else:
                    head = [q.stmt for q in waiting]
                waiting = []
                called, rows, ended = await aexecute_ahead(conn, step, head)
                result = (called, rows)
                if ended:
                    finishing, tx, conn = tx, None, None
                    await finishing.__aexit__(None, None, None)  # committed: gives the connection back
            elif isinstance(step, Commit):
                if waiting and tx is None:
                    tx, conn = await _open(adb, waiting, waiting[0].user)
                elif waiting:
                    await aexecute_held(conn, waiting)
                waiting = []
                finishing, tx, conn, result = tx, None, None, None
                if finishing is not None:
                    await _end(finishing, step.rollback)
            elif held(step):
                waiting.append(step)
                result = None
            elif tx is None and pipelined(waiting + [step]):
                steps, waiting = waiting + [step], []
                async with adb.connection(steps[0].user, scope=False) as one:
                    result = await aexecute_last(one, steps)
            else:
                if tx is None:
                    tx, conn = await _open(adb, waiting, waiting[0].user if waiting else step.user)
                    waiting = []
                if step.last:
                    result = await aexecute_committing(conn, step, waiting)
                else:
                    await aexecute_held(conn, waiting)
                    result = await aexecute(conn, step)
                waiting = []
                if step.last:
                    finishing, tx, conn = tx, None, None
                    await finishing.__aexit__(None, None, None)  # committed: gives the connection back
    except BaseException:
        op.close()
        if tx is not None:
            await tx.__aexit__(*sys.exc_info())  # rollback; raises the translated error where there is one
        raise


class AsyncMemoryManager:
    """The hot path of ``MemoryManager``, awaited (see the module docstring)."""

    def __init__(self, planner: MemoryManager, adb: AsyncDatabase) -> None:
        self._mm = planner  # its table objects describe the operations
        self.adb = adb

    @classmethod
    async def open(cls, settings: Settings | None = None, *, embedder: Embedder | None = None,
                   conninfo: str | None = None) -> AsyncMemoryManager:
        """Resolve the database (URL or embedded server), migrate, and open the async pool."""
        from memory.manager import MemoryManager

        settings = settings or Settings.from_env()
        planner = await asyncio.to_thread(MemoryManager.open, settings.with_(pool_min_size=0, pool_max_size=2),
                                          embedder=embedder, conninfo=conninfo)
        planner.store.settings = settings
        try:
            adb = await AsyncDatabase.open(planner.db.conninfo, settings)
        except BaseException:
            planner.close()
            raise
        return cls(planner, adb)

    @property
    def settings(self) -> Settings:
        return self._mm.settings

    @property
    def embeddings(self) -> EmbeddingService:
        return self._mm.embeddings

    def user(self, user_id: str) -> AsyncUserMemory:
        """A handle on one user's memory (``user_id`` validated once); ``.thread(id)`` narrows it to a thread."""
        return AsyncUserMemory(self, user_id)

    async def close(self) -> None:
        await self.adb.close()
        await asyncio.to_thread(self._mm.close)

    async def __aenter__(self) -> AsyncMemoryManager:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _run(self, op: Op[T]) -> T:
        return await arun(self.adb, op)

    # -- conversation ---------------------------------------------------------------------
    async def write_conversational_memory(self, role: str, content: str, *, user_id: str, thread_id: str,
                                          **fields: Any) -> Message:
        """Store one message (``fields``: tool_call_id, tool_name, tool_args, tool_calls, metadata, created_at)."""
        rows = await self.write_messages([NewMessage(role=role, content=content, **fields)], user_id=user_id,
                                         thread_id=thread_id)
        return rows[0]

    async def write_messages(self, messages: Iterable[NewMessage | Mapping[str, Any]], *, user_id: str,
                             thread_id: str, embed: bool = True) -> list[Message]:
        """Store messages in order, in one transaction; if any is rejected, none is written."""
        return await self._run(self._mm.conversations.write_messages_op(messages, user_id=user_id,
                                                                        thread_id=thread_id, embed=embed))

    async def read_conversational_memory(self, *, user_id: str, thread_id: str,
                                         limit: int | None = None) -> list[Message]:
        """The thread's working set: unsummarized messages, oldest first (the latest ``limit``)."""
        return await self._run(self._mm.conversations.working_set_op(user_id=user_id, thread_id=thread_id,
                                                                     limit=limit))

    async def read_thread(self, *, user_id: str, thread_id: str, include_summarized: bool = True) -> list[Message]:
        """Every message of a thread in order, summarized ones included by default."""
        return await self._run(self._mm.conversations.thread_op(user_id=user_id, thread_id=thread_id,
                                                                include_summarized=include_summarized))

    # -- reads the context is made of -------------------------------------------------------
    async def read_knowledge(self, query: str, *, user_id: str, k: int = 5,
                             hybrid: bool = True) -> list[Hit[KnowledgeItem]]:
        return await self._run(self._mm.knowledge.read_knowledge_op(query, user_id=user_id, k=k, hybrid=hybrid))

    async def read_workflows(self, query: str, *, user_id: str, k: int = 3, hybrid: bool = True) -> list[Hit[Workflow]]:
        return await self._run(self._mm.workflows.read_workflows_op(query, user_id=user_id, k=k, hybrid=hybrid))

    async def read_entities(self, query: str | None = None, *, user_id: str,
                            k: int = 10) -> list[Entity] | list[Hit[Entity]]:
        return await self._run(self._mm.entities.read_entities_op(query, user_id=user_id, k=k))

    async def read_summaries(self, *, user_id: str, thread_id: str | None = None, limit: int = 50) -> list[Summary]:
        return await self._run(self._mm.summaries.latest_op(user_id=user_id, thread_id=thread_id, limit=limit))

    async def read_summary_by_id(self, summary_id: str | uuid.UUID, *, user_id: str) -> Summary:
        return await self._run(self._mm.summaries.by_id_op(summary_id, user_id=user_id))

    async def build_context(self, query: str, *, user_id: str, thread_id: str, k: int = 3) -> str:
        """A plain context from every memory type (``MemoryManager.build_context``)."""
        return await self._run(build_context_op(self._mm, query, user_id=user_id, thread_id=thread_id, k=k))

    # -- search -----------------------------------------------------------------------------
    async def search_memory(self, query: str, *, user_id: str, k: int = 10, scope: str | Iterable[str] | None = None,
                            thread_id: str | None = None, since: datetime | None = None,
                            until: datetime | None = None, now: datetime | None = None, time_mode: str = "boost",
                            min_score: float | None = None, method: str = "hybrid",
                            weights: SearchWeights | None = None, shape: str = "auto") -> list[MemoryHit]:
        """The user's past messages, summaries and facts most relevant to ``query``, best first."""
        return await self._run(self._mm.memory_search.search_op(
            query, user_id=user_id, k=k, scope=scope, thread_id=thread_id, since=since, until=until, now=now,
            time_mode=time_mode, min_score=min_score, method=method, weights=weights, shape=shape))

    # -- monitor and consolidation ------------------------------------------------------------
    async def calculate_context_usage(self, context: str, model: str | None = None) -> ContextUsage:
        """Tokens of ``context`` against ``model``'s usable window (counted in a worker thread)."""
        return await asyncio.to_thread(self._mm.calculate_context_usage, context, model)

    async def monitor_context_window(self, context: str, model: str | None = None) -> ContextStatus:
        """The usage plus a status: ok, warning or critical."""
        return await asyncio.to_thread(self._mm.monitor_context_window, context, model)

    def summarizer(self, model: Any | None = None, **kwargs: Any) -> Summarizer:
        return self._mm.summarizer(model, **kwargs)

    async def summarize_conversation(self, *, user_id: str, thread_id: str, keep_recent: int = 0,
                                     model: Any | None = None, summarizer: Summarizer | None = None,
                                     focus: str | None = None) -> ConsolidationResult:
        """Summarise the thread's unsummarized whole turns and mark them with the summary id, atomically."""
        return await self._run(self._mm.consolidation.summarize_op(
            user_id=user_id, thread_id=thread_id, keep_recent=keep_recent, model=model, summarizer=summarizer,
            focus=focus))

    async def expand_summary(self, summary_id: str | uuid.UUID, *, user_id: str) -> ExpandedSummary:
        """The summary and every original message, in order; NotFoundError if not this user's."""
        return await self._run(self._mm.consolidation.expand_op(summary_id, user_id=user_id))

    # -- facts --------------------------------------------------------------------------------
    async def remember(self, category: str, content: str, *, user_id: str, replaces: str | uuid.UUID | None = None,
                       source_message_id: int | None = None) -> Remembered:
        """Store a durable fact, updating a near-duplicate or superseding a contradicted one."""
        return await self._run(self._mm.facts.remember_op(category, content, user_id=user_id, replaces=replaces,
                                                          source_message_id=source_message_id))

    async def forget(self, fact_id: str | uuid.UUID, *, user_id: str, purge: bool = False) -> Fact:
        """Retire an active fact (kept as history); ``purge=True`` deletes the row."""
        return await self._run(self._mm.facts.forget_op(fact_id, user_id=user_id, purge=purge))

    async def read_facts(self, *, user_id: str) -> list[Fact]:
        """The user's active facts, oldest first."""
        return await self._run(self._mm.facts.read_facts_op(user_id=user_id))

    async def recall(self, query: str | None = None, *, user_id: str, k: int = 10,
                     include_history: bool = False) -> list[Fact] | list[Hit[Fact]]:
        """Active facts most relevant to ``query`` (all active facts without one)."""
        return await self._run(self._mm.facts.recall_op(query, user_id=user_id, k=k,
                                                        include_history=include_history))
