"""Input checks run before anything touches the database.

Every public write validates all of its arguments first, so a rejected call writes
nothing. PostgreSQL text cannot hold NUL bytes and UTF-8 cannot hold lone surrogates;
both are rejected here with a message that names the field, rather than surfacing as
a driver error halfway through a batch.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from .errors import InvalidInputError


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
    check_text(text, field, max_chars=max_chars, allow_empty=True)
    # JSON escapes a NUL as \u0000, which jsonb rejects as well.
    if "\\u0000" in text:
        raise InvalidInputError(f"{field} contains a NUL byte (\\u0000), which jsonb cannot store")
    return value


def check_choice(value: Any, field: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise InvalidInputError(f"{field} must be one of {', '.join(choices)}; got {value!r}")
    return str(value)


def check_positive_int(value: Any, field: str, *, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInputError(f"{field} must be a positive integer, got {value!r}")
    if maximum is not None and value > maximum:
        raise InvalidInputError(f"{field} must be at most {maximum}, got {value}")
    return value
