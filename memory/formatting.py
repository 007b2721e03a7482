"""Render memory rows as markdown context sections with stable headings.

The headings are part of the contract: a context is rebuilt and rewritten section
by section (``offload_to_summary`` replaces only ``## Conversation Memory``), so they
never change.
"""

from __future__ import annotations

import json
from typing import Iterable, Sequence

from .models import Entity, Fact, KnowledgeItem, Message, Summary, Workflow

CONVERSATION = "## Conversation Memory"
SUMMARIES = "## Summary Memory"
KNOWLEDGE = "## Knowledge Base"
WORKFLOWS = "## Workflows"
ENTITIES = "## Entities"
FACTS = "## Known Facts"

HEADINGS = (FACTS, SUMMARIES, WORKFLOWS, ENTITIES, KNOWLEDGE, CONVERSATION)

FACTS_RULE = ("These were true when recorded. If the user says something different now, "
              "what the user says now wins.")


def _section(heading: str, lines: Iterable[str], empty: str) -> str:
    body = "\n".join(lines)
    return f"{heading}\n{body if body else empty}"


def format_message(m: Message) -> str:
    stamp = m.created_at.strftime("%Y-%m-%d %H:%M")
    if m.role == "tool":
        return f"[{stamp}] tool {m.tool_name or ''} result ({m.tool_call_id}): {m.content}"
    if m.tool_calls:
        calls = ", ".join(f"{c.get('name')}({json.dumps(c.get('args', {}), ensure_ascii=False)})"
                          for c in m.tool_calls)
        text = f" {m.content}" if m.content else ""
        return f"[{stamp}] {m.role}:{text} [calls {calls}]"
    return f"[{stamp}] {m.role}: {m.content}"


def format_conversation(messages: Sequence[Message]) -> str:
    return _section(CONVERSATION, (format_message(m) for m in messages), "(no messages yet)")


def format_summaries(summaries: Sequence[Summary]) -> str:
    return _section(SUMMARIES, (s.reference for s in summaries), "(no summaries)")


def format_knowledge(items: Sequence[KnowledgeItem]) -> str:
    lines = [f"- {k.content}" + (f" (source: {k.source})" if k.source else "") for k in items]
    return _section(KNOWLEDGE, lines, "(nothing relevant)")


def format_workflows(workflows: Sequence[Workflow]) -> str:
    lines = []
    for w in workflows:
        steps = "; ".join(f"{i}. {s if isinstance(s, str) else json.dumps(s, ensure_ascii=False)}"
                          for i, s in enumerate(w.steps, 1))
        lines.append(f"- {w.name}: {w.description} Steps: {steps}")
    return _section(WORKFLOWS, lines, "(no matching workflow)")


def format_entities(entities: Sequence[Entity]) -> str:
    lines = [f"- {e.name} ({e.entity_type})" + (f": {e.description}" if e.description else "")
             for e in entities]
    return _section(ENTITIES, lines, "(none)")


def format_facts(facts: Sequence[Fact]) -> str:
    lines = [f"- [{f.category}] {f.content} (since {f.valid_from:%Y-%m-%d})" for f in facts]
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
