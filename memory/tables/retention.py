"""Retention: expiring rows, and forgetting a user completely.

Both act on agentmem's own tables only: the ones the migrations recorded in
``agentmem_tables`` (migration 007), whatever else lives in the schema (with
``AGENTMEM_SCHEMA=public``, another application's ``orders`` may have a ``user_id``
column; it is never touched). A migration that adds a table registers it there, so
it is covered here without anyone remembering to add it to this module.

``purge_expired`` deletes, in every table with an ``expires_at`` column, the rows
whose ``expires_at`` has passed, and, for tables given a retention period in
``Settings.retention_days`` (days; 0 keeps forever), the rows older than that by
their ``created_at`` (``last_seen`` for entities). A row still referenced through a
foreign key that does not cascade (a summary its messages point to, a fact an older
version was superseded into) is kept until its referrers go, so purging summaries
never puts summarized messages back into a working set and never breaks a key
(migration 008 made those keys NO ACTION: Citus refuses SET NULL on a key holding the
distribution column). Purge runs as the schema owner: it spans users.

``forget_user`` deletes every row of one user in every per-user table, referencing
tables first, once each, in one transaction scoped to that user (so it works through
the app role too), and returns the count per table. The vectors and generated search
columns live in those rows, so they go with them. ``MemoryManager.forget_user`` also
empties the process's embedding cache, which held the user's texts' vectors (and of
their search queries, which were never rows). Caches of other processes are theirs
to clear.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, LiteralString
from collections.abc import Sequence

import psycopg
from psycopg import sql

from memory.tables.base import Table
from memory.store.db import Database
from memory.errors import ConfigurationError
from memory.store.isolation import BOOKKEEPING, agentmem_tables, base_tables, require_owner, user_tables
from memory.settings import Settings
from memory.store.validation import check_datetime, check_id

#: Columns that date a row for age-based retention, in order of preference.
AGE_COLUMNS = ("created_at", "last_seen", "valid_from")

_FKS = """
SELECT child.relname, parent.relname, c.confdeltype,
       ARRAY(SELECT a.attname FROM unnest(c.conkey) WITH ORDINALITY k(n, i)
             JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.n ORDER BY k.i),
       ARRAY(SELECT a.attname FROM unnest(c.confkey) WITH ORDINALITY k(n, i)
             JOIN pg_attribute a ON a.attrelid = c.confrelid AND a.attnum = k.n ORDER BY k.i),
       cardinality(c.conkey)
FROM pg_constraint c
JOIN pg_class child ON child.oid = c.conrelid
JOIN pg_class parent ON parent.oid = c.confrelid
WHERE c.contype = 'f' AND c.connamespace = (SELECT oid FROM pg_namespace WHERE nspname = %s)
  AND child.relname = ANY(%s) AND parent.relname = ANY(%s)
"""


#: (child table, parent table, confdeltype, child columns, parent columns, width)
ForeignKey = tuple[str, str, str, Sequence[str], Sequence[str], int]


def _foreign_keys(conn: psycopg.Connection, schema: str) -> list[ForeignKey]:
    """Foreign keys between agentmem's own tables."""
    ours = base_tables(conn, schema)
    return [(r[0], r[1], r[2], r[3], r[4], r[5]) for r in conn.execute(_FKS, (schema, ours, ours))]


#: Tables that triggers fill from another table's rows, with no foreign key between them
#: (migration 013: a passage's words; 014: the user's passage count; 015: the words of a
#: message's window), as (derived, source) pairs: ``forget_user`` deletes the derived table
#: first, so each count is the rows that table held (and a count row is not written back by
#: the source's delete trigger), and a user's postings go in one range delete rather than
#: word by word through the source's delete trigger.
DERIVED_TABLES: tuple[ForeignKey, ...] = (
    ("knowledge_terms", "knowledge_memory", "a", ("user_id", "id"), ("user_id", "id"), 2),
    ("knowledge_stats", "knowledge_memory", "a", ("user_id",), ("user_id",), 1),
    ("conversational_terms", "conversational_context", "a", ("user_id", "message_id"), ("user_id", "message_id"), 2),
)


def referencing_first(tables: list[str], fks: Sequence[ForeignKey]) -> list[str]:
    """``tables`` ordered so a table comes before the tables it references (cycles: by name)."""
    refs = {t: {p for c, p, *_ in fks if c == t and p != t and p in tables} for t in tables}
    ordered: list[str] = []
    remaining = sorted(tables)
    while remaining:
        # A table goes next when nothing still remaining references it.
        ready = [t for t in remaining if not any(t in refs[o] for o in remaining if o != t)] or remaining[:1]
        ordered.append(ready[0])
        remaining.remove(ready[0])
    return ordered


