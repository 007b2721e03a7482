"""Broken shapes and impossible dates: rejected at write, survived at read.

A write API refuses a value of the wrong shape (``tool_calls=["x"]``, metadata that is
not an object, an integer that is not one) with an ``AgentMemError`` and writes
nothing. A row that holds such a shape anyway (written by plain SQL, by an older
version, by a DBA) must not crash any reader, for its own user or for anyone else.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Iterator

import pytest
from psycopg.types.json import Jsonb

from memory import AgentMemError, InvalidInputError, MemoryManager, Settings
from memory.context.builder import ContextBuilder, ContextParts
from memory.context.render import format_conversation

from fix_schemas import own_schema_manager, total_rows


@pytest.fixture(scope="module")
def module_mm(settings: Settings, pg_uri: str) -> Iterator[MemoryManager]:
    """This module's own schema: ``total_rows`` must not see what other tests write."""
    with own_schema_manager(settings, pg_uri, "s_rows") as manager:
        yield manager


@pytest.fixture
def mm(module_mm: MemoryManager) -> MemoryManager:
    return module_mm


def _call(cid: str = "c1", name: str = "lookup", args: Any = None) -> dict[str, Any]:
    return {"id": cid, "name": name, "args": {} if args is None else args}


# -- 1. shapes at write --------------------------------------------------------------------
BAD_TOOL_CALLS = [
    ["x"], [1], [None], [["c1", "lookup"]], {"id": "c1", "name": "lookup", "args": {}}, "c1",
    [{"id": "c1", "args": {}}],                      # no name
    [{"id": "c1", "name": "", "args": {}}],          # empty name
    [{"id": "c1", "name": 7, "args": {}}],           # name not a string
    [{"id": 12, "name": "lookup", "args": {}}],      # id not a string
    [{"id": "c1", "name": "lookup", "args": "city=Paris"}],  # args not an object
    [{"id": "c1", "name": "lookup", "args": [1, 2]}],
    [{"id": "c1", "function": {"name": "lookup", "arguments": "{not json"}}],
    [{"id": "c1", "function": {"name": "lookup", "arguments": "[1]"}}],
    [{"id": "c1", "function": "lookup"}],
    [{"id": "c1", "name": "lookup", "args": {}, "surprise": 1}],  # unknown key
]


@pytest.mark.parametrize("bad", BAD_TOOL_CALLS, ids=repr)
def test_malformed_tool_calls_are_rejected_and_nothing_written(mm, sql_conn, user, thread, bad):
    before = total_rows(sql_conn)
    with pytest.raises(InvalidInputError) as info:
        mm.write_messages([{"role": "user", "content": "hi"},
                                         {"role": "assistant", "content": "",
                                          "tool_calls": bad}], user_id=user, thread_id=thread)
    assert "tool_calls" in str(info.value)
    assert total_rows(sql_conn) == before


def test_well_formed_tool_calls_of_both_shapes_are_accepted(mm, user, thread):
    langchain = [_call("c1", "lookup", {"city": "Paris"}), {"id": None, "name": "now", "args": {}, "type": "tool_call"}]
    openai = [{"id": "c2", "type": "function", "function": {"name": "lookup", "arguments": '{"city": "Rome"}'}}]
    mm.write_messages([{"role": "assistant", "content": "", "tool_calls": langchain},
                                     {"role": "assistant", "content": "",
                                      "tool_calls": openai}], user_id=user, thread_id=thread)
    rows = mm.read_thread(thread_id=thread, user_id=user)
    assert rows[0].tool_calls == langchain and rows[1].tool_calls == openai
    text = format_conversation(rows)
    assert 'lookup({"city": "Paris"})' in text and 'lookup({"city": "Rome"})' in text


@pytest.mark.parametrize("field,bad", [("metadata", ["a"]), ("metadata", "text"), ("metadata", 3),
                                       ("tool_args", ["a"]), ("tool_args", "city=Paris"), ("tool_args", 1.5)])
def test_metadata_and_tool_args_must_be_objects(mm, sql_conn, user, thread, field, bad):
    before = total_rows(sql_conn)
    with pytest.raises(InvalidInputError) as info:
        mm.write_messages([{"role": "tool", "content": "r", "tool_call_id": "c1", field: bad}], user_id=user,
                          thread_id=thread)
    assert field in str(info.value) and "object" in str(info.value)
    assert total_rows(sql_conn) == before


