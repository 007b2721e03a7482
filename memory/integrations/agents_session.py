"""``AgentMemSession``: an OpenAI Agents SDK ``Session`` over the conversation table, with consolidation.

``Runner.run(agent, message, session=AgentMemSession(mm, "t1", user_id="alice"))``: the
session id is the thread, the user is named explicitly (one user's sessions never show
another's items, whatever the session id). Every item the SDK adds becomes one row of
``conversational_memory`` and keeps the item itself, exactly, in ``metadata["agents_item"]``
(tool calls and their outputs, reasoning items, ids, statuses); the row's role, text, tool
calls and tool call ids are derived from it, so consolidation keeps a call with its
output, and ``search_memory``, the DBA views and ``forget_user`` see these turns like any
other. ``get_items`` returns the items exactly as they were added.

**Consolidation.** After ``add_items`` the session measures its working set with the
context monitor (the window of ``model``, agentmem's settings) and, when the status
reaches ``consolidate_at`` (default ``"warning"``; ``None`` never), summarises the older
turns (``summarize_conversation``, keeping the last ``keep_recent`` turns live). From then
on ``get_items`` starts with one system item per summary: its ``[Summary ID: ...]``
reference, its text and how to expand it, followed by the items still live.
``await session.expand(summary_id)`` gives the original items back, exactly;
``await session.consolidate()`` consolidates now, and ``session.expand_summary_tool()`` is the
``expand_summary`` tool the summary items mention, for the agent. The database work runs in a worker
thread, so the event loop is never blocked.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any, Literal

from memory.consolidation.writeback import EXPAND_HINT, ConsolidationResult
from memory.errors import AgentMemError, InvalidInputError
from memory.integrations._extras import missing
from memory.integrations._threads import clear_thread, ids, pop_message
from memory.store.rows import Message
from memory.store.validation import check_count

try:
    from agents import FunctionTool, function_tool
    from agents.memory.session import SessionABC
    from agents.memory.session_settings import SessionSettings, resolve_session_limit
except ImportError as exc:  # pragma: no cover - exercised in a subprocess without the extra
    raise missing("agents", "openai-agents", exc) from exc

if TYPE_CHECKING:
    from memory.manager import MemoryManager

__all__ = ["AgentMemSession", "item_to_row", "row_items"]

_STATUS_ORDER = {"ok": 0, "warning": 1, "critical": 2}
_MESSAGE_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}


class AgentMemSession(SessionABC):
    """The Agents SDK's session protocol (get_items, add_items, pop_item, clear_session) on agentmem."""

    session_settings: SessionSettings | None = None

    def __init__(self, mm: MemoryManager, session_id: str, *, user_id: str, model: str | None = None,
                 consolidate_at: Literal["warning", "critical"] | None = "warning", keep_recent: int = 1,
                 summary_model: Any | None = None, session_settings: SessionSettings | None = None) -> None:
        if consolidate_at not in (None, "warning", "critical"):
            raise InvalidInputError(f"consolidate_at must be 'warning', 'critical' or None, got {consolidate_at!r}")
        self.mm = mm
        self.user_id, self.session_id = ids(mm, user_id, session_id)
        self.model = model
        self.consolidate_at = consolidate_at
        self.keep_recent = check_count(keep_recent, "keep_recent")
        self.summary_model = summary_model
        self.session_settings = session_settings or SessionSettings()

    # -- the Session protocol ------------------------------------------------------------
    async def get_items(self, limit: int | None = None) -> list[Any]:
        limit = resolve_session_limit(limit, self.session_settings)
        if limit is not None:
            check_count(limit, "limit")
        items = await asyncio.to_thread(self._items)
        return items if limit is None else items[-limit:] if limit else []

    async def add_items(self, items: list[Any]) -> None:
        rows = [item_to_row(item) for item in items]  # every item checked before anything is written
        if rows:
            await asyncio.to_thread(self._add, rows)

    async def pop_item(self) -> Any | None:
        row = await asyncio.to_thread(pop_message, self.mm, self.user_id, self.session_id)
        return None if row is None else row_items(row)[-1]

    async def clear_session(self) -> None:
        await asyncio.to_thread(clear_thread, self.mm, self.user_id, self.session_id)

    # -- consolidation -------------------------------------------------------------------
    async def consolidate(self) -> ConsolidationResult:
        """Summarise the older turns now (the last ``keep_recent`` stay live)."""
        return await asyncio.to_thread(self._consolidate)

    async def expand(self, summary_id: Any) -> list[Any]:
        """The original items a summary replaced, in order, exactly as they were added."""
        expanded = await asyncio.to_thread(self.mm.expand_summary, summary_id, user_id=self.user_id)
        return [item for m in expanded.messages for item in row_items(m)]

    def expand_summary_tool(self) -> FunctionTool:
        """An ``expand_summary`` tool for the agent, bound to this session's user: the hint in each
        summary item names it, so ``Agent(tools=[session.expand_summary_tool()])`` lets the model
        read the originals back itself. A bad or unknown id comes back as an error the model reads."""
        session = self

        async def expand_summary(summary_id: str) -> str:
            """Read in full the original messages that a [Summary ID: ...] reference in the conversation replaced.

            Args:
                summary_id: the id in the reference, e.g. "3f2b...".
            """
            try:
                expanded = await asyncio.to_thread(session.mm.expand_summary, summary_id, user_id=session.user_id)
            except AgentMemError as exc:
                return json.dumps({"error": type(exc).__name__, "message": str(exc),
                                   "fix": "pass the id of a [Summary ID: ...] reference from this conversation"})
            return str(expanded.format())

        return function_tool(expand_summary)

    def _consolidate(self) -> ConsolidationResult:
        return self.mm.summarize_conversation(user_id=self.user_id, thread_id=self.session_id,
                                              keep_recent=self.keep_recent, model=self.summary_model)

    def _add(self, rows: list[dict[str, Any]]) -> None:
        self.mm.write_messages(rows, user_id=self.user_id, thread_id=self.session_id)
        if self.consolidate_at is None:
            return
        live = self.mm.read_conversational_memory(user_id=self.user_id, thread_id=self.session_id)
        text = "\n".join(f"{m.role}: {m.content}" for m in live)
        status = self.mm.monitor_context_window(text, self.model).status
        if _STATUS_ORDER[status] >= _STATUS_ORDER[self.consolidate_at]:
            self._consolidate()

    def _items(self) -> list[Any]:
        summaries = self.mm.read_summaries(user_id=self.user_id, thread_id=self.session_id)
        head = [{"role": "system",
                 "content": f"{s.reference}\n{s.content}\n{EXPAND_HINT.format(id=s.summary_id)}"}
                for s in sorted(summaries, key=lambda s: (s.last_message_at or s.created_at, s.created_at))]
        rows = self.mm.read_conversational_memory(user_id=self.user_id, thread_id=self.session_id)
        return head + [item for m in rows for item in row_items(m)]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") or p.get("refusal") or "" for p in content if isinstance(p, dict)]
        return "\n".join(p for p in parts if isinstance(p, str) and p)
    return ""


