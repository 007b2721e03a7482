"""Consolidation against the real database: the full cycle, whole turns, concurrency, faults, isolation."""

from __future__ import annotations

import threading
import uuid

import psycopg
import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel

from memory import DatabaseUnavailableError, InvalidInputError, LLMError, NotFoundError
from memory.context.render import CONVERSATION, FACTS, KNOWLEDGE, format_conversation, format_message
from memory.consolidation.summary_shape import HEADINGS
from memory.consolidation.summarizer import Summarizer

from fix_consolidation import (MARKING_CRASH, BarrierSummarizer, ScriptedChat, assert_consistent, call_all,
                               call_in_thread, fault_at_marking, foreign_label_words, raw_conn, section, seed_thread,
                               thread_state)


def _headings(content: str) -> list[str]:
    return [ln for ln in content.splitlines() if ln.startswith("### ")]


# -- the full cycle ------------------------------------------------------------------------
@pytest.mark.slow
def test_full_cycle_on_a_long_thread_with_real_minilm(real_mm, user, thread):
    mm = real_mm
    written = seed_thread(mm, user, thread, turns=12)  # 12 turns, 6 with a tool call: 36 messages
    assert len(written) >= 30
    context = format_conversation(mm.read_conversational_memory(thread_id=thread, user_id=user))
    before = mm.monitor_context_window(context, "llama3")
    assert before.tokens > 0 and before.method == "tokenizer" and before.status in ("ok", "warning", "critical")

    result = mm.summarize_conversation(thread_id=thread, user_id=user)
    assert result.status == "summarized" and result.method == "extractive"
    assert result.source_ids == [m.id for m in written]
    assert _headings(result.summary.content) == list(HEADINGS)
    transcript = "\n".join(format_message(m) for m in written)
    label = result.summary.description  # the thread's date and words, not padding
    assert label.startswith("Conversation (2026-03-02) about ") and foreign_label_words(label, transcript) == []
    assert "OPS-1000" in section(result.summary.content, "### Entities & References")

    with raw_conn(mm) as conn:
        unsummarized, summarized = conn.execute(
            "SELECT count(*) FILTER (WHERE summary_id IS NULL), count(*) FILTER (WHERE summary_id = %s)"
            " FROM conversational_memory WHERE user_id = %s AND thread_id = %s",
            (result.summary.summary_id, user, thread)).fetchone()
    assert (unsummarized, summarized) == (0, len(written))

    later = mm.write_conversational_memory("user", "A new question after the summary", user_id=user, thread_id=thread)
    assert [m.id for m in mm.read_conversational_memory(thread_id=thread, user_id=user)] == [later.id]
    after = mm.monitor_context_window(result.summary.reference + "\n" + format_conversation([later]), "llama3")
    assert after.tokens < before.tokens

    expanded = mm.expand_summary(result.summary.summary_id, user_id=user)
    assert [m.id for m in expanded.messages] == [m.id for m in written]
    assert [m.content for m in expanded.messages] == [m.content for m in written]
    # The summary is found again by meaning with the real model.
    hits = mm.read_summary_memory("which ticket had errors and was restarted", user_id=user, k=1)
    assert hits and hits[0].item.summary_id == result.summary.summary_id

    again = mm.summarize_conversation(thread_id=thread, user_id=user, keep_recent=1)
    assert again.status == "nothing_to_summarize" and again.summary is None


def test_second_call_right_after_says_nothing_to_summarize(mm, user, thread):
    seed_thread(mm, user, thread, turns=3)
    assert mm.summarize_conversation(thread_id=thread, user_id=user).status == "summarized"
    assert mm.summarize_conversation(thread_id=thread, user_id=user).status == "nothing_to_summarize"
    assert mm.summarize_conversation(thread_id="empty-thread", user_id=user).status == "nothing_to_summarize"


# -- whole turns -----------------------------------------------------------------------------
def test_keep_recent_keeps_whole_last_turns_live(mm, user, thread):
    seed_thread(mm, user, thread, turns=5)
    result = mm.summarize_conversation(thread_id=thread, user_id=user, keep_recent=2)
    assert result.status == "summarized" and result.kept_turns == 2
    live = mm.read_conversational_memory(thread_id=thread, user_id=user)
    assert live[0].role == "user" and live[0].content.startswith("Turn 3:")
    assert sum(1 for m in live if m.role == "user") == 2
    # Every tool result shares the summary status of the call it answers.
    all_rows = mm.read_thread(thread_id=thread, user_id=user)
    call_summary = {c["id"]: m.summary_id for m in all_rows for c in (m.tool_calls or [])}
    for m in all_rows:
        if m.role == "tool":
            assert m.summary_id == call_summary[m.tool_call_id]