# -- 1. shapes at read: rows written by plain SQL ---------------------------------------------
MALFORMED_ROWS = [  # (tool_calls, metadata, tool_args) as jsonb
    (["x"], {}, None),
    ({"id": "c9", "name": "lookup"}, {}, None),
    ("just text", {}, None),
    ([None, 3, {"id": 5, "name": None, "args": "s"}, {"function": "f"}, {"id": "c8", "function": {"arguments": 1}}],
     {}, None),
    (None, ["not", "an", "object"], "args as text"),
    (None, "metadata as text", [1, 2]),
]


def _insert_raw(sql_conn, user: str, thread: str, role: str, content: str, *, tool_calls: Any = None,
                metadata: Any = None, tool_args: Any = None, tool_call_id: str | None = None,
                created_at: str | None = None) -> None:
    sql_conn.execute(
        "INSERT INTO conversational_memory (user_id, thread_id, role, content, tool_call_id, tool_name, tool_args,"
        " tool_calls, metadata, created_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, COALESCE(%s, '{}'::jsonb),"
        " COALESCE(%s::timestamptz, clock_timestamp()))",
        (user, thread, role, content, tool_call_id, "lookup" if role == "tool" else None,
         Jsonb(tool_args) if tool_args is not None else None, Jsonb(tool_calls) if tool_calls is not None else None,
         Jsonb(metadata) if metadata is not None else None, created_at))


@pytest.mark.parametrize("tool_calls,metadata,tool_args", MALFORMED_ROWS, ids=range(len(MALFORMED_ROWS)))
def test_readers_survive_a_malformed_row_written_by_sql(mm, sql_conn, user, thread, tool_calls, metadata,
                                                        tool_args):
    mm.write_messages([{"role": "user", "content": "What is the status of ticket T-7?"}], user_id=user,
                      thread_id=thread)
    _insert_raw(sql_conn, user, thread, "assistant", "checking T-7", tool_calls=tool_calls, metadata=metadata)
    _insert_raw(sql_conn, user, thread, "tool", "T-7 is open", tool_call_id="c9", tool_args=tool_args)
    mm.write_messages([{"role": "user", "content": "thanks"},
                                     {"role": "assistant",
                                      "content": "You're welcome."}], user_id=user, thread_id=thread)

    rows = mm.read_thread(thread_id=thread, user_id=user)
    assert [m.content for m in rows][:3] == ["What is the status of ticket T-7?", "checking T-7", "T-7 is open"]
    for m in rows:
        assert m.tool_calls is None or all(isinstance(c, dict) for c in m.tool_calls)
        assert isinstance(m.metadata, dict)
    context = mm.build_context("ticket T-7", user_id=user, thread_id=thread)
    assert "checking T-7" in context and "T-7 is open" in context
    built = ContextBuilder(8000).build(ContextParts(instructions="Be brief.", user_message="and now?",
                                                    conversation=mm.read_conversational_memory(thread_id=thread,
                                                                                               user_id=user)))
    assert "thanks" in built.text
    result = mm.summarize_conversation(thread_id=thread, user_id=user)
    assert result.status == "summarized"
    assert {m.id for m in mm.expand_summary(result.summary.summary_id, user_id=user).messages} == {m.id for m in rows}


@pytest.mark.parametrize("steps,metadata", [("42", "[1, 2]"), ('"one step as text"', '"text"'), ("null", "7")])
def test_workflows_knowledge_and_summaries_with_odd_json_still_read(mm, sql_conn, user, thread, steps, metadata):
    wf = mm.write_workflow("zebra export", "Export the zebra report", ["open", "export"], user_id=user, query="zebra")
    item = mm.write_knowledge("zebra reports export nightly", user_id=user)
    summary = mm.write_summary("zebra summary", "zebra export discussed", user_id=user, thread_id=thread)
    sql_conn.execute("UPDATE workflow_memory SET steps = %s::jsonb WHERE id = %s", (steps, wf.id))
    sql_conn.execute("UPDATE knowledge_memory SET metadata = %s::jsonb WHERE id = %s", (metadata, item.id))
    sql_conn.execute("UPDATE summary_memory SET metadata = %s::jsonb WHERE summary_id = %s",
                     (metadata, summary.summary_id))
    [found] = [h.item for h in mm.read_workflows("zebra export", user_id=user) if h.item.id == wf.id]
    assert isinstance(found.steps, list)
    assert all(isinstance(h.item.metadata, dict) for h in mm.read_knowledge("zebra", user_id=user))
    assert all(isinstance(s.metadata, dict) for s in mm.read_summaries(user_id=user))
    context = mm.build_context("zebra export", user_id=user, thread_id=thread)
    assert "zebra export" in context and "zebra reports export nightly" in context


