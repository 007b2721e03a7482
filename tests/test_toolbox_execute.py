"""Executing a model's tool calls: validation, running, tool_log, structured errors."""

from __future__ import annotations

import asyncio
import enum
import json
import uuid
from typing import Any, Literal

import pytest
from pydantic import BaseModel

from memory import InvalidInputError, MemoryManager
from toolbox import ToolResult, Toolbox


class Unit(enum.Enum):
    CELSIUS = "celsius"
    FAHRENHEIT = "fahrenheit"


class Address(BaseModel):
    street: str
    city: str


CALLS: list[dict[str, Any]] = []


def get_weather(city: str, days: int = 1, unit: Unit = Unit.CELSIUS) -> dict[str, Any]:
    """Weather forecast for a city."""
    CALLS.append({"city": city, "days": days, "unit": unit})
    return {"city": city, "days": days, "unit": unit.value, "sky": "clear"}


def ship(address: Address, mode: Literal["ground", "air"] = "ground") -> str:
    """Ship a parcel to an address."""
    assert isinstance(address, Address)
    return f"shipping by {mode} to {address.street}, {address.city}"


def divide(a: float, b: float) -> float:
    """Divide a by b."""
    return a / b


def dump_logs(n: int) -> str:
    """Return n lines of log output."""
    return "\n".join(f"line {i}: all systems nominal" for i in range(n))


async def fetch_page(url: str) -> str:
    """Fetch a web page (async)."""
    await asyncio.sleep(0.01)
    return f"<html>{url}</html>"


@pytest.fixture
def tb(mm: MemoryManager) -> Toolbox:
    box = Toolbox(mm, namespace=f"ns-{uuid.uuid4().hex[:10]}", output_limit=200)
    box.register_tools([get_weather, ship, divide, dump_logs, fetch_page])
    return box


def log_row(mm: MemoryManager, result: ToolResult, user: str) -> Any:
    assert result.log_id is not None
    return mm.read_tool_log_entry(result.log_id, user_id=user)


def test_a_langchain_tool_call_runs_and_is_logged_in_full(tb: Toolbox, mm: MemoryManager, user: str,
                                                          thread: str) -> None:
    CALLS.clear()
    result = tb.execute({"name": "get_weather", "args": {"city": "Paris", "unit": "fahrenheit"}, "id": "call_1",
                         "type": "tool_call"}, user_id=user, thread_id=thread)
    assert result.ok and result.error is None
    assert json.loads(result.content) == {"city": "Paris", "days": 1, "unit": "fahrenheit", "sky": "clear"}
    assert CALLS == [{"city": "Paris", "days": 1, "unit": Unit.FAHRENHEIT}]  # JSON value -> Enum member
    row = log_row(mm, result, user)
    assert (row.tool_name, row.tool_call_id, row.thread_id, row.status) == ("get_weather", "call_1", thread, "ok")
    assert row.args == {"city": "Paris", "unit": "fahrenheit"} and row.output == result.content
    assert row.duration_ms is not None and row.duration_ms >= 0
    message = result.to_message()
    assert message.tool_call_id == "call_1" and message.status == "success"


def test_an_openai_tool_call_with_json_string_arguments_builds_pydantic_models(tb: Toolbox, user: str) -> None:
    call = {"id": "call_9", "type": "function",
            "function": {"name": "ship", "arguments": '{"address": {"street": "1 Main St", "city": "Oslo"},'
                                                       ' "mode": "air"}'}}
    result = tb.execute(call, user_id=user)
    assert result.ok and result.content == "shipping by air to 1 Main St, Oslo"
    assert result.to_openai_message() == {"role": "tool", "tool_call_id": "call_9", "content": result.content}


def test_an_unknown_tool_is_a_structured_error_naming_the_close_match(tb: Toolbox, mm: MemoryManager,
                                                                     user: str) -> None:
    result = tb.execute({"name": "get_wether", "args": {"city": "Rome"}, "id": "c2"}, user_id=user)
    assert result.status == "error" and result.error == "unknown_tool"
    body = json.loads(result.content)
    assert body["error"] == "unknown_tool" and "'get_weather'" in body["fix"]
    assert "get_weather" in body["available_tools"]
    row = log_row(mm, result, user)
    assert row.status == "error" and row.tool_name == "get_wether" and "unknown_tool" in (row.error or "")


