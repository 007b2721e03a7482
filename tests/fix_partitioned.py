"""A stand-in for a Citus cluster: a migrated schema whose per-user tables are hash-partitioned on user_id.

Citus routes a statement to one shard when every distributed table in it is
filtered by ``user_id = value`` (directly, or joined on user_id to a table that is);
PostgreSQL prunes a hash-partitioned table to one partition under the same
condition, at planning time. Each per-user table becomes ``PARTITION BY HASH
(user_id)`` with the same modulus, so a user's rows land in partitions of the same
remainder in every table (colocation), and keys, indexes, triggers and row-level
security are recreated as the migrations made them.

With ``debug_print_plan`` every plan the server builds, nested ones included (the
statements of triggers, of functions, of foreign-key checks), is sent to the client
as a LOG message; ``plan_cache_mode = force_custom_plan`` plans each execution with
its values, so pruning happens at planning and the plan's range table lists exactly
the partitions the statement can touch.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

import psycopg
from psycopg import sql
from psycopg_pool import ConnectionPool

from memory import HashEmbedder, MemoryManager, Settings
from memory.store.db import Database, _configure
from memory.retrieval.embeddings import EmbeddingService
from memory.store.isolation import user_tables

MODULUS = 8

_RTE_RELATION = re.compile(r":rtekind\s+0\s+:relid\s+(\d+)")  # the dump wraps lines at any space


def partition_by_user(conn: psycopg.Connection, schema: str, modulus: int = MODULUS) -> list[str]:
    """Rebuild every per-user table of a migrated, empty ``schema`` hash-partitioned; returns them."""
    with conn.transaction():
        conn.execute(sql.SQL("SET LOCAL search_path TO {}, public").format(sql.Identifier(schema)))
        tables = user_tables(conn, schema)
        fks = conn.execute(
            "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint"
            " WHERE contype = 'f' AND connamespace = %s::regnamespace ORDER BY conrelid::regclass::text, conname",
            (schema,)).fetchall()
        triggers = [r[0] for r in conn.execute(
            "SELECT pg_get_triggerdef(t.oid) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid"
            " WHERE NOT t.tgisinternal AND c.relnamespace = %s::regnamespace ORDER BY t.tgname", (schema,))]
        for child, name, _ in fks:
            conn.execute(sql.SQL("ALTER TABLE {} DROP CONSTRAINT {}").format(sql.Identifier(child),
                                                                             sql.Identifier(name)))
        for table in tables:
            old = f"{table}__flat"
            for (index,) in conn.execute("SELECT indexrelid::regclass::text FROM pg_index WHERE indrelid = %s::regclass",
                                         (table,)).fetchall():
                conn.execute(sql.SQL("ALTER INDEX {} RENAME TO {}").format(
                    sql.Identifier(index), sql.Identifier(f"{index}__flat")))
            conn.execute(sql.SQL("ALTER TABLE {} RENAME TO {}").format(sql.Identifier(table), sql.Identifier(old)))
            conn.execute(sql.SQL("CREATE TABLE {} (LIKE {} INCLUDING ALL) PARTITION BY HASH (user_id)").format(
                sql.Identifier(table), sql.Identifier(old)))
            for r in range(modulus):
                conn.execute(sql.SQL("CREATE TABLE {} PARTITION OF {} FOR VALUES WITH (MODULUS {}, REMAINDER {})").format(
                    sql.Identifier(f"{table}_p{r}"), sql.Identifier(table), sql.Literal(modulus), sql.Literal(r)))
        for table in tables:
            conn.execute(sql.SQL("DROP TABLE {} CASCADE").format(sql.Identifier(f"{table}__flat")))
        for child, name, definition in fks:
            conn.execute(sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} " + definition.replace("%", "%%")).format(
                sql.Identifier(child), sql.Identifier(name)))
        for definition in triggers:
            conn.execute(definition.replace("%", "%%"))
        conn.execute("SELECT agentmem_enable_row_security()")
    return tables


def remainder_of(conn: psycopg.Connection, schema: str, table: str, user_id: str, modulus: int = MODULUS) -> int:
    """The hash partition (remainder) ``user_id`` lands in, in every table of the stand-in."""
    for r in range(modulus):
        row = conn.execute("SELECT satisfies_hash_partition(%s::regclass, %s, %s, %s::text)",
                           (f"{schema}.{table}", modulus, r, user_id)).fetchone()
        if row and row[0]:
            return r
    raise AssertionError(f"no partition for {user_id!r}")


@dataclass
class Plan:
    """One plan the server built, with the client statement that was running."""

    statement: str
    partitions: set[str]


@dataclass
class Recorder:
    """Every client statement and every plan, with the partitions each plan's range table holds."""

    partition_names: dict[int, str]
    statements: list[str] = field(default_factory=list)
    plans: list[Plan] = field(default_factory=list)
    current: str = ""

    def notice(self, diag: psycopg.errors.Diagnostic) -> None:
        if diag.message_primary != "plan:" or not diag.message_detail:
            return
        relids = {int(m) for m in _RTE_RELATION.findall(diag.message_detail)}
        self.plans.append(Plan(self.current, {self.partition_names[r] for r in relids if r in self.partition_names}))


class RecordingCursor(psycopg.Cursor[Any]):
    recorder: Recorder | None = None

    def _note(self, query: Any) -> None:
        if self.recorder is not None:
            text = query.as_string(self) if isinstance(query, sql.Composable) else str(query)
            self.recorder.current = text
            self.recorder.statements.append(text)

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:  # type: ignore[override]
        self._note(query)
        return super().execute(query, params, **kwargs)

    def executemany(self, query: Any, params_seq: Any, **kwargs: Any) -> None:  # type: ignore[override]
        self._note(query)
        return super().executemany(query, params_seq, **kwargs)


@contextmanager
def recording_manager(settings: Settings, schema: str) -> Iterator[tuple[MemoryManager, Recorder]]:
    """A MemoryManager on ``schema`` whose every connection reports its statements and plans."""
    with psycopg.connect(settings.database_url or "", autocommit=True) as conn:
        names = {int(oid): str(name) for oid, name in conn.execute(
            "SELECT c.oid, c.relname FROM pg_class c WHERE c.relnamespace = %s::regnamespace AND c.relispartition",
            (schema,))}
    recorder = Recorder(names)
    cursor_class = type("BoundRecordingCursor", (RecordingCursor,), {"recorder": recorder})
    base = _configure(schema)

    def configure(conn: psycopg.Connection) -> None:
        base(conn)
        conn.add_notice_handler(recorder.notice)
        conn.execute("SET plan_cache_mode = force_custom_plan")
        conn.execute("SET debug_print_plan = on")
        conn.execute("SET debug_pretty_print = off")
        conn.execute("SET client_min_messages = log")
        conn.commit()
        conn.cursor_factory = cursor_class

    embedder = HashEmbedder()
    service = EmbeddingService(embedder)
    MemoryManager.open(settings.with_(schema=schema), embedder=embedder).close()  # migrated: checks only
    pool = ConnectionPool(settings.database_url or "", min_size=1, max_size=4, configure=configure, open=True,
                          name="recording")
    db = Database(conninfo=settings.database_url or "", schema=schema, dimension=service.dimension, pool=pool)
    mm = MemoryManager(db, service, settings.with_(schema=schema))
    try:
        yield mm, recorder
    finally:
        mm.close()
