"""The agent loop with LangChain fake chat models that emit tool calls."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import openai
import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatResult

from memory import LLMError, MemoryManager
from memory.agent.loop import MEMORY_TOOLS, MemoryAgent
from memory.llm.scripted import LABEL, ScriptedChatModel
from toolbox import Toolbox

WEATHER_CALLS: list[str] = []


def get_weather(city: str) -> str:
    """Current weather conditions and temperature for a city."""
    WEATHER_CALLS.append(city)
    return f"{city}: 14 C, light rain"


def convert_currency(amount: float, source: str, target: str) -> str:
    """Convert an amount of money from one currency to another."""
    return f"{amount} {source} = {amount * 1.1:.2f} {target}"


def send_email(to: str, subject: str, body: str) -> str:
    """Send an e-mail message to a recipient."""
    return "sent"


def book_meeting_room(room: str, hour: int) -> str:
    """Reserve a meeting room in the office for a given hour."""
    return f"{room} booked at {hour}:00"


class Recording(FakeMessagesListChatModel):
    """LangChain's list fake, remembering the messages of every call."""

    seen: list[list[BaseMessage]] = []

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        self.seen.append(list(messages))
        return super()._generate(messages, *args, **kwargs)


_REQUEST = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")
PRIMARY_FAILURES = {
    "rate_limit": lambda: openai.RateLimitError("rate limited", response=httpx.Response(429, request=_REQUEST),
                                                body=None),
    "server_error": lambda: openai.InternalServerError("bad gateway", response=httpx.Response(502, request=_REQUEST),
                                                       body=None),
    "timeout": lambda: openai.APITimeoutError(request=_REQUEST),
}


class FailingPrimary(BaseChatModel):
    """A primary model that always fails the same way."""

    failure: str = "rate_limit"

    @property
    def _llm_type(self) -> str:
        return "failing"

    def _generate(self, *args: Any, **kwargs: Any) -> ChatResult:
        raise PRIMARY_FAILURES[self.failure]()


def call(name: str, **args: Any) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": name, "args": args, "id": f"call_{uuid.uuid4().hex[:8]}"}])


@pytest.fixture
def toolbox(mm: MemoryManager) -> Toolbox:
    tb = Toolbox(mm, namespace=f"agent-{uuid.uuid4().hex[:6]}")
    for fn in (get_weather, convert_currency, send_email, book_meeting_room):
        tb.register_tool(fn)
    return tb


def test_tool_found_by_retrieval_executed_and_fed_back(mm, toolbox, user, thread):
    model = Recording(responses=[call("get_weather", city="Bergen"), AIMessage("Bergen: 14 C and light rain.")])
    agent = MemoryAgent(mm, toolbox, model, extract_with_model=False, k_tools=2)
    result = agent.run("What's the weather like in Bergen right now?", user_id=user, thread_id=thread)

    assert result.tools_offered[0] == "get_weather"  # found by retrieval, not listed by hand
    assert "send_email" not in result.tools_offered
    assert [(c.name, c.status) for c in result.tool_calls] == [("get_weather", "ok")]
    assert WEATHER_CALLS[-1] == "Bergen"
    # the second model call saw the tool's result answering its call
    second = model.seen[1]
    assert isinstance(second[-1], ToolMessage) and second[-1].content == "Bergen: 14 C, light rain"
    assert second[-1].tool_call_id == second[-2].tool_calls[0]["id"]
    assert result.answer == "Bergen: 14 C and light rain."
    stored = mm.read_conversational_memory(thread_id=thread, user_id=user)
    assert [m.role for m in stored] == ["user", "assistant", "tool", "assistant"]
    assert stored[1].tool_calls[0]["name"] == "get_weather" and stored[2].tool_call_id == stored[1].tool_calls[0]["id"]
    assert stored[-1].content == result.answer
    log = mm.read_tool_log(user_id=user, thread_id=thread)
    assert [(e.tool_name, e.args, e.status) for e in log] == [("get_weather", {"city": "Bergen"}, "ok")]
    # the successful procedure became a workflow, the mentioned city an entity
    assert result.workflow_recorded
    wf = mm.read_workflows("weather in Bergen", user_id=user, k=1)[0].item
    assert wf.steps == [{"tool": "get_weather", "args": {"city": "Bergen"}}]
    assert "Bergen" in [e.name for e in mm.read_entities(user_id=user)]