@pytest.mark.parametrize("args, expected", [
    ({}, "'city' is a required property"),
    ({"city": "Rome", "days": "three"}, "days: 'three' is not of type 'integer'"),
    ({"city": "Rome", "unit": "kelvin"}, "unit: 'kelvin' is not one of ['celsius', 'fahrenheit']"),
    ({"city": "Rome", "citty": "x"}, "the accepted arguments are: city, days, unit"),
    ('{"city": "Rome"', "not valid JSON"),
    ("[1, 2]", "must be a JSON object"),
    ({"city": "Ro\x00me"}, "NUL"),
])
def test_bad_arguments_come_back_as_a_structured_error_and_the_tool_does_not_run(
        tb: Toolbox, mm: MemoryManager, user: str, args: Any, expected: str) -> None:
    CALLS.clear()
    call = {"id": "c3", "function": {"name": "get_weather", "arguments": args if isinstance(args, str)
                                     else json.dumps(args)}}
    result = tb.execute(call, user_id=user)
    assert CALLS == []
    assert result.status == "error" and result.error == "invalid_arguments"
    body = json.loads(result.content)
    assert expected in body["message"]
    assert "get_weather(city: string, days?: integer" in body["fix"]
    assert body["parameters"]["required"] == ["city"]
    assert log_row(mm, result, user).status == "error"


def test_an_exception_in_the_tool_is_returned_with_its_traceback_logged(tb: Toolbox, mm: MemoryManager,
                                                                        user: str) -> None:
    result = tb.execute({"name": "divide", "args": {"a": 1, "b": 0}, "id": "c4"}, user_id=user)
    assert result.status == "error" and result.error == "tool_error"
    body = json.loads(result.content)
    assert body["message"] == "divide raised ZeroDivisionError: float division by zero"
    assert "retry with corrected values" in body["fix"]
    row = log_row(mm, result, user)
    assert row.status == "error" and "Traceback" in (row.error or "") and "ZeroDivisionError" in (row.error or "")


def test_a_large_output_reaches_the_model_as_a_preview_with_its_log_reference(tb: Toolbox, mm: MemoryManager,
                                                                             user: str) -> None:
    result = tb.execute({"name": "dump_logs", "args": {"n": 500}, "id": "c5"}, user_id=user)
    full = dump_logs(500)
    assert result.ok and result.truncated
    assert result.content.startswith(full[:200])
    assert f"showing 200 of {len(full):,} characters" in result.content
    assert f"tool_log id {result.log_id}" in result.content
    assert log_row(mm, result, user).output == full  # kept whole


def test_async_tools_run_from_execute_and_aexecute(tb: Toolbox, user: str) -> None:
    call = {"name": "fetch_page", "args": {"url": "https://example.org"}, "id": "c6"}
    assert tb.execute(call, user_id=user).content == "<html>https://example.org</html>"

    async def main() -> tuple[ToolResult, ToolResult, ToolResult]:
        inside = tb.execute(call, user_id=user)  # sync execute called inside a running loop
        return inside, await tb.aexecute(call, user_id=user), await tb.aexecute(
            {"name": "divide", "args": {"a": 6, "b": 3}, "id": "c7"}, user_id=user)
    inside, awaited, sync_tool = asyncio.run(main())
    assert inside.ok and awaited.ok and awaited.content == inside.content
    assert sync_tool.ok and sync_tool.content == "2.0"


def test_program_errors_are_raised_but_model_errors_never_are(tb: Toolbox, user: str) -> None:
    with pytest.raises(InvalidInputError):
        tb.execute({"name": "divide", "args": {"a": 1, "b": 2}}, user_id="")
    for junk in (None, 42, {"args": {}}, {"name": None, "args": None}, {"name": "x" * 5000, "args": {}}):
        result = tb.execute(junk, user_id=user)
        assert result.status == "error" and result.error in ("unknown_tool", "invalid_arguments")
