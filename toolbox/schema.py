"""A function's JSON schema (OpenAI tools format) from its type hints and docstring.

The signature is the schema: each parameter becomes a property typed from its hint,
documented from the docstring (``docstring.py``), required unless it has a default.
Hints map as follows; anything else pydantic can describe (datetime, UUID, TypedDict,
dataclasses) is delegated to pydantic, and what nobody can describe is a clear
:class:`~toolbox.errors.ToolSchemaError` at registration, not a surprise at call time.

==============================  =============================================
hint                            schema
==============================  =============================================
``str`` / ``int`` / ``float``   ``string`` / ``integer`` / ``number``
``bool``                        ``boolean``
``list[X]`` / ``tuple`` / set   ``array`` (``items`` from X)
``dict[str, X]``                ``object`` (``additionalProperties`` from X)
``Optional[X]`` / ``X | None``  X's schema, also accepting ``null``
``Literal["a", "b"]``           ``enum`` (with the values' JSON type)
``Enum`` subclass               ``enum`` of the members' values
pydantic ``BaseModel``          the model's schema, ``$defs`` hoisted to the top
``Annotated[X, "text"]``        X, with "text" as the description
no hint / ``Any``               ``{}`` (any JSON value)
==============================  =============================================

Defaults go into ``default`` when JSON can hold them. The parameters object is
closed (``additionalProperties: false``) so a misspelled argument is caught and
reported back to the model instead of being silently dropped. ``self`` of a bound
method and ``*args`` / ``**kwargs`` are not parameters the model can fill.

Each parameter also gets a pydantic ``TypeAdapter`` so validated JSON arguments are
turned into what the function expects (an Enum member, a model instance).
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import json
import re
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Callable

from pydantic import BaseModel, TypeAdapter

from .docstring import parse_docstring
from .errors import ToolSchemaError

#: What OpenAI (and most compatible servers) accept as a function name.
NAME_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

_SCALARS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}
_JSON_TYPES: dict[type, str] = {bool: "boolean", int: "integer", float: "number", str: "string"}


@dataclass
class FunctionSpec:
    """Everything registration needs to know about a function."""

    name: str
    docstring: str
    description: str
    parameters: dict[str, Any]
    signature_text: str
    adapters: dict[str, TypeAdapter[Any]] = field(default_factory=dict)


def _json_type(values: list[Any]) -> dict[str, Any]:
    kinds = {_JSON_TYPES.get(type(v)) for v in values}
    if len(kinds) == 1 and None not in kinds:
        return {"type": kinds.pop()}
    return {}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    if isinstance(schema.get("type"), str):
        out = dict(schema, type=[schema["type"], "null"])
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
        return out
    if not schema:
        return schema
    return {"anyOf": [schema, {"type": "null"}]}


class _SchemaBuilder:
    """Turns hints into JSON schema, collecting pydantic ``$defs`` on the way."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.defs: dict[str, Any] = {}

    def build(self, hint: Any) -> dict[str, Any]:
        origin = typing.get_origin(hint)
        args = typing.get_args(hint)
        if hint is inspect.Parameter.empty or hint is Any or hint is object:
            return {}
        if hint is type(None):
            return {"type": "null"}
        if hint in _SCALARS:
            return {"type": _SCALARS[hint]}
        if origin is typing.Annotated:
            base = self.build(args[0])
            text = next((a for a in args[1:] if isinstance(a, str)), None)
            desc = text or next((getattr(a, "description", None) for a in args[1:]
                                 if getattr(a, "description", None)), None)
            return dict(base, description=desc) if desc else base
        if origin in (typing.Union, types.UnionType):
            members = [a for a in args if a is not type(None)]
            inner = self.build(members[0]) if len(members) == 1 else {"anyOf": [self.build(m) for m in members]}
            return _nullable(inner) if len(members) < len(args) else inner
        if origin is typing.Literal:
            return {**_json_type(list(args)), "enum": list(args)}
        if isinstance(hint, type) and issubclass(hint, enum.Enum):
            values = [m.value for m in hint]
            return {**_json_type(values), "enum": values}
        if hint in (list, tuple, set, frozenset) or origin in (list, set, frozenset, typing.Sequence):
            schema: dict[str, Any] = {"type": "array"}
            if args:
                schema["items"] = self.build(args[0])
            return schema
        if origin is tuple:
            if len(args) == 2 and args[1] is Ellipsis:
                return {"type": "array", "items": self.build(args[0])}
            return {"type": "array", "prefixItems": [self.build(a) for a in args],
                    "minItems": len(args), "maxItems": len(args)}
        if hint is dict or origin in (dict, typing.Mapping):
            schema = {"type": "object"}
            if len(args) == 2:
                if args[0] is not str:
                    raise ToolSchemaError(f"{self.where}: dict keys must be str in JSON, got {args[0]!r}")
                value = self.build(args[1])
                if value:
                    schema["additionalProperties"] = value
            return schema
        if isinstance(hint, type) and issubclass(hint, BaseModel):
            return self._pydantic(hint.model_json_schema(), hint)
        return self._pydantic(None, hint)

    def _pydantic(self, schema: dict[str, Any] | None, hint: Any) -> dict[str, Any]:
        if schema is None:
            try:
                schema = TypeAdapter(hint).json_schema()
            except Exception as exc:
                raise ToolSchemaError(
                    f"{self.where}: type hint {hint!r} cannot be described as JSON schema ({exc}); use str, int, "
                    "float, bool, list, dict, Optional, Literal, an Enum or a pydantic model"
                ) from None
        schema = dict(schema)
        self.defs.update(schema.pop("$defs", {}))
        return schema