def test_the_context_carries_memory_and_status(mm, toolbox, user, thread):
    mm.write_knowledge("Bergen is the rainiest city in Norway.", user_id=user, source="facts.md")
    model = Recording(responses=[AIMessage("ok")])
    MemoryAgent(mm, toolbox, model, extract_with_model=False).run("Is it rainy in Bergen?", user_id=user,
                                                                  thread_id=thread)
    system = model.seen[0][0].content
    assert "## Knowledge Base" in system and "rainiest city" in system
    assert "## Context Status" in system and "(" in system and "ok)" in system
    assert model.seen[0][-1].content == "Is it rainy in Bergen?"  # the user's message comes last


def test_iteration_bound_forces_a_final_answer(mm, toolbox, user, thread):
    model = Recording(responses=[call("get_weather", city="Oslo"), call("get_weather", city="Oslo"),
                                 AIMessage("Final: Oslo is rainy.")])
    agent = MemoryAgent(mm, toolbox, model, max_iterations=2, extract_with_model=False)
    result = agent.run("weather in Oslo?", user_id=user, thread_id=thread)
    assert result.iterations == 2 and result.forced_final
    assert result.answer == "Final: Oslo is rainy."
    assert "Do not call tools" in model.seen[-1][-1].content
    assert mm.read_conversational_memory(thread_id=thread, user_id=user)[-1].content == "Final: Oslo is rainy."


def test_wall_time_bound_forces_a_final_answer(mm, toolbox, user, thread):
    model = Recording(responses=[AIMessage("never used"), AIMessage("forced answer")])
    agent = MemoryAgent(mm, toolbox, model, max_seconds=0.0, extract_with_model=False)
    result = agent.run("weather in Oslo?", user_id=user, thread_id=thread)
    assert result.iterations == 0 and result.forced_final and result.answer == "never used"


@pytest.mark.parametrize("failure", sorted(PRIMARY_FAILURES))
def test_failing_primary_switches_to_fallback(mm, toolbox, user, thread, failure):
    fallback = Recording(responses=[AIMessage("answer from the fallback model")])
    agent = MemoryAgent(mm, toolbox, FailingPrimary(failure=failure), fallback_model=fallback,
                        extract_with_model=False)
    result = agent.run("hello", user_id=user, thread_id=thread)
    assert result.answer == "answer from the fallback model"
    assert len(fallback.seen) == 1


def test_a_non_transient_primary_error_is_not_hidden_by_the_fallback(mm, toolbox, user, thread):
    class Broken(FailingPrimary):
        def _generate(self, *args: Any, **kwargs: Any) -> ChatResult:
            raise ValueError("a bug, not an outage")

    fallback = Recording(responses=[AIMessage("should not be used")])
    agent = MemoryAgent(mm, toolbox, Broken(), fallback_model=fallback, extract_with_model=False)
    with pytest.raises(LLMError, match="a bug, not an outage"):
        agent.run("hello", user_id=user, thread_id=thread)
    assert fallback.seen == []


def _small_window(mm: MemoryManager, window: int) -> MemoryManager:
    settings = mm.settings.with_(model_context_windows={"tiny-model": window}, reserved_output_tokens=100)
    return MemoryManager(mm.db, mm.embeddings, settings)


def _fill(mm: MemoryManager, user: str, thread: str, turns: int) -> None:
    for i in range(turns):
        mm.write_messages([
            {"role": "user", "content": f"Question {i}: please check the status of order ORD-{1000 + i} for me."},
            {"role": "assistant", "content": f"Order ORD-{1000 + i} shipped on day {i} and arrives soon."},
        ], user_id=user, thread_id=thread)


