"""``AgentMemChatMessageHistory``: LangChain's ``BaseChatMessageHistory`` over the conversation table.

For ``RunnableWithMessageHistory``: one history per (user, thread), both required, so a
history is never shared by two users by accident. Messages are rows of
``conversational_memory`` like the agent loop's own (role, content, tool calls, tool
call id and name), so consolidation, search and ``forget_user`` treat them alike; each
row also keeps LangChain's own serialisation of the message (``metadata["langchain"]``:
ids, names, additional kwargs, response metadata, list contents), so a message reads
back equal to the one added.

``messages`` is the thread's working set: once a consolidation has summarised older
messages, they leave it and the history starts with one ``SystemMessage`` per summary
(its ``[Summary ID: ...]`` reference, its text, and how to expand it), then the
messages still live. ``clear()`` deletes the thread's messages and summaries.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Sequence

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import BaseMessage, SystemMessage, message_to_dict, messages_from_dict

from memory.consolidation.writeback import EXPAND_HINT
from memory.errors import InvalidInputError
from memory.integrations._threads import clear_thread, ids
from memory.store.rows import Message

__all__ = ["AgentMemChatMessageHistory"]

_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}
_TYPES = {"user": "human", "assistant": "ai", "system": "system", "tool": "tool"}


class AgentMemChatMessageHistory(BaseChatMessageHistory):
    """For ``RunnableWithMessageHistory(chain, get_session_history)``.

    ``get_session_history = lambda session_id: AgentMemChatMessageHistory(mm, user_id=u, thread_id=session_id)``.
    """

    def __init__(self, mm: Any, *, user_id: str, thread_id: str, include_summaries: bool = True) -> None:
        self.mm = mm
        self.user_id, self.thread_id = ids(mm, user_id, thread_id)
        self.include_summaries = include_summaries

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        rows = self.mm.read_conversational_memory(thread_id=self.thread_id, user_id=self.user_id)
        out: list[BaseMessage] = []
        if self.include_summaries:
            summaries = self.mm.read_summaries(user_id=self.user_id, thread_id=self.thread_id)
            for s in sorted(summaries, key=lambda s: (s.last_message_at or s.created_at, s.created_at)):
                out.append(SystemMessage(content=f"{s.reference}\n{s.content}\n{EXPAND_HINT.format(id=s.summary_id)}",
                                         additional_kwargs={"summary_id": str(s.summary_id)}))
        out.extend(to_langchain(row) for row in rows)
        return out

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        self.mm.write_messages(user_id=self.user_id, thread_id=self.thread_id,
                               messages=[to_row(m) for m in messages])

    def clear(self) -> None:
        clear_thread(self.mm, self.user_id, self.thread_id)


def to_row(message: BaseMessage) -> dict[str, Any]:
    """A LangChain message as a conversation row (``write_messages`` input)."""
    if not isinstance(message, BaseMessage):
        raise InvalidInputError(f"a chat history takes LangChain messages, got {type(message).__name__}")
    kind = message.type
    role = _ROLES.get(kind)
    if role is None:
        raise InvalidInputError(f"{type(message).__name__} (type {kind!r}) cannot be stored: use Human, AI, System "
                                "or Tool messages")
    data = message_to_dict(message)["data"]
    content = message.content
    if isinstance(content, str):
        data.pop("content", None)
        text = content
    else:  # a list of parts: the text for agentmem, the parts kept as they were
        text = "\n".join(p if isinstance(p, str) else str(p.get("text", "")) for p in content).strip()
    row: dict[str, Any] = {"role": role, "content": text, "metadata": {"langchain": {"type": kind, "data": data}}}
    if role == "assistant" and getattr(message, "tool_calls", None):
        row["tool_calls"] = [{"id": c.get("id"), "name": c["name"], "args": c.get("args") or {}}
                             for c in message.tool_calls]  # type: ignore[attr-defined]
    if role == "tool":
        row["tool_call_id"] = message.tool_call_id  # type: ignore[attr-defined]
        row["tool_name"] = message.name
    return row


def to_langchain(row: Message) -> BaseMessage:
    """A conversation row as the LangChain message it was (or, for rows written otherwise, by its role)."""
    stored = row.metadata.get("langchain") if isinstance(row.metadata, dict) else None
    if isinstance(stored, dict) and isinstance(stored.get("data"), dict) and stored.get("type") in _ROLES:
        data = dict(stored["data"])
        data.setdefault("content", row.content)
        return messages_from_dict([{"type": stored["type"], "data": data}])[0]
    data = {"content": row.content}
    if row.role == "assistant" and row.tool_calls:
        data["tool_calls"] = [{"id": c.get("id"), "name": c.get("name", ""), "args": c.get("args") or {},
                               "type": "tool_call"} for c in row.tool_calls]
    if row.role == "tool":
        data.update(tool_call_id=row.tool_call_id or "", name=row.tool_name)
    return messages_from_dict([{"type": _TYPES[row.role], "data": data}])[0]
