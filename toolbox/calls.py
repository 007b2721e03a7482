"""Reading a model's tool call, checking its arguments, running the function.

A tool call arrives in one of two shapes: LangChain's ``ToolCall``
(``{"name", "args", "id"}``, ``args`` a dict) or the OpenAI API's
(``{"id", "type": "function", "function": {"name", "arguments"}}``, ``arguments`` a
JSON string; SDK objects are read through ``model_dump``). Arguments are validated
against exactly the JSON schema the model was shown (jsonschema, draft 2020-12),
then turned into the Python values the function expects (pydantic adapters: an
Enum member, a model instance). Every problem is described in terms the model can
act on: which argument, what was wrong, what the schema wants. Arguments nested
deeper than :data:`MAX_DEPTH` are refused before anything recursive (the JSON
parser, the schema validator) touches them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import inspect
import json
import reprlib
from dataclasses import dataclass
from typing import Any
from collections.abc import Callable

from jsonschema import Draft202012Validator
from pydantic import BaseModel, ValidationError

from .models import Tool

_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother, _REPR.maxlist, _REPR.maxdict = 8, 2000, 2000, 50, 50


def safe_repr(value: Any) -> str:
    """A bounded repr that cannot raise (depth, length and a failing ``__repr__`` all handled)."""
    try:
        return _REPR.repr(value)
    except Exception:  # noqa: BLE001 - a __repr__ can raise anything
        return f"<unprintable {type(value).__name__} object>"


def safe_str(exc: BaseException) -> str:
    """``str(exc)``, or a placeholder when its ``__str__`` raises."""
    try:
        return str(exc)
    except Exception:  # noqa: BLE001
        return f"<{type(exc).__name__} whose message cannot be printed>"


#: Deepest nesting of arguments accepted (no tool schema needs more; recursion needs less).
MAX_DEPTH = 64


@dataclass
class ParsedCall:
    name: str
    args: Any
    id: str | None
    problem: str | None = None  # set when the arguments could not be read as JSON


def json_depth(value: Any, limit: int = MAX_DEPTH) -> int:
    """Nesting depth of lists/dicts in ``value``, counted without recursion; stops past ``limit``."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        stack.extend((child, depth + 1) for child in children)
    return deepest


def parse_call(call: Any) -> ParsedCall:
    """Normalise a LangChain or OpenAI tool call; never raises on the model's mistakes."""
    try:
        parsed = _parse_call(call)
    except Exception as exc:  # noqa: BLE001 - a call object whose attributes raise
        return ParsedCall("", {}, None, f"the tool call could not be read ({type(exc).__name__})")
    if parsed.problem is None and json_depth(parsed.args) > MAX_DEPTH:
        return ParsedCall(parsed.name, {}, parsed.id,
                          f"the arguments are nested more than {MAX_DEPTH} levels deep; send a flat JSON object")
    return parsed


def _parse_call(call: Any) -> ParsedCall:
    if hasattr(call, "model_dump"):
        call = call.model_dump()
    elif not isinstance(call, dict) and hasattr(call, "__dict__"):
        call = vars(call)
    if not isinstance(call, dict):
        return ParsedCall("", {}, None, f"a tool call must be an object, got {type(call).__name__}")
    call_id = call.get("id")
    call_id = str(call_id) if call_id is not None else None
    fn = call.get("function")
    if isinstance(fn, dict):
        name, raw = fn.get("name"), fn.get("arguments", {})
    else:
        name, raw = call.get("name"), call.get("args", call.get("arguments", {}))
    name = name if isinstance(name, str) else ""
    if raw is None or raw == "":
        raw = {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            return ParsedCall(name, raw, call_id, f"the arguments are not valid JSON ({exc.msg} at position {exc.pos})")
        except RecursionError:
            return ParsedCall(name, raw[:2000], call_id, f"the arguments are nested more than {MAX_DEPTH} levels "
                              "deep; send a flat JSON object")
    if not isinstance(raw, dict):
        return ParsedCall(name, raw, call_id, f"the arguments must be a JSON object, got {type(raw).__name__}")
    return ParsedCall(name, raw, call_id)


def _where(path: Any) -> str:
    parts = [str(p) for p in path]
    return ".".join(parts) if parts else "(arguments)"


def check_arguments(tool: Tool, args: dict[str, Any]) -> list[str]:
    """Every way ``args`` breaks the tool's schema, one readable line each (empty if valid)."""
    validator = Draft202012Validator(tool.json_schema)
    problems = []
    for err in sorted(validator.iter_errors(args), key=lambda e: list(map(str, e.absolute_path))):
        if err.validator == "additionalProperties":
            allowed = ", ".join(tool.json_schema.get("properties", {})) or "none"
            problems.append(f"{err.message}; the accepted arguments are: {allowed}")
        else:
            problems.append(f"{_where(err.absolute_path)}: {err.message}")
    return problems


def convert_arguments(tool: Tool, args: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Turn validated JSON values into the function's Python types."""
    kwargs: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in args.items():
        adapter = tool.adapters.get(key)
        if adapter is None:
            kwargs[key] = value
            continue
        try:
            kwargs[key] = adapter.validate_python(value)
        except ValidationError as exc:
            for err in exc.errors():
                where = ".".join(str(p) for p in (key, *err.get("loc", ())))
                problems.append(f"{where}: {err.get('msg')}")
    return kwargs, problems


def _run_coroutine(coro: Any) -> Any:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    # Called from inside an event loop (a sync execute in async code): run on a worker thread.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


def call_function(func: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    """Call ``func``; a coroutine function (or a returned awaitable) is run to completion."""
    result = func(**kwargs)
    if inspect.isawaitable(result):
        return _run_coroutine(_await(result))
    return result


async def _await(awaitable: Any) -> Any:
    return await awaitable


async def acall_function(func: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    """Async twin of :func:`call_function`; a sync function runs in a worker thread."""
    if inspect.iscoroutinefunction(func):
        return await func(**kwargs)
    result = await asyncio.to_thread(func, **kwargs)
    if inspect.isawaitable(result):
        return await result
    return result


def render_output(value: Any) -> str:
    """A tool's return value as text for the model: strings as they are, the rest as JSON.

    Never raises: a value that cannot be serialised or even printed (a ``__str__`` or
    ``__repr__`` that raises, nesting too deep) is shown as a bounded repr or a placeholder.
    """
    try:
        return _render(value)
    except Exception:  # noqa: BLE001 - RecursionError, or whatever a __str__ raises
        return safe_repr(value)


def _render(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return repr(value)
    except RecursionError:
        return safe_repr(value)
