"""Reading the DBA views of migration 005 from Python (the CLI and notebooks use these).

The views themselves are plain SQL for DBAs (``SELECT * FROM agent_memory.consolidation_status``);
these functions add the filters and order a caller wants and return typed rows.

The monitor status in ``consolidation_status`` is an estimate of the unsummarized
conversation alone (``ceil(characters / 4)`` tokens, SQL has no tokenizer) against the
usable budget of a context window. The view reads the window and thresholds from
session settings (``agentmem.context_window`` ...); :func:`consolidation_status` sets
them from :class:`~memory.settings.Settings` for its transaction, so the estimate uses
the same thresholds as :mod:`memory.consolidation.monitor`.

The views run with the schema owner's rights and are for DBAs: the application role
of :mod:`memory.store.isolation` is never granted them.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import class_row

from memory.store.db import Database
from memory.errors import AccessDeniedError
from memory.settings import Settings
from memory.store.validation import check_id, check_positive_int

VIEWS = ("consolidation_status", "summary_lineage", "table_sizes", "memory_growth", "fact_history")


@dataclass
class ThreadStatus:
    user_id: str
    thread_id: str
    total_messages: int
    unsummarized_messages: int
    summarized_messages: int
    summaries: int
    oldest_unsummarized_at: datetime | None
    last_message_at: datetime | None
    last_summary_at: datetime | None
    unsummarized_chars: int
    est_unsummarized_tokens: int
    context_window: int
    est_usage_percent: Decimal
    monitor_status: str


@dataclass
class SummaryLineage:
    summary_id: uuid.UUID
    user_id: str
    thread_id: str | None
    label: str
    recorded_source_count: int
    source_rows: int
    sources_intact: bool
    first_message_id: int | None
    last_message_id: int | None
    first_message_at: datetime | None
    last_message_at: datetime | None
    source_tokens: int | None
    summary_tokens: int | None
    compression_ratio: Decimal | None
    method: str | None
    created_at: datetime


@dataclass
class TableSize:
    table_name: str
    row_count: int
    rows_last_day: int | None
    rows_last_week: int | None
    total_bytes: int
    table_bytes: int
    index_bytes: int
    toast_bytes: int
    total_size: str
    est_live_rows: int | None
    dead_rows: int | None
    last_vacuum: datetime | None
    last_analyze: datetime | None


@dataclass
class FactVersion:
    user_id: str
    chain_id: uuid.UUID
    version: int
    fact_id: uuid.UUID
    category: str
    content: str
    status: str
    valid_from: datetime
    valid_to: datetime | None
    superseded_by: uuid.UUID | None
    superseded_by_content: str | None
    source_message_id: int | None
    created_at: datetime
    updated_at: datetime


def monitor_settings(settings: Settings, context_window: int | None = None) -> dict[str, str]:
    """The session settings the views' monitor functions read, from ``settings``."""
    window = context_window if context_window is not None else settings.default_context_window
    check_positive_int(window, "context_window", maximum=100_000_000)
    return {
        "agentmem.context_window": str(window),
        "agentmem.reserved_output_tokens": str(settings.reserved_output_tokens),
        "agentmem.safety_margin": str(settings.safety_margin),
        "agentmem.warning_threshold": str(settings.warning_threshold),
        "agentmem.critical_threshold": str(settings.critical_threshold),
    }


def _filters(**values: Any) -> tuple[sql.Composable, list[Any]]:
    conds, params = [], []
    for column, value in values.items():
        if value is not None:
            conds.append(sql.SQL("{} = %s").format(sql.Identifier(column)))
            params.append(value)
    if not conds:
        return sql.SQL(""), params
    return sql.SQL(" WHERE ") + sql.SQL(" AND ").join(conds), params


def _read(db: Database, row: type, view: str, order: str, settings: dict[str, str] | None = None,
          **filters: Any) -> list[Any]:
    where, params = _filters(**filters)
    stmt = sql.SQL("SELECT * FROM {view}{where} ORDER BY {order}").format(
        view=sql.Identifier(db.schema, view), where=where,
        order=sql.SQL(", ").join(sql.SQL(o) for o in order.split(", ")))
    try:
        with db.connection(filters.get("user_id")) as conn:
            for name, value in (settings or {}).items():
                conn.execute("SELECT set_config(%s, %s, true)", (name, value))
            cur: psycopg.Cursor[Any]
            with conn.cursor(row_factory=class_row(row)) as cur:
                return cur.execute(stmt, params).fetchall()
    except (psycopg.errors.InsufficientPrivilege, AccessDeniedError) as exc:
        raise AccessDeniedError(
            f"the view {view} is for the schema owner (views run with their owner's rights, so they are never "
            "granted to the application role): run this with the owner's AGENTMEM_DATABASE_URL") from exc


def _id(value: str | None, name: str) -> str | None:
    return None if value is None else check_id(value, name, max_chars=10_000)


def consolidation_status(db: Database, settings: Settings, *, user_id: str | None = None,
                         thread_id: str | None = None, context_window: int | None = None) -> list[ThreadStatus]:
    """Rows of ``consolidation_status``, most recently active thread first."""
    return _read(db, ThreadStatus, "consolidation_status", "last_message_at DESC NULLS LAST, user_id, thread_id",
                 monitor_settings(settings, context_window),
                 user_id=_id(user_id, "user_id"), thread_id=_id(thread_id, "thread_id"))


def summary_lineage(db: Database, *, user_id: str | None = None, thread_id: str | None = None,
                    summary_id: str | uuid.UUID | None = None) -> list[SummaryLineage]:
    """Rows of ``summary_lineage``, oldest summary first."""
    from memory.store.validation import check_uuid

    sid = check_uuid(summary_id, "summary_id") if summary_id is not None else None
    return _read(db, SummaryLineage, "summary_lineage", "created_at, summary_id",
                 user_id=_id(user_id, "user_id"), thread_id=_id(thread_id, "thread_id"), summary_id=sid)


def table_sizes(db: Database) -> list[TableSize]:
    """Rows of ``table_sizes``, largest table first (exact counts: each table is scanned)."""
    return _read(db, TableSize, "table_sizes", "total_bytes DESC, table_name")


def fact_history(db: Database, *, user_id: str | None = None) -> list[FactVersion]:
    """Rows of ``fact_history``: each chain in version order."""
    return _read(db, FactVersion, "fact_history", "user_id, chain_id, version",
                 user_id=_id(user_id, "user_id"))
