"""SQL over ``toolbox_memory``: the stored description of each tool, and the two searches.

Rows are keyed by ``(namespace, name)``. Registration is an upsert
(``INSERT ... ON CONFLICT (namespace, name) DO UPDATE``), so processes that register the
same tool at the same moment leave exactly one row, whichever wins holding a complete
description and its embedding. One exception to "the last write wins": a docstring
fallback (a model that failed in one process) never replaces an augmented row of the
same content that another process wrote meanwhile; the augmented row is kept and
returned. Both searches are restricted to the names the calling process registered:
the table is shared by every process of a deployment, but a process can only run the
functions it holds.

Tool rows feed every user's prompt, so the application role may only read them
(migration 007): tools are registered by the schema owner or by a role made with
``agentmem create-app-role ROLE --tool-registrar``. A process on the app role can
still "register" a tool that is stored unchanged (same content hash): that is a read.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Sequence

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
    created_at: datetime
    updated_at: datetime
    embedding: Any = field(default=None, repr=False)


_COLUMNS = ("id, namespace, name, docstring, description, json_schema, queries, search_text, content_hash,"
            " augmented, created_at, updated_at, embedding")


def fetch(db: Database, namespace: str, name: str) -> ToolRow | None:
    with db.connection() as conn, conn.cursor(row_factory=class_row(ToolRow)) as cur:
        return cur.execute(
            "SELECT id, namespace, name, docstring, description, json_schema, queries, search_text, content_hash,"
            " augmented, created_at, updated_at, embedding FROM toolbox_memory WHERE namespace = %s AND name = %s",
            (namespace, name),
        ).fetchone()


def upsert(db: Database, *, namespace: str, name: str, docstring: str, description: str,
           json_schema: dict[str, Any], queries: Sequence[str], search_text: str, content_hash: str,
           augmented: bool, embedding: np.ndarray) -> ToolRow:
    """Insert or replace the row of ``(namespace, name)``; safe to race from many processes.

    Refused with :class:`AccessDeniedError` for a role that may not register tools.
    """
    try:
        with db.connection() as conn, conn.cursor(row_factory=class_row(ToolRow)) as cur:
            row = _upsert(cur, namespace, name, docstring, description, json_schema, queries, search_text,
                          content_hash, augmented, embedding)
    except psycopg.errors.InsufficientPrivilege as exc:
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
            embedding: np.ndarray) -> ToolRow | None:
    row: ToolRow | None = cur.execute(
        "INSERT INTO toolbox_memory (namespace, name, docstring, description, json_schema, queries, search_text,"
        " content_hash, augmented, embedding) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
        " ON CONFLICT (namespace, name) DO UPDATE SET docstring = EXCLUDED.docstring,"
        " description = EXCLUDED.description, json_schema = EXCLUDED.json_schema, queries = EXCLUDED.queries,"
        " search_text = EXCLUDED.search_text, content_hash = EXCLUDED.content_hash,"
        " augmented = EXCLUDED.augmented, embedding = EXCLUDED.embedding, updated_at = clock_timestamp()"
        " WHERE NOT (toolbox_memory.augmented AND NOT EXCLUDED.augmented"
        "  AND toolbox_memory.content_hash = EXCLUDED.content_hash)"
        " RETURNING " + _COLUMNS,
        (namespace, name, docstring, description, Jsonb(json_schema), Jsonb(list(queries)), search_text,
         content_hash, augmented, embedding),
    ).fetchone()
    if row is None:  # kept an augmented row of the same content (locked by the statement above)
        row = cur.execute("SELECT " + _COLUMNS + " FROM toolbox_memory WHERE namespace = %s AND name = %s",
                          (namespace, name)).fetchone()
    return row


def vector_ranking(db: Database, namespace: str, names: Sequence[str], qvec: np.ndarray,
                   limit: int) -> list[tuple[str, float]]:
    """Registered tools nearest to ``qvec`` (cosine), with their similarity, best first."""
    with db.connection() as conn:
        conn.execute("SET LOCAL hnsw.iterative_scan = strict_order")
        rows = conn.execute(
            "SELECT name, 1 - (embedding <=> %(q)s) FROM toolbox_memory"
            " WHERE namespace = %(ns)s AND name = ANY(%(names)s) AND embedding IS NOT NULL"
            " ORDER BY embedding <=> %(q)s LIMIT %(limit)s",
            {"q": qvec, "ns": namespace, "names": list(names), "limit": limit},
        ).fetchall()
    return [(r[0], float(r[1])) for r in rows]


def keyword_ranking(db: Database, namespace: str, names: Sequence[str], text: str, tsquery: str,
                    limit: int) -> list[tuple[str, float]]:
    """Registered tools sharing words with ``text`` (english stems), best first, with a coverage.

    PostgreSQL's ``ts_rank`` has no inverse document frequency: a request's "get" or
    "city", found in dozens of tool texts, weighs as much as "umbrella". Tool texts are
    short, so each tool is scored instead by the IDF (BM25's form, counted over this
    process's tools) of the request's stems it contains, divided by the IDF of all the
    request's stems: the share of the request's information the tool's text matches, in
    [0, 1] (a stem no tool contains counts at full IDF). The GIN index on ``search_tsv``
    finds the candidates (``tsquery`` is the OR of the request's words).
    """
    with db.connection() as conn:
        rows = conn.execute(
            "WITH q AS (SELECT DISTINCT unnest(tsvector_to_array(to_tsvector('english', %(text)s))) AS lex),"
            " docs AS (SELECT name, tsvector_to_array(search_tsv) AS lexes"
            "  FROM toolbox_memory, to_tsquery('english', %(tsq)s) AS tq"
            "  WHERE namespace = %(ns)s AND name = ANY(%(names)s) AND search_tsv @@ tq),"
            " hits AS (SELECT docs.name, q.lex FROM docs JOIN q ON q.lex = ANY(docs.lexes)),"
            " idf AS (SELECT q.lex, ln((%(total)s - count(hits.name) + 0.5) / (count(hits.name) + 0.5) + 1) AS w"
            "  FROM q LEFT JOIN hits USING (lex) GROUP BY q.lex)"
            " SELECT hits.name, sum(idf.w) / (SELECT sum(w) FROM idf) AS coverage"
            " FROM hits JOIN idf USING (lex) GROUP BY hits.name ORDER BY coverage DESC, hits.name"
            " LIMIT %(limit)s",
            {"text": text, "tsq": tsquery, "ns": namespace, "names": list(names), "total": len(names),
             "limit": limit},
        ).fetchall()
    return [(r[0], float(r[1])) for r in rows]
