"""Input checks run before anything touches the database.

Every public write validates all of its arguments first, so a rejected call writes
nothing. PostgreSQL text cannot hold NUL bytes and UTF-8 cannot hold lone surrogates;
both are rejected here with a message that names the field, rather than surfacing as
a driver error halfway through a batch.
"""

from __future__ import annotations

import json
import math
import uuid
from datetime import datetime
from typing import Any

from memory.errors import InvalidInputError


def check_text(value: Any, field: str, *, max_chars: int, allow_empty: bool = False) -> str:
    """Return ``value`` if it is a storable string, else raise InvalidInputError."""
    if not isinstance(value, str):
        raise InvalidInputError(f"{field} must be a string, got {type(value).__name__}")
    if not allow_empty and not value.strip():
        raise InvalidInputError(f"{field} must not be empty")
    if len(value) > max_chars:
        raise InvalidInputError(
            f"{field} is {len(value):,} characters, above the limit of {max_chars:,}; "
            "split it or raise the limit in settings"
        )
    if "\x00" in value:
        raise InvalidInputError(f"{field} contains a NUL byte (\\x00), which PostgreSQL text cannot store")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInputError(
            f"{field} contains a lone surrogate at position {exc.start}, which is not valid UTF-8"
        ) from None
    return value


def check_optional_text(value: Any, field: str, *, max_chars: int) -> str | None:
    if value is None:
        return None
    return check_text(value, field, max_chars=max_chars, allow_empty=True)


def check_id(value: Any, field: str, *, max_chars: int = 200) -> str:
    """User and thread ids: non-empty strings without control characters."""
    text = check_text(value, field, max_chars=max_chars)
    if any(ord(c) < 32 for c in text):
        raise InvalidInputError(f"{field} must not contain control characters")
    return text


def check_uuid(value: Any, field: str) -> uuid.UUID:
    if isinstance(value, uuid.UUID):
        return value
    if not isinstance(value, str):
        raise InvalidInputError(f"{field} must be a UUID string, got {type(value).__name__}")
    try:
        return uuid.UUID(value.strip())
    except ValueError:
        raise InvalidInputError(f"{field} {value[:60]!r} is not a valid UUID") from None


def check_json(value: Any, field: str, *, max_chars: int) -> Any:
    """A JSON-serialisable value whose strings are storable; returns it unchanged."""
    if value is None:
        return None
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"{field} is not JSON-serialisable: {exc}") from None
    except RecursionError:
        raise InvalidInputError(f"{field} is nested too deeply to store; flatten it") from None
    check_text(text, field, max_chars=max_chars, allow_empty=True)
    # JSON escapes a NUL as \u0000, which jsonb rejects as well.
    if "\\u0000" in text:
        raise InvalidInputError(f"{field} contains a NUL byte (\\u0000), which jsonb cannot store")
    return value


def check_choice(value: Any, field: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise InvalidInputError(f"{field} must be one of {', '.join(choices)}; got {value!r}")
    return str(value)


#: The largest count or limit accepted anywhere (PostgreSQL ``integer``); bigger ones mean a bug.
MAX_INT = 2**31 - 1


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_positive_int(value: Any, field: str, *, maximum: int | None = MAX_INT) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInputError(f"{field} must be a positive integer, got {_short(value)}")
    if maximum is not None and value > maximum:
        raise InvalidInputError(f"{field} must be at most {maximum:,}, got {_short(value)}")
    return value


def check_count(value: Any, field: str, *, maximum: int = MAX_INT) -> int:
    """A non-negative integer (a count, a number of tokens, of turns)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInputError(f"{field} must be a non-negative integer, got {_short(value)}")
    if value > maximum:
        raise InvalidInputError(f"{field} must be at most {maximum:,}, got {_short(value)}")
    return value


def check_optional_count(value: Any, field: str) -> int | None:
    return None if value is None else check_count(value, field)


def check_duration_ms(value: Any, field: str = "duration_ms") -> float | None:
    """None or a finite, non-negative number of milliseconds (at most a year)."""
    if value is None:
        return None
    ok = not isinstance(value, bool) and isinstance(value, (int, float))
    if ok:
        try:
            number = float(value)
        except OverflowError:
            ok = False
        else:
            ok = math.isfinite(number) and 0 <= number <= 365 * 86_400_000
    if not ok:
        raise InvalidInputError(f"{field} must be a non-negative number of milliseconds (at most a year), "
                                f"got {_short(value)}")
    return number


def check_number(value: Any, field: str) -> float:
    """A finite real number (scores, thresholds)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInputError(f"{field} must be a number, got {_short(value)}")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise InvalidInputError(f"{field} must be a finite number, got {_short(value)}")
    return number


def check_bool(value: Any, field: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidInputError(f"{field} must be True or False, got {_short(value)}")
    return value


def check_datetime(value: Any, field: str) -> datetime | None:
    """None or a ``datetime`` (naive ones are taken as UTC by the database session)."""
    if value is not None and not isinstance(value, datetime):
        raise InvalidInputError(f"{field} must be a datetime, got {type(value).__name__}")
    return value


def check_object(value: Any, field: str, *, max_chars: int) -> dict[str, Any] | None:
    """None or a JSON object (a dict with string keys) that jsonb can store."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidInputError(f"{field} must be a JSON object (a dict), got {type(value).__name__}")
    check_json(value, field, max_chars=max_chars)
    return value


_CALL_KEYS = {"id", "name", "args", "type"}
_OPENAI_KEYS = {"id", "type", "function"}


def _call_problem(call: Any) -> str | None:
    if not isinstance(call, dict):
        return f"is a {type(call).__name__}, not an object"
    cid = call.get("id")
    if cid is not None and not isinstance(cid, str):
        return f"has an id of type {type(cid).__name__}; use a string or null"
    if "function" in call:
        extra = set(call) - _OPENAI_KEYS
        fn = call["function"]
        if extra:
            return f"has unknown key(s) {', '.join(sorted(map(str, extra)))}"
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            return "needs function.name, a non-empty string"
        args = fn.get("arguments", {})
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except ValueError:
                return "has function.arguments that are not valid JSON"
        if not isinstance(args, dict):
            return "needs function.arguments to be a JSON object"
        return None
    extra = set(call) - _CALL_KEYS
    if extra:
        return f"has unknown key(s) {', '.join(sorted(map(str, extra)))}"
    if not isinstance(call.get("name"), str) or not call["name"]:
        return "needs name, a non-empty string"
    if not isinstance(call.get("args", {}), dict):
        return f"has args of type {type(call['args']).__name__}; args must be an object"
    return None


def check_tool_calls(value: Any, field: str = "tool_calls", *, max_chars: int) -> list[dict[str, Any]] | None:
    """None or a list of calls, each ``{id, name, args}`` or ``{id, type, function: {name, arguments}}``."""
    if value is None:
        return None
    shape = "a list of {id, name, args} (or OpenAI {id, type, function}) objects"
    if not isinstance(value, list):
        raise InvalidInputError(f"{field} must be {shape}, got {type(value).__name__}")
    for i, call in enumerate(value):
        problem = _call_problem(call)
        if problem:
            raise InvalidInputError(f"{field}[{i}] {problem}; {field} must be {shape}")
    check_json(value, field, max_chars=max_chars)
    return value
