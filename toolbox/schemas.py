"""Tools described by a schema instead of a Python signature: OpenAI, MCP, LangChain.

A catalogue of hundreds of tools usually exists as schemas already. Accepted shapes:

* OpenAI tools format ``{"type": "function", "function": {"name", "description",
  "parameters"}}``, or the bare function object ``{"name", "description", "parameters"}``;
* an MCP tool listing ``{"name", "description", "inputSchema"}`` (a dict, or the MCP
  SDK's ``Tool`` object);
* a LangChain ``BaseTool`` (``@tool`` functions, ``StructuredTool``...): its name, its
  description and its arguments' JSON schema; it is its own handler (``tool.invoke``).

The name and the description are kept exactly as given (nothing cut, whitespace
untouched) and the parameters schema is stored as given: a call's arguments are
checked against exactly that schema. The schema must be a valid JSON schema of an
object (draft 2020-12); a name must be what OpenAI accepts (1-64 letters, digits,
``_`` or ``-``). Anything else is a :class:`~toolbox.errors.ToolSchemaError` naming the
problem.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from collections.abc import Callable

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from .errors import ToolSchemaError
from .schema import FunctionSpec, check_name, signature_text

#: The longest schema accepted, as JSON (a tool schema is a few KB; this is a guard, not a style rule).
MAX_SCHEMA_CHARS = 200_000


@dataclass
class DescribedSchema:
    spec: FunctionSpec
    handler: Callable[..., Any] | None  # the object's own way to run (LangChain), else None


def describe_schema(obj: Any) -> DescribedSchema:
    """Read a tool schema of any accepted shape (raises ToolSchemaError)."""
    handler: Callable[..., Any] | None = None
    if _is_langchain_tool(obj):
        name, description, parameters = _langchain(obj)
        handler = _invoker(obj)
    else:
        data = obj.model_dump(by_alias=True, exclude_none=True) if hasattr(obj, "model_dump") else obj
        if not isinstance(data, dict):
            raise ToolSchemaError(f"a tool schema must be an object (OpenAI, MCP or a LangChain tool), got "
                                  f"{type(obj).__name__}")
        if data.get("type") == "function" and isinstance(data.get("function"), dict):
            data = data["function"]
        name = data.get("name")
        description = data.get("description", "")
        if "inputSchema" in data:
            parameters = data["inputSchema"]
        elif "input_schema" in data:
            parameters = data["input_schema"]
        else:
            parameters = data.get("parameters", {"type": "object", "properties": {}})
    name = check_name(name)
    if description is None:
        description = ""
    if not isinstance(description, str):
        raise ToolSchemaError(f"tool {name!r}: the description must be a string, got {type(description).__name__}")
    parameters = _check_parameters(name, parameters)
    spec = FunctionSpec(name=name, docstring=description, description=description or f"{name.replace('_', ' ')}.",
                        parameters=parameters, signature_text=signature_text(name, parameters))
    return DescribedSchema(spec, handler)


def _check_parameters(name: str, parameters: Any) -> dict[str, Any]:
    if not isinstance(parameters, dict):
        raise ToolSchemaError(f"tool {name!r}: the parameters schema must be a JSON object, got "
                              f"{type(parameters).__name__}")
    try:
        text = json.dumps(parameters, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ToolSchemaError(f"tool {name!r}: the parameters schema is not JSON ({exc})") from None
    if len(text) > MAX_SCHEMA_CHARS:
        raise ToolSchemaError(f"tool {name!r}: the parameters schema is {len(text):,} characters as JSON; "
                              f"at most {MAX_SCHEMA_CHARS:,} are accepted")
    if parameters.get("type", "object") != "object":
        raise ToolSchemaError(f"tool {name!r}: the parameters schema must describe an object (\"type\": "
                              f"\"object\"), got type {parameters.get('type')!r}")
    try:
        Draft202012Validator.check_schema(parameters)
    except SchemaError as exc:
        raise ToolSchemaError(f"tool {name!r}: the parameters schema is not a valid JSON schema: "
                              f"{exc.message}") from None
    copy: dict[str, Any] = json.loads(text)  # a copy the caller cannot change under us
    return copy


def _is_langchain_tool(obj: Any) -> bool:
    try:
        from langchain_core.tools import BaseTool
    except ImportError:  # pragma: no cover - langchain-core is a core dependency
        return False
    return isinstance(obj, BaseTool)


def _langchain(tool: Any) -> tuple[Any, Any, Any]:
    from langchain_core.utils.function_calling import convert_to_openai_tool

    try:
        function = convert_to_openai_tool(tool)["function"]
    except Exception as exc:  # noqa: BLE001 - whatever the tool's args_schema raises
        raise ToolSchemaError(f"LangChain tool {getattr(tool, 'name', '?')!r}: its arguments cannot be described "
                              f"as JSON schema ({exc})") from None
    return tool.name, tool.description, function.get("parameters", {"type": "object", "properties": {}})


def _invoker(tool: Any) -> Callable[..., Any]:
    def run(**kwargs: Any) -> Any:
        return tool.invoke(kwargs)

    run.__name__ = str(getattr(tool, "name", "tool"))
    return run