def signature_text(name: str, parameters: dict[str, Any]) -> str:
    """A short, readable signature: ``get_weather(city: string, unit?: "c" | "f")``."""
    parts = []
    required = set(parameters.get("required", []))
    for pname, prop in parameters.get("properties", {}).items():
        if "enum" in prop:
            kind = " | ".join(json.dumps(v) for v in prop["enum"])
        else:
            kind = prop.get("type", "any")
            kind = " | ".join(kind) if isinstance(kind, list) else str(kind)
        parts.append(f"{pname}{'' if pname in required else '?'}: {kind}")
    return f"{name}({', '.join(parts)})"


def _default(value: Any) -> tuple[bool, Any]:
    if isinstance(value, enum.Enum):
        value = value.value
    elif isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False, None
    return True, value


def _hints(func: Callable[..., Any], where: str) -> dict[str, Any]:
    target = func.__call__ if not inspect.isroutine(func) and hasattr(func, "__call__") else func
    target = getattr(target, "func", target)  # functools.partial
    try:
        return typing.get_type_hints(target, include_extras=True)
    except Exception:
        raw = getattr(target, "__annotations__", {}) or {}
        unresolved = [k for k, v in raw.items() if isinstance(v, str)]
        if unresolved:
            raise ToolSchemaError(
                f"{where}: cannot resolve the type hints of {', '.join(unresolved)}; define the types at module "
                "level or avoid string annotations"
            ) from None
        return dict(raw)


def _accepts_none(hint: Any) -> bool:
    if hint is Any or hint is None or hint is type(None):
        return True
    origin = typing.get_origin(hint)
    if origin is typing.Annotated:
        return _accepts_none(typing.get_args(hint)[0])
    return origin in (typing.Union, types.UnionType) and type(None) in typing.get_args(hint)


def describe_function(func: Callable[..., Any], name: str | None = None) -> FunctionSpec:
    """Build the tool description of ``func`` (raises ToolSchemaError if it cannot be described)."""
    if not callable(func):
        raise ToolSchemaError(f"a tool must be callable, got {type(func).__name__}")
    tool_name = name if name is not None else getattr(func, "__name__", None)
    if not isinstance(tool_name, str) or not NAME_PATTERN.match(tool_name):
        raise ToolSchemaError(
            f"tool name {tool_name!r} is not valid: use 1-64 letters, digits, '_' or '-' (pass name=...)"
        )
    where = f"tool {tool_name!r}"
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError) as exc:
        raise ToolSchemaError(f"{where}: cannot read the signature ({exc})") from None
    hints = _hints(func, where)
    docstring = inspect.getdoc(func) or ""
    parsed = parse_docstring(docstring)
    builder = _SchemaBuilder(where)
    properties: dict[str, Any] = {}
    required: list[str] = []
    adapters: dict[str, TypeAdapter[Any]] = {}
    for pname, param in sig.parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if param.kind is param.POSITIONAL_ONLY:
            raise ToolSchemaError(f"{where}: positional-only parameter {pname!r} cannot be passed by name")
        hint = hints.get(pname, param.annotation)
        if param.default is None and hint is not inspect.Parameter.empty and not _accepts_none(hint):
            hint = typing.Optional[hint]  # ``x: int = None`` means "may be null"
        prop = builder.build(hint)
        if parsed.params.get(pname) and "description" not in prop:
            prop = dict(prop, description=parsed.params[pname])
        if param.default is param.empty:
            required.append(pname)
        else:
            ok, value = _default(param.default)
            if ok:
                prop = dict(prop, default=value)
        properties[pname] = prop
        if hint is not inspect.Parameter.empty and hint is not Any:
            try:
                adapters[pname] = TypeAdapter(hint)
            except Exception as exc:
                raise ToolSchemaError(f"{where}: parameter {pname!r} has an unusable hint {hint!r} ({exc})") from None
    parameters: dict[str, Any] = {"type": "object", "properties": properties, "required": required,
                                  "additionalProperties": False}
    if builder.defs:
        parameters["$defs"] = builder.defs
    description = parsed.description or f"{tool_name.replace('_', ' ')}."
    return FunctionSpec(name=tool_name, docstring=docstring, description=description, parameters=parameters,
                        signature_text=signature_text(tool_name, parameters), adapters=adapters)
