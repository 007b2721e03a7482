"""MemoryManager round-trips, user scoping, rejected input and concurrent writers.

Tests taking ``front`` run against both ``MemoryManager`` and ``AsyncMemoryManager``."""

from __future__ import annotations

import threading
import uuid

import pytest

from memory import InvalidInputError, NotFoundError
from memory.context.render import CONVERSATION, ENTITIES, KNOWLEDGE, SUMMARIES, WORKFLOWS

from fix_fronts import async_mm, event_loop_thread, front  # noqa: F401  (fixtures)


def test_conversation_round_trip_oldest_first(front, user, thread):
    mm = front  # MemoryManager, then AsyncMemoryManager (tests/fix_fronts.py)
    written = mm.write_messages([
        {"role": "user", "content": "My order A-17 has not arrived."},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "track", "args": {"order": "A-17"}}]},
        {"role": "tool", "content": "in transit", "tool_call_id": "c1", "tool_name": "track"},
        {"role": "assistant", "content": "It is in transit.", "metadata": {"model": "x"}},
    ], user_id=user, thread_id=thread)
    read = mm.read_conversational_memory(thread_id=thread, user_id=user)
    assert [m.id for m in read] == [m.id for m in written]
    assert [m.role for m in read] == ["user", "assistant", "tool", "assistant"]
    assert read[1].tool_calls == [{"id": "c1", "name": "track", "args": {"order": "A-17"}}]
    assert read[2].tool_call_id == "c1" and read[2].tool_name == "track"
    assert read[3].metadata == {"model": "x"}
    assert all(m.summary_id is None for m in read)
    # limit keeps the most recent, still oldest first
    assert [m.content for m in mm.read_conversational_memory(thread_id=thread, user_id=user,
                                                             limit=2)] == ["in transit", "It is in transit."]


def test_conversation_read_returns_only_unsummarized(mm, user, thread, sql_conn):
    msgs = mm.write_messages([{"role": "user", "content": f"message {i}"} for i in range(6)], user_id=user,
                             thread_id=thread)
    summary = mm.write_summary("first three messages of a test thread summarised here", "gist", user_id=user,
                               thread_id=thread)
    sql_conn.execute("UPDATE conversational_memory SET summary_id = %s WHERE id = ANY(%s)",
                     (summary.summary_id, [m.id for m in msgs[:3]]))
    assert [m.content for m in mm.read_conversational_memory(thread_id=thread, user_id=user)] == ["message 3",
                                                                                                  "message 4", "message 5"]
    assert len(mm.read_thread(thread_id=thread, user_id=user)) == 6


def test_knowledge_round_trip_and_similarity(mm, user):
    items = mm.write_knowledge_batch([
        {"content": "The refund window for electronics is 30 days.", "source": "policy.md", "metadata": {"v": 2}},
        {"content": "Shipping to Norway takes five business days.", "source": "shipping.md"},
    ], user_id=user)
    assert {i.source for i in items} == {"policy.md", "shipping.md"}
    hits = mm.read_knowledge("refund window electronics", user_id=user, k=1)
    assert hits[0].item.id == items[0].id and hits[0].item.metadata == {"v": 2}
    assert 0 < hits[0].signals["vector"] <= 1.0001  # the cosine similarity
    assert hits[0].signals["keyword"] > 0  # "refund", "window" and "electronics" are in the passage
    assert hits[0].score > 0 and hits[0].matched_by[0] == "vector"


def test_workflow_round_trip_private_and_shared(schema_mm, user):
    mm = schema_mm  # shared workflows are visible to every user: no other test's may rank here
    other = f"other-{uuid.uuid4().hex[:8]}"
    private = mm.write_workflow("reset password", "reset a user's password", ["verify identity", "send link"],
                                user_id=user, query="I forgot my password", outcome="link sent")
    shared = mm.write_workflow("export invoices", "export invoices to CSV", ["filter", "export"], user_id=other,
                               shared=True)
    got = mm.read_workflows("password reset link", user_id=user, k=5)
    assert got[0].item.id == private.id and got[0].item.steps == ["verify identity", "send link"]
    # merged across own and shared by the one absolute score: vector + keyword_weight x keyword
    kw = mm.settings.keyword_weight
    assert got[0].score == pytest.approx(got[0].signals["vector"] + kw * got[0].signals["keyword"])
    assert [h.score for h in got] == sorted((h.score for h in got), reverse=True)
    assert shared.user_id is None
    assert any(h.item.id == shared.id for h in mm.read_workflows("export invoices csv", user_id=user, k=5))
    assert all(h.item.id != private.id for h in mm.read_workflows("reset password", user_id=other, k=5))
    mm.record_workflow_use(str(private.id), user_id=user)
    with pytest.raises(NotFoundError):
        mm.record_workflow_use(str(private.id), user_id=other)


