"""forget_user removes what every adapter stored for the user, and nothing of anyone else."""

from __future__ import annotations

import asyncio

from langchain_core.messages import AIMessage, HumanMessage

from memory.integrations.agents_session import AgentMemSession
from memory.integrations.chat_history import AgentMemChatMessageHistory
from memory.integrations.langgraph_store import AgentMemStore


def _fill(mm, user: str) -> tuple[AgentMemStore, AgentMemSession, AgentMemChatMessageHistory]:
    store = AgentMemStore(mm, index={"fields": ["text"]})
    store.put((user, "memories"), "tea", {"text": f"{user} likes green tea"})
    session = AgentMemSession(mm, "agents-thread", user_id=user, consolidate_at=None)
    asyncio.run(session.add_items([{"role": "user", "content": "Book a table"},
                                   {"type": "function_call", "call_id": "c1", "name": "book", "arguments": "{}"},
                                   {"type": "function_call_output", "call_id": "c1", "output": "booked"}]))
    history = AgentMemChatMessageHistory(mm, user_id=user, thread_id="chat-thread")
    history.add_messages([HumanMessage("hello"), AIMessage("hi")])
    return store, session, history


def test_forget_user_removes_store_items_session_items_and_chat_history(mm, user):
    other = user + "-kept"
    store, session, history = _fill(mm, user)
    _, other_session, other_history = _fill(mm, other)
    counts = mm.forget_user(user_id=user)
    assert counts["store_memory"] == 1 and counts["store_vectors"] == 1
    assert counts["conversational_memory"] == 5  # three session items, two chat messages
    assert store.get((user, "memories"), "tea") is None and store.search((user,)) == []
    assert asyncio.run(session.get_items()) == [] and history.messages == []
    assert store.get((other, "memories"), "tea") is not None
    assert len(asyncio.run(other_session.get_items())) == 3 and len(other_history.messages) == 2
