"""Connections: where the database is, the schema on it, and the pool to it.

``connect()`` resolves the server (``AGENTMEM_DATABASE_URL``, then ``DATABASE_URL``,
else the embedded server), applies pending migrations, checks the embedding
dimension, and returns a :class:`Database` holding a ``psycopg_pool.ConnectionPool``.
Every pooled connection has pgvector's types registered and ``search_path`` set to
the agentmem schema in the pool's ``configure`` callback, so a transaction is simply
``with db.pool.connection() as conn:``.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

import psycopg
from pgvector.psycopg import register_vector
from psycopg import sql
from psycopg_pool import ConnectionPool, PoolTimeout

from . import embedded, migrations
from .dates import register_clamping_loaders
from .errors import AccessDeniedError, DatabaseUnavailableError
from .settings import Settings

log = logging.getLogger(__name__)


@dataclass
class Database:
    """A migrated agentmem schema and a pool of configured connections to it."""

    conninfo: str
    schema: str
    dimension: int
    pool: ConnectionPool
    embedded: bool = False
    applied: list[str] = field(default_factory=list)

    def connection(self, user_id: str | None = None) -> Any:
        """``with db.connection() as conn:`` is one transaction.

        With ``user_id`` the transaction first sets ``agentmem.user_id`` locally (it ends
        with the transaction, so a pooled connection never carries it to the next user):
        the key of the row-level-security policies that apply when agentmem connects
        through a non-owner role (see ``memory.isolation``). The owner bypasses them.
        """
        if user_id is not None:
            return _user_transaction(self.pool, user_id)
        try:
            return self.pool.connection()
        except PoolTimeout as exc:  # pragma: no cover - depends on load
            raise DatabaseUnavailableError(f"no database connection available: {exc}") from exc

    def close(self) -> None:
        self.pool.close()

    def __enter__(self) -> "Database":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextmanager
def _user_transaction(pool: ConnectionPool, user_id: str) -> Iterator[psycopg.Connection]:
    try:
        with pool.connection() as conn:
            # SET LOCAL, not set_config(): Citus forwards SET LOCAL commands to the workers
            # (citus.propagate_set_commands = local), where the row-level policies run.
            conn.execute(sql.SQL("SET LOCAL agentmem.user_id = {}").format(sql.Literal(user_id)))
            yield conn
    except PoolTimeout as exc:  # pragma: no cover - depends on load
        raise DatabaseUnavailableError(f"no database connection available: {exc}") from exc
    except psycopg.errors.InsufficientPrivilege as exc:
        raise AccessDeniedError(f"the database refused this for user {user_id[:60]!r}: {exc}".strip()) from exc


def resolve_conninfo(settings: Settings) -> tuple[str, bool]:
    """The connection string to use and whether it is the embedded server."""
    if settings.database_url:
        return settings.database_url, False
    return embedded.start_server(settings.data_dir / "pg"), True


def _configure(schema: str):
    def configure(conn: psycopg.Connection) -> None:
        register_vector(conn)
        register_clamping_loaders(conn)
        ext = conn.execute(
            "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace "
            "WHERE e.extname = 'vector'"
        ).fetchone()
        conn.execute(
            sql.SQL("SET search_path TO {}, {}").format(sql.Identifier(schema), sql.Identifier(ext[0] if ext else "public"))
        )
        conn.commit()

    return configure


def connect(settings: Settings | None = None, *, dimension: int, model_name: str,
            conninfo: str | None = None, backend: str = "") -> Database:
    """Open (and migrate) the database described by ``settings``."""
    settings = settings or Settings.from_env()
    is_embedded = False
    if conninfo is None:
        conninfo, is_embedded = resolve_conninfo(settings)
    applied = migrations.migrate(conninfo, schema=settings.schema, dimension=dimension, model_name=model_name,
                                 backend=backend)
    if applied:
        log.info("applied migrations: %s", ", ".join(applied))
    pool = ConnectionPool(
        conninfo,
        min_size=settings.pool_min_size,
        max_size=settings.pool_max_size,
        configure=_configure(settings.schema),
        open=False,
        name="agentmem",
    )
    try:
        pool.open(wait=True, timeout=30)
    except PoolTimeout as exc:
        pool.close()
        raise DatabaseUnavailableError(f"could not open connections to {_redact(conninfo)}: {exc}") from exc
    return Database(conninfo=conninfo, schema=settings.schema, dimension=dimension, pool=pool,
                    embedded=is_embedded, applied=applied)


def _redact(conninfo: str) -> str:
    try:
        params = psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError:
        return "<database>"
    params.pop("password", None)
    return psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in params.items() if v is not None})
