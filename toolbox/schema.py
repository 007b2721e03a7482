"""A function's JSON schema (OpenAI tools format) from its signature and docstring.

The signature is the schema, and pydantic writes it: the parameters become the fields
of a model built with ``create_model`` (each under its own name as an alias, so a
parameter may be called ``schema`` or ``json``), and ``model_json_schema()`` describes
every hint pydantic knows (str, int, list[X], dict[str, X], Optional, Literal, Enum,
datetime, UUID, TypedDict, dataclasses, pydantic models...). The docstring gives the
description and each parameter's text (``docstring_parser``: Google, reST/Sphinx and
NumPy layouts). What is left here is what neither does:

* the parameters object is closed (``additionalProperties: false``) so a misspelled
  argument is caught and reported back to the model instead of silently dropped;
* ``x: int = None`` means "may be null" (pydantic would describe a plain integer);
* ``Annotated[X, "text"]`` puts "text" into the description;
* the schema is tidied for models: no generated ``title``s, enums and the parameter's
  own model inlined (nested models stay ``$ref``s into ``$defs``), ``X | None`` written
  as ``{"type": [X, "null"]}``, no empty ``items`` / ``additionalProperties: true``;
* dict keys must be strings (JSON has no other keys), positional-only parameters
  cannot be passed by name, a name must be what OpenAI accepts: each a clear
  :class:`~toolbox.errors.ToolSchemaError` at registration, not a surprise at call time.

``self`` of a bound method and ``*args`` / ``**kwargs`` are not parameters the model can
fill. Each parameter also gets a pydantic ``TypeAdapter`` so validated JSON arguments
are turned into what the function expects (an Enum member, a model instance).
"""

from __future__ import annotations

import inspect
import json
import re
import types
import typing
import warnings
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable

import docstring_parser
from pydantic import Field, TypeAdapter, create_model

from .errors import ToolSchemaError

#: What OpenAI (and most compatible servers) accept as a function name.
NAME_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@dataclass
class FunctionSpec:
    """Everything registration needs to know about a function."""

    name: str
    docstring: str
    description: str
    parameters: dict[str, Any]
    signature_text: str
    adapters: dict[str, TypeAdapter[Any]] = field(default_factory=dict)


def check_name(name: Any) -> str:
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise ToolSchemaError(f"tool name {name!r} is not valid: use 1-64 letters, digits, '_' or '-' (pass name=...)")
    return name


def describe_function(func: Callable[..., Any], name: str | None = None) -> FunctionSpec:
    """Build the tool description of ``func`` (raises ToolSchemaError if it cannot be described)."""
    if not callable(func):
        raise ToolSchemaError(f"a tool must be callable, got {type(func).__name__}")
    tool_name = check_name(name if name is not None else getattr(func, "__name__", None))
    where = f"tool {tool_name!r}"
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError) as exc:
        raise ToolSchemaError(f"{where}: cannot read the signature ({exc})") from None
    hints = _hints(func, where)
    docstring = inspect.getdoc(func) or ""
    doc = docstring_parser.parse(docstring)
    param_docs = {p.arg_name: " ".join((p.description or "").split()) for p in doc.params}
    fields: dict[str, Any] = {}
    adapters: dict[str, TypeAdapter[Any]] = {}
    names: list[str] = []
    for pname, param in sig.parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if param.kind is param.POSITIONAL_ONLY:
            raise ToolSchemaError(f"{where}: positional-only parameter {pname!r} cannot be passed by name")
        hint = hints.get(pname, param.annotation)
        hint = Any if hint is inspect.Parameter.empty else hint
        if param.default is None and not _accepts_none(hint):
            hint = typing.Optional[hint]  # noqa: UP045 - ``x: int = None`` means "may be null"
        _check_keys(hint, where)
        text = _annotated_text(hint) or param_docs.get(pname) or None
        default = ... if param.default is param.empty else param.default
        fields[f"p{len(names)}"] = (hint, Field(default, alias=pname, description=text))
        names.append(pname)
        if hint is not Any:
            try:
                adapters[pname] = TypeAdapter(hint)
            except Exception as exc:  # noqa: BLE001 - pydantic raises several kinds
                raise ToolSchemaError(
                    f"{where}: the hint {hint!r} of parameter {pname!r} cannot be described as JSON schema "
                    f"({str(exc).splitlines()[0]}); use str, int, float, bool, list, dict, Optional, Literal, an "
                    "Enum, a dataclass or a pydantic model") from None
    parameters = _parameters_schema(fields, names, where)
    description = "\n\n".join(p for p in (doc.short_description, doc.long_description) if p) or \
        f"{tool_name.replace('_', ' ')}."
    return FunctionSpec(name=tool_name, docstring=docstring, description=description, parameters=parameters,
                        signature_text=signature_text(tool_name, parameters), adapters=adapters)


