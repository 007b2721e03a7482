"""Conversational (episodic) memory: every message of every thread.

Reads of the working set return only rows whose ``summary_id`` is NULL, oldest
first: once consolidation writes a summary id onto a row, the row leaves the
working set for good (it stays in the table and can be expanded back).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime
from concurrent.futures import Future
from typing import Any
from collections.abc import Iterable, Mapping

from psycopg import sql
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from memory.store.ops import Call, Op, Sql, run
from memory.tables.base import EMBED_CHARS, Table, select_list
from memory.errors import InvalidInputError
from memory.store.isolation import require_owner
from memory.store.rows import ROLES, Message
from memory.store.validation import (check_bool, check_choice, check_datetime, check_id, check_object,
                                     check_optional_text, check_positive_int, check_text, check_tool_calls)

_COLUMNS = sql.SQL(
    "INSERT INTO conversational_memory (user_id, thread_id, role, content, tool_call_id, tool_name,"
    " tool_args, tool_calls, metadata, created_at, embedding, name) VALUES ")
#: One row's values; ``created_at`` defaults to the clock when the row is written, so
#: the rows of one statement keep their order in time.
_ROW = sql.SQL("(%s, %s, %s, %s, %s, %s, %s, %s, %s, COALESCE(%s::timestamptz, clock_timestamp()), %s, %s)")
_RETURNING = sql.SQL(" RETURNING {cols}").format(cols=select_list(Message))

#: Messages per pipeline stage, from the end of a call. While the model embeds, inserting
#: a message takes the database (and this thread) about 0.4 of what embedding it takes
#: the int8 model (LoCoMo turns into an HNSW index that does not hold their vectors yet:
#: ~1.0 ms a row against ~2.6), so each stage is at most about three times the next: its
#: insert ends while the next one is embedded, and only the last stage's short insert is
#: left once the model is done. The rest is cut into equal stages of at most ``_STAGE_MAX``
#: (one INSERT of 12 parameters a row), so most texts are sorted and planned into model
#: runs together (runs of texts of similar length,
#: :func:`memory.retrieval.onnx_minilm.plan_runs`; the ONNX model gets each stage in one
#: call, its texts tokenized with every other stage's when the call starts:
#: ``EmbeddingService.embed_later_each``). LoCoMo's conversations written with (4, 12, 36,
#: 100, 250) ran at 0.934, 0.900 and 0.904 of the encoder alone on the same texts in one
#: call, with (8, 32, 128) at 0.863, 0.855 and 0.852 (medians of 6, 8 and 10 interleaved
#: rounds, each round into empty tables; (8, 32, 128) had been chosen by rounds that wrote
#: the same vectors again into one index, which pgvector stores as pointers to the
#: elements already there, an insert half as dear: 0.62 ms a row).
_STAGES = (4, 12, 36, 100, 250)
_STAGE_MAX = 1024


@functools.lru_cache(maxsize=64)
def _insert(n: int) -> sql.Composed:
    """One INSERT of ``n`` rows (one statement: one round trip, one trigger pass)."""
    return _COLUMNS + sql.SQL(", ").join([_ROW] * n) + _RETURNING


def stages(n: int) -> list[tuple[int, int]]:
    """``(start, end)`` of each pipeline stage of ``n`` messages, in order."""
    sizes: list[int] = []
    left = n
    for size in _STAGES:
        if left <= 0:
            break
        sizes.append(min(size, left))
        left -= size
    if left > 0:  # the rest in equal stages of at most _STAGE_MAX (no stray short one)
        parts = -(-left // _STAGE_MAX)
        sizes += [left // parts + (1 if i < left % parts else 0) for i in range(parts)]
    out, start = [], 0
    for size in reversed(sizes):
        out.append((start, start + size))
        start += size
    return out


#: The working set: the latest unsummarized messages (all, or %s of them), oldest first.
WORKING_SET = sql.SQL(
    "SELECT * FROM (SELECT {cols} FROM conversational_memory"
    " WHERE user_id = %s AND thread_id = %s AND summary_id IS NULL"
    " ORDER BY created_at DESC, id DESC LIMIT %s) t ORDER BY created_at, id").format(cols=select_list(Message))

#: Every message of a thread, in order; ``THREAD_LIVE`` only the unsummarized ones.
THREAD = sql.SQL("SELECT {cols} FROM conversational_memory WHERE user_id = %s AND thread_id = %s"
                 " ORDER BY created_at, id").format(cols=select_list(Message))
THREAD_LIVE = sql.SQL("SELECT {cols} FROM conversational_memory WHERE user_id = %s AND thread_id = %s"
                      " AND summary_id IS NULL ORDER BY created_at, id").format(cols=select_list(Message))


@dataclass
class NewMessage:
    """A message to write; ``write_messages`` takes these or plain dicts."""

    role: str
    content: str
    tool_call_id: str | None = None
    tool_name: str | None = None
    tool_args: Any = None
    tool_calls: list[dict[str, Any]] | None = None
    metadata: dict[str, Any] | None = None
    created_at: datetime | None = None
    name: str | None = None  # the speaker's name (OpenAI ``name``), e.g. in a chat with several people


def embedding_text(role: str, content: str, name: str | None = None) -> str:
    """What is embedded for a message: its speaker (the name, else the role) and its content."""
    return f"{name or role}: {content}"


def _vectors(ahead: Future[list[Any]]) -> list[Any]:
    return ahead.result()


class Conversations(Table):
    """``conversational_memory``: write messages, read a thread's working set or all of it."""

    def _stage_texts(self, checked: list[NewMessage], start: int, end: int) -> list[str]:
        return [embedding_text(m.role, m.content, m.name)[:EMBED_CHARS] for m in checked[start:end]
                if m.content.strip()]

    def _embed_stages(self, stages: list[list[str]]) -> list[Future[list[Any]]]:
        return self.embeddings.embed_later_each(stages)

    def _check_message(self, msg: NewMessage | Mapping[str, Any]) -> NewMessage:
        if isinstance(msg, Mapping):
            unknown = set(msg) - set(NewMessage.__dataclass_fields__)
            if unknown:
                raise InvalidInputError(f"unknown message field(s): {', '.join(sorted(unknown))}")
            try:
                msg = NewMessage(**msg)
            except TypeError as exc:
                raise InvalidInputError(f"a message needs role and content: {exc}") from None
        if not isinstance(msg, NewMessage):
            raise InvalidInputError(f"a message must be a dict or NewMessage, got {type(msg).__name__}")
        s = self.settings
        check_choice(msg.role, "role", ROLES)
        # Assistant messages that only carry tool calls may have empty content.
        check_text(msg.content, "content", max_chars=s.max_content_chars,
                   allow_empty=msg.role in ("assistant", "tool"))
        check_optional_text(msg.tool_call_id, "tool_call_id", max_chars=s.max_id_chars)
        check_optional_text(msg.tool_name, "tool_name", max_chars=s.max_id_chars)
        if msg.name is not None:  # a speaker's name: like an id, one line and not blank
            check_id(msg.name, "name", max_chars=s.max_id_chars)
        check_object(msg.tool_args, "tool_args", max_chars=s.max_content_chars)
        check_tool_calls(msg.tool_calls, max_chars=s.max_content_chars)
        check_object(msg.metadata, "metadata", max_chars=s.max_content_chars)
        check_datetime(msg.created_at, "created_at")
        if msg.role == "tool" and not msg.tool_call_id:
            raise InvalidInputError("a tool message needs the tool_call_id of the call it answers")
        return msg

    def write_conversational_memory(self, role: str, content: str, *, user_id: str, thread_id: str,
                                    **fields: Any) -> Message:
        """Store one message; see :meth:`write_messages` for batches."""
        return self.write_messages([NewMessage(role=role, content=content, **fields)], user_id=user_id,
                                   thread_id=thread_id)[0]

    def write_messages(self, messages: Iterable[NewMessage | Mapping[str, Any]], *, user_id: str, thread_id: str,
                       embed: bool = True) -> list[Message]:
        """Store messages in order, in one transaction, embedding them on the way.

        Every message is validated first: if any is rejected, none is written. The
        write is a pipeline of stages (:func:`stages`): a worker thread embeds them one
        after another while this thread inserts each stage (one statement, in the
        database's own process) as soon as its vectors are in, so the model and the
        database work at the same time. A failure in either (the model, a statement)
        rolls the whole call back: nothing of it is written.
        """
        return run(self.db, self.write_messages_op(messages, user_id=user_id, thread_id=thread_id, embed=embed))

    def write_messages_op(self, messages: Iterable[NewMessage | Mapping[str, Any]], *, user_id: str, thread_id: str,
                          embed: bool = True) -> Op[list[Message]]:
        """:meth:`write_messages` as an operation (``memory.store.ops``)."""
        uid, tid = self._uid(user_id), self._tid(thread_id)
        if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Iterable):
            raise InvalidInputError("messages must be a list of dicts or NewMessage objects")
        checked = [self._check_message(m) for m in messages]
        check_bool(embed, "embed")
        if not checked:
            return []
        if len(checked) > self.settings.max_batch:
            raise InvalidInputError(f"at most {self.settings.max_batch} messages per call")
        written: list[Message] = []
        plan = stages(len(checked))
        # Every stage goes to the embedding thread at once, in order: it embeds them back to
        # back while this thread inserts each stage as soon as its vectors are in.
        pending: list[Any] = []
        try:
            if embed:
                pending = yield Call(self._embed_stages, ([self._stage_texts(checked, start, end)
                                                          for start, end in plan],))
            for n, (start, end) in enumerate(plan):
                vectors: list[Any] = [None] * (end - start)
                if embed:
                    embedded = yield Call(_vectors, (pending[n],))
                    nonempty = [i for i in range(start, end) if checked[i].content.strip()]
                    for i, vec in zip(nonempty, embedded, strict=True):
                        vectors[i - start] = vec
                params: list[Any] = []
                for m, vec in zip(checked[start:end], vectors, strict=True):
                    params += (uid, tid, m.role, m.content, m.tool_call_id, m.tool_name,
                               Jsonb(m.tool_args) if m.tool_args is not None else None,
                               Jsonb(m.tool_calls) if m.tool_calls is not None else None,
                               Jsonb(m.metadata or {}), m.created_at, vec, m.name)
                rows: list[Message] = yield Sql(_insert(end - start), params, Message, "all", uid)
                written += rows
        finally:
            for later in pending:  # after a failure the stages not yet embedded are not needed
                later.cancel()
        if any(m.name for m in checked):
            self.store.speakers.forget(uid)  # a new speaker is matched by the next search
        return written

    def read_conversational_memory(self, *, user_id: str, thread_id: str, limit: int | None = None) -> list[Message]:
        """The thread's working set: unsummarized messages, oldest first.

        With ``limit``, the most recent ``limit`` of them (still oldest first).
        """
        return run(self.db, self.working_set_op(user_id=user_id, thread_id=thread_id, limit=limit))

    def working_set_op(self, *, user_id: str, thread_id: str, limit: int | None = None) -> Op[list[Message]]:
        uid, tid = self._uid(user_id), self._tid(thread_id)
        if limit is not None:
            check_positive_int(limit, "limit")
        rows: list[Message] = yield Sql(WORKING_SET, (uid, tid, limit), Message, user=uid)
        return rows

    def read_thread(self, *, user_id: str, thread_id: str, include_summarized: bool = True) -> list[Message]:
        """Every message of a thread in order, summarized ones included by default."""
        return run(self.db, self.thread_op(user_id=user_id, thread_id=thread_id,
                                           include_summarized=include_summarized))

    def thread_op(self, *, user_id: str, thread_id: str, include_summarized: bool = True) -> Op[list[Message]]:
        uid, tid = self._uid(user_id), self._tid(thread_id)
        check_bool(include_summarized, "include_summarized")
        rows: list[Message] = yield Sql(THREAD if include_summarized else THREAD_LIVE, (uid, tid), Message, user=uid)
        return rows

    def list_threads(self, *, user_id: str | None = None) -> list[dict[str, Any]]:
        """Threads with their message counts, summarized vs not (all users when None: schema owner only)."""
        params: tuple[Any, ...] = ()
        where = sql.SQL("")
        if user_id is not None:
            where, params = sql.SQL("WHERE user_id = %s"), (self._uid(user_id),)
        q = sql.SQL(
            "SELECT user_id, thread_id, count(*) AS total,"
            " count(*) FILTER (WHERE summary_id IS NULL) AS unsummarized,"
            " count(*) FILTER (WHERE summary_id IS NOT NULL) AS summarized,"
            " min(created_at) AS first_at, max(created_at) AS last_at"
            " FROM conversational_memory {where} GROUP BY user_id, thread_id ORDER BY max(created_at) DESC"
        ).format(where=where)
        with self.db.connection(params[0] if params else None) as conn, conn.cursor(row_factory=dict_row) as cur:
            if not params:
                require_owner(conn, "listing every user's threads")
            return cur.execute(q, params).fetchall()
