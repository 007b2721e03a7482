"""Output helpers of the CLI: JSON for pipes, rich tables and spinners for people."""

from __future__ import annotations

import dataclasses
import json
import uuid
from contextlib import contextmanager
from datetime import datetime
from decimal import Decimal
from typing import Any
from collections.abc import Iterator, Sequence

import click


def one_line(text: str) -> str:
    return " ".join(str(text).split())


def jsonable(value: Any) -> Any:
    """Dataclasses, datetimes, UUIDs and Decimals as plain JSON values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)
                if f.name != "embedding"}
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, Decimal):
        return float(value)
    return value


def emit_json(value: Any) -> None:
    click.echo(json.dumps(jsonable(value), ensure_ascii=False, indent=2))


def console(stderr: bool = False) -> Any:
    import os

    from rich.console import Console

    out = Console(stderr=stderr, highlight=False, soft_wrap=False)
    if not out.is_terminal and "COLUMNS" not in os.environ:
        out.width = 120  # piped or captured: rich would assume 80 columns
    return out


def table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    from rich import box
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    t = Table(title=escape(title) if title else None, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for c in columns:
        t.add_column(c, overflow="fold")
    for r in rows:
        t.add_row(*[v if isinstance(v, Text) else escape("" if v is None else str(v)) for v in r])
    console().print(t)


def styled(value: str, style: str) -> Any:
    from rich.text import Text

    return Text(value, style=style)


def when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M") if value else ""


def short(text: str, width: int = 80) -> str:
    flat = one_line(text)
    return flat if len(flat) <= width else flat[:width - 1] + "…"


STATUS_STYLE = {"ok": "green", "warning": "yellow", "critical": "bold red"}


@contextmanager
def spinner(message: str) -> Iterator[None]:
    """A spinner on stderr while slow work runs (silent when stderr is not a terminal)."""
    err = console(stderr=True)
    if not err.is_terminal:
        yield
        return
    with err.status(message):
        yield
