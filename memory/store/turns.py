"""What a turn is: a user message and what answers it, a tool call and its results together.

The context builder keeps whole turns when it trims, and consolidation never splits one
between a summary and the working set; both read turns from here.
"""

from __future__ import annotations

from collections.abc import Sequence

from memory.store.rows import Message


def group_turns(messages: Sequence[Message]) -> list[list[Message]]:
    """Whole turns, in order; a call and its tool results always share a unit."""
    turns: list[list[Message]] = []
    call_turn: dict[str, int] = {}
    for m in messages:
        if m.role == "user" or not turns:
            turns.append([m])
        else:
            turns[-1].append(m)
        if m.role == "tool" and m.tool_call_id in call_turn:
            start = call_turn[m.tool_call_id]
            if start < len(turns) - 1:  # a late result: join the turns in between
                merged = [x for t in turns[start:] for x in t]
                del turns[start:]
                turns.append(merged)
                for cid, idx in list(call_turn.items()):
                    if idx > start:
                        call_turn[cid] = start
        for call in m.tool_calls or []:
            if isinstance(call, dict) and call.get("id"):
                call_turn[str(call["id"])] = len(turns) - 1
    return turns


def unanswered_calls(turn: Sequence[Message]) -> set[str]:
    calls = {str(c["id"]) for m in turn for c in (m.tool_calls or []) if isinstance(c, dict) and c.get("id")}
    answered = {m.tool_call_id for m in turn if m.role == "tool"}
    return calls - answered
