"""Dates Python cannot hold, read as the nearest date it can.

PostgreSQL stores timestamps from 4713 BC to 294276 AD, plus ``infinity`` and
``-infinity``; Python's ``datetime`` stops at years 1 and 9999, and psycopg's loaders
raise ``DataError`` beyond them. One such row (written by plain SQL, by a DBA, by an
import) would make every read that returns it fail: ``read_thread``, search, even
``list_threads()`` across users. So every pooled connection reads ``timestamptz``,
``timestamp`` and ``date`` values through loaders that clamp an out-of-range value to
:data:`LATEST` / :data:`EARLIEST` (a day inside Python's range, so converting it to a
local time zone cannot overflow). The row in the database is left as it is; ordering
and filtering happen in SQL on the real value. Anything else the base loader refuses
(a ``DateStyle`` it cannot parse) still raises.
"""

from __future__ import annotations

from datetime import datetime, UTC
from typing import Any

import psycopg
from psycopg.abc import AdaptContext, Buffer
from psycopg.adapt import Loader
from psycopg.pq import Format

LATEST = datetime(9999, 12, 31, tzinfo=UTC)
EARLIEST = datetime(1, 1, 2, tzinfo=UTC)


def _is_early_text(data: Buffer) -> bool | None:
    """True for a value before year 1, False for one after 9999, None if neither."""
    text = bytes(data).decode("ascii", "replace").strip()
    if text.startswith("-infinity") or text.endswith(" BC"):
        return True
    head = text.split("-", 1)[0]
    if text.startswith("infinity") or (head.isdigit() and len(head) > 4):
        return False
    return None


def _is_early_binary(data: Buffer, size: int) -> bool:
    return int.from_bytes(bytes(data)[:size], "big", signed=True) < 0


_CLASSES: dict[tuple[type, bool], type] = {}


def _clamping(base: type, early: Any, late: Any, binary_size: int | None) -> type:
    """A loader wrapping ``base`` (psycopg's C loaders cannot be subclassed)."""
    key = (base, binary_size is not None)
    if key in _CLASSES:
        return _CLASSES[key]

    class Clamping(Loader):
        format = Format.BINARY if binary_size else Format.TEXT

        def __init__(self, oid: int, context: AdaptContext | None = None) -> None:
            super().__init__(oid, context)
            self._base = base(oid, context)

        def load(self, data: Buffer) -> Any:
            try:
                return self._base.load(data)
            except psycopg.DataError:
                is_early = _is_early_binary(data, binary_size) if binary_size else _is_early_text(data)
                if is_early is None:
                    raise
                return early if is_early else late

    Clamping.__name__ = Clamping.__qualname__ = f"Clamping{base.__name__}"
    _CLASSES[key] = Clamping
    return Clamping


def register_clamping_loaders(context: AdaptContext) -> None:
    """Make ``context`` (a connection) read out-of-range dates as EARLIEST/LATEST."""
    adapters = context.adapters
    kinds = [("timestamptz", EARLIEST, LATEST, 8), ("timestamp", EARLIEST.replace(tzinfo=None),
                                                      LATEST.replace(tzinfo=None), 8),
             ("date", EARLIEST.date(), LATEST.date(), 4)]
    for name, early, late, size in kinds:
        info = adapters.types.get(name)
        if info is None:  # pragma: no cover - builtin types are always known
            continue
        for fmt in (Format.TEXT, Format.BINARY):
            base = adapters.get_loader(info.oid, fmt)
            if base is None or base.__name__.startswith("Clamping"):
                continue
            adapters.register_loader(info.oid, _clamping(base, early, late, size if fmt == Format.BINARY else None))


__all__ = ["EARLIEST", "LATEST", "register_clamping_loaders"]