# -- 2. dates psycopg cannot represent --------------------------------------------------------
IMPOSSIBLE_DATES = ["10000-01-01 00:00:00+00", "infinity", "-infinity", "0044-03-15 12:00:00+00 BC"]


@pytest.mark.parametrize("stamp", IMPOSSIBLE_DATES)
def test_a_row_dated_beyond_python_breaks_no_reader(mm, sql_conn, user, thread, stamp):
    other, other_thread = user + "-other", thread + "-other"
    mm.write_messages([{"role": "user", "content": "my zebra project plan"}], user_id=other, thread_id=other_thread)
    mm.write_messages([{"role": "user", "content": "the zebra migration is due"}], user_id=user, thread_id=thread)
    _insert_raw(sql_conn, user, thread, "assistant", "zebra noted for the far future", created_at=stamp)
    item = mm.write_knowledge("zebra knowledge from beyond", user_id=user)
    sql_conn.execute("UPDATE knowledge_memory SET created_at = %s WHERE id = %s", (stamp, item.id))
    summary = mm.write_summary("odd dates", "zebra summary", user_id=user, thread_id=thread)
    sql_conn.execute("UPDATE summary_memory SET first_message_at = %s, last_message_at = %s, created_at = %s"
                     " WHERE summary_id = %s", (stamp, stamp, stamp, summary.summary_id))
    entity = mm.write_entity("Zebra", "project", user_id=user)
    sql_conn.execute("UPDATE entity_memory SET first_seen = %s, last_seen = %s WHERE id = %s",
                     (stamp, stamp, entity.id))
    fact = mm.remember("stable_fact", "Works on the zebra project", user_id=user).fact
    sql_conn.execute("UPDATE fact_memory SET valid_from = %s WHERE id = %s", (stamp, fact.id))

    for uid, tid in ((user, thread), (other, other_thread)):
        rows = mm.read_thread(thread_id=tid, user_id=uid)
        assert rows and all(isinstance(m.created_at, datetime) and m.created_at.tzinfo for m in rows)
        assert mm.read_conversational_memory(thread_id=tid, user_id=uid)
        assert mm.search_memory("zebra", user_id=uid)
        assert "zebra" in mm.build_context("zebra", user_id=uid, thread_id=tid)
        assert mm.read_summaries(user_id=uid) or uid == other
        assert mm.read_entities(user_id=uid) or uid == other
        assert mm.recall(user_id=uid) or uid == other
    threads = {(t["user_id"], t["thread_id"]): t for t in mm.list_threads()}
    assert (user, thread) in threads and (other, other_thread) in threads
    mine = mm.read_thread(thread_id=thread, user_id=user)
    odd = next(m for m in mine if m.content.startswith("zebra noted"))
    if stamp.startswith("-") or stamp.endswith("BC"):
        assert odd.created_at == datetime.min.replace(tzinfo=timezone.utc) or odd.created_at.year == 1
        assert mine[0] is odd  # still ordered as the database orders it
    else:
        assert odd.created_at.year == 9999 and mine[-1] is odd
    assert mm.summarize_conversation(thread_id=thread, user_id=user).status == "summarized"


