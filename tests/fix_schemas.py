"""Helpers for tests that need a schema or a database of their own.

Most tests isolate themselves by a fresh user id. Tests that count every row of a
schema, or that change what a whole database holds, cannot: they get their own schema
(``own_schema_manager``) or their own database (a conninfo from ``with_conninfo``).
"""

from __future__ import annotations

import shutil
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import psycopg
from psycopg import sql

from memory import HashEmbedder, MemoryManager, Settings
from memory.store import migrations


def with_conninfo(uri: str, **changes: str) -> str:
    """``uri`` with some connection parameters replaced (``dbname=``, ``user=``, ...)."""
    params = psycopg.conninfo.conninfo_to_dict(uri)
    params.update(changes)
    return psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in params.items() if v is not None})


@contextmanager
def own_schema_manager(settings: Settings, pg_uri: str, prefix: str) -> Iterator[MemoryManager]:
    """A hash-embedder manager on a schema nobody else writes to, dropped afterwards."""
    schema = f"{prefix}_{uuid.uuid4().hex[:8]}"
    manager = MemoryManager.open(settings.with_(schema=schema, pool_max_size=4), embedder=HashEmbedder())
    try:
        yield manager
    finally:
        manager.close()
        with psycopg.connect(pg_uri, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


def total_rows(conn: psycopg.Connection) -> int:
    """Every row in every table of the connection's current schema."""
    tables = [r[0] for r in conn.execute(
        "SELECT relname FROM pg_class WHERE relnamespace = current_schema()::regnamespace AND relkind = 'r'")]
    return sum(conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(t))).fetchone()[0]
               for t in tables)


def migrations_before(version: int, into: Path) -> Path:
    """A directory ``into/sql`` holding the packaged migrations older than ``version``: a
    schema migrated from it is one from before that migration, with rows to fill it from."""
    older = into / "sql"
    older.mkdir()
    for mig in migrations.discover(migrations.sql_dir()):
        if mig.version < version:
            shutil.copy(mig.path, older / mig.path.name)
    return older
