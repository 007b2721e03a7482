"""The context builder: one turn's prompt, inside a token budget.

Rules (DESIGN.md, Context builder):

* **Order for prompt caching.** Stable parts first (instructions, then known facts
  and summary references, which change rarely), what changes every turn later
  (retrieved memory, the conversation, the monitor's status, re-asserted
  constraints), and the user's message at the very end.
* **Mandatory parts always in**: instructions, the latest exchange of the
  conversation, the status line, re-asserted constraints, the user's message. If
  they alone exceed the budget, :class:`ContextBudgetError` says by how much.
* **The rest by priority** until the budget is spent: facts, summary references,
  older exchanges (newest first, and contiguous: once one does not fit, older ones
  are dropped too and a marker says how many messages are not shown), workflows,
  knowledge passages, entities. Headings and markers count in the budget, and so
  do the tool schemas sent beside the prompt.
* **Exchanges are whole**: a tool result is never shown without the call it answers
  (consolidation's turn grouping is reused, and results whose call is not in the
  window are dropped).
* **Passages** are chosen by maximal marginal relevance with a hard near-duplicate
  cut-off, then placed most-relevant-at-the-ends (1st first, 2nd last, ...), since
  models attend least to the middle of long contexts.
* **Facts** come with the rule that what the user says now wins.

The final text is counted once more with the real tokenizer and trimmed by priority
until it fits, so the budget holds exactly, not just by the sum of parts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Sequence

import numpy as np

from memory.errors import AgentMemError
from memory.settings import default_of
from memory.context.render import (CONVERSATION, ENTITIES, FACTS, FACTS_RULE, KNOWLEDGE, SUMMARIES, WORKFLOWS,
                         format_message)
from memory.store.rows import Message
from memory.store.turns import group_turns
from memory.context.tokens import count_tokens

STATUS = "## Context Status"
CONSTRAINTS = "## Constraints (re-asserted)"
USER_MESSAGE = "## User Message"

#: Chat-format overhead per message (role markers), counted against the budget.
MESSAGE_OVERHEAD_TOKENS = 4
#: Two passages at least this similar (cosine) are near-duplicates: only one is kept. The
#: default of ``Settings.passage_near_duplicate_similarity`` (calibrated by
#: ``bench/thresholds.py``); the agent loop passes the setting.
NEAR_DUPLICATE: float = default_of("passage_near_duplicate_similarity")

PRIORITY = {FACTS: 90, SUMMARIES: 80, CONVERSATION: 70, WORKFLOWS: 60, KNOWLEDGE: 50, ENTITIES: 40}
#: Render order of the optional sections (stable first).
ORDER = (FACTS, SUMMARIES, WORKFLOWS, ENTITIES, KNOWLEDGE, CONVERSATION)


class ContextBudgetError(AgentMemError):
    """The mandatory parts of the context alone do not fit the token budget."""


@dataclass
class Passage:
    """A retrieved passage: its rendered line, relevance to the query, and vector."""

    text: str
    score: float
    vector: np.ndarray | None = None


@dataclass
class ContextParts:
    """Everything a turn's context may contain; lines are already rendered."""

    instructions: str
    user_message: str
    conversation: Sequence[Message] = ()
    facts: Sequence[str] = ()
    summaries: Sequence[str] = ()
    workflows: Sequence[str] = ()
    entities: Sequence[str] = ()
    passages: Sequence[Passage] = ()
    status_line: str | None = None
    constraints: Sequence[str] = ()
    tool_schemas: Sequence[dict[str, Any]] = ()


@dataclass
class BuiltContext:
    system: str
    user_message: str
    tokens: int              # everything sent: system + user message + tool schemas + overhead
    budget: int
    tool_tokens: int
    method: str              # "tokenizer" or "estimate"
    included: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)
    passages: list[Passage] = field(default_factory=list)  # in placed order
    conversation: list[Message] = field(default_factory=list)

    @property
    def text(self) -> str:
        """The whole prompt as one string (what the monitor measures)."""
        return f"{self.system}\n\n{USER_MESSAGE}\n{self.user_message}"

    def messages(self) -> list[Any]:
        from langchain_core.messages import HumanMessage, SystemMessage

        return [SystemMessage(self.system), HumanMessage(self.user_message)]


# -- passages -----------------------------------------------------------------------------

def _cos(a: np.ndarray, b: np.ndarray) -> float:
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    return float(np.dot(a, b) / (na * nb)) if na and nb else 0.0


def _same_text(a: str, b: str) -> bool:
    return " ".join(a.lower().split()) == " ".join(b.lower().split())


