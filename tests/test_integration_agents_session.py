"""AgentMemSession under the OpenAI Agents SDK's own Runner, with a scripted model class of the SDK's interface."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from agents import Agent, Runner, SQLiteSession, function_tool, set_tracing_disabled
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

from memory import HashEmbedder, InvalidInputError, MemoryManager
from memory.integrations.agents_session import AgentMemSession

set_tracing_disabled(True)


def say(text: str, n: int) -> ResponseOutputMessage:
    return ResponseOutputMessage(id=f"msg_{n}", type="message", role="assistant", status="completed",
                                 content=[ResponseOutputText(type="output_text", text=text, annotations=[])])


def call(name: str, arguments: str, n: int) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(id=f"fc_{n}", type="function_call", call_id=f"call_{n}", name=name,
                                    arguments=arguments, status="completed")


class ScriptedModel(Model):
    """The SDK's Model interface: answers from a script and records every input it was given."""

    def __init__(self, script: list[list[Any]]) -> None:
        self.script = list(script)
        self.inputs: list[Any] = []

    async def get_response(self, system_instructions, input, model_settings, tools, output_schema, handoffs,
                           tracing, *, previous_response_id=None, conversation_id=None, prompt=None, **kwargs):
        self.inputs.append(input if isinstance(input, str) else [dict(i) for i in input])
        return ModelResponse(output=self.script.pop(0), usage=Usage(), response_id=None)

    def stream_response(self, *args, **kwargs):  # pragma: no cover - the tests do not stream
        raise NotImplementedError


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"4 degrees and rain in {city}"


def _texts(model_input: list[dict]) -> str:
    return "\n".join(str(i.get("content", "")) + str(i.get("output", "")) for i in model_input)


SCRIPT = [[say("Hello Ada!", 1)],
          [call("get_weather", '{"city": "Oslo"}', 2)], [say("It is 4 degrees and raining in Oslo.", 3)],
          [say("Your name is Ada.", 4)]]
TURNS = ["My name is Ada", "What is the weather in Oslo?", "What is my name?"]


async def _converse(session: Any, model: ScriptedModel) -> list[str]:
    agent = Agent(name="helper", instructions="Be brief.", model=model, tools=[get_weather])
    return [(await Runner.run(agent, text, session=session)).final_output for text in TURNS]


def test_runner_turns_see_the_earlier_ones_and_items_are_kept_exactly(mm, user):
    session = AgentMemSession(mm, f"s-{uuid.uuid4().hex[:6]}", user_id=user, consolidate_at=None)
    model = ScriptedModel(SCRIPT)
    answers = asyncio.run(_converse(session, model))
    assert answers == ["Hello Ada!", "It is 4 degrees and raining in Oslo.", "Your name is Ada."]
    assert "My name is Ada" in _texts(model.inputs[1]) and "Hello Ada!" in _texts(model.inputs[1])
    assert "4 degrees and rain in Oslo" in _texts(model.inputs[2])  # the tool's output came back to the model
    assert "Hello Ada!" in _texts(model.inputs[3])  # the last turn still sees the first
    # The SDK's own SQLite session, given the same run, holds the same items.
    reference = SQLiteSession("reference")
    asyncio.run(_converse(reference, ScriptedModel(SCRIPT)))
    ours, theirs = asyncio.run(session.get_items()), asyncio.run(reference.get_items())
    assert ours == theirs and len(ours) == 8
    assert [i.get("type") for i in ours].count("function_call_output") == 1
    rows = mm.read_thread(user_id=user, thread_id=session.session_id)
    assert [r.role for r in rows] == ["user", "assistant", "user", "assistant", "tool", "assistant", "user",
                                      "assistant"]
    call_row = next(r for r in rows if r.tool_calls)
    assert call_row.tool_calls == [{"id": "call_2", "name": "get_weather", "args": {"city": "Oslo"}}]
    assert next(r for r in rows if r.role == "tool").tool_call_id == "call_2"
    assert asyncio.run(session.get_items(limit=2)) == theirs[-2:]
    assert asyncio.run(session.get_items(limit=50)) == theirs and asyncio.run(session.get_items(limit=0)) == []


def test_after_consolidation_items_are_the_summary_reference_and_the_recent_ones(mm, user):
    session = AgentMemSession(mm, f"s-{uuid.uuid4().hex[:6]}", user_id=user, consolidate_at=None, keep_recent=1)
    model = ScriptedModel(SCRIPT + [[say("You asked about Oslo.", 5)]])
    asyncio.run(_converse(session, model))
    before = asyncio.run(session.get_items())
    result = asyncio.run(session.consolidate())
    assert result.summarized
    after = asyncio.run(session.get_items())
    sid = result.summary.summary_id
    assert after[0]["role"] == "system" and f"[Summary ID: {sid}]" in after[0]["content"]
    assert after[1:] == before[-2:]  # the last turn (question and answer) stays live
    assert asyncio.run(session.expand(sid)) == before[:-2]  # the originals, exactly
    agent = Agent(name="helper", instructions="Be brief.", model=model, tools=[get_weather])
    asyncio.run(Runner.run(agent, "What did I ask before?", session=session))
    assert f"[Summary ID: {sid}]" in _texts(model.inputs[-1])