def test_summarize_and_store_at_critical_marks_the_rows(mm, user, thread, sql_conn):
    small = _small_window(mm, 1500)
    tb = Toolbox(small, namespace=f"crit-{uuid.uuid4().hex[:6]}")
    tb.register_tool(get_weather)
    model = Recording(responses=[call("summarize_and_store"), AIMessage("Consolidated; how can I help?")])
    agent = MemoryAgent(small, tb, model, model_name="tiny-model", extract_with_model=False)
    # find a history size that puts the monitor at critical but below the hard limit
    turns = 0
    while True:
        _fill(small, user, thread, 1)
        turns += 1
        status = agent.monitor(agent._parts("Anything else?", user, thread))
        if status.status == "critical":
            break
        assert turns < 200
    assert not status.hard_limit_reached
    result = agent.run("Anything else?", user_id=user, thread_id=thread)
    assert result.status.status == "critical"
    assert set(MEMORY_TOOLS) <= set(result.tools_offered)  # pinned under pressure
    assert [(c.name, c.status) for c in result.tool_calls] == [("summarize_and_store", "ok")]
    assert result.auto_consolidated is None  # the agent did it, not the safety net
    summarized, unsummarized = sql_conn.execute(
        "SELECT count(*) FILTER (WHERE summary_id IS NOT NULL), count(*) FILTER (WHERE summary_id IS NULL)"
        " FROM conversational_memory WHERE user_id = %s AND thread_id = %s", (user, thread)).fetchone()
    assert summarized >= 2 * turns
    assert unsummarized >= 1  # the current exchange stays live
    assert sql_conn.execute("SELECT count(*) FROM summary_memory WHERE user_id = %s", (user,)).fetchone() == (1,)


def test_hard_limit_safety_net_consolidates_automatically(mm, user, thread, sql_conn):
    small = _small_window(mm, 1500)
    tb = Toolbox(small, namespace=f"hard-{uuid.uuid4().hex[:6]}")
    _fill(small, user, thread, 40)  # far beyond the window
    agent = MemoryAgent(small, tb, Recording(responses=[AIMessage("fine")]), model_name="tiny-model",
                        extract_with_model=False)
    result = agent.run("Anything else?", user_id=user, thread_id=thread)
    assert result.auto_consolidated is not None and result.auto_consolidated.status == "summarized"
    assert result.context_tokens <= result.budget
    assert sql_conn.execute(
        "SELECT count(*) FROM conversational_memory WHERE user_id = %s AND summary_id IS NOT NULL",
        (user,)).fetchone()[0] >= 70


def test_scripted_model_calls_the_retrieved_tool_and_labels_its_answer(mm, toolbox, user, thread):
    agent = MemoryAgent(mm, toolbox, ScriptedChatModel(), extract_with_model=False)
    result = agent.run("Book meeting room Fjord at 14", user_id=user, thread_id=thread)
    assert result.tool_calls[0].name == "book_meeting_room" and result.tool_calls[0].status == "ok"
    assert result.answer.startswith(LABEL) and "booked at 14:00" in result.answer


def test_bad_tool_arguments_reach_the_model_as_a_structured_error(mm, toolbox, user, thread):
    model = Recording(responses=[call("book_meeting_room", room="Fjord", hour="two o'clock"),
                                 AIMessage("Sorry, which hour?")])
    result = MemoryAgent(mm, toolbox, model, extract_with_model=False).run("book Fjord", user_id=user, thread_id=thread)
    assert result.tool_calls[0].status == "error"
    fed_back = model.seen[1][-1]
    assert isinstance(fed_back, ToolMessage) and "fix" in fed_back.content and "hour" in fed_back.content
    assert not result.workflow_recorded  # a failed procedure is not learned
