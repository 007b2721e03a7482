"""Consolidation: summarise old turns and write the summary id back onto them.

``summarize_conversation(user_id=..., thread_id=..., keep_recent=0)`` runs in three steps:

1. **Choose** (no transaction held): read the thread's unsummarized rows in order and
   group them into whole turns. A turn is a user message and everything up to the
   next one; a tool result that answers a call of an earlier turn joins the turns in
   between into one unit, so a call and its result are never split. The last
   ``keep_recent`` turns stay live, and so does a last turn whose tool calls are not
   all answered yet. The chosen ids are fixed here.
2. **Summarise** (no transaction held, no lock): build the timestamped transcript
   and summarise it (model, retry, extractive fallback, map-reduce: see
   :mod:`memory.consolidation.summarizer`), then embed the summary. A slow model never holds a lock.
3. **Commit** in ONE transaction: take ``pg_advisory_xact_lock`` on (user, thread),
   lock the chosen rows with ``FOR UPDATE`` and check every one is still
   unsummarized; insert the summary; ``UPDATE ... SET summary_id WHERE id = ANY(ids)
   AND summary_id IS NULL`` and check the row count equals the number of sources.
   Any mismatch or error rolls the whole transaction back.

Why the advisory lock and not ``SKIP LOCKED``: the lock is taken only by
consolidations of the same (user, thread), for the milliseconds of step 3, so the
second of two concurrent consolidations waits for the first to commit and then sees
its marks deterministically, and reports ``conflict`` with nothing written.
``SKIP LOCKED`` would also avoid double marking, but the loser would find rows
"missing" for a reason it cannot tell apart from a concurrent undo or deletion, and
two consolidations locking overlapping id sets would depend on lock order. Writers of
new messages never take the lock, so the conversation keeps flowing during a
consolidation; their rows are not in the chosen id set and stay unsummarized.

A crash at any point leaves the old state (nothing committed) or the new one (the
summary and all its marks). ``undo_consolidation`` is the DBA's way back: clear the
marks and drop the summary, in one transaction.
"""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

from psycopg import sql

from memory.store.ops import COMMIT, ROLLBACK, Call, Op, Sql, run
from memory.tables.base import Store, Table, select_list
from memory.tables.conversation import Conversations
from memory.tables.summaries import Summaries
from memory.errors import InvalidInputError, NotFoundError
from memory.context.render import CONVERSATION, format_conversation, format_message, split_sections
from memory.store.rows import Message, Summary
from memory.consolidation.monitor import ContextStatus, ContextUsage, calculate_context_usage, monitor_context_window
from memory.consolidation.summarizer import Summarizer
from memory.consolidation.summary_fit import fit_content
from memory.store.turns import group_turns, unanswered_calls
from memory.context.tokens import count_tokens
from memory.store.validation import check_count, check_optional_text, check_uuid

Status = Literal["summarized", "nothing_to_summarize", "conflict"]

EXPAND_HINT = 'Older messages were consolidated; call expand_summary("{id}") to read them in full.'

# Step 3: serialise consolidations of one (user, thread), lock the chosen rows, mark them.
_LOCK_THREAD = "SELECT pg_advisory_xact_lock(hashtext(%s), hashtext(%s))"
_LOCK_SOURCES = ("SELECT id FROM conversational_memory WHERE id = ANY(%s) AND user_id = %s AND thread_id = %s"
                 " AND summary_id IS NULL ORDER BY id FOR UPDATE")
_MARK_SOURCES = ("UPDATE conversational_memory SET summary_id = %s WHERE id = ANY(%s) AND user_id = %s"
                 " AND summary_id IS NULL")
_SOURCES = sql.SQL("SELECT {cols} FROM conversational_memory WHERE summary_id = %s AND user_id = %s"
                   " ORDER BY created_at, id").format(cols=select_list(Message))


@dataclass
class ConsolidationResult:
    """What a consolidation did (``status``) and, when it summarised, with what."""

    status: Status
    summary: Summary | None = None
    source_ids: list[int] = field(default_factory=list)
    source_tokens: int = 0
    summary_tokens: int = 0
    llm_calls: int = 0
    method: str | None = None
    kept_turns: int = 0
    message: str = ""
    errors: tuple[str, ...] = ()

    @property
    def summarized(self) -> bool:
        return self.status == "summarized"


@dataclass
class ExpandedSummary:
    """A summary and every original message it replaced, oldest first."""

    summary: Summary
    messages: list[Message]

    def format(self) -> str:
        lines = [self.summary.reference, "", self.summary.content, "", f"Original messages ({len(self.messages)}):"]
        lines += [format_message(m) for m in self.messages]
        return "\n".join(lines)


@dataclass
class Offload:
    """A context whose conversation section now points at a summary."""

    context: str
    summary: Summary | None
    result: ConsolidationResult | None = None


class _Conflict(Exception):
    pass