def test_entity_round_trip_counts_mentions(mm, user):
    mm.write_entity("Project Falcon", "project", "migration", user_id=user)
    again = mm.write_entity("Project Falcon", "project", "migration of billing to Postgres", user_id=user)
    assert again.mention_count == 2 and again.description == "migration of billing to Postgres"
    assert [e.name for e in mm.read_entities(user_id=user)] == ["Project Falcon"]
    assert mm.read_entities("falcon billing", user_id=user, k=1)[0].item.id == again.id


def test_summary_by_id_similarity_and_reference(mm, user, thread):
    s = mm.write_summary("Customer asked about a late parcel to Oslo", "### Technical Information\nparcel",
                         user_id=user, thread_id=thread)
    assert mm.read_summary_by_id(str(s.summary_id), user_id=user).content.startswith("### Technical")
    assert mm.read_summary_memory("late parcel Oslo", user_id=user, k=1)[0].item.summary_id == s.summary_id
    assert mm.summary_references(user_id=user,
                                 thread_id=thread) == [f"[Summary ID: {s.summary_id}] Customer asked about a late parcel to Oslo"]


def test_tool_log_round_trip(mm, user, thread):
    entry = mm.write_tool_log("track", {"order": "A-17"}, "x" * 10_000, user_id=user, status="ok", duration_ms=12.5,
                              thread_id=thread, tool_call_id="c9")
    got = mm.read_tool_log_entry(entry.id, user_id=user)
    assert got.output == "x" * 10_000 and got.args == {"order": "A-17"} and got.duration_ms == 12.5
    assert [e.id for e in mm.read_tool_log(user_id=user, thread_id=thread)] == [entry.id]


def test_context_sections_have_stable_headings(front, user, thread):
    mm = front  # MemoryManager, then AsyncMemoryManager (tests/fix_fronts.py)
    mm.write_conversational_memory("user", "hello", user_id=user, thread_id=thread)
    ctx = mm.build_context("hello", user_id=user, thread_id=thread)
    for heading in (SUMMARIES, WORKFLOWS, ENTITIES, KNOWLEDGE, CONVERSATION):
        assert heading in ctx
    assert ctx.index(CONVERSATION) > ctx.index(KNOWLEDGE)


def test_user_b_sees_nothing_of_user_a(mm, user, thread):
    b = f"b-{uuid.uuid4().hex[:8]}"
    mm.write_conversational_memory("user", "secret plan for alpha launch", user_id=user, thread_id=thread)
    k = mm.write_knowledge("alpha launch secret knowledge", user_id=user)
    mm.write_workflow("alpha flow", "alpha launch steps", ["a"], user_id=user)
    mm.write_entity("Alpha", "project", "secret", user_id=user)
    s = mm.write_summary("alpha launch summary label for the test", "secret", user_id=user, thread_id=thread)
    t = mm.write_tool_log("tool", {}, "secret output", user_id=user, thread_id=thread)
    assert mm.read_conversational_memory(thread_id=thread, user_id=b) == []
    assert mm.read_thread(thread_id=thread, user_id=b) == []
    assert mm.read_knowledge("alpha launch secret", user_id=b) == []
    assert all(h.item.user_id is None for h in mm.read_workflows("alpha launch", user_id=b))  # shared ones only
    assert mm.read_entities(user_id=b) == [] and mm.read_entities("alpha", user_id=b) == []
    assert mm.read_summaries(user_id=b) == [] and mm.read_summary_memory("alpha launch", user_id=b) == []
    assert mm.read_tool_log(user_id=b) == [] and mm.list_threads(user_id=b) == []
    with pytest.raises(NotFoundError):
        mm.read_summary_by_id(s.summary_id, user_id=b)
    with pytest.raises(NotFoundError):
        mm.read_tool_log_entry(t.id, user_id=b)
    assert mm.read_knowledge("alpha launch secret", user_id=user)[0].item.id == k.id


