"""The hot path against both front doors (``front``: MemoryManager, then AsyncMemoryManager),
and what only the async one has: calls off the event loop, cancellation, one loop's concurrency."""

from __future__ import annotations

import asyncio
import threading
import uuid
from typing import Any

import pytest

from memory import HashEmbedder, InvalidInputError, NotFoundError, TooManyFactsError
from memory.aio import AsyncMemoryManager
from memory.context.render import CONVERSATION, FACTS

from fix_consolidation import (assert_consistent, fault_at_marking, raw_conn, seed_thread, thread_state)
from fix_fronts import async_mm, event_loop_thread, front  # noqa: F401  (fixtures)


# -- one suite, both managers ---------------------------------------------------------------
def test_consolidation_marks_exactly_its_rows_and_expands_back(front, user, thread, mm):
    written = seed_thread(front, user, thread, turns=4)
    result = front.summarize_conversation(user_id=user, thread_id=thread, keep_recent=1)
    assert result.status == "summarized" and result.summary is not None
    live = front.read_conversational_memory(user_id=user, thread_id=thread)
    assert [m.id for m in live] == [m.id for m in written if m.id not in result.source_ids]
    assert result.source_ids == [m.id for m in written[:len(result.source_ids)]]
    expanded = front.expand_summary(result.summary.summary_id, user_id=user)
    assert [m.id for m in expanded.messages] == result.source_ids
    with raw_conn(mm) as conn:
        assert_consistent(thread_state(conn, user, thread))
    again = front.summarize_conversation(user_id=user, thread_id=thread, keep_recent=1)
    assert again.status == "nothing_to_summarize"
    with pytest.raises(NotFoundError):
        front.expand_summary(result.summary.summary_id, user_id=f"other-{uuid.uuid4().hex[:6]}")


def test_search_finds_live_and_consolidated_messages_of_the_user_only(front, user, thread):
    front.write_messages([{"role": "user", "content": "the zebra export job EXP-4411 failed overnight"},
                          {"role": "assistant", "content": "EXP-4411 ran out of disk"},
                          {"role": "user", "content": "thanks, the quokka backup is fine"}],
                         user_id=user, thread_id=thread)
    done = front.summarize_conversation(user_id=user, thread_id=thread, keep_recent=1)
    hits = front.search_memory("zebra export EXP-4411", user_id=user, k=5, scope="messages")
    assert hits and "EXP-4411" in hits[0].item.content and hits[0].item.summary_id == done.summary.summary_id
    assert front.search_memory("quokka backup", user_id=user, k=1, scope="messages")[0].item.summary_id is None
    assert front.search_memory("zebra export EXP-4411", user_id=f"other-{uuid.uuid4().hex[:6]}", k=5) == []
    with pytest.raises(InvalidInputError):
        front.search_memory("x", user_id=user, scope="everything")


def test_build_context_has_every_section_and_the_live_turns(front, user, thread):
    front.remember("preference", "Prefers answers in metric units", user_id=user)
    front.write_conversational_memory("user", "how far is Oslo from Bergen?", user_id=user, thread_id=thread)
    context = front.build_context("Oslo Bergen distance", user_id=user, thread_id=thread)
    assert context.index(FACTS) < context.index(CONVERSATION)
    assert "metric units" in context and "how far is Oslo from Bergen?" in context
    status = front.monitor_context_window(context)
    assert status.status == "ok" and status.tokens > 0


def test_facts_update_supersede_forget_and_cap(front, user):
    first = front.remember("stable_fact", "Lives in Oslo", user_id=user)
    assert first.action == "created"
    moved = front.remember("stable_fact", "Moved to Bergen", user_id=user, replaces=str(first.fact.id))
    assert moved.action == "superseded" and moved.previous.id == first.fact.id
    assert [f.content for f in front.read_facts(user_id=user)] == ["Moved to Bergen"]
    assert [h.item.content for h in front.recall("where does the user live", user_id=user)] == ["Moved to Bergen"]
    front.forget(moved.fact.id, user_id=user)
    assert front.read_facts(user_id=user) == []
    with pytest.raises(NotFoundError):
        front.forget(moved.fact.id, user_id=user)
    def unrelated() -> str:  # words no other fact shares: always a new fact
        return " ".join(uuid.uuid4().hex[i:i + 6] for i in (0, 8, 16))

    for _ in range(front.settings.max_active_facts):
        assert front.remember("preference", unrelated(), user_id=user).action == "created"
    with pytest.raises(TooManyFactsError):
        front.remember("preference", unrelated(), user_id=user)


def test_a_rejected_batch_writes_nothing(front, user, thread):
    with pytest.raises(InvalidInputError):
        front.write_messages([{"role": "user", "content": "fine"}, {"role": "user", "content": "bad\x00"}],
                             user_id=user, thread_id=thread)
    assert front.read_thread(user_id=user, thread_id=thread) == []


# -- async only ------------------------------------------------------------------------------
class GatedEmbedder(HashEmbedder):
    """The hash embedder that, once armed, waits (in its worker thread) until released."""

    def __init__(self) -> None:
        super().__init__()
        self.armed, self.entered, self.release = False, threading.Event(), threading.Event()

    def embed(self, texts: Any) -> Any:
        if self.armed:
            self.entered.set()
            assert self.release.wait(30)
        return super().embed(texts)


