"""The front door: ids are keyword-only everywhere, and the scoped user/thread handles."""

from __future__ import annotations

import inspect
import uuid

import pytest

import memory
from memory import InvalidInputError, MemoryAgent, MemoryManager, NotFoundError, ThreadMemory, UserMemory
from memory.agent import fact_tools, memory_tools, search_tool
from memory.consolidation.writeback import Consolidation
from memory.tables import conversation, corrections, entities, facts, knowledge, retention, search, summaries
from memory.tables import tool_log, workflows

IDS = ("user_id", "thread_id")
#: The handle constructors take the one id they scope to, positionally: there is nothing to swap it with.
SCOPING = {"MemoryManager.user"}


def _public_callables() -> list[tuple[str, object]]:
    out: list[tuple[str, object]] = []
    classes = [MemoryManager, MemoryAgent, Consolidation, conversation.Conversations, corrections.Corrections,
               entities.Entities, facts.Facts, knowledge.Knowledge, retention.Retention, search.MemorySearch,
               summaries.Summaries, tool_log.ToolLog, workflows.Workflows]
    for cls in classes:
        out += [(f"{cls.__name__}.{n}", f) for n, f in vars(cls).items() if callable(f) and not n.startswith("_")]
    for module in (fact_tools, memory_tools, search_tool, retention):
        out += [(f"{module.__name__}.{n}", f) for n, f in vars(module).items()
                if inspect.isfunction(f) and f.__module__ == module.__name__ and not n.startswith("_")]
    return out


def test_user_and_thread_ids_are_keyword_only_on_every_public_method_and_function() -> None:
    checked, positional = [], []
    for name, fn in _public_callables():
        if name in SCOPING:
            continue
        for p in inspect.signature(fn).parameters.values():  # type: ignore[arg-type]
            if p.name in IDS:
                checked.append(name)
                if p.kind is not p.KEYWORD_ONLY:
                    positional.append(f"{name}({p.name})")
    assert not positional, positional
    # the walk really saw the front door (a rename would otherwise pass vacuously)
    assert {"MemoryManager.write_conversational_memory", "MemoryManager.read_conversational_memory",
            "MemoryManager.search_memory", "MemoryManager.summarize_conversation", "MemoryAgent.run",
            "memory.agent.fact_tools.fact_tools"} <= set(checked)


def test_a_positional_id_pair_is_a_type_error_not_a_silent_empty_read(mm: MemoryManager, user: str,
                                                                        thread: str) -> None:
    mm.write_conversational_memory("user", "the parcel to Oslo is late", user_id=user, thread_id=thread)
    with pytest.raises(TypeError):
        mm.read_conversational_memory(thread, user)  # type: ignore[misc]
    with pytest.raises(TypeError):
        mm.write_conversational_memory(user, thread, "user", "hi")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        mm.read_knowledge("parcel", user)  # type: ignore[misc]
    with pytest.raises(TypeError):
        mm.read_entities(user, "parcel")  # type: ignore[misc]
    with pytest.raises(TypeError):
        mm.summarize_conversation(thread, user)  # type: ignore[misc]
    # nothing was written by the refused calls
    assert [m.content for m in mm.read_conversational_memory(user_id=user, thread_id=thread)] == [
        "the parcel to Oslo is late"]


def test_the_handles_are_exported() -> None:
    assert {"UserMemory", "ThreadMemory"} <= set(memory.__all__)


def test_a_handle_validates_its_ids_once_when_made(mm: MemoryManager) -> None:
    with pytest.raises(InvalidInputError):
        mm.user("")
    with pytest.raises(InvalidInputError):
        mm.user("alice").thread("x" * (mm.settings.max_id_chars + 1))


def test_thread_handle_writes_reads_consolidates_and_expands(mm: MemoryManager, user: str, thread: str) -> None:
    t = mm.user(user).thread(thread)
    assert isinstance(t, ThreadMemory) and (t.user_id, t.thread_id) == (user, thread)
    first = t.write("user", "My export job EXP-2291 failed: disk quota exceeded")
    t.write_many([{"role": "assistant", "content": "The volume is full; I freed 20 GB."},
                  {"role": "user", "content": "Thanks, rerun EXP-2291 tonight."},
                  {"role": "assistant", "content": "Scheduled for 22:00."}])
    assert first.user_id == user and first.thread_id == thread
    live = t.messages()
    assert [m.content for m in live][0] == "My export job EXP-2291 failed: disk quota exceeded"
    assert len(live) == 4 and t.messages(limit=1)[0].content == "Scheduled for 22:00."
    # the rows went where the keyword calls read them
    assert [m.id for m in mm.read_conversational_memory(user_id=user, thread_id=thread)] == [m.id for m in live]

    context = t.context("why did the export fail?")
    assert "EXP-2291" in context
    assert t.status(context).status in ("ok", "warning", "critical")

    result = t.consolidate(keep_recent=1)
    assert result.summarized and result.summary is not None
    assert [m.content for m in t.messages()] == ["Thanks, rerun EXP-2291 tonight.", "Scheduled for 22:00."]
    assert [s.summary_id for s in t.summaries()] == [result.summary.summary_id]
    expanded = t.expand(result.summary.summary_id)
    assert [m.id for m in expanded.messages] == result.source_ids
    assert len(t.history()) == 4 and len(t.history(include_summarized=False)) == 2


