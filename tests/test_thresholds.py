"""The similarity thresholds are settings, and each decides what it says it decides.

``workflow_reuse_similarity`` (the agent loop: count a use of a known workflow, or write
a new one), ``passage_near_duplicate_similarity`` (the context builder: keep one of two
near-identical passages) and ``fact_swap_similarity`` (``remember``: a swapped word is a
restatement, or a second fact). Each test sets the threshold just above and just below the
similarity the case has, so what is pinned is the decision, not a fitted value
(``bench/thresholds.py`` and ``bench/facts.py`` chose the defaults).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage

from memory import ConfigurationError, HashEmbedder, MemoryManager, Settings
from memory.agent.loop import MemoryAgent
from memory.tables.fact_rules import Candidate, decide
from toolbox import Toolbox


def get_weather(city: str) -> str:
    """Current weather conditions and temperature for a city."""
    return f"{city}: 14 C, light rain"


def _call(name: str, **args: Any) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": name, "args": args, "id": f"call_{uuid.uuid4().hex[:8]}"}])


@pytest.fixture
def managers(settings: Settings, fresh_schema: str) -> Iterator[Any]:
    """Managers on one fresh schema, each with its own threshold settings."""
    opened: list[MemoryManager] = []

    def make(**changes: Any) -> MemoryManager:
        mm = MemoryManager.open(settings.with_(schema=fresh_schema, pool_max_size=2, **changes),
                                embedder=HashEmbedder())
        opened.append(mm)
        return mm

    yield make
    for mm in opened:
        mm.close()


def _cos(mm: MemoryManager, a: str, b: str) -> float:
    va, vb = (np.asarray(v, dtype=np.float64) for v in mm.embeddings.embed([a, b]))
    return float(va @ vb / (np.linalg.norm(va) * np.linalg.norm(vb)))


def _agent(mm: MemoryManager, *responses: AIMessage) -> MemoryAgent:
    tb = Toolbox(mm, namespace="thresholds")
    tb.register_tool(get_weather)
    return MemoryAgent(mm, tb, FakeMessagesListChatModel(responses=list(responses)), extract_with_model=False,
                       register_memory_tools=False)


def test_the_agent_counts_a_use_of_a_known_workflow_only_at_the_reuse_similarity(managers: Any, user: str,
                                                                                 thread: str) -> None:
    message = "What is the weather like in Bergen right now?"

    def turn(mm: MemoryManager) -> None:
        _agent(mm, _call("get_weather", city="Bergen"), AIMessage("14 C and rain.")).run(
            message, user_id=user, thread_id=thread)

    first = managers()
    turn(first)
    [known] = first.read_workflows(message, user_id=user, k=10)
    similarity = known.signals["vector"]
    assert 0 < similarity < 0.99 and known.item.use_count == 0

    # just below the request's similarity: the same steps for the same kind of request are one workflow
    turn(managers(workflow_reuse_similarity=similarity - 0.01))
    [again] = first.read_workflows(message, user_id=user, k=10)
    assert again.item.id == known.item.id and again.item.use_count == 1

    # just above it: the request is not taken for that workflow, a new one is written
    turn(managers(workflow_reuse_similarity=similarity + 0.01))
    after = first.read_workflows(message, user_id=user, k=10)
    assert len(after) == 2 and {h.item.use_count for h in after if h.item.id == known.item.id} == {1}


def test_the_agent_drops_a_near_duplicate_passage_only_at_the_setting(managers: Any, user: str) -> None:
    a = "Bergen is the rainiest city in Norway."
    b = "Bergen is the rainiest city in all of Norway, they say."
    writer = managers()
    writer.write_knowledge_batch([{"content": a}, {"content": b}], user_id=user)
    similarity = _cos(writer, a, b)
    assert 0 < similarity < 0.99

    def passages(threshold: float) -> list[str]:
        mm = managers(passage_near_duplicate_similarity=threshold)
        result = _agent(mm, AIMessage("ok")).run("Is Bergen rainy?", user_id=user,
                                                 thread_id=f"t-{uuid.uuid4().hex[:6]}")
        assert result.context is not None
        return [p.text for p in result.context.passages]

    kept = passages(min(1.0, similarity + 0.01))
    assert any(a in t for t in kept) and any(b in t for t in kept)
    dropped = passages(similarity - 0.01)
    assert len(dropped) == 1 and (a in dropped[0] or b in dropped[0])


def test_a_swapped_word_is_a_restatement_only_at_the_swap_similarity() -> None:
    old, new = "The user drinks tea in the morning.", "The user drinks coffee in the morning."
    similarity = 0.83  # what MiniLM gives this pair (fact_rules); the rule only sees the number

    def action(swap: float) -> str:
        return decide(new, "preference", [Candidate(0, "preference", old, similarity)], related=0.5,
                      duplicate=0.7, swap=swap).action

    assert action(0.82) == "updated"  # at or above the swap threshold: taken for a synonym
    assert action(0.84) == "created"  # below: an alternative, a second fact


def test_remember_uses_the_swap_setting(managers: Any, user: str) -> None:
    old, new = "User drinks tea in the morning", "User drinks coffee in the morning"
    probe = managers()
    similarity = _cos(probe, old, new)
    assert 0.3 < similarity < 0.99
    low = dict(fact_related_similarity=0.0, fact_duplicate_similarity=0.0)
    loose = managers(fact_swap_similarity=similarity - 0.01, **low)
    loose.remember("preference", old, user_id=user)
    assert loose.remember("preference", new, user_id=user).action == "updated"
    other = f"{user}-b"
    strict = managers(fact_swap_similarity=min(1.0, similarity + 0.01), **low)
    strict.remember("preference", old, user_id=other)
    assert strict.remember("preference", new, user_id=other).action == "created"


@pytest.mark.parametrize("name", ["workflow_reuse_similarity", "passage_near_duplicate_similarity",
                                  "fact_swap_similarity"])
def test_a_threshold_setting_outside_0_1_is_refused(name: str) -> None:
    with pytest.raises(ConfigurationError, match=f"AGENTMEM_{name.upper()}"):
        Settings.from_env({f"AGENTMEM_{name.upper()}": "1.5", "AGENTMEM_DATABASE_URL": "postgresql://x/y"})
