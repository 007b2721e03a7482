"""The async scoped handles: ``amm.user("alice").thread("t1")``, the twins of ``mm.user(...).thread(...)``."""

from __future__ import annotations

import inspect
import uuid

import pytest

from memory import InvalidInputError, MemoryManager, NotFoundError, ThreadMemory, UserMemory
from memory.aio import AsyncThreadMemory, AsyncUserMemory

from fix_fronts import Blocking, LoopThread, async_mm, event_loop_thread  # noqa: F401  (fixtures)


def _public(cls: type) -> dict[str, inspect.Signature]:
    return {n: inspect.signature(f) for n, f in vars(cls).items() if callable(f) and not n.startswith("_")}


def test_each_async_handle_method_is_the_sync_one_awaited() -> None:
    for async_cls, sync_cls in ((AsyncUserMemory, UserMemory), (AsyncThreadMemory, ThreadMemory)):
        methods = _public(async_cls)
        sync = _public(sync_cls)
        assert len(methods) >= 10, async_cls
        for name, sig in methods.items():
            assert name in sync, (async_cls, name)  # same name as on the sync handle
            assert list(sig.parameters) == list(sync[name].parameters), (async_cls, name)
            assert inspect.iscoroutinefunction(getattr(async_cls, name)) is (name != "thread"), (async_cls, name)


def test_an_async_handle_validates_its_ids_once_when_made(async_mm: Blocking) -> None:
    with pytest.raises(InvalidInputError):
        async_mm.amm.user("")
    with pytest.raises(InvalidInputError):
        async_mm.amm.user("alice").thread("x" * (async_mm.amm.settings.max_id_chars + 1))


def test_async_thread_handle_writes_reads_consolidates_and_expands(async_mm: Blocking, event_loop_thread: LoopThread,
                                                                  mm: MemoryManager, user: str,
                                                                  thread: str) -> None:
    run = event_loop_thread.run
    t = async_mm.amm.user(user).thread(thread)
    assert isinstance(t, AsyncThreadMemory) and (t.user_id, t.thread_id) == (user, thread)
    first = run(t.write("user", "My export job EXP-2291 failed: disk quota exceeded"))
    run(t.write_many([{"role": "assistant", "content": "The volume is full; I freed 20 GB."},
                      {"role": "user", "content": "Thanks, rerun EXP-2291 tonight."},
                      {"role": "assistant", "content": "Scheduled for 22:00."}]))
    assert first.user_id == user and first.thread_id == thread
    live = run(t.messages())
    assert len(live) == 4 and live[0].content == "My export job EXP-2291 failed: disk quota exceeded"
    assert [m.content for m in run(t.messages(limit=1))] == ["Scheduled for 22:00."]
    # the rows went where the keyword calls of the sync manager read them
    assert [m.id for m in mm.read_conversational_memory(user_id=user, thread_id=thread)] == [m.id for m in live]
    other = async_mm.amm.user(user).thread(thread + "-other")
    assert run(other.messages()) == []

    context = run(t.context("why did the export fail?"))
    assert "EXP-2291" in context
    assert run(t.status(context)).tokens > 0
    found = run(t.search("disk quota EXP-2291", k=5))
    assert found and {h.item.thread_id for h in found} == {thread}

    result = run(t.consolidate(keep_recent=1))
    assert result.summarized and result.summary is not None
    sid = result.summary.summary_id
    assert [m.content for m in run(t.messages())] == ["Thanks, rerun EXP-2291 tonight.", "Scheduled for 22:00."]
    assert [s.summary_id for s in run(t.summaries())] == [sid]
    assert [m.id for m in run(t.expand(sid)).messages] == result.source_ids
    assert len(run(t.history())) == 4 and len(run(t.history(include_summarized=False))) == 2
    assert run(t.user.summary(sid)).summary_id == sid


def test_async_user_handle_facts_reads_and_isolation(async_mm: Blocking, event_loop_thread: LoopThread,
                                                     mm: MemoryManager, user: str, thread: str) -> None:
    run = event_loop_thread.run
    mem = async_mm.amm.user(user)
    assert isinstance(mem, AsyncUserMemory) and mem.user_id == user
    done = run(mem.remember("preference", "User prefers answers in French"))
    assert done.action == "created" and [f.id for f in run(mem.facts())] == [done.fact.id]
    assert [f.id for f in run(mem.recall())] == [done.fact.id]  # no query: rows
    hits = run(mem.recall("which language for answers", k=1))
    assert [h.item.id for h in hits] == [done.fact.id] and hits[0].signals["vector"] > 0
    mm.write_knowledge("A disk quota error means the volume is full.", source="errors.md", user_id=user)
    mm.write_entity("EXP-2291", "job", "the nightly export job", user_id=user)
    assert run(mem.knowledge("disk quota", k=1))[0].item.source == "errors.md"
    assert [e.name for e in run(mem.entities())] == ["EXP-2291"]
    assert run(mem.entities("export job", k=1))[0].item.name == "EXP-2291"
    mm.write_workflow("rerun export", "rerun a failed export", ["free disk", "rerun"], user_id=user)
    assert run(mem.workflows("rerun the failed export", k=1))[0].item.name == "rerun export"
    assert {h.item.kind for h in run(mem.search("answers in French", k=5))} >= {"fact"}

    t = mem.thread(thread)
    run(t.write("user", "secret plan for the Oslo launch"))
    run(t.write("assistant", "noted"))
    sid = run(t.consolidate()).summary.summary_id  # type: ignore[union-attr]
    assert run(mem.expand(sid)).summary.summary_id == sid
    assert [s.summary_id for s in run(mem.summaries())] == [sid]
    stranger = async_mm.amm.user(f"other-{uuid.uuid4().hex[:8]}")
    with pytest.raises(NotFoundError):
        run(stranger.expand(sid))
    with pytest.raises(NotFoundError):
        run(stranger.thread(thread).expand(sid))
    assert run(stranger.facts()) == [] and run(stranger.thread(thread).messages()) == []

    retired = run(mem.forget_fact(done.fact.id))
    assert retired.valid_to is not None and run(mem.facts()) == []
