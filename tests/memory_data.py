"""Test data shared by the isolation, retention and load tests: one row of every kind."""

from __future__ import annotations

from typing import Any

from memory import MemoryManager


def populate(mm: MemoryManager, user: str, thread: str, marker: str) -> dict[str, Any]:
    """One row of every kind for ``user``, each carrying ``marker``."""
    msgs = mm.write_messages([
        {"role": "user", "content": f"{marker} please look up my order"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "lookup", "args": {"q": marker}}]},
        {"role": "tool", "content": f"order {marker} shipped", "tool_call_id": "c1", "tool_name": "lookup"},
        {"role": "assistant", "content": f"Your order {marker} has shipped."},
        {"role": "user", "content": f"thanks {marker}"},
    ], user_id=user, thread_id=thread)
    with mm.db.connection(user) as conn:  # a LangGraph store item (memory.integrations.langgraph_store) and its vector
        conn.execute("INSERT INTO store_memory (user_id, namespace, key, value) VALUES (%s, ARRAY[%s, 'notes'], 'note',"
                     " jsonb_build_object('text', %s::text))", (user, user, f"{marker} likes tea"))
        conn.execute("INSERT INTO store_vectors (user_id, namespace, key, field_path, embedding)"
                     " VALUES (%s, ARRAY[%s, 'notes'], 'note', 'text', %s)",
                     (user, user, mm.embeddings.embed([f"{marker} likes tea"])[0]))
    consolidated = mm.summarize_conversation(thread_id=thread, user_id=user, keep_recent=1)
    assert consolidated.summary is not None
    return {
        "messages": msgs,
        "summary_id": consolidated.summary.summary_id,
        "knowledge": mm.write_knowledge(f"{marker} warranty lasts two years", user_id=user, source=marker),
        "workflow": mm.write_workflow(f"{marker} refund", f"refund flow {marker}", ["check", marker], user_id=user),
        "entity": mm.write_entity(f"{marker} Corp", "organization", f"vendor {marker}", user_id=user),
        "tool_log": mm.write_tool_log("lookup", {"q": marker}, f"order {marker}", user_id=user, thread_id=thread),
        "fact": mm.remember("stable_fact", f"User's order code is {marker}", user_id=user).fact,
        "extra_summary": mm.write_summary(f"{marker} notes", f"notes {marker}", user_id=user, thread_id=thread),
    }