class Consolidation(Table):
    """Monitor, consolidate, expand, offload and undo (see the module docstring).

    It reads threads through ``conversations`` and writes summaries through ``summaries``.
    """

    def __init__(self, store: Store, conversations: Conversations, summaries: Summaries) -> None:
        super().__init__(store)
        self.conversations = conversations
        self.summaries = summaries

    # -- monitor -------------------------------------------------------------------------
    def calculate_context_usage(self, context: str, model: str | None = None) -> ContextUsage:
        return calculate_context_usage(context, model, self.settings)

    def monitor_context_window(self, context: str, model: str | None = None) -> ContextStatus:
        return monitor_context_window(context, model, self.settings)

    def summarizer(self, model: Any | None = None, **kwargs: Any) -> Summarizer:
        """A summariser for ``model`` (None: extractive) sized to that model's window."""
        name = getattr(model, "model_name", None) if model is not None else None
        kwargs.setdefault("window_tokens", self.settings.context_window(name))
        kwargs.setdefault("output_tokens", self.settings.reserved_output_tokens)
        kwargs.setdefault("limit_chars", self.settings.max_content_chars)
        return Summarizer(model, **kwargs)

    # -- consolidate ---------------------------------------------------------------------
    def summarize_conversation(self, *, user_id: str, thread_id: str, keep_recent: int = 0,
                               model: Any | None = None, summarizer: Summarizer | None = None,
                               focus: str | None = None) -> ConsolidationResult:
        """Summarise the thread's unsummarized whole turns and mark them, atomically."""
        return run(self.db, self.summarize_op(user_id=user_id, thread_id=thread_id, keep_recent=keep_recent,
                                              model=model, summarizer=summarizer, focus=focus))

    def summarize_op(self, *, user_id: str, thread_id: str, keep_recent: int = 0, model: Any | None = None,
                     summarizer: Summarizer | None = None, focus: str | None = None) -> Op[ConsolidationResult]:
        """:meth:`summarize_conversation` as an operation: read (one transaction), summarise and embed (no
        transaction held), commit (one transaction). Cancelled or failing anywhere, it leaves the thread as
        it was or consolidated, never half."""
        uid, tid = self._uid(user_id), self._tid(thread_id)
        check_count(keep_recent, "keep_recent")
        focus = check_optional_text(focus, "focus", max_chars=2000)
        rows = yield from self.conversations.thread_op(user_id=uid, thread_id=tid, include_summarized=False)
        yield COMMIT  # no transaction is held while the model summarises
        turns = group_turns(rows)
        chosen_turns = turns[:len(turns) - keep_recent] if keep_recent else list(turns)
        if chosen_turns and len(chosen_turns) == len(turns) and unanswered_calls(chosen_turns[-1]):
            chosen_turns.pop()  # the last turn is still waiting for tool results
        kept = len(turns) - len(chosen_turns)
        chosen = [m for t in chosen_turns for m in t]
        if not chosen:
            return ConsolidationResult("nothing_to_summarize", kept_turns=kept,
                                       message="no complete turns to summarize in this thread")
        units = [format_message(m) for m in chosen]
        summ = summarizer or self.summarizer(model)
        structured = yield Call(summ.summarize, (units,), {"focus": focus})
        limit = self.settings.max_content_chars
        if len(structured.content) > limit:  # a summariser built with a larger limit: the store's wins
            structured = dataclasses.replace(structured, content=fit_content(structured.content, limit))
        source_tokens = count_tokens("\n".join(units)).tokens
        summary_tokens = count_tokens(structured.content).tokens
        ids = [m.id for m in chosen]
        row = yield Call(self.summaries.prepare, (structured.label, structured.content), dict(
            user_id=uid, thread_id=tid, source_count=len(ids),
            first_message_at=chosen[0].created_at, last_message_at=chosen[-1].created_at,
            source_tokens=source_tokens, summary_tokens=summary_tokens,
            metadata={"method": structured.method, "llm_calls": structured.llm_calls,
                      "pieces": structured.pieces, "first_id": ids[0], "last_id": ids[-1],
                      "turns": len(chosen_turns)}))
        try:
            summary = yield from self._commit_op(uid, tid, ids, row)
        except _Conflict as exc:
            yield ROLLBACK
            return ConsolidationResult("conflict", source_ids=ids, kept_turns=kept, llm_calls=structured.llm_calls,
                                       method=structured.method, message=str(exc), errors=structured.errors)
        return ConsolidationResult(
            "summarized", summary, ids, source_tokens, summary_tokens, structured.llm_calls, structured.method,
            kept, f"{len(ids)} messages in {len(chosen_turns)} turns consolidated into {summary.summary_id}",
            structured.errors)

    def _commit_op(self, uid: str, tid: str, ids: list[int], row: dict[str, Any]) -> Op[Summary]:
        """Step 3 of the module docstring, in the operation's (new) transaction; _Conflict if it must not commit."""
        yield Sql(_LOCK_THREAD, (uid, tid), fetch="none", user=uid)
        free = yield Sql(_LOCK_SOURCES, (ids, uid, tid), user=uid)
        if len(free) != len(ids):
            raise _Conflict(f"{len(ids) - len(free)} of the {len(ids)} chosen messages were consolidated or "
                            "removed meanwhile; nothing written, read the thread again")
        summary = yield from self.summaries.insert_op(row)
        marked = yield Sql(_MARK_SOURCES, (summary.summary_id, ids, uid), fetch="rowcount", user=uid)
        if marked != len(ids):  # cannot happen under the locks; never commit half
            raise _Conflict(f"marked {marked} of {len(ids)} messages; rolled back")
        return summary

    # -- read back -----------------------------------------------------------------------
    def read_conversations_by_summary_id(self, summary_id: str | uuid.UUID, *, user_id: str) -> list[Message]:
        """The messages a summary replaced, oldest first (empty for another user's id)."""
        return run(self.db, self.sources_op(summary_id, user_id=user_id))

    def sources_op(self, summary_id: str | uuid.UUID, *, user_id: str) -> Op[list[Message]]:
        sid, uid = check_uuid(summary_id, "summary_id"), self._uid(user_id)
        rows: list[Message] = yield Sql(_SOURCES, (sid, uid), Message, user=uid)
        return rows

    def expand_summary(self, summary_id: str | uuid.UUID, *, user_id: str) -> ExpandedSummary:
        """The summary and every original message, in order; NotFoundError if not this user's."""
        return run(self.db, self.expand_op(summary_id, user_id=user_id))

    def expand_op(self, summary_id: str | uuid.UUID, *, user_id: str) -> Op[ExpandedSummary]:
        summary = yield from self.summaries.by_id_op(summary_id, user_id=user_id)
        messages = yield from self.sources_op(summary.summary_id, user_id=user_id)
        return ExpandedSummary(summary, messages)

    # -- context rewrite -----------------------------------------------------------------
    def offload_to_summary(self, context: str, *, user_id: str, thread_id: str,
                           summary_id: str | uuid.UUID | None = None, keep_recent: int = 0,
                           model: Any | None = None, summarizer: Summarizer | None = None) -> Offload:
        """Rewrite only ``## Conversation Memory`` into summary references plus the live turns.

        Without ``summary_id`` the thread is consolidated first. Every other section of
        ``context`` is kept byte for byte.
        """
        if not isinstance(context, str):
            raise InvalidInputError(f"context must be a string, got {type(context).__name__}")
        result: ConsolidationResult | None = None
        if summary_id is not None:
            summary: Summary | None = self.summaries.read_summary_by_id(summary_id, user_id=user_id)
        else:
            result = self.summarize_conversation(user_id=user_id, thread_id=thread_id, keep_recent=keep_recent,
                                                 model=model, summarizer=summarizer)
            summary = result.summary
            if summary is None:
                existing = self.summaries.read_summaries(user_id=user_id, thread_id=thread_id, limit=1)
                summary = existing[-1] if existing else None
        if summary is None:
            return Offload(context, None, result)
        live = self.conversations.read_conversational_memory(user_id=user_id, thread_id=thread_id)
        section = f"{CONVERSATION}\n{summary.reference}\n{EXPAND_HINT.format(id=summary.summary_id)}\n"
        if live:
            section += format_conversation(live)[len(CONVERSATION) + 1:] + "\n"
        return Offload(replace_section(context, CONVERSATION, section), summary, result)

    # -- undo ----------------------------------------------------------------------------
    def undo_consolidation(self, summary_id: str | uuid.UUID, *, user_id: str) -> int:
        """Clear the marks of a consolidation and drop its summary (one transaction); returns the rows cleared."""
        sid, uid = check_uuid(summary_id, "summary_id"), self._uid(user_id)
        with self.db.connection(uid) as conn:
            cleared = conn.execute("UPDATE conversational_memory SET summary_id = NULL"
                                   " WHERE summary_id = %s AND user_id = %s", (sid, uid)).rowcount
            dropped = conn.execute("DELETE FROM summary_memory WHERE summary_id = %s AND user_id = %s",
                                   (sid, uid)).rowcount
            if dropped != 1:
                raise NotFoundError(f"summary {sid} not found for this user")
        return cleared


def replace_section(context: str, heading: str, new_section: str) -> str:
    """Replace the section under ``heading`` (appending it if absent); other sections untouched."""
    parts = split_sections(context)
    out: list[str] = []
    done = False
    for head, text in parts:
        if head == heading and not done:
            # Keep the blank lines that separated the old section from the next one.
            out.append(new_section.rstrip("\n") + text[len(text.rstrip("\n")):])
            done = True
        else:
            out.append(text)
    if not done:
        sep = "" if not context or context.endswith("\n\n") else ("\n" if context.endswith("\n") else "\n\n")
        out.append(sep + new_section.rstrip("\n"))
    return "".join(out)