def item_to_row(item: Any) -> dict[str, Any]:
    """One Agents SDK input item as a conversation row (``write_messages`` input), the item kept whole."""
    if not isinstance(item, dict):
        raise InvalidInputError(f"a session item must be a dict (a Responses input item), got {type(item).__name__}")
    kind = item.get("type") or ("message" if "role" in item else None)
    row: dict[str, Any] = {"metadata": {"agents_item": item}}
    call_id = item.get("call_id")
    if kind == "message":
        role = _MESSAGE_ROLES.get(item.get("role"))  # type: ignore[arg-type]
        if role is None:
            raise InvalidInputError(f"a message item's role must be user, assistant, system or developer, "
                                    f"got {item.get('role')!r}")
        row.update(role=role, content=_text(item.get("content")))
    elif isinstance(kind, str) and kind.endswith("_call_output") and isinstance(call_id, str):
        output = item.get("output")
        row.update(role="tool", tool_call_id=call_id,
                   content=output if isinstance(output, str) else json.dumps(output, ensure_ascii=False))
    elif isinstance(kind, str) and kind.endswith("_call") and isinstance(call_id, str):
        try:
            args = json.loads(item.get("arguments") or "{}")
        except (TypeError, ValueError):
            args = {"arguments": item.get("arguments")}
        name = item.get("name") if kind == "function_call" else kind
        row.update(role="assistant", content="",
                   tool_calls=[{"id": call_id, "name": str(name or kind),
                                "args": args if isinstance(args, dict) else {"arguments": args}}])
    elif isinstance(kind, str):  # reasoning and the other item types: kept, no text of their own
        summary = item.get("summary")
        row.update(role="assistant", content=_text(summary) if isinstance(summary, list) else "")
    else:
        raise InvalidInputError("a session item needs a 'type' (or a 'role' for a message)")
    return row


def row_items(row: Message) -> list[Any]:
    """The item a row was written from; for rows written otherwise (the agent loop), the items its role describes."""
    item = row.metadata.get("agents_item") if isinstance(row.metadata, dict) else None
    if isinstance(item, dict):
        return [item]
    if row.role == "tool":
        return [{"type": "function_call_output", "call_id": row.tool_call_id or "", "output": row.content}]
    out: list[Any] = [{"role": row.role, "content": row.content}] if row.content or not row.tool_calls else []
    for call in row.tool_calls or []:
        out.append({"type": "function_call", "call_id": str(call.get("id") or ""), "name": str(call.get("name") or ""),
                    "arguments": json.dumps(call.get("args") or {})})
    return out
