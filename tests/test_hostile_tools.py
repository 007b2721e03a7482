"""Tools and models that misbehave: ``Toolbox.execute`` and the agent loop never crash.

A tool call is the model's text and the tool is the deployment's code; either can be
hostile or broken. Every case here must come back as a ``ToolResult`` the model can
read (logged in ``tool_log`` as what it was), never as an exception, with
``KeyboardInterrupt`` the one exception that must still reach the caller.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import uuid
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, ToolMessage

from memory import InvalidInputError, MemoryManager
from memory.agent.loop import MemoryAgent
from toolbox import Toolbox

RELEASE = threading.Event()  # set at the end of each test: no abandoned tool thread outlives it


@pytest.fixture(autouse=True)
def _release_sleepers():
    RELEASE.clear()
    yield
    RELEASE.set()


def echo(text: str) -> str:
    """Repeat the text back."""
    return text


def lookup(query: dict) -> str:
    """Look a structured query up."""
    return "found"


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no str for you")

    def __repr__(self) -> str:
        raise RuntimeError("no repr either")


class UnprintableError(Exception):
    def __str__(self) -> str:
        raise RuntimeError("cannot print this error")


def returns_unprintable() -> Any:
    """Return an object that cannot be printed."""
    return Unprintable()


def returns_deep() -> Any:
    """Return a 5,000-deep list."""
    value: Any = []
    for _ in range(5000):
        value = [value]
    return value


def raises_unprintable() -> str:
    """Raise an exception that cannot be printed."""
    raise UnprintableError()


def exits() -> str:
    """Call sys.exit."""
    sys.exit(3)


def interrupts() -> str:
    """Raise KeyboardInterrupt."""
    raise KeyboardInterrupt


def whoami_thread() -> str:
    """Name the thread running this tool."""
    return threading.current_thread().name


def huge_output(chars: int) -> str:
    """Return that many characters."""
    return "x" * chars


def slow(seconds: float) -> str:
    """Sleep, then answer."""
    RELEASE.wait(seconds)
    return f"slept {seconds}"


async def slow_async(seconds: float) -> str:
    """Sleep asynchronously, then answer."""
    import asyncio

    await asyncio.sleep(seconds)
    return "done"


@pytest.fixture
def tb(mm: MemoryManager) -> Toolbox:
    box = Toolbox(mm, namespace=f"hostile-{uuid.uuid4().hex[:8]}", output_limit=200)
    box.register_tools([echo, lookup, returns_unprintable, returns_deep, raises_unprintable, exits, interrupts,
                        huge_output, slow, slow_async])
    return box


def logged(mm: MemoryManager, result: Any, user: str) -> Any:
    assert result.log_id is not None, "the call was not logged"
    return mm.read_tool_log_entry(result.log_id, user_id=user)


def deep_dict(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"a": value}
    return value


# -- 3. arguments that break recursive code ----------------------------------------------------
@pytest.mark.parametrize("call", [
    {"id": "c1", "type": "function", "function": {"name": "echo", "arguments": "[" * 200_000}},
    {"id": "c1", "name": "lookup", "args": {"query": deep_dict(5000)}},
    {"id": "c1", "type": "function", "function": {"name": "lookup",
                                                  "arguments": json.dumps({"query": deep_dict(900)})}},
], ids=["200k-brackets", "5000-deep-dict", "900-deep-json"])
def test_deeply_nested_arguments_are_a_tool_error(mm, tb, user, call):
    result = tb.execute(call, user_id=user)
    assert result.status == "error" and result.error == "invalid_arguments"
    body = json.loads(result.content)
    assert "nested more than" in body["message"] and body["fix"]
    row = logged(mm, result, user)
    assert row.status == "error" and "unstorable_arguments" in row.args or row.args == {}


# -- 3. values and errors that cannot be printed ------------------------------------------------
def test_a_return_value_that_cannot_be_printed_is_shown_as_a_placeholder(mm, tb, user):
    result = tb.execute({"id": "c1", "name": "returns_unprintable", "args": {}}, user_id=user)
    assert result.ok and "Unprintable" in result.content
    assert logged(mm, result, user).output == result.content
    assert "ToolResult" in repr(result)  # the unprintable value it holds does not break its repr


def test_a_5000_deep_return_value_is_rendered_bounded(mm, tb, user):
    result = tb.execute({"id": "c1", "name": "returns_deep", "args": {}}, user_id=user)
    assert result.ok and result.content.startswith("[[[") and "..." in result.content
    assert logged(mm, result, user).status == "ok"


def test_an_exception_that_cannot_be_printed_is_a_tool_error(mm, tb, user):
    result = tb.execute({"id": "c1", "name": "raises_unprintable", "args": {}}, user_id=user)
    assert result.status == "error" and result.error == "tool_error"
    assert "UnprintableError" in json.loads(result.content)["message"]
    row = logged(mm, result, user)
    assert row.status == "error" and "UnprintableError" in row.error


def test_a_tool_calling_sys_exit_is_a_tool_error_and_the_process_lives_on(mm, tb, user):
    result = tb.execute({"id": "c1", "name": "exits", "args": {}}, user_id=user)
    assert result.status == "error" and result.error == "tool_error"
    assert "SystemExit" in json.loads(result.content)["message"]
    assert logged(mm, result, user).status == "error"


@pytest.mark.parametrize("timeout", [None, 5.0], ids=["inline", "worker-thread"])
def test_keyboard_interrupt_still_reaches_the_caller(mm, user, timeout):
    box = Toolbox(mm, namespace=f"kbd-{uuid.uuid4().hex[:8]}")
    box.tool_timeout = timeout
    box.register_tool(interrupts)
    with pytest.raises(KeyboardInterrupt):
        box.execute({"id": "c1", "name": "interrupts", "args": {}}, user_id=user)


# -- 3. an output larger than the log keeps -------------------------------------------------------
def test_an_output_above_the_log_limit_says_exactly_what_was_kept(mm, tb, user):
    limit = mm.settings.max_tool_output_chars
    chars = limit * 2 + 17
    result = tb.execute({"id": "c1", "name": "huge_output", "args": {"chars": chars}}, user_id=user)
    assert result.ok and result.truncated
    row = logged(mm, result, user)
    assert len(row.output) <= limit
    kept = row.output.index("\n[tool_log keeps")
    assert row.output[:kept] == "x" * kept
    assert f"the first {kept:,} of {chars:,} characters" in row.output
    assert f"keeps only the first {kept:,} characters" in result.content
    assert "full output is stored" not in result.content


def test_an_output_within_the_limit_is_stored_whole(mm, tb, user):
    result = tb.execute({"id": "c1", "name": "huge_output", "args": {"chars": 50_000}}, user_id=user)
    assert logged(mm, result, user).output == "x" * 50_000
    assert f"the full output is stored in tool_log id {result.log_id}" in result.content


# -- 4. time limits ---------------------------------------------------------------------------------
def test_a_tool_past_its_timeout_is_a_structured_error(mm, user):
    box = Toolbox(mm, namespace=f"slow-{uuid.uuid4().hex[:8]}")
    box.register_tool(slow, timeout=0.5)
    started = time.monotonic()
    result = box.execute({"id": "c1", "name": "slow", "args": {"seconds": 30}}, user_id=user)
    assert time.monotonic() - started < 15  # well before the 30 s sleep ends
    assert result.status == "error" and result.error == "tool_timeout"
    body = json.loads(result.content)
    assert body["timeout_seconds"] == 0.5 and "0.5 s" in body["message"] and body["fix"]
    row = logged(mm, result, user)
    assert row.status == "error" and "tool_timeout" in row.error


def test_the_timeout_setting_applies_and_register_tool_overrides_it(settings, mm, user):
    box = Toolbox(MemoryManager(mm.db, mm.embeddings, settings.with_(tool_timeout=0.5)),
                  namespace=f"slow-{uuid.uuid4().hex[:8]}")
    assert box.tool_timeout == 0.5
    box.register_tool(slow)
    box.register_tool(echo, timeout=20)
    assert box.execute({"id": "c1", "name": "slow", "args": {"seconds": 30}}, user_id=user).error == "tool_timeout"
    assert box.get("echo").timeout == 20
    fast = box.execute({"id": "c2", "name": "echo", "args": {"text": "hi"}}, user_id=user)
    assert fast.ok and fast.content == "hi"
    box.register_tool(whoami_thread, timeout=0)  # 0: inline, in the caller's thread, even under a call timeout
    here = box.execute({"id": "c3", "name": "whoami_thread", "args": {}}, user_id=user, timeout=5)
    assert here.content == threading.current_thread().name
    with pytest.raises(InvalidInputError):
        box.register_tool(echo, timeout=-1)
    with pytest.raises(InvalidInputError):
        box.register_tool(echo, timeout="soon")


def test_a_call_shorter_timeout_wins_and_async_tools_are_cancelled(mm, tb, user):
    import asyncio

    result = tb.execute({"id": "c1", "name": "slow", "args": {"seconds": 30}}, user_id=user, timeout=0.3)
    assert result.error == "tool_timeout"
    result = asyncio.run(tb.aexecute({"id": "c2", "name": "slow_async", "args": {"seconds": 30}}, user_id=user,
                                     timeout=0.3))
    assert result.error == "tool_timeout" and logged(mm, result, user).status == "error"


def test_tools_see_the_callers_context_variables_in_the_worker_thread(mm, user):
    import contextvars

    var: contextvars.ContextVar[str] = contextvars.ContextVar("who")

    def whoami() -> str:
        """Who is calling."""
        return var.get("nobody")

    box = Toolbox(mm, namespace=f"ctx-{uuid.uuid4().hex[:8]}")
    box.register_tool(whoami, timeout=5)
    var.set("alice")
    assert box.execute({"id": "c1", "name": "whoami", "args": {}}, user_id=user).content == "alice"


def test_a_tool_that_keeps_hanging_cannot_pile_up_threads(mm, user):
    from toolbox.running import MAX_ABANDONED, abandoned_calls

    gate = threading.Event()

    def stuck() -> str:
        """Wait for the gate."""
        gate.wait(60)
        return "free"

    box = Toolbox(mm, namespace=f"stuck-{uuid.uuid4().hex[:8]}")
    box.register_tool(stuck, timeout=0.2)
    try:
        errors = [box.execute({"id": f"c{i}", "name": "stuck", "args": {}}, user_id=user).error
                  for i in range(MAX_ABANDONED + 2)]
        assert errors == ["tool_timeout"] * MAX_ABANDONED + ["tool_unavailable"] * 2
        assert abandoned_calls(stuck) == MAX_ABANDONED
    finally:
        gate.set()
    deadline = time.monotonic() + 30
    while abandoned_calls(stuck) and time.monotonic() < deadline:  # the abandoned threads return now
        time.sleep(0.05)
    assert abandoned_calls(stuck) == 0
    assert box.execute({"id": "again", "name": "stuck", "args": {}}, user_id=user).content == "free"


def test_a_negative_timeout_setting_is_a_configuration_error(settings, mm):
    from memory import ConfigurationError

    with pytest.raises(ConfigurationError, match="AGENTMEM_TOOL_TIMEOUT"):
        Toolbox(MemoryManager(mm.db, mm.embeddings, settings.with_(tool_timeout=-1.0)))


def call(name: str, **args: Any) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": name, "args": args, "id": f"call_{uuid.uuid4().hex[:8]}"}])


def test_the_agents_wall_time_bound_is_real(mm, tb, user, thread):
    model = FakeMessagesListChatModel(responses=[call("slow", seconds=30),
                                                 AIMessage("Sorry, the lookup is too slow today.")])
    agent = MemoryAgent(mm, tb, model, extract_with_model=False, max_seconds=2, max_iterations=5)
    started = time.monotonic()
    result = agent.run("Run the slow lookup please", user_id=user, thread_id=thread)
    elapsed = time.monotonic() - started
    assert elapsed < 15, f"the turn took {elapsed:.1f} s with max_seconds=2"  # not the 30 s the tool sleeps
    assert result.forced_final and result.answer == "Sorry, the lookup is too slow today."
    assert [c.status for c in result.tool_calls] == ["error"]
    stored = mm.read_thread(thread_id=thread, user_id=user)
    tool_msgs = [m for m in stored if m.role == "tool"]
    assert len(tool_msgs) == 1 and json.loads(tool_msgs[0].content)["error"] == "tool_timeout"
    assert stored[-1].role == "assistant" and stored[-1].content == result.answer


def test_calls_made_after_the_time_is_up_are_answered_not_run(mm, tb, user, thread):
    two = AIMessage("", tool_calls=[{"name": "slow", "args": {"seconds": 30}, "id": "s1"},
                                    {"name": "echo", "args": {"text": "late"}, "id": "s2"}])
    model = FakeMessagesListChatModel(responses=[two, AIMessage("Giving up.")])
    agent = MemoryAgent(mm, tb, model, extract_with_model=False, max_seconds=1)
    result = agent.run("Do both things", user_id=user, thread_id=thread)
    assert [(c.name, c.status) for c in result.tool_calls] == [("slow", "error"), ("echo", "error")]
    answers = {m.tool_call_id: json.loads(m.content)["error"] for m in mm.read_thread(thread_id=thread,
                                                                                      user_id=user) if m.role == "tool"}
    assert answers == {"s1": "tool_timeout", "s2": "not_run"}  # every call answered, the late one never run


# -- 5. unstorable text in the model's tool call ----------------------------------------------------
@pytest.mark.parametrize("bad", ["nul \x00 byte", "lone \ud800 surrogate"], ids=["nul", "surrogate"])
def test_unstorable_characters_in_tool_arguments_become_a_tool_error(mm, tb, user, thread, bad):
    model = FakeMessagesListChatModel(responses=[call("echo", text=bad), AIMessage("That input was broken.")])
    agent = MemoryAgent(mm, tb, model, extract_with_model=False)
    result = agent.run("Echo something odd", user_id=user, thread_id=thread)
    assert result.answer == "That input was broken." and not result.forced_final
    assert [(c.name, c.status) for c in result.tool_calls] == [("echo", "error")]
    assert json.loads(result.tool_calls[0].content)["error"] == "invalid_arguments"
    stored = mm.read_thread(thread_id=thread, user_id=user)
    assert [m.role for m in stored] == ["user", "assistant", "tool", "assistant"]
    assert "unstorable_arguments" in stored[1].tool_calls[0]["args"]
    assert stored[2].tool_call_id == stored[1].tool_calls[0]["id"]


def test_a_nul_in_the_models_answer_and_call_id_is_stored_escaped(mm, tb, user, thread):
    odd = AIMessage("", tool_calls=[{"name": "echo", "args": {"text": "hi"}, "id": "id\x00x"}])
    model = FakeMessagesListChatModel(responses=[odd, AIMessage("done \x00 here")])
    agent = MemoryAgent(mm, tb, model, extract_with_model=False)
    result = agent.run("Echo hi", user_id=user, thread_id=thread)
    assert result.answer == "done \x00 here"
    stored = mm.read_thread(thread_id=thread, user_id=user)
    assert stored[-1].content == "done \\x00 here"
    assert stored[1].tool_calls[0]["id"] == stored[2].tool_call_id == "id\\x00x"