def test_user_handle_facts_knowledge_search_threads_and_forget(mm: MemoryManager) -> None:
    uid = f"handle-{uuid.uuid4().hex[:8]}"
    mem = mm.user(uid)
    assert isinstance(mem, UserMemory)
    done = mem.remember("preference", "User prefers answers in French")
    assert done.action == "created" and [f.id for f in mem.facts()] == [done.fact.id]
    assert [f.id for f in mem.recall()] == [done.fact.id]
    mem.write_knowledge("A disk quota error means the volume is full.", source="errors.md")
    assert mem.knowledge("disk quota", k=1)[0].item.source == "errors.md"
    mem.thread("t1").write("user", "The zebra export keeps failing")
    mem.thread("t2").write("user", "Lunch at noon")
    assert {r["thread_id"] for r in mem.threads()} == {"t1", "t2"}
    assert "zebra export" in mem.search("zebra export", k=1)[0].item.content
    assert mem.thread("t1").search("zebra export", k=5)[0].item.thread_id == "t1"

    retired = mem.forget_fact(done.fact.id)
    assert retired.valid_to is not None and mem.facts() == []
    counts = mem.forget()
    assert counts["conversational_memory"] == 2 and counts["knowledge_memory"] == 1
    assert mem.threads() == [] and mem.recall(include_history=True) == []


def test_one_users_handle_cannot_reach_another_users_summary(mm: MemoryManager, user: str, thread: str) -> None:
    mine = mm.user(user).thread(thread)
    mine.write("user", "secret plan for the Oslo launch")
    mine.write("assistant", "noted")
    sid = mine.consolidate().summary.summary_id  # type: ignore[union-attr]
    other = mm.user(f"other-{uuid.uuid4().hex[:8]}")
    with pytest.raises(NotFoundError):
        other.expand(sid)
    with pytest.raises(NotFoundError):
        other.thread(thread).expand(sid)


def test_similarity_reads_return_hits_with_their_signals_and_rows_carry_no_score(schema_mm: MemoryManager,
                                                                                 user: str, thread: str) -> None:
    import dataclasses

    mm = schema_mm  # an own schema: shared workflows of other tests would rank here too

    from memory import Entity, Fact, Hit, KnowledgeItem, Summary, Workflow

    mm.write_knowledge("The zebra export writes CSV files nightly.", user_id=user)
    mm.write_workflow("zebra export", "rerun the zebra export", ["check disk", "rerun"], user_id=user)
    mm.write_entity("Zebra", "project", "the nightly zebra export", user_id=user)
    mm.write_summary("the zebra export failed twice and was rerun", "zebra export rerun", user_id=user,
                     thread_id=thread)
    mm.remember("stable_fact", "User owns the zebra export job", user_id=user)
    reads = {
        KnowledgeItem: mm.read_knowledge("zebra export", user_id=user),
        Workflow: mm.read_workflows("zebra export", user_id=user),
        Entity: mm.read_entities("zebra export", user_id=user),
        Summary: mm.read_summary_memory("zebra export", user_id=user),
        Fact: mm.recall("zebra export", user_id=user),
    }
    for row_cls, hits in reads.items():
        assert "score" not in {f.name for f in dataclasses.fields(row_cls)}
        assert hits, row_cls
        for hit in hits:
            assert isinstance(hit, Hit) and isinstance(hit.item, row_cls)
            assert set(hit.signals) == {"vector", "keyword"}
            assert hit.signals["keyword"] > 0  # "zebra" and "export" are words of every row
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    # without a query, the listings stay rows
    assert all(isinstance(e, Entity) for e in mm.read_entities(user_id=user))
    assert all(isinstance(f, Fact) for f in mm.recall(user_id=user))