def test_embedding_runs_off_the_event_loop(settings, user, thread):
    embedder = GatedEmbedder()

    async def scenario() -> None:
        async with await AsyncMemoryManager.open(settings.with_(pool_max_size=4), embedder=embedder) as amm:
            await amm.write_conversational_memory("user", "before", user_id=user, thread_id=thread)
            embedder.armed = True
            writing = asyncio.create_task(amm.write_conversational_memory("user", "slow one", user_id=user,
                                                                          thread_id=thread))
            assert await asyncio.to_thread(embedder.entered.wait, 30)
            # the embedder is stuck in its thread; the loop still serves another call to completion
            live = await asyncio.wait_for(amm.read_conversational_memory(user_id=user, thread_id=thread), 30)
            assert [m.content for m in live] == ["before"] and not writing.done()
            embedder.release.set()
            await writing
            assert len(await amm.read_thread(user_id=user, thread_id=thread)) == 2

    asyncio.run(scenario())


class GatedSummarizer:
    """Extractive summaries, held until released (in the worker thread the async manager runs it in)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.entered, self.release = inner, threading.Event(), threading.Event()

    def summarize(self, units: Any, **kwargs: Any) -> Any:
        self.entered.set()
        assert self.release.wait(30)
        return self.inner.summarize(units, **kwargs)


def test_cancelled_while_summarising_leaves_the_thread_as_it_was(settings, mm, user, thread):
    async def scenario() -> None:
        async with await AsyncMemoryManager.open(settings.with_(pool_max_size=4), embedder=HashEmbedder()) as amm:
            seed_thread(mm, user, thread, turns=3)
            gate = GatedSummarizer(amm.summarizer())
            task = asyncio.create_task(amm.summarize_conversation(user_id=user, thread_id=thread, summarizer=gate))
            assert await asyncio.to_thread(gate.entered.wait, 30)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            gate.release.set()  # the summariser's thread finishes; its result is dropped
            await asyncio.sleep(0.5)

    asyncio.run(scenario())
    with raw_conn(mm) as conn:
        state = thread_state(conn, user, thread)
    assert state["marked"] == {} and state["summaries"] == {} and state["unsummarized"] == state["all"]


def test_cancelled_between_summary_insert_and_marking_leaves_no_half(settings, mm, user, thread):
    """The commit is held at the exact half-way point (summary inserted, rows not yet marked) and
    the task is cancelled there: the whole transaction rolls back."""
    seed_thread(mm, user, thread, turns=3)

    async def scenario(blocker: Any) -> None:
        async with await AsyncMemoryManager.open(settings.with_(pool_max_size=4), embedder=HashEmbedder()) as amm:
            task = asyncio.create_task(amm.summarize_conversation(user_id=user, thread_id=thread))
            await asyncio.to_thread(blocker.wait_for_waiter)  # inside the commit, summary row written
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            blocker.release()
            await asyncio.sleep(0.5)

    with fault_at_marking(mm, user, "block") as blocker:
        asyncio.run(scenario(blocker))
    with raw_conn(mm) as conn:
        state = thread_state(conn, user, thread)
    assert state["marked"] == {} and state["summaries"] == {} and state["unsummarized"] == state["all"]
    after = mm.summarize_conversation(user_id=user, thread_id=thread)  # and nothing is stuck
    assert after.status == "summarized" and len(after.source_ids) == len(state["all"])


def test_many_agents_on_one_loop_lose_nothing(settings, user):
    threads, per = 16, 10

    async def agent(amm: AsyncMemoryManager, t: int) -> None:
        for i in range(per):
            await amm.write_conversational_memory("user", f"agent {t} turn {i}", user_id=user, thread_id=f"t{t}")
            await amm.build_context(f"turn {i}", user_id=user, thread_id=f"t{t}")

    async def scenario() -> list[int]:
        async with await AsyncMemoryManager.open(settings.with_(pool_max_size=8), embedder=HashEmbedder()) as amm:
            await asyncio.gather(*(agent(amm, t) for t in range(threads)))
            return [len(await amm.read_thread(user_id=user, thread_id=f"t{t}")) for t in range(threads)]

    assert asyncio.run(scenario()) == [per] * threads


def test_toolbox_aretrieve_ranks_like_retrieve(mm, user):
    from toolbox import Toolbox

    tb = Toolbox(mm, namespace=f"aio-{uuid.uuid4().hex[:6]}")

    def get_weather(city: str) -> str:
        """Current weather forecast for a city."""
        return city

    def send_invoice(customer: str, amount: float) -> str:
        """Email an invoice to a customer."""
        return customer

    tb.register_tools([get_weather, send_invoice])
    got = asyncio.run(tb.aretrieve("email the invoice to the customer", k=1))
    assert got == tb.retrieve("email the invoice to the customer", k=1) and got.names == ["send_invoice"]
    assert got[0].item.name == "send_invoice"


def test_agent_arun_is_the_same_turn(mm, user, thread):
    from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
    from langchain_core.messages import AIMessage

    from memory import MemoryAgent
    from toolbox import Toolbox

    tb = Toolbox(mm, namespace=f"aio-{uuid.uuid4().hex[:6]}")
    agent = MemoryAgent(mm, tb, FakeMessagesListChatModel(responses=[AIMessage("Hello from the model.")]),
                        extract_with_model=False)

    async def scenario() -> Any:
        ticks = 0

        async def heartbeat() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        beat = asyncio.create_task(heartbeat())
        result = await agent.arun("Hi there", user_id=user, thread_id=thread)
        beat.cancel()
        return result, ticks

    result, ticks = asyncio.run(scenario())
    assert result.answer == "Hello from the model."
    assert [(m.role, m.content) for m in mm.read_thread(user_id=user, thread_id=thread)] == [
        ("user", "Hi there"), ("assistant", "Hello from the model.")]
    assert ticks > 0  # the loop kept running during the turn