def test_the_agent_expands_a_summary_with_the_sessions_tool(mm, user):
    session = AgentMemSession(mm, f"s-{uuid.uuid4().hex[:6]}", user_id=user, consolidate_at=None, keep_recent=1)
    asyncio.run(_converse(session, ScriptedModel(SCRIPT)))
    sid = str(asyncio.run(session.consolidate()).summary.summary_id)
    model = ScriptedModel([[ResponseFunctionToolCall(id="fc_9", type="function_call", call_id="call_9",
                                                     name="expand_summary", arguments=f'{{"summary_id": "{sid}"}}')],
                           [say("You said your name is Ada.", 10)]])
    agent = Agent(name="helper", instructions="Be brief.", model=model, tools=[session.expand_summary_tool()])
    result = asyncio.run(Runner.run(agent, "What did I tell you first?", session=session))
    assert result.final_output == "You said your name is Ada."
    tool_output = next(i["output"] for i in model.inputs[1] if i.get("type") == "function_call_output")
    assert f"[Summary ID: {sid}]" in tool_output and "My name is Ada" in tool_output
    other = AgentMemSession(mm, session.session_id, user_id=user + "-x").expand_summary_tool()
    stranger = Agent(name="helper", model=ScriptedModel([[ResponseFunctionToolCall(
        id="fc_8", type="function_call", call_id="call_8", name="expand_summary",
        arguments=f'{{"summary_id": "{sid}"}}')], [say("done", 11)]]), tools=[other])
    asyncio.run(Runner.run(stranger, "expand it", session=AgentMemSession(mm, "x", user_id=user + "-x")))
    out = next(i["output"] for i in stranger.model.inputs[1] if i.get("type") == "function_call_output")
    assert "NotFoundError" in out and "My name is Ada" not in out  # another user's summary is not found


def test_the_session_consolidates_when_the_monitor_says_so(settings, user):
    small = MemoryManager.open(settings.with_(default_context_window=600, reserved_output_tokens=100,
                                              pool_max_size=2), embedder=HashEmbedder())
    try:
        session = AgentMemSession(small, "busy", user_id=user, consolidate_at="warning", keep_recent=1)
        filler = "The export job EXP-2291 failed again with a disk quota error on volume data. " * 3
        for i in range(8):
            asyncio.run(session.add_items([{"role": "user", "content": f"{i}: {filler}"},
                                           {"role": "assistant", "content": f"Noted {i}."}]))
        items = asyncio.run(session.get_items())
        assert items[0]["role"] == "system" and "[Summary ID:" in items[0]["content"]
        live = small.read_conversational_memory(user_id=user, thread_id="busy")
        assert len(live) < 16
        text = "\n".join(f"{m.role}: {m.content}" for m in live)
        assert small.monitor_context_window(text).status != "critical"
        assert len(small.read_thread(user_id=user, thread_id="busy")) == 16  # nothing thrown away
    finally:
        small.close()


def test_two_users_sessions_never_mix(mm, user):
    other = user + "-b"
    mine, theirs = AgentMemSession(mm, "shared-id", user_id=user), AgentMemSession(mm, "shared-id", user_id=other)
    asyncio.run(mine.add_items([{"role": "user", "content": "my secret"}]))
    asyncio.run(theirs.add_items([{"role": "user", "content": "their secret"}]))
    assert asyncio.run(mine.get_items()) == [{"role": "user", "content": "my secret"}]
    asyncio.run(theirs.clear_session())
    assert asyncio.run(theirs.get_items()) == [] and len(asyncio.run(mine.get_items())) == 1


def test_pop_item_clear_session_and_bad_items(mm, user):
    session = AgentMemSession(mm, "p", user_id=user)
    items = [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}]
    asyncio.run(session.add_items(items))
    assert asyncio.run(session.pop_item()) == items[1]
    assert asyncio.run(session.get_items()) == items[:1]
    with pytest.raises(InvalidInputError):
        asyncio.run(session.add_items([{"role": "user", "content": "fine"}, {"role": "robot", "content": "x"}]))
    with pytest.raises(InvalidInputError):
        asyncio.run(session.add_items(["not an item"]))
    assert asyncio.run(session.get_items()) == items[:1]  # the refused batch wrote nothing
    asyncio.run(session.clear_session())
    assert asyncio.run(session.get_items()) == [] and asyncio.run(session.pop_item()) is None


def test_forget_user_removes_the_session_items(mm, user):
    session = AgentMemSession(mm, "f", user_id=user)
    asyncio.run(session.add_items([{"role": "user", "content": "forget me"}]))
    assert mm.forget_user(user_id=user)["conversational_memory"] == 1
    assert asyncio.run(session.get_items()) == []