def _parameters_schema(fields: dict[str, Any], names: list[str], where: str) -> dict[str, Any]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a default JSON cannot hold is left out of the schema, as intended
            model = create_model("Arguments", **fields)
            raw = model.model_json_schema(by_alias=True)
    except Exception as exc:  # noqa: BLE001 - PydanticSchemaGenerationError, PydanticInvalidForJsonSchema...
        raise ToolSchemaError(
            f"{where}: a type hint cannot be described as JSON schema ({str(exc).splitlines()[0]}); use str, int, "
            "float, bool, list, dict, Optional, Literal, an Enum, a dataclass or a pydantic model"
        ) from None
    defs = raw.get("$defs", {})
    props = {n: _inline(raw.get("properties", {}).get(n, {}), defs, top=True) for n in names}
    parameters: dict[str, Any] = {"type": "object", "properties": _tidy_map(props, defs),
                                  "required": [n for n in names if n in raw.get("required", [])],
                                  "additionalProperties": False}
    used = _refs(parameters)
    kept = {k: _tidy(v, defs) for k, v in defs.items() if k in used}
    while True:  # defs referenced only from other defs
        more = {k for k in _refs(kept) if k not in kept and k in defs}
        if not more:
            break
        kept.update({k: _tidy(defs[k], defs) for k in more})
    if kept:
        parameters["$defs"] = kept
    return parameters


def _ref_target(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any] | None:
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return typing.cast("dict[str, Any] | None", defs.get(ref[len("#/$defs/"):]))
    return None


def _inline(schema: dict[str, Any], defs: dict[str, Any], *, top: bool = False) -> dict[str, Any]:
    """Replace a ``$ref`` by its definition when it is an enum, or the parameter's own type (``top``)."""
    target = _ref_target(schema, defs)
    if target is not None and ("enum" in target or top):
        rest = {k: v for k, v in schema.items() if k != "$ref"}
        return {**target, **rest}
    return schema


def _tidy_map(props: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    return {k: _tidy(v, defs) for k, v in props.items()}


def _tidy(schema: Any, defs: dict[str, Any]) -> Any:
    if not isinstance(schema, dict):
        return schema
    schema = _inline(schema, defs)
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title":
            continue
        if key in ("properties", "patternProperties"):
            out[key] = _tidy_map(value, defs)
        elif key in ("items", "additionalProperties", "not", "contains"):
            out[key] = _tidy(value, defs)
        elif key in ("anyOf", "oneOf", "allOf", "prefixItems"):
            out[key] = [_tidy(v, defs) for v in value]
        else:
            out[key] = value
    if out.get("items") == {}:
        del out["items"]
    if out.get("additionalProperties") is True:
        del out["additionalProperties"]
    return _nullable(out)


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """``anyOf: [X, {"type": "null"}]`` as ``X`` with ``"null"`` among its types (and None among its enum)."""
    members = schema.get("anyOf")
    if not isinstance(members, list) or {"type": "null"} not in members:
        return schema
    others = [m for m in members if m != {"type": "null"}]
    if len(others) != 1 or not isinstance(others[0].get("type"), str):
        return schema
    inner = dict(others[0])
    inner["type"] = [inner["type"], "null"]
    if "enum" in inner:
        inner["enum"] = [*inner["enum"], None]
    rest = {k: v for k, v in schema.items() if k != "anyOf"}
    return {**inner, **rest}


def _refs(schema: Any) -> set[str]:
    found: set[str] = set()
    stack = [schema]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            ref = item.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                found.add(ref[len("#/$defs/"):])
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


def _annotated_text(hint: Any) -> str | None:
    if typing.get_origin(hint) is typing.Annotated:
        return next((a for a in typing.get_args(hint)[1:] if isinstance(a, str)), None)
    return None


def _check_keys(hint: Any, where: str) -> None:
    """JSON object keys are strings: ``dict[int, X]`` anywhere in the hint is refused."""
    stack = [hint]
    while stack:
        h = stack.pop()
        args = typing.get_args(h)
        if typing.get_origin(h) in (dict, typing.Mapping) and len(args) == 2 and args[0] is not str:
            raise ToolSchemaError(f"{where}: dict keys must be str in JSON, got {args[0]!r}")
        stack.extend(a for a in args if not isinstance(a, (str, int, float, bool, type(None))))


def _accepts_none(hint: Any) -> bool:
    if hint is Any or hint is None or hint is type(None):
        return True
    origin = typing.get_origin(hint)
    if origin is typing.Annotated:
        return _accepts_none(typing.get_args(hint)[0])
    return origin in (typing.Union, types.UnionType) and type(None) in typing.get_args(hint)


def _hints(func: Callable[..., Any], where: str) -> dict[str, Any]:
    target = func if inspect.isroutine(func) else getattr(func, "__call__", func)  # noqa: B004
    target = getattr(target, "func", target)  # functools.partial
    try:
        return typing.get_type_hints(target, include_extras=True)
    except Exception:  # noqa: BLE001 - NameError, TypeError... from the function's own annotations
        raw = getattr(target, "__annotations__", {}) or {}
        unresolved = [k for k, v in raw.items() if isinstance(v, str)]
        if unresolved:
            raise ToolSchemaError(
                f"{where}: cannot resolve the type hints of {', '.join(unresolved)}; define the types at module "
                "level or avoid string annotations"
            ) from None
        return dict(raw)


def signature_text(name: str, parameters: dict[str, Any]) -> str:
    """A short, readable signature: ``get_weather(city: string, unit?: "c" | "f")``."""
    parts = []
    required = set(parameters.get("required", []))
    for pname, prop in parameters.get("properties", {}).items():
        if not isinstance(prop, dict):
            prop = {}
        if "enum" in prop and isinstance(prop["enum"], list):
            kind = " | ".join(json.dumps(v) for v in prop["enum"])
        else:
            kind = prop.get("type", "any")
            kind = " | ".join(map(str, kind)) if isinstance(kind, list) else str(kind)
        parts.append(f"{pname}{'' if pname in required else '?'}: {kind}")
    return f"{name}({', '.join(parts)})"
