"""SQL over ``toolbox_memory``: the stored description of each tool, and the two searches.

Rows are keyed by ``(namespace, name)``. Registration is an upsert
(``INSERT ... ON CONFLICT (namespace, name) DO UPDATE``), so processes that register the
same tool at the same moment leave exactly one row, whichever wins holding a complete
description and its embedding. One exception to "the last write wins": a docstring
fallback (a model that failed in one process) never replaces an augmented row of the
same content that another process wrote meanwhile; the augmented row is kept and
returned. Ranking happens in the process (``index.py``) over the rows of the tools that
process registered: the table is shared by every process of a deployment, but a
process can only run the functions it holds.

Tool rows feed every user's prompt, so the application role may only read them
(migration 007): tools are registered by the schema owner or by a role made with
``agentmem create-app-role ROLE --tool-registrar``. A process on the app role can
still "register" a tool that is stored unchanged (same content hash): that is a read.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from collections.abc import Sequence

import numpy as np
import psycopg
from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from memory import AccessDeniedError, Database


@dataclass
class ToolRow:
    id: uuid.UUID
    namespace: str
    name: str
    docstring: str
    description: str
    json_schema: dict[str, Any]
    queries: list[str]
    search_text: str
    content_hash: str
    augmented: bool
    category: str
    created_at: datetime
    updated_at: datetime
    embedding: Any = field(default=None, repr=False)


_COLUMNS = ("id, namespace, name, docstring, description, json_schema, queries, search_text, content_hash,"
            " augmented, category, created_at, updated_at, embedding")


def fetch(db: Database, namespace: str, name: str) -> ToolRow | None:
    with db.connection() as conn, conn.cursor(row_factory=class_row(ToolRow)) as cur:
        return cur.execute(
            "SELECT id, namespace, name, docstring, description, json_schema, queries, search_text, content_hash,"
            " augmented, category, created_at, updated_at, embedding FROM toolbox_memory"
            " WHERE namespace = %s AND name = %s",
            (namespace, name),
        ).fetchone()


def fetch_many(db: Database, namespace: str, names: Sequence[str] | None = None) -> list[ToolRow]:
    """The stored rows of ``namespace`` (those of ``names`` only, if given), by name."""
    with db.connection() as conn, conn.cursor(row_factory=class_row(ToolRow)) as cur:
        return cur.execute(
            "SELECT id, namespace, name, docstring, description, json_schema, queries, search_text, content_hash,"
            " augmented, category, created_at, updated_at, embedding FROM toolbox_memory"
            " WHERE namespace = %(ns)s AND (%(all)s OR name = ANY(%(names)s)) ORDER BY name",
            {"ns": namespace, "all": names is None, "names": list(names or [])},
        ).fetchall()


def upsert(db: Database, *, namespace: str, name: str, docstring: str, description: str,
           json_schema: dict[str, Any], queries: Sequence[str], search_text: str, content_hash: str,
           augmented: bool, embedding: np.ndarray, category: str = "") -> ToolRow:
    """Insert or replace the row of ``(namespace, name)``; safe to race from many processes.

    Refused with :class:`AccessDeniedError` for a role that may not register tools.
    """
    try:
        with db.connection() as conn, conn.cursor(row_factory=class_row(ToolRow)) as cur:
            row = _upsert(cur, namespace, name, docstring, description, json_schema, queries, search_text,
                          content_hash, augmented, embedding, category)
    except (psycopg.errors.InsufficientPrivilege, AccessDeniedError) as exc:
        user = psycopg.conninfo.conninfo_to_dict(db.conninfo).get("user") or "this role"
        raise AccessDeniedError(
            f"role {user!r} may not register or change tool {namespace}/{name}: tools feed every user's prompt, "
            "so only the schema owner or a tool registrar writes toolbox_memory. Register tools with the owner's "
            "AGENTMEM_DATABASE_URL, or with a role made by `agentmem create-app-role ROLE --tool-registrar`; "
            "this role then reuses the stored tool as long as it is unchanged"
        ) from exc
    assert row is not None
    return row


def _upsert(cur: Any, namespace: str, name: str, docstring: str, description: str, json_schema: dict[str, Any],
            queries: Sequence[str], search_text: str, content_hash: str, augmented: bool,
            embedding: np.ndarray, category: str) -> ToolRow | None:
    row: ToolRow | None = cur.execute(
        "INSERT INTO toolbox_memory (namespace, name, docstring, description, json_schema, queries, search_text,"
        " content_hash, augmented, embedding, category) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
        " ON CONFLICT (namespace, name) DO UPDATE SET docstring = EXCLUDED.docstring,"
        " description = EXCLUDED.description, json_schema = EXCLUDED.json_schema, queries = EXCLUDED.queries,"
        " search_text = EXCLUDED.search_text, content_hash = EXCLUDED.content_hash,"
        " augmented = EXCLUDED.augmented, embedding = EXCLUDED.embedding, category = EXCLUDED.category,"
        " updated_at = clock_timestamp()"
        " WHERE NOT (toolbox_memory.augmented AND NOT EXCLUDED.augmented"
        "  AND toolbox_memory.content_hash = EXCLUDED.content_hash)"
        " RETURNING " + _COLUMNS,
        (namespace, name, docstring, description, Jsonb(json_schema), Jsonb(list(queries)), search_text,
         content_hash, augmented, embedding, category),
    ).fetchone()
    if row is None:  # kept an augmented row of the same content (locked by the statement above)
        row = cur.execute("SELECT " + _COLUMNS + " FROM toolbox_memory WHERE namespace = %s AND name = %s",
                          (namespace, name)).fetchone()
    return row
