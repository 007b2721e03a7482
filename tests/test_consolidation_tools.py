"""The memory tools registered in a real Toolbox and executed through it."""

from __future__ import annotations

import json
import uuid

from toolbox import Toolbox

from memory.agent.memory_tools import memory_tools, register_memory_tools

from fix_consolidation import seed_thread


def _call(name, args, i=0):
    return {"id": f"call_{name}_{i}", "name": name, "args": args}


def test_tools_registered_and_executed_through_the_toolbox(mm, user, thread):
    written = seed_thread(mm, user, thread, turns=4)
    tb = Toolbox(mm, namespace=f"memtools-{uuid.uuid4().hex[:6]}")
    names = register_memory_tools(tb, mm, user_id=user, thread_id=thread, keep_recent=1, pin=True)
    assert names == ["summarize_and_store", "expand_summary"] and set(names) <= set(tb.pinned)
    schema = tb.get("summarize_and_store").json_schema
    assert set(schema["properties"]) == {"text", "thread_id"} and not schema.get("required")
    assert tb.get("expand_summary").json_schema["required"] == ["summary_id"]

    stored = tb.execute(_call("summarize_and_store", {}), user_id=user, thread_id=thread)
    assert stored.ok, stored.content
    sid = stored.content.split("[Summary ID: ")[1].split("]")[0]
    live = mm.read_conversational_memory(thread_id=thread, user_id=user)
    assert live and live[0].content.startswith("Turn 3:")  # the current turn stays live

    expanded = tb.execute(_call("expand_summary", {"summary_id": sid}), user_id=user, thread_id=thread)
    assert expanded.ok
    originals = [m for m in written if m.id not in {x.id for x in live}]
    marker = f"Original messages ({len(originals)}):"
    tail = expanded.content[expanded.content.index(marker):]
    positions = [tail.index(m.content) for m in originals if m.content]
    assert positions == sorted(positions)  # every original message, in order

    again = tb.execute(_call("summarize_and_store", {}, 1), user_id=user, thread_id=thread)
    assert again.ok and "nothing_to_summarize" in again.content


def test_expand_summary_tool_for_another_users_id_is_a_structured_error(mm, user, thread):
    seed_thread(mm, user, thread, turns=2)
    sid = str(mm.summarize_conversation(thread_id=thread, user_id=user).summary.summary_id)
    other = f"other-{uuid.uuid4().hex[:8]}"
    tb = Toolbox(mm, namespace=f"memtools-{uuid.uuid4().hex[:6]}")
    register_memory_tools(tb, mm, user_id=other)
    result = tb.execute(_call("expand_summary", {"summary_id": sid}), user_id=other)
    assert not result.ok and result.error == "tool_error"
    assert "NotFoundError" in json.loads(result.content)["message"]


def test_summarize_and_store_without_a_thread_summarises_the_text(mm, user):
    summarize_and_store, _ = memory_tools(mm, user_id=lambda: user)  # the user may be resolved per call
    out = summarize_and_store("Decided: migrate db-7 on 2026-04-01. Ticket OPS-9 tracks it.")
    assert out.startswith("[Summary ID: ") and "OPS-9" in out and "2026-04-01" in out
    assert mm.read_summaries(user_id=user)[-1].thread_id is None
    assert summarize_and_store("") .startswith("Nothing to summarize")
