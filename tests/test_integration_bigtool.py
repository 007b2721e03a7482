"""A langgraph-bigtool agent that finds its tool in a 200-tool Toolbox and calls it."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage

from memory.integrations.bigtool import create_toolbox_agent, toolbox_retrieval
from toolbox import Toolbox

SUBJECTS = ["invoice", "calendar", "playlist", "recipe", "parcel", "password", "spreadsheet", "flight", "pod",
            "ticket", "photo", "contract", "payroll", "backup", "domain", "coupon", "podcast", "lease", "vaccine",
            "printer"]
VERBS = ["create", "delete", "list", "archive", "share", "rename", "export", "import", "validate", "summarize"]


def _tool(name: str, doc: str):
    def tool(item_id: str) -> str:
        return f"{name} done for {item_id}"

    tool.__doc__ = doc
    tool.__name__ = name
    return tool


def _toolbox(mm) -> tuple[Toolbox, list[str]]:
    calls: list[str] = []
    tb = Toolbox(mm, namespace=f"bigtool-{uuid.uuid4().hex[:8]}")

    def get_weather(city: str) -> str:
        """Get the current weather forecast (temperature, rain) for a city."""
        calls.append(city)
        return f"4 degrees and rain in {city}"

    tools = [_tool(f"{verb}_{subject}", f"{verb.capitalize()} a {subject} by its id.")
             for subject in SUBJECTS for verb in VERBS][:199]
    tb.register_tools(tools + [get_weather])
    assert len(tb) == 200
    return tb, calls


class ToolCallingFake(GenericFakeChatModel):
    """LangChain's fake chat model, able to be bound to tools (it records which)."""

    bound: list[list[str]] = []

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        self.bound.append([getattr(t, "name", None) or t.__name__ for t in tools])
        return self


def _script() -> ToolCallingFake:
    return ToolCallingFake(bound=[], messages=iter([
        AIMessage("", tool_calls=[{"id": "r1", "name": "retrieve_tools", "args": {"query": "weather forecast for a city"}}]),
        AIMessage("", tool_calls=[{"id": "w1", "name": "get_weather", "args": {"city": "Oslo"}}]),
        AIMessage("It is 4 degrees and raining in Oslo."),
    ]))


def test_the_toolbox_retrieval_finds_the_tool_among_200(mm):
    tb, _ = _toolbox(mm)
    retrieve, aretrieve = toolbox_retrieval(tb, limit=3)
    assert "get_weather" in retrieve("weather forecast for a city")
    assert "get_weather" in asyncio.run(aretrieve("weather forecast for a city"))
    assert "get_weather" not in retrieve("archive a spreadsheet")


def test_a_bigtool_agent_retrieves_the_tool_and_calls_it(mm, user):
    tb, calls = _toolbox(mm)
    llm = _script()
    agent = create_toolbox_agent(llm, tb, limit=3, user_id=user).compile()
    out = agent.invoke({"messages": [HumanMessage("What is the weather in Oslo?")]})
    assert out["messages"][-1].content == "It is 4 degrees and raining in Oslo."
    assert calls == ["Oslo"]
    assert llm.bound[0] == ["retrieve_tools"]  # the model starts with the retrieval tool only
    assert "get_weather" in llm.bound[1] and len(llm.bound[1]) <= 4  # then the few tools found, out of 200
    assert "get_weather" in out["selected_tool_ids"]
    logged = mm.read_tool_log(user_id=user)
    assert [(e.tool_name, e.args, e.status) for e in logged] == [("get_weather", {"city": "Oslo"}, "ok")]


def test_the_async_path_uses_the_coroutine(mm):
    tb, calls = _toolbox(mm)
    agent = create_toolbox_agent(_script(), tb, limit=3).compile()
    out = asyncio.run(agent.ainvoke({"messages": [HumanMessage("What is the weather in Oslo?")]}))
    assert out["messages"][-1].content == "It is 4 degrees and raining in Oslo." and calls == ["Oslo"]
