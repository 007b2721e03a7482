"""The context builder: budget, whole exchanges, MMR, placement, order."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory.context.builder import (CONSTRAINTS, STATUS, USER_MESSAGE, ContextBudgetError, ContextBuilder, ContextParts,
                            Passage, place_at_ends, select_passages)
from memory.retrieval.embeddings import HashEmbedder
from memory.context.render import CONVERSATION, FACTS, FACTS_RULE, KNOWLEDGE, SUMMARIES
from memory.store.rows import Message
from memory.context.tokens import count_tokens

T0 = datetime(2026, 5, 1, 9, 0, tzinfo=timezone.utc)
EMB = HashEmbedder(64)


def msg(i: int, role: str, content: str, **kw) -> Message:
    return Message(id=i, user_id="u", thread_id="t", role=role, content=content,
                   created_at=T0 + timedelta(minutes=i), **kw)


def conversation(n_exchanges: int, *, tool_every: int = 3, words: int = 8) -> list[Message]:
    out: list[Message] = []
    i = 0
    for e in range(n_exchanges):
        out.append(msg(i, "user", f"question {e} " + "lorem " * words)); i += 1
        if e % tool_every == 0:
            cid = f"c{e}"
            out.append(msg(i, "assistant", "", tool_calls=[{"id": cid, "name": "lookup", "args": {"e": e}}])); i += 1
            out.append(msg(i, "tool", f"result {e} " + "ipsum " * words, tool_call_id=cid, tool_name="lookup")); i += 1
        out.append(msg(i, "assistant", f"answer {e} " + "dolor " * words)); i += 1
    return out


def passage(text: str, score: float) -> Passage:
    return Passage(f"- {text}", score, EMB.embed([text])[0])


def tokens(text: str) -> int:
    return count_tokens(text).tokens


def test_everything_fits_in_a_large_budget_in_stable_order():
    parts = ContextParts(
        instructions="You are helpful.", user_message="What now?", conversation=conversation(3),
        facts=["- [preference] metric units"], summaries=["[Summary ID: 1] older talk"],
        passages=[passage("alpha beta", 0.9)], status_line="Context usage: ok", constraints=["never share keys"])
    built = ContextBuilder(100_000).build(parts)
    text = built.text
    order = [text.index(h) for h in ("You are helpful.", FACTS, SUMMARIES, KNOWLEDGE, CONVERSATION, STATUS,
                                     CONSTRAINTS, USER_MESSAGE)]
    assert order == sorted(order)
    assert text.endswith("What now?") and FACTS_RULE in text
    assert built.dropped == {}
    assert built.tokens == tokens(built.system) + tokens(f"{USER_MESSAGE}\nWhat now?") + 8


def test_older_exchanges_dropped_oldest_first_with_a_marker():
    conv = conversation(30)
    parts = ContextParts(instructions="Be brief.", user_message="And now?", conversation=conv)
    built = ContextBuilder(400).build(parts)
    assert built.tokens <= 400
    assert "earlier exchange(s) not shown" in built.system
    shown_ids = [m.id for m in built.conversation]
    assert shown_ids == [m.id for m in conv[-len(shown_ids):]]  # a contiguous tail
    assert conv[-1].id in shown_ids


def test_latest_exchange_is_kept_even_when_long():
    conv = conversation(5)
    conv.append(msg(100, "user", "big " * 300))
    conv.append(msg(101, "assistant", "reply"))
    built = ContextBuilder(1200).build(ContextParts(instructions="x", user_message="q", conversation=conv))
    assert "big big" in built.system and [m.id for m in built.conversation][-2:] == [100, 101]


def test_orphan_tool_results_are_dropped():
    conv = [msg(1, "tool", "result without its call", tool_call_id="gone", tool_name="t"),
            msg(2, "user", "hi"), msg(3, "assistant", "hello")]
    built = ContextBuilder(10_000).build(ContextParts(instructions="x", user_message="q", conversation=conv))
    assert "result without its call" not in built.system
    assert built.dropped["orphan_tool_results"] == 1


def test_mandatory_parts_over_budget_is_a_clear_error():
    with pytest.raises(ContextBudgetError, match="mandatory context parts need"):
        ContextBuilder(50).build(ContextParts(instructions="word " * 200, user_message="q"))


def test_tool_schemas_count_against_the_budget():
    schema = {"type": "function", "function": {"name": "f", "description": "d " * 100, "parameters": {}}}
    parts = ContextParts(instructions="x", user_message="q", conversation=conversation(20))
    without = ContextBuilder(600).build(parts)
    parts.tool_schemas = [schema]
    with_tools = ContextBuilder(600).build(parts)
    assert with_tools.tool_tokens > 100 and with_tools.tokens <= 600
    assert len(with_tools.conversation) < len(without.conversation)


def test_mmr_never_selects_near_duplicates_and_prefers_diversity():
    ps = [passage("refunds take ten business days", 0.90),
          passage("refunds take ten business days.", 0.89),  # same words: near-duplicate
          passage("shipping to Norway takes five days", 0.60)]
    chosen = select_passages(ps, 3)
    assert [p.text for p in chosen] == [ps[0].text, ps[2].text]


def test_most_relevant_passages_sit_at_the_ends():
    assert place_at_ends([1, 2, 3, 4, 5]) == [1, 3, 5, 4, 2]
    ps = [passage(f"topic{i} " * 3 + f"unique{i}", 1.0 - i / 10) for i in range(5)]
    built = ContextBuilder(10_000).build(ContextParts(instructions="x", user_message="q", passages=ps))
    section = built.system.split(KNOWLEDGE + "\n")[1].split("\n\n")[0].splitlines()
    assert section[0] == ps[0].text and section[-1] == ps[1].text


# -- property test ---------------------------------------------------------------------------

words = st.text(alphabet="abcdefghij ", min_size=1, max_size=40).map(lambda s: s.strip() or "w")


@st.composite
def parts_and_budget(draw):
    n = draw(st.integers(0, 12))
    conv = conversation(n, tool_every=draw(st.integers(1, 4)), words=draw(st.integers(1, 20)))
    texts = draw(st.lists(words, max_size=8))
    dup = draw(st.booleans()) and texts
    ps = [passage(t, draw(st.floats(0, 1))) for t in texts]
    if dup:
        ps.append(passage(texts[0], 0.5))  # an exact near-duplicate of the first
    parts = ContextParts(
        instructions="You are an assistant. " * draw(st.integers(1, 5)), user_message=draw(words),
        conversation=conv, facts=[f"- {w}" for w in draw(st.lists(words, max_size=4))],
        summaries=[f"[Summary ID: {i}] {w}" for i, w in enumerate(draw(st.lists(words, max_size=3)))],
        workflows=[f"- {w}" for w in draw(st.lists(words, max_size=3))],
        entities=[f"- {w}" for w in draw(st.lists(words, max_size=3))], passages=ps,
        status_line="status ok", constraints=draw(st.lists(words, max_size=2)))
    return parts, draw(st.integers(20, 1500))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parts_and_budget())
def test_property_budget_pairs_latest_exchange_mmr(data):
    parts, budget = data
    try:
        built = ContextBuilder(budget).build(parts)
    except ContextBudgetError as exc:
        # only when the mandatory parts alone cannot fit: they are the instructions, the
        # latest exchange, status, constraints, the message, and (when older exchanges
        # exist) the one-line marker saying that some are hidden
        need = int(re.search(r"need ([\d,]+) tokens", str(exc)).group(1).replace(",", ""))
        mandatory = ContextBuilder(10**9).build(ContextParts(
            instructions=parts.instructions, user_message=parts.user_message,
            conversation=parts.conversation[-_latest_len(parts.conversation):] if parts.conversation else (),
            status_line=parts.status_line, constraints=parts.constraints))
        assert need > budget
        assert mandatory.tokens <= need <= mandatory.tokens + (30 if parts.conversation else 0)
        return
    # the budget is never exceeded (exact count of the final text)
    assert built.tokens <= budget
    assert tokens(built.system) + tokens(f"{USER_MESSAGE}\n{built.user_message}") + 8 == built.tokens
    # no tool result without its call
    calls = {c["id"] for m in built.conversation if m.tool_calls for c in m.tool_calls}
    assert all(m.tool_call_id in calls for m in built.conversation if m.role == "tool")
    # the latest exchange is always present
    if parts.conversation:
        latest = parts.conversation[-_latest_len(parts.conversation):]
        assert [m.id for m in built.conversation[-len(latest):]] == [m.id for m in latest]
    # two near-duplicate passages are never both selected
    for i, a in enumerate(built.passages):
        for b in built.passages[i + 1:]:
            assert float(np.dot(a.vector, b.vector)) < 0.92
    # the most relevant selected passage sits at an end
    if built.passages:
        best = max(p.score for p in built.passages)
        assert built.passages[0].score == best
        if len(built.passages) > 1:  # the second best at the other end
            assert built.passages[-1].score == sorted((p.score for p in built.passages), reverse=True)[1]


def _latest_len(conv: list[Message]) -> int:
    last_user = max(i for i, m in enumerate(conv) if m.role == "user")
    return len(conv) - last_user
