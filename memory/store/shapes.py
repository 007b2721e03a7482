"""The shapes of the JSON columns: checked at write, made safe at read.

A message's ``tool_calls`` is a list of calls in one of the two shapes models use:
LangChain's ``{"id", "name", "args"}`` (``args`` an object; ``type`` optional) or the
OpenAI API's ``{"id", "type": "function", "function": {"name", "arguments"}}``
(``arguments`` a JSON object, or a string holding one). ``metadata`` and ``tool_args``
are JSON objects. The write APIs refuse anything else (``check_tool_calls`` and
``check_object`` in ``memory.store.validation``).

A row can still hold another shape: written by plain SQL, by a DBA, by an older
version. Readers never trust the column: the row dataclasses normalise it when they
are built (``readable_tool_calls``), keeping a call they cannot read as a
``(malformed tool call)`` entry with the stored value under ``raw``, so it renders as
text instead of crashing a summary or a context.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

MALFORMED = "(malformed tool call)"


def call_parts(call: dict[str, Any]) -> tuple[str | None, str, Any]:
    """``(id, name, args)`` of a call in either shape (as normalised by ``readable_tool_calls``)."""
    fn = call.get("function")
    if isinstance(fn, dict):
        args = fn.get("arguments", {})
        if isinstance(args, str):
            with contextlib.suppress(ValueError):
                args = json.loads(args) if args.strip() else {}
        return call.get("id"), str(fn.get("name")), args
    return call.get("id"), str(call.get("name")), call.get("args", {})


def _well_formed(call: Any) -> bool:
    if not isinstance(call, dict) or not (call.get("id") is None or isinstance(call.get("id"), str)):
        return False
    fn = call.get("function")
    if fn is not None:
        return isinstance(fn, dict) and isinstance(fn.get("name"), str) and bool(fn["name"])
    return isinstance(call.get("name"), str) and bool(call["name"]) and isinstance(call.get("args", {}), dict)


def readable_tool_calls(value: Any) -> list[dict[str, Any]] | None:
    """``tool_calls`` as stored, every call a dict readers can use; None when there are none."""
    if value is None:
        return None
    items = value if isinstance(value, list) else [value]
    out: list[dict[str, Any]] = []
    for item in items:
        if _well_formed(item):
            out.append(item)
        else:
            cid = item.get("id") if isinstance(item, dict) else None
            out.append({"id": cid if isinstance(cid, str) else None, "name": MALFORMED, "args": {}, "raw": item})
    return out or None


def readable_object(value: Any) -> dict[str, Any]:
    """A JSON-object column (metadata) as a dict; another stored value is kept under ``raw``."""
    if value is None:
        return {}
    return value if isinstance(value, dict) else {"raw": value}