def _columns(conn: psycopg.Connection, schema: str) -> dict[str, set[str]]:
    """Columns of agentmem's data tables (per-user and shared; not the bookkeeping)."""
    ours = [t for t, kind in agentmem_tables(conn, schema).items() if kind != BOOKKEEPING]
    out: dict[str, set[str]] = {}
    for table, column in conn.execute(
            "SELECT c.relname, a.attname FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid"
            " WHERE c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = %s) AND c.relname = ANY(%s)"
            " AND a.attnum > 0 AND NOT a.attisdropped", (schema, ours)):
        out.setdefault(table, set()).add(column)
    return out


def purge_expired(db: Database, settings: Settings, *, now: datetime | None = None) -> dict[str, int]:
    """Delete expired rows in every table; returns rows deleted per table (zeros included)."""
    with db.connection() as conn:
        require_owner(conn, "purge")
        at = now or _scalar(conn, "SELECT clock_timestamp()")
        columns = _columns(conn, db.schema)
        fks = _foreign_keys(conn, db.schema)
        for table, days in settings.retention_days.items():
            if table not in columns:
                raise ConfigurationError(f"retention_days names {table!r}, which is not a table of agentmem in "
                                         f"{db.schema}")
            if days and not any(c in columns[table] for c in AGE_COLUMNS):
                raise ConfigurationError(f"retention_days: {table!r} has no column dating its rows")
        candidates = [t for t, cols in columns.items()
                      if "expires_at" in cols or settings.retention_days.get(t, 0) > 0]
        counts: dict[str, int] = {}
        for table in referencing_first(candidates, fks):
            conds: list[sql.Composable] = []
            params: list[Any] = []
            if "expires_at" in columns[table]:
                conds.append(sql.SQL("t.expires_at <= %s"))
                params.append(at)
            days = settings.retention_days.get(table, 0)
            if days > 0:
                age = next(c for c in AGE_COLUMNS if c in columns[table])
                conds.append(sql.SQL("t.{} < %s - %s * interval '1 day'").format(sql.Identifier(age)))
                params += [at, days]
            keep = [
                sql.SQL(" AND NOT EXISTS (SELECT 1 FROM {child} r WHERE {match})").format(
                    child=sql.Identifier(child), match=sql.SQL(" AND ").join(
                        sql.SQL("r.{} = t.{}").format(sql.Identifier(c), sql.Identifier(p))
                        for c, p in zip(ccols, pcols, strict=False)))
                for child, parent, deltype, ccols, pcols, _ in fks
                if parent == table and deltype != "c"
            ]
            stmt = sql.SQL("DELETE FROM {} t WHERE ({}){}").format(
                sql.Identifier(table), sql.SQL(" OR ").join(conds), sql.SQL("").join(keep))
            counts[table] = conn.execute(stmt, params).rowcount
    return counts


def forget_user(db: Database, *, user_id: str) -> dict[str, int]:
    """Delete every row of ``user_id`` in agentmem's per-user tables, once each; counts per table.

    Referencing tables go first (and tables derived by triggers, :data:`DERIVED_TABLES`,
    before their source). The row triggers of migration 004 refresh the search
    windows of the rows after a deleted message; they fire at the end of the DELETE,
    when every message of the user is already gone, so they write nothing back and
    one pass leaves no row of the user behind.
    """
    uid = check_id(user_id, "user_id", max_chars=10_000)
    with db.connection(uid) as conn:
        tables = referencing_first(user_tables(conn, db.schema), [*_foreign_keys(conn, db.schema), *DERIVED_TABLES])
        return {table: conn.execute(sql.SQL("DELETE FROM {} WHERE user_id = %s").format(
            sql.Identifier(db.schema, table)), (uid,)).rowcount for table in tables}


def rows_of_user(conn: psycopg.Connection, schema: str, *, user_id: str) -> dict[str, int]:
    """Rows of ``user_id`` per per-user table of agentmem (run it in a transaction scoped to the user)."""
    return {table: _scalar(conn, sql.SQL("SELECT count(*) FROM {}.{} WHERE user_id = %s").format(
        sql.Identifier(schema), sql.Identifier(table)), (user_id,)) for table in user_tables(conn, schema)}


def _scalar(conn: psycopg.Connection, query: LiteralString | sql.Composed, params: Sequence[Any] = ()) -> Any:
    row = conn.execute(query, params).fetchone()
    assert row is not None  # an aggregate or a function call: always one row
    return row[0]


class Retention(Table):
    """Expiry and forgetting a user, over every table of agentmem."""

    def purge_expired(self, *, now: datetime | None = None) -> dict[str, int]:
        """Delete expired rows (``expires_at`` and ``Settings.retention_days``); counts per table."""
        return purge_expired(self.db, self.settings, now=check_datetime(now, "now"))

    def forget_user(self, *, user_id: str) -> dict[str, int]:
        """Delete every row of this user in every table, in one transaction; counts per table.

        The embedding cache of this process is emptied too: it held vectors of the
        user's texts and queries.
        """
        counts = forget_user(self.db, user_id=self._uid(user_id))
        self.embeddings.clear_cache()
        return counts

