"""Render memory rows as markdown context sections with stable headings.

The headings are part of the contract: a context is rebuilt and rewritten section
by section (``offload_to_summary`` replaces only ``## Conversation Memory``), so they
never change.
"""

from __future__ import annotations

import json
import re
from typing import Any
from collections.abc import Iterable, Sequence

from memory.store.rows import Entity, Fact, KnowledgeItem, Message, Summary, Workflow
from memory.store.shapes import MALFORMED, call_parts

CONVERSATION = "## Conversation Memory"
SUMMARIES = "## Summary Memory"
KNOWLEDGE = "## Knowledge Base"
WORKFLOWS = "## Workflows"
ENTITIES = "## Entities"
FACTS = "## Known Facts"

HEADINGS = (FACTS, SUMMARIES, WORKFLOWS, ENTITIES, KNOWLEDGE, CONVERSATION)

FACTS_RULE = ("These were true when recorded. If the user says something different now, "
              "what the user says now wins.")


#: Every line break ``str.splitlines`` honours (and so ``split_sections``).
_LINE_BREAKS = re.compile("\r\n|[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")


def as_data(text: str) -> str:
    """Stored text rendered inside a section: each continuation line is indented, so
    nothing a user, document or tool output contains can start a line that reads as
    a section heading (``## ...``) and step outside its section."""
    return _LINE_BREAKS.sub("\n    ", text)


def _section(heading: str, lines: Iterable[str], empty: str) -> str:
    body = "\n".join(lines)
    return f"{heading}\n{body if body else empty}"


def format_message(m: Message) -> str:
    return as_data(_message_line(m))


def _message_line(m: Message) -> str:
    stamp = m.created_at.strftime("%Y-%m-%d %H:%M")
    if m.role == "tool":
        return f"[{stamp}] tool {m.tool_name or ''} result ({m.tool_call_id}): {m.content}"
    if m.tool_calls:
        calls = ", ".join(_call_text(c) for c in m.tool_calls)
        text = f" {m.content}" if m.content else ""
        return f"[{stamp}] {speaker(m)}:{text} [calls {calls}]"
    return f"[{stamp}] {speaker(m)}: {m.content}"


def speaker(m: Message) -> str:
    """Who said it: the role, with the speaker's name when the message has one ("Ann (user)")."""
    return f"{m.name} ({m.role})" if m.name else m.role


def _call_text(call: dict[str, Any]) -> str:
    _, name, args = call_parts(call)
    if name == MALFORMED:
        return f"{name} {json.dumps(call.get('raw'), ensure_ascii=False, default=str)[:500]}"
    return f"{name}({json.dumps(args, ensure_ascii=False, default=str)})"


def format_conversation(messages: Sequence[Message]) -> str:
    return _section(CONVERSATION, (format_message(m) for m in messages), "(no messages yet)")


def summary_line(s: Summary) -> str:
    return as_data(s.reference)


def knowledge_line(k: KnowledgeItem) -> str:
    return as_data(f"- {k.content}" + (f" (source: {k.source})" if k.source else ""))


def workflow_line(w: Workflow) -> str:
    steps = "; ".join(f"{i}. {s if isinstance(s, str) else json.dumps(s, ensure_ascii=False)}"
                      for i, s in enumerate(w.steps, 1))
    return as_data(f"- {w.name}: {w.description} Steps: {steps}")


def entity_line(e: Entity) -> str:
    return as_data(f"- {e.name} ({e.entity_type})" + (f": {e.description}" if e.description else ""))


def fact_line(f: Fact) -> str:
    return as_data(f"- [{f.category}] {f.content} (since {f.valid_from:%Y-%m-%d})")


def format_summaries(summaries: Sequence[Summary]) -> str:
    return _section(SUMMARIES, map(summary_line, summaries), "(no summaries)")


def format_knowledge(items: Sequence[KnowledgeItem]) -> str:
    return _section(KNOWLEDGE, map(knowledge_line, items), "(nothing relevant)")


def format_workflows(workflows: Sequence[Workflow]) -> str:
    return _section(WORKFLOWS, map(workflow_line, workflows), "(no matching workflow)")


def format_entities(entities: Sequence[Entity]) -> str:
    return _section(ENTITIES, map(entity_line, entities), "(none)")


def format_facts(facts: Sequence[Fact]) -> str:
    lines = [fact_line(f) for f in facts]
    body = "\n".join([FACTS_RULE, *lines]) if lines else "(none recorded)"
    return f"{FACTS}\n{body}"


def split_sections(context: str) -> list[tuple[str | None, str]]:
    """Split a context into (heading, text) parts; text before any heading has heading None."""
    parts: list[tuple[str | None, str]] = []
    current: str | None = None
    buf: list[str] = []
    for line in context.splitlines(keepends=True):
        stripped = line.rstrip("\n")
        if stripped.startswith("## ") and not stripped.startswith("###"):
            if buf or current is not None:
                parts.append((current, "".join(buf)))
            current, buf = stripped, [line]
        else:
            buf.append(line)
    if buf or current is not None:
        parts.append((current, "".join(buf)))
    return parts
