"""Test data shared by the isolation, retention and load tests: one row of every kind."""

from __future__ import annotations

from typing import Any

from memory import MemoryManager


def populate(mm: MemoryManager, user: str, thread: str, marker: str) -> dict[str, Any]:
    """One row of every kind for ``user``, each carrying ``marker``."""
    msgs = mm.write_messages(user, thread, [
        {"role": "user", "content": f"{marker} please look up my order"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "lookup", "args": {"q": marker}}]},
        {"role": "tool", "content": f"order {marker} shipped", "tool_call_id": "c1", "tool_name": "lookup"},
        {"role": "assistant", "content": f"Your order {marker} has shipped."},
        {"role": "user", "content": f"thanks {marker}"},
    ])
    consolidated = mm.summarize_conversation(thread, user, keep_recent=1)
    assert consolidated.summary is not None
    return {
        "messages": msgs,
        "summary_id": consolidated.summary.summary_id,
        "knowledge": mm.write_knowledge(user, f"{marker} warranty lasts two years", source=marker),
        "workflow": mm.write_workflow(user, f"{marker} refund", f"refund flow {marker}", ["check", marker]),
        "entity": mm.write_entity(user, f"{marker} Corp", "organization", f"vendor {marker}"),
        "tool_log": mm.write_tool_log(user, "lookup", {"q": marker}, f"order {marker}", thread_id=thread),
        "fact": mm.remember(user, "stable_fact", f"User's order code is {marker}").fact,
        "extra_summary": mm.write_summary(user, thread, f"{marker} notes", f"notes {marker}"),
    }