def select_passages(passages: Sequence[Passage], k: int, *, lambda_mult: float = 0.7,
                    near_duplicate: float = NEAR_DUPLICATE) -> list[Passage]:
    """Maximal marginal relevance: relevant, and unlike what is already chosen.

    A candidate at least ``near_duplicate`` similar to a chosen passage (or with the
    same text, when vectors are missing) is never chosen. Returns best first.
    """
    chosen: list[Passage] = []
    pool = list(passages)
    while pool and len(chosen) < k:
        best, best_value = None, -np.inf
        for cand in pool:
            sims = [(_cos(cand.vector, c.vector) if cand.vector is not None and c.vector is not None
                     else (1.0 if _same_text(cand.text, c.text) else 0.0)) for c in chosen]
            top = max(sims, default=0.0)
            if top >= near_duplicate or any(_same_text(cand.text, c.text) for c in chosen):
                continue
            value = lambda_mult * cand.score - (1 - lambda_mult) * top
            if value > best_value:
                best, best_value = cand, value
        if best is None:
            break
        chosen.append(best)
        pool.remove(best)
    return chosen


def place_at_ends(ranked: Sequence[Any]) -> list[Any]:
    """Best first, second best last, third second, ...: the weakest sit in the middle."""
    front: list[Any] = []
    back: list[Any] = []
    for i, item in enumerate(ranked):
        (front if i % 2 == 0 else back).append(item)
    return front + back[::-1]


def _placed(passages: list[Passage]) -> list[Passage]:
    """MMR decides which passages go in; relevance decides where."""
    return place_at_ends(sorted(passages, key=lambda p: -p.score))


# -- conversation ------------------------------------------------------------------------

def exchanges(messages: Sequence[Message]) -> tuple[list[list[Message]], int]:
    """Whole exchanges, oldest first, and the number of orphaned tool results dropped."""


    out: list[list[Message]] = []
    orphans = 0
    for turn in group_turns(messages):
        calls = {str(c.get("id")) for m in turn if m.tool_calls for c in m.tool_calls}
        kept = [m for m in turn if m.role != "tool" or (m.tool_call_id is not None and m.tool_call_id in calls)]
        orphans += len(turn) - len(kept)
        if kept:
            out.append(kept)
    return out, orphans


# -- the builder --------------------------------------------------------------------------

@dataclass
class _Item:
    section: str
    priority: int
    rank: int
    text: str
    payload: Any = None