def test_an_unanswered_tool_call_is_never_split_from_its_result(mm, user, thread):
    seed_thread(mm, user, thread, turns=2)
    mm.write_messages([
        dict(role="user", content="Now look up OPS-77"),
        dict(role="assistant", content="", tool_calls=[{"id": "pending_1", "name": "get_ticket", "args": {}}]),
    ], user_id=user, thread_id=thread)
    result = mm.summarize_conversation(thread_id=thread, user_id=user)
    assert result.status == "summarized"
    live = mm.read_conversational_memory(thread_id=thread, user_id=user)
    assert [m.content for m in live] == ["Now look up OPS-77", ""]
    mm.write_conversational_memory("tool", "OPS-77: closed", user_id=user, thread_id=thread, tool_call_id="pending_1",
                                   tool_name="get_ticket")
    second = mm.summarize_conversation(thread_id=thread, user_id=user)
    assert second.status == "summarized" and len(second.source_ids) == 3
    assert mm.read_conversational_memory(thread_id=thread, user_id=user) == []


def test_late_tool_result_joins_its_call_turn():
    from datetime import datetime, timezone

    from memory.store.turns import group_turns
    from memory.store.rows import Message

    def msg(i, role, **kw):
        return Message(id=i, user_id="u", thread_id="t", role=role, content=str(i),
                       created_at=datetime(2026, 1, 1, tzinfo=timezone.utc), **kw)

    rows = [msg(1, "user"), msg(2, "assistant", tool_calls=[{"id": "c1", "name": "x", "args": {}}]),
            msg(3, "user"), msg(4, "tool", tool_call_id="c1"), msg(5, "user"), msg(6, "assistant")]
    assert [[m.id for m in t] for t in group_turns(rows)] == [[1, 2, 3, 4], [5, 6]]


def test_keep_recent_is_validated(mm, user, thread):
    with pytest.raises(InvalidInputError):
        mm.summarize_conversation(thread_id=thread, user_id=user, keep_recent=-1)


# -- concurrency -------------------------------------------------------------------------------
def test_messages_written_during_a_consolidation_stay_unsummarized(mm, user, thread):
    seed_thread(mm, user, thread, turns=4)
    before_ids = [m.id for m in mm.read_conversational_memory(thread_id=thread, user_id=user)]
    written = []

    def write_meanwhile(prompt):  # the model is "thinking": the conversation goes on
        written.append(mm.write_conversational_memory("user", "Written while summarising", user_id=user,
                                                      thread_id=thread).id)

    result = mm.summarize_conversation(thread_id=thread, user_id=user, model=ScriptedChat(on_call=write_meanwhile))
    assert result.status == "summarized" and result.method == "llm"
    assert result.source_ids == before_ids
    assert [m.id for m in mm.read_conversational_memory(thread_id=thread, user_id=user)] == written

    # And a message committed by another connection inside the commit window.
    seed_thread(mm, user, thread, turns=1)
    with fault_at_marking(mm, user, "block") as blocker:
        running = call_in_thread(lambda: mm.summarize_conversation(thread_id=thread, user_id=user))
        blocker.wait_for_waiter()  # the summary is inserted, no row is marked yet
        with raw_conn(mm) as other:
            other.execute("INSERT INTO conversational_memory (user_id, thread_id, role, content)"
                          " VALUES (%s, %s, 'user', 'inserted during the commit')", (user, thread))
        blocker.release()
        second = running.result(timeout=60)
    assert second.status == "summarized"
    assert [m.content for m in mm.read_conversational_memory(thread_id=thread,
                                                             user_id=user)] == ["inserted during the commit"]
    with raw_conn(mm) as conn:
        assert_consistent(thread_state(conn, user, thread))


def test_two_concurrent_consolidations_never_mark_a_row_twice(mm, user, thread):
    seed_thread(mm, user, thread, turns=6)
    barrier = threading.Barrier(2)  # both have read and summarised the same rows before either commits
    results = call_all([lambda: mm.summarize_conversation(thread_id=thread, user_id=user, summarizer=BarrierSummarizer(
        mm.summarizer(), barrier)) for _ in range(2)])
    assert sorted(r.status for r in results) == ["conflict", "summarized"], results
    loser = next(r for r in results if r.status == "conflict")
    assert loser.summary is None and "nothing written" in loser.message
    with raw_conn(mm) as conn:
        state = thread_state(conn, user, thread)
    assert len(state["summaries"]) == 1 and state["unsummarized"] == []
    assert_consistent(state)