@pytest.mark.parametrize("bad, match", [
    ("hello\x00world", "NUL byte"),
    ("lone \ud800 surrogate", "surrogate"),
    (12345, "must be a string"),
    ("", "must not be empty"),
])
def test_bad_content_rejected_nothing_written(mm, user, thread, bad, match):
    with pytest.raises(InvalidInputError, match=match):
        mm.write_messages([{"role": "user", "content": "fine"}, {"role": "user", "content": bad}], user_id=user,
                          thread_id=thread)
    with pytest.raises(InvalidInputError, match=match):
        mm.write_knowledge_batch([{"content": "fine"}, {"content": bad}], user_id=user)
    assert mm.read_thread(thread_id=thread, user_id=user) == []
    assert mm.read_knowledge("fine", user_id=user) == []


def test_oversized_content_rejected_with_limit_in_message(mm, user, thread):
    huge = "a" * (mm.settings.max_content_chars + 1)
    with pytest.raises(InvalidInputError, match="above the limit"):
        mm.write_messages([{"role": "user", "content": "first"}, {"role": "user", "content": huge}], user_id=user,
                          thread_id=thread)
    with pytest.raises(InvalidInputError, match="above the limit"):
        mm.write_tool_log("t", {}, "o" * (mm.settings.max_tool_output_chars + 1), user_id=user)
    assert mm.read_thread(thread_id=thread, user_id=user) == [] and mm.read_tool_log(user_id=user) == []


@pytest.mark.parametrize("field, value", [
    ("role", "wizard"), ("metadata", {"k": "nul\x00"}), ("tool_calls", "not-a-list"), ("bogus", 1),
])
def test_bad_message_fields_rejected(front, user, thread, field, value):
    mm = front  # MemoryManager, then AsyncMemoryManager (tests/fix_fronts.py)
    msg = {"role": "user", "content": "x", field: value}
    with pytest.raises(InvalidInputError):
        mm.write_messages([msg], user_id=user, thread_id=thread)
    assert mm.read_thread(thread_id=thread, user_id=user) == []


@pytest.mark.parametrize("bad_id", ["", "x" * 1000, None, 7, "tab\there"])
def test_bad_ids_rejected(front, bad_id):
    mm = front  # MemoryManager, then AsyncMemoryManager (tests/fix_fronts.py)
    with pytest.raises(InvalidInputError):
        mm.write_conversational_memory("user", "hi", user_id=bad_id, thread_id="t")
    with pytest.raises(InvalidInputError):
        mm.read_conversational_memory(thread_id="t", user_id=bad_id)


def test_malformed_and_unknown_summary_ids(front, user):
    mm = front  # MemoryManager, then AsyncMemoryManager (tests/fix_fronts.py)
    with pytest.raises(InvalidInputError, match="not a valid UUID"):
        mm.read_summary_by_id("'; DROP TABLE summary_memory; --", user_id=user)
    with pytest.raises(NotFoundError):
        mm.read_summary_by_id(str(uuid.uuid4()), user_id=user)


def test_eight_concurrent_writers_lose_nothing(mm, user, thread, sql_conn):
    per_writer, writers = 200, 8
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        try:
            for i in range(per_writer):
                mm.write_conversational_memory("user", f"writer {w} message {i}", user_id=user, thread_id=thread)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    total, distinct = sql_conn.execute(
        "SELECT count(*), count(DISTINCT content) FROM conversational_memory WHERE user_id = %s AND thread_id = %s",
        (user, thread)).fetchone()
    assert (total, distinct) == (1600, 1600)
    read = mm.read_conversational_memory(thread_id=thread, user_id=user)
    assert len(read) == 1600
    # each writer's messages come back in the order it wrote them
    for w in range(writers):
        mine = [int(m.content.split()[-1]) for m in read if m.content.startswith(f"writer {w} ")]
        assert mine == list(range(per_writer))


def test_langchain_similarity_search_finds_what_memory_manager_wrote(mm, user):
    other = f"o-{uuid.uuid4().hex[:8]}"
    written = mm.write_knowledge("Invoices are archived for seven years in cold storage.", user_id=user,
                                 source="finance.md")
    mm.write_knowledge("Invoices are archived for seven years in cold storage.", user_id=other, source="leak.md")
    store = mm.as_vectorstore("knowledge")
    docs = store.similarity_search("invoices archived seven years", k=3, filter={"user_id": user})
    assert docs and docs[0].id == str(written.id)
    assert docs[0].page_content == written.content and docs[0].metadata["source"] == "finance.md"
    assert all(d.metadata["user_id"] == user for d in docs)


def test_unknown_vectorstore_type(mm):
    with pytest.raises(InvalidInputError, match="unknown memory type"):
        mm.as_vectorstore("nonsense")