class ContextBuilder:
    """Builds :class:`BuiltContext` objects for one model's budget."""

    def __init__(self, budget: int, *, model: str | None = None, max_passages: int = 5,
                 near_duplicate: float = NEAR_DUPLICATE) -> None:
        if budget < 1:
            raise AgentMemError("the token budget must be positive")
        self.budget = budget
        self.model = model
        self.max_passages = max_passages
        self.near_duplicate = near_duplicate

    def _count(self, text: str) -> tuple[int, str]:
        c = count_tokens(text, self.model)
        return c.tokens, c.method

    def build(self, parts: ContextParts) -> BuiltContext:
        tool_tokens = self._count(json.dumps(list(parts.tool_schemas), ensure_ascii=False))[0] \
            if parts.tool_schemas else 0
        history, orphans = exchanges(parts.conversation)
        latest = history[-1] if history else []
        older = history[:-1]

        items: list[_Item] = []
        items += [_Item(FACTS, PRIORITY[FACTS], i, t) for i, t in enumerate(parts.facts)]
        # Newest summary references matter most; render them oldest first.
        n = len(parts.summaries)
        items += [_Item(SUMMARIES, PRIORITY[SUMMARIES], n - 1 - i, t) for i, t in enumerate(parts.summaries)]
        for age, ex in enumerate(reversed(older)):  # newest older exchange first
            text = "\n".join(format_message(m) for m in ex)
            items.append(_Item(CONVERSATION, PRIORITY[CONVERSATION], age, text, ex))
        items += [_Item(WORKFLOWS, PRIORITY[WORKFLOWS], i, t) for i, t in enumerate(parts.workflows)]
        chosen = select_passages(parts.passages, self.max_passages, near_duplicate=self.near_duplicate)
        items += [_Item(KNOWLEDGE, PRIORITY[KNOWLEDGE], i, p.text, p) for i, p in enumerate(chosen)]
        items += [_Item(ENTITIES, PRIORITY[ENTITIES], i, t) for i, t in enumerate(parts.entities)]
        items.sort(key=lambda it: (-it.priority, it.rank))

        # Greedy selection by estimated cost, then exact trimming of the rendered text.
        base_system = self._render(parts, latest, [], len(older), [])
        used = self._total(base_system, parts.user_message, tool_tokens)[0]
        if used > self.budget:
            raise ContextBudgetError(
                f"the mandatory context parts need {used:,} tokens but the budget is {self.budget:,}: "
                "consolidate the conversation (summarize_and_store), shorten the instructions or the "
                "message, or send fewer tools"
            )
        selected: list[_Item] = []
        conversation_closed = False
        opened: set[str] = set()
        for it in items:
            if it.section == CONVERSATION and conversation_closed:
                continue
            cost = self._count(it.text)[0] + 1
            if it.section not in opened and it.section != CONVERSATION:
                cost += self._count(it.section)[0] + (self._count(FACTS_RULE)[0] + 1 if it.section == FACTS else 0) + 2
            if used + cost <= self.budget:
                selected.append(it)
                opened.add(it.section)
                used += cost
            elif it.section == CONVERSATION:
                conversation_closed = True  # keep the shown conversation contiguous
        while True:
            system = self._compose(parts, latest, older, selected)
            total, method = self._total(system, parts.user_message, tool_tokens)
            if total <= self.budget or not selected:
                break
            selected.pop()  # lowest priority last; an older exchange popped is always the oldest shown
        if total > self.budget:  # pragma: no cover - guarded by the mandatory check above
            raise ContextBudgetError(f"context needs {total:,} tokens, budget {self.budget:,}")

        included: dict[str, int] = {}
        for it in selected:
            included[it.section] = included.get(it.section, 0) + 1
        candidates = {FACTS: len(parts.facts), SUMMARIES: len(parts.summaries), CONVERSATION: len(older),
                      WORKFLOWS: len(parts.workflows), KNOWLEDGE: len(parts.passages),
                      ENTITIES: len(parts.entities)}
        dropped = {k: v - included.get(k, 0) for k, v in candidates.items() if v - included.get(k, 0)}
        if orphans:
            dropped["orphan_tool_results"] = orphans
        shown = self._shown_exchanges(older, selected) + ([latest] if latest else [])
        return BuiltContext(
            system=system, user_message=parts.user_message, tokens=total, budget=self.budget,
            tool_tokens=tool_tokens, method=method, included=included, dropped=dropped,
            passages=_placed([it.payload for it in selected if it.section == KNOWLEDGE]),
            conversation=[m for ex in shown for m in ex],
        )

    def _total(self, system: str, user_message: str, tool_tokens: int) -> tuple[int, str]:
        s, method = self._count(system)
        u, _ = self._count(f"{USER_MESSAGE}\n{user_message}")
        return s + u + tool_tokens + 2 * MESSAGE_OVERHEAD_TOKENS, method

    @staticmethod
    def _shown_exchanges(older: list[list[Message]], selected: list[_Item]) -> list[list[Message]]:
        ids = {id(it.payload) for it in selected if it.section == CONVERSATION}
        return [ex for ex in older if id(ex) in ids]

    def _compose(self, parts: ContextParts, latest: list[Message], older: list[list[Message]],
                 selected: list[_Item]) -> str:
        shown = self._shown_exchanges(older, selected)
        return self._render(parts, latest, selected, len(older) - len(shown), shown)

    @staticmethod
    def _render(parts: ContextParts, latest: list[Message], selected: list[_Item], hidden_exchanges: int,
                shown_exchanges: list[list[Message]]) -> str:
        by_section: dict[str, list[_Item]] = {}
        for it in selected:
            by_section.setdefault(it.section, []).append(it)
        blocks = [parts.instructions.strip()]
        for section in ORDER:
            if section == CONVERSATION:
                lines: list[str] = []
                if hidden_exchanges:
                    lines.append(f"({hidden_exchanges} earlier exchange(s) not shown; use search_memory "
                                 "or expand_summary to see them)")
                lines += [format_message(m) for ex in shown_exchanges for m in ex]
                lines += [format_message(m) for m in latest]
                if lines:
                    blocks.append(CONVERSATION + "\n" + "\n".join(lines))
                continue
            its = by_section.get(section)
            if not its:
                continue
            if section == KNOWLEDGE:
                texts = [p.text for p in _placed([it.payload for it in its])]
            elif section == SUMMARIES:
                texts = [it.text for it in sorted(its, key=lambda it: -it.rank)]  # oldest first
            else:
                texts = [it.text for it in sorted(its, key=lambda it: it.rank)]
            if section == FACTS:
                texts = [FACTS_RULE, *texts]
            blocks.append(section + "\n" + "\n".join(texts))
        if parts.status_line:
            blocks.append(f"{STATUS}\n{parts.status_line}")
        if parts.constraints:
            blocks.append(CONSTRAINTS + "\n" + "\n".join(f"- {c}" for c in parts.constraints))
        return "\n\n".join(blocks)