def test_many_consolidations_racing_with_writers_stay_consistent(mm, user, thread):
    seed_thread(mm, user, thread, turns=4)
    stop = threading.Event()

    def writer():
        n = 0
        while not stop.is_set() and n < 40:
            mm.write_messages([dict(role="user", content=f"extra {n}"),
                                             dict(role="assistant",
                                                  content=f"reply {n}")], user_id=user, thread_id=thread, embed=False)
            n += 1
        return n

    def consolidator():
        statuses = [mm.summarize_conversation(thread_id=thread, user_id=user, keep_recent=1).status for _ in range(6)]
        return statuses

    results = call_all([writer, consolidator, consolidator, consolidator])
    stop.set()
    assert not [r for r in results if isinstance(r, Exception)], results
    statuses = [s for r in results[1:] for s in r]
    assert "summarized" in statuses and set(statuses) <= {"summarized", "conflict", "nothing_to_summarize"}
    with raw_conn(mm) as conn:
        state = thread_state(conn, user, thread)
    assert_consistent(state)
    # Every message is either live or in exactly one summary.
    marked = [i for ids in state["marked"].values() for i in ids]
    assert sorted(marked + state["unsummarized"]) == state["all"]


# -- faults: the thread is left as before or fully consolidated, never half --------------------
@pytest.mark.parametrize("model, expected_method", [
    (ScriptedChat(error=True), "extractive"),
    (ScriptedChat(delay=3.0, timeout=0.5), "extractive"),
    (FakeListChatModel(responses=["", "   "]), "extractive"),
    (ScriptedChat(answer="Some prose with no headings at all about OPS-1000."), "llm"),
], ids=["raises", "times-out", "empty-twice", "unstructured"])
def test_model_faults_fall_back_and_consolidate_fully(mm, user, thread, model, expected_method):
    written = seed_thread(mm, user, thread, turns=3)
    summ = mm.summarizer(model)
    result = mm.summarize_conversation(thread_id=thread, user_id=user, summarizer=summ)
    assert result.status == "summarized" and result.method == expected_method
    assert _headings(result.summary.content) == list(HEADINGS)
    transcript = "\n".join(format_message(m) for m in written)
    # No usable label from the model: the label is the transcript's own words, not padding.
    assert foreign_label_words(result.summary.description, transcript) == []
    technical = section(result.summary.content, "### Technical Information")
    if expected_method == "extractive":
        assert result.errors  # what went wrong is reported, not hidden
        assert "we decided to restart db-" in section(result.summary.content, "### Action Items & Decisions")
        assert all(ln[2:] in transcript or ln.startswith("- [") and ln.split(": ", 1)[1] in transcript
                   for ln in technical.splitlines() if ln.startswith("- "))
    else:  # the model's prose is kept (under the first heading), not replaced
        assert "Some prose with no headings at all about OPS-1000." in technical
    with raw_conn(mm) as conn:
        state = thread_state(conn, user, thread)
    assert state["unsummarized"] == [] and list(state["marked"].values()) == [[m.id for m in written]]
    assert_consistent(state)


def test_empty_answer_is_retried_with_a_simpler_prompt(mm, user, thread):
    seed_thread(mm, user, thread, turns=2)
    answers = iter(["", "Label: too short\n### Technical Information\n- OPS-1000 checked"])
    model = ScriptedChat(answer=lambda prompt: next(answers))
    result = mm.summarize_conversation(thread_id=thread, user_id=user, model=model)
    assert result.method == "llm-retry" and result.llm_calls == 2 and len(model.prompts) == 2
    assert len(model.prompts[1]) < len(model.prompts[0])
    assert "- OPS-1000 checked" in section(result.summary.content, "### Technical Information")
    assert _headings(result.summary.content) == list(HEADINGS)
    # The model's two-word label, completed from the transcript's words (not generic padding).
    label = result.summary.description.split()
    transcript = "\n".join(format_message(m) for m in mm.read_thread(thread_id=thread, user_id=user))
    assert label[:2] == ["too", "short"] and len(label) > 2
    assert foreign_label_words(" ".join(label[2:]), transcript) == []


def test_failing_model_without_fallback_leaves_the_thread_as_before(mm, user, thread):
    seed_thread(mm, user, thread, turns=3)
    with raw_conn(mm) as conn:
        before = thread_state(conn, user, thread)
        with pytest.raises(LLMError):
            mm.summarize_conversation(thread_id=thread, user_id=user,
                                      summarizer=mm.summarizer(ScriptedChat(error=True), fallback=False))
        assert thread_state(conn, user, thread) == before
    assert before["summaries"] == {}