# -- 6. every argument through memory.store.validation ----------------------------------------------
def _bad_calls(mm: MemoryManager, user: str, thread: str) -> list[tuple[str, Any]]:
    return [
        ("limit", lambda: mm.read_conversational_memory(thread_id=thread, user_id=user, limit=10**30)),
        ("limit", lambda: mm.read_conversational_memory(thread_id=thread, user_id=user, limit="5")),
        ("limit", lambda: mm.read_tool_log(user_id=user, limit=10**30)),
        ("limit", lambda: mm.read_summaries(user_id=user, limit=10**30)),
        ("k", lambda: mm.read_knowledge("q", user_id=user, k=10**30)),
        ("k", lambda: mm.search_memory("q", user_id=user, k=10**30)),
        ("k", lambda: mm.recall("q", user_id=user, k=10**30)),
        ("source_count", lambda: mm.write_summary("d", "c", user_id=user, thread_id=thread, source_count="abc")),
        ("source_count", lambda: mm.write_summary("d", "c", user_id=user, thread_id=thread, source_count=-1)),
        ("source_count", lambda: mm.write_summary("d", "c", user_id=user, thread_id=thread, source_count=10**30)),
        ("source_count", lambda: mm.write_summary("d", "c", user_id=user, thread_id=thread, source_count=2.5)),
        ("first_message_at", lambda: mm.write_summary("d", "c", user_id=user, thread_id=thread,
                                                      first_message_at="yesterday")),
        ("last_message_at", lambda: mm.write_summary("d", "c", user_id=user, thread_id=thread, last_message_at=12)),
        ("duration_ms", lambda: mm.write_tool_log("t", {}, "o", user_id=user, duration_ms="fast")),
        ("duration_ms", lambda: mm.write_tool_log("t", {}, "o", user_id=user, duration_ms=float("nan"))),
        ("duration_ms", lambda: mm.write_tool_log("t", {}, "o", user_id=user, duration_ms=-3)),
        ("duration_ms", lambda: mm.write_tool_log("t", {}, "o", user_id=user, duration_ms=10**400)),
        ("args", lambda: mm.write_tool_log("t", "not an object", "o", user_id=user)),
        ("thread_id", lambda: mm.read_summaries(user_id=user, thread_id="a\nb")),
        ("thread_id", lambda: mm.read_summaries(user_id=user, thread_id=5)),
        ("created_at", lambda: mm.write_messages([{"role": "user", "content": "x",
                                                                 "created_at": "2024-01-01"}], user_id=user, thread_id=thread)),
        ("source", lambda: mm.write_knowledge("c", user_id=user, source=5)),
        ("metadata", lambda: mm.write_knowledge("c", user_id=user, metadata=["x"])),
        ("metadata", lambda: mm.write_summary("d", "c", user_id=user, thread_id=thread, metadata=["x"])),
        ("shared", lambda: mm.write_workflow("n", "d", ["s"], user_id=user, shared="no")),
        ("include_summarized", lambda: mm.read_thread(thread_id=thread, user_id=user, include_summarized="no")),
        ("hybrid", lambda: mm.read_knowledge("q", user_id=user, hybrid="no")),
        ("success", lambda: mm.record_workflow_use("00000000-0000-0000-0000-000000000000", user_id=user, success=3)),
        ("entry_id", lambda: mm.write_tool_log("t", {}, "o", user_id=user, tool_call_id=5)),
        ("message_id", lambda: mm.correct("a", "b", user_id=user, thread_id=thread, message_id=10**30)),
        ("batch_size", lambda: mm.embed_pending_messages(user_id=user, batch_size=0)),
        ("limit", lambda: mm.embed_pending_messages(user_id=user, limit=-1)),
        ("keep_recent", lambda: mm.summarize_conversation(thread_id=thread, user_id=user, keep_recent=10**30)),
        ("min_score", lambda: mm.search_memory("q", user_id=user, min_score="high")),
        ("weights", lambda: mm.search_memory("q", user_id=user, weights={"fusion": "rrf"})),
        ("include_history", lambda: mm.recall(user_id=user, include_history="yes")),
        ("purge", lambda: mm.forget("00000000-0000-0000-0000-000000000000", user_id=user, purge="yes")),
        ("focus", lambda: mm.summarize_conversation(thread_id=thread, user_id=user, focus=["dates"])),
        ("context", lambda: mm.offload_to_summary(None, thread_id=thread, user_id=user)),
        ("model", lambda: mm.calculate_context_usage("hello", model=["gpt-4o"])),
        ("now", lambda: mm.purge_expired(now="today")),
        ("messages", lambda: mm.write_messages(42, user_id=user, thread_id=thread)),
        ("embed", lambda: mm.write_messages([{"role": "user", "content": "x"}], user_id=user, thread_id=thread,
                                            embed="no")),
    ]


def test_every_bad_argument_is_an_agentmem_error_and_writes_nothing(mm, sql_conn, user, thread):
    mm.write_messages([{"role": "user", "content": "hello"}], user_id=user, thread_id=thread)
    before = total_rows(sql_conn)
    escaped = []
    for field, call in _bad_calls(mm, user, thread):
        try:
            call()
        except AgentMemError as exc:
            assert str(exc), field
            continue
        except Exception as exc:  # noqa: BLE001 - the point of the test
            escaped.append(f"{field}: {type(exc).__name__}: {str(exc)[:120]}")
            continue
        escaped.append(f"{field}: accepted")
    assert not escaped, "\n".join(escaped)
    assert total_rows(sql_conn) == before


def test_the_messages_say_what_to_do(mm, user, thread):
    with pytest.raises(InvalidInputError, match=r"limit must be at most"):
        mm.read_conversational_memory(thread_id=thread, user_id=user, limit=10**30)
    with pytest.raises(InvalidInputError, match=r"source_count must be a non-negative integer, got 'abc'"):
        mm.write_summary("d", "c", user_id=user, thread_id=thread, source_count="abc")
    with pytest.raises(InvalidInputError, match=r"duration_ms must be a non-negative number of milliseconds"):
        mm.write_tool_log("t", {}, "o", user_id=user, duration_ms="fast")
