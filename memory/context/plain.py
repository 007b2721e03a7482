"""The plain context of ``MemoryManager.build_context``, as one operation for both managers.

Every memory type in its markdown section, in a fixed order: known facts, the thread's
summaries, workflows, entities and knowledge relevant to the query, then the thread's
live messages. Each section is read in a transaction of its own (as separate calls
would); the query is embedded once (the embedding cache serves the other sections).
The agent loop builds its prompts with ``ContextBuilder`` instead.
"""

from __future__ import annotations

from typing import Any

from memory.context.render import (format_conversation, format_entities, format_facts, format_knowledge,
                                   format_summaries, format_workflows)
from memory.store.ops import COMMIT, Op


def build_context_op(mm: Any, query: str, *, user_id: str, thread_id: str, k: int = 3) -> Op[str]:
    """``mm``: anything with the table objects of a ``MemoryManager`` (facts, summaries, ...)."""
    facts = yield from mm.facts.read_facts_op(user_id=user_id)
    yield COMMIT
    summaries = yield from mm.summaries.latest_op(user_id=user_id, thread_id=thread_id)
    yield COMMIT
    workflows = yield from mm.workflows.read_workflows_op(query, user_id=user_id, k=k)
    yield COMMIT
    entities = yield from mm.entities.read_entities_op(query, user_id=user_id, k=k)
    yield COMMIT
    knowledge = yield from mm.knowledge.read_knowledge_op(query, user_id=user_id, k=k)
    yield COMMIT
    live = yield from mm.conversations.working_set_op(user_id=user_id, thread_id=thread_id)
    return "\n\n".join([format_facts(facts), format_summaries(summaries), format_workflows([h.item for h in workflows]),
                        format_entities([h.item for h in entities]), format_knowledge([h.item for h in knowledge]),
                        format_conversation(live)])