def test_failure_between_summary_insert_and_marking_rolls_back(mm, user, thread):
    seed_thread(mm, user, thread, turns=3)
    with raw_conn(mm) as conn:
        before = thread_state(conn, user, thread)
        with fault_at_marking(mm, user, "raise"):  # checks the summary row exists, then raises
            with pytest.raises(Exception) as info:
                mm.summarize_conversation(thread_id=thread, user_id=user)
        assert MARKING_CRASH in f"{info.value} {info.value.__cause__}"
        assert thread_state(conn, user, thread) == before  # the inserted summary is gone: no summary, no marks
        assert conn.execute("SELECT count(*) FROM summary_memory WHERE user_id = %s", (user,)).fetchone()[0] == 0
    assert mm.summarize_conversation(thread_id=thread, user_id=user).status == "summarized"  # the thread is not stuck


def test_killed_backend_mid_transaction_leaves_the_old_state(mm, user, thread):
    seed_thread(mm, user, thread, turns=2)
    with raw_conn(mm) as conn:
        before = thread_state(conn, user, thread)
        with fault_at_marking(mm, user, "block") as blocker:
            running = call_in_thread(lambda: mm.summarize_conversation(thread_id=thread, user_id=user))
            pid = blocker.wait_for_waiter()  # between the summary insert and the marks
            conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
            with pytest.raises(DatabaseUnavailableError) as info:  # an AgentMemError, the driver's error chained
                running.result(timeout=60)
            assert isinstance(info.value.__cause__, psycopg.OperationalError)
        assert thread_state(conn, user, thread) == before
        assert conn.execute("SELECT count(*) FROM summary_memory WHERE user_id = %s", (user,)).fetchone()[0] == 0
    assert mm.summarize_conversation(thread_id=thread,
                                     user_id=user).status == "summarized"  # the pool replaced the dead connection


# -- read back, isolation, undo, offload ----------------------------------------------------
def test_another_users_summary_id_is_not_found(mm, user, thread):
    written = seed_thread(mm, user, thread, turns=2)
    sid = mm.summarize_conversation(thread_id=thread, user_id=user).summary.summary_id
    intruder = f"other-{uuid.uuid4().hex[:8]}"
    with pytest.raises(NotFoundError):
        mm.expand_summary(sid, user_id=intruder)
    with pytest.raises(NotFoundError):
        mm.expand_summary(str(uuid.uuid4()), user_id=user)
    with pytest.raises(InvalidInputError):
        mm.expand_summary("not-a-uuid", user_id=user)
    assert mm.read_conversations_by_summary_id(sid, user_id=intruder) == []
    with pytest.raises(NotFoundError):
        mm.undo_consolidation(sid, user_id=intruder)
    assert len(mm.expand_summary(sid, user_id=user).messages) == len(written)  # untouched by the intruder's undo


def test_undo_clears_the_marks_and_drops_the_summary(mm, user, thread):
    written = seed_thread(mm, user, thread, turns=3)
    sid = mm.summarize_conversation(thread_id=thread, user_id=user).summary.summary_id
    assert mm.undo_consolidation(sid, user_id=user) == len(written)
    assert [m.id for m in mm.read_conversational_memory(thread_id=thread, user_id=user)] == [m.id for m in written]
    with pytest.raises(NotFoundError):
        mm.read_summary_by_id(sid, user_id=user)
    assert mm.summarize_conversation(thread_id=thread, user_id=user).status == "summarized"  # and it can be done again


def test_offload_rewrites_only_the_conversation_section(mm, user, thread):
    seed_thread(mm, user, thread, turns=4)
    conversation = format_conversation(mm.read_conversational_memory(thread_id=thread, user_id=user))
    facts = f"{FACTS}\n- [preference] likes short answers"
    knowledge = f"{KNOWLEDGE}\n- Runbook: restart db nodes one at a time"
    context = "You are a helpful agent.\n\n" + "\n\n".join([facts, conversation, knowledge]) + "\n"
    off = mm.offload_to_summary(context, thread_id=thread, user_id=user, keep_recent=1)
    assert off.summary is not None and off.result.status == "summarized"
    new = off.context
    assert new.startswith("You are a helpful agent.\n\n" + facts + "\n\n")
    assert new.endswith("\n\n" + knowledge + "\n")
    section = new[new.index(CONVERSATION):new.index(KNOWLEDGE)]
    assert f"[Summary ID: {off.summary.summary_id}] {off.summary.description}" in section
    assert f'expand_summary("{off.summary.summary_id}")' in section
    assert "Turn 3:" in section and "Turn 0:" not in section  # the kept turn stays, the old ones went
    assert len(new) < len(context)

    # With an explicit id, nothing is consolidated again; a context without the section gets one.
    again = mm.offload_to_summary("## Known Facts\n- x\n", thread_id=thread, user_id=user,
                                  summary_id=off.summary.summary_id)
    assert again.result is None and again.context.startswith("## Known Facts\n- x\n\n" + CONVERSATION)
