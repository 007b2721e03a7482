"""Tools registered from schemas (OpenAI, MCP, LangChain), with and without a handler."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from memory import MemoryManager
from toolbox import Toolbox, ToolNotRunnableError, ToolSchemaError, describe_schema

#: A description a docstring parser would have cut at "Parameters:" and re-spaced.
DESCRIPTION = ("Look up a parcel.\n\n   Parameters:\n  reference - the Pack & Send number\n\n"
               "Returns the latest   status, with its date.")
PARAMS = {"type": "object", "properties": {"reference": {"type": "string", "description": "tracking number"},
                                           "carrier": {"type": "string", "enum": ["dhl", "ups"]}},
          "required": ["reference"]}


@pytest.fixture
def tb(mm: MemoryManager) -> Toolbox:
    return Toolbox(mm, namespace=f"schemas-{uuid.uuid4().hex[:8]}")


def test_openai_schema_keeps_name_description_and_parameters_exactly(tb: Toolbox, sql_conn: Any) -> None:
    schema = {"type": "function", "function": {"name": "track_parcel", "description": DESCRIPTION,
                                               "parameters": PARAMS}}
    tool = tb.register_schema(schema, category="Pack & Send")
    assert (tool.name, tool.description, tool.json_schema, tool.category) == \
        ("track_parcel", DESCRIPTION, PARAMS, "Pack & Send")
    assert tool.openai_schema == {"type": "function", "function": {"name": "track_parcel",
                                                                   "description": DESCRIPTION, "parameters": PARAMS}}
    stored = sql_conn.execute("SELECT description, json_schema, category, search_text FROM toolbox_memory"
                              " WHERE namespace = %s AND name = %s", (tb.namespace, "track_parcel")).fetchone()
    assert stored[:3] == (DESCRIPTION, PARAMS, "Pack & Send")
    assert "Returns the latest   status" in stored[3]  # the whole description is indexed, nothing cut
    # ... and found by words that come after the "Parameters:" heading.
    assert tb.retrieve("latest status date", k=1, mode="keyword").names == ["track_parcel"]


def test_mcp_listing_dict_and_sdk_object(tb: Toolbox) -> None:
    import mcp.types

    listed = {"name": "get_forecast", "description": "Forecast for a place.", "inputSchema": PARAMS}
    sdk = mcp.types.Tool(name="get_alerts", description="Weather alerts of a US state.",
                         inputSchema={"type": "object", "properties": {"state": {"type": "string"}}})
    a, b = tb.register_schemas([listed, sdk], categories=["weather-server", "weather-server"])
    assert (a.name, a.description, a.json_schema) == ("get_forecast", "Forecast for a place.", PARAMS)
    assert b.json_schema == {"type": "object", "properties": {"state": {"type": "string"}}}
    assert a.func is None and b.category == "weather-server"


def test_langchain_tool_is_its_own_handler(tb: Toolbox, user: str) -> None:
    from langchain_core.tools import tool as lc_tool

    @lc_tool
    def shout(text: str) -> str:
        """Upper-case a text.

        Args:
            text: what to shout
        """
        return text.upper()

    registered = tb.register_schema(shout)
    assert registered.description == shout.description  # exactly LangChain's description
    assert registered.json_schema["required"] == ["text"]
    result = tb.execute({"name": "shout", "args": {"text": "hi"}, "id": "c1"}, user_id=user)
    assert result.ok and result.content == "HI"


def test_handler_runs_and_arguments_are_checked_against_the_stored_schema(tb: Toolbox, user: str) -> None:
    calls: list[dict[str, Any]] = []

    def handler(**kwargs: Any) -> str:
        calls.append(kwargs)
        return "in transit"

    tb.register_schema({"name": "track_parcel", "description": "Track.", "parameters": PARAMS}, handler)
    ok = tb.execute({"name": "track_parcel", "args": {"reference": "X1", "carrier": "dhl"}}, user_id=user)
    assert ok.ok and ok.content == "in transit" and calls == [{"reference": "X1", "carrier": "dhl"}]
    bad = tb.execute({"name": "track_parcel", "args": {"carrier": "fedex"}}, user_id=user)
    assert bad.error == "invalid_arguments" and "reference" in bad.content and "fedex" in bad.content
    assert len(calls) == 1  # never run with bad arguments


def test_without_a_handler_calls_are_checked_not_run(tb: Toolbox, user: str) -> None:
    tool = tb.register_schema({"name": "track_parcel", "description": "Track.", "parameters": PARAMS})
    assert tb.check_call({"name": "track_parcel", "args": {"reference": "X1"}}) == []
    problems = tb.check_call({"name": "track_parcel", "args": {"reference": 5, "extra": 1}})
    assert any("reference" in p for p in problems)
    assert tb.check_call({"name": "nope", "args": {}}) == ["there is no tool named 'nope'"]
    result = tb.execute({"name": "track_parcel", "args": {"reference": "X1"}}, user_id=user)
    assert result.error == "no_handler" and not result.ok
    with pytest.raises(ToolNotRunnableError):
        tool(reference="X1")


@pytest.mark.parametrize("schema, match", [
    ({"name": "has space", "description": "x"}, "not valid"),
    ({"name": "t", "description": 5}, "description must be a string"),
    ({"name": "t", "parameters": {"type": "array"}}, "must describe an object"),
    ({"name": "t", "parameters": {"type": "object", "properties": {"a": {"type": "nonsense"}}}}, "not a valid"),
    ({"name": "t", "parameters": "x"}, "must be a JSON object"),
    (["not", "a", "schema"], "must be an object"),
])
def test_bad_schemas_are_clear_errors_and_nothing_is_registered(tb: Toolbox, schema: Any, match: str) -> None:
    with pytest.raises(ToolSchemaError, match=match):
        tb.register_schemas([{"name": "fine", "description": "ok"}, schema])
    assert len(tb) == 0  # all described before anything is written


def test_re_registering_an_unchanged_schema_embeds_nothing(tb: Toolbox) -> None:
    schema = {"name": "track_parcel", "description": "Track.", "parameters": PARAMS}
    tb.register_schema(schema, category="post")
    before = tb.mm.embeddings.texts_embedded
    Toolbox(tb.mm, namespace=tb.namespace).register_schema(schema, category="post")
    assert tb.mm.embeddings.texts_embedded == before
    moved = Toolbox(tb.mm, namespace=tb.namespace).register_schema(schema, category="parcels")
    assert moved.category == "parcels" and tb.mm.embeddings.texts_embedded == before + 1  # the group is indexed


def test_describe_schema_reads_the_bare_function_object() -> None:
    spec = describe_schema({"name": "t", "description": " keep  me ", "parameters": PARAMS}).spec
    assert isinstance(spec.description, str) and spec.description == " keep  me "
    assert describe_schema({"name": "t"}).spec.parameters == {"type": "object", "properties": {}}
