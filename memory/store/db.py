"""Connections: where the database is, the schema on it, and the pool to it.

``connect()`` resolves the server (``AGENTMEM_DATABASE_URL``, then ``DATABASE_URL``,
else the embedded server), applies pending migrations, checks the embedding
dimension, and returns a :class:`Database` holding a ``psycopg_pool.ConnectionPool``.
Every pooled connection has pgvector's types registered and ``search_path`` set to
the agentmem schema in the pool's ``configure`` callback, so a transaction is simply
``with db.pool.connection() as conn:``.

Losing the server mid-session: a statement that fails because the connection is gone
(psycopg ``OperationalError`` of a broken connection, SQLSTATE class 08 or 57P01-57P03)
raises :class:`DatabaseUnavailableError` from ``db.connection()``, with the driver error
as its cause. The broken connection is discarded, and every connection the pool held
at that moment is pinged once when next handed out (psycopg_pool's ``check``) and
replaced if dead: once the server is back, the next call works, with no round trip
added while nothing goes wrong.
"""

from __future__ import annotations

import logging
import time
import weakref
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable, Iterator, Sequence

import psycopg
from pgvector.psycopg import register_vector
from psycopg import sql
from psycopg_pool import ConnectionPool, PoolTimeout

from memory.store import conninfo as _conninfo, embedded, migrations
from memory.store.dates import register_clamping_loaders
from memory.errors import DatabaseUnavailableError
from memory.store.driver_errors import connection_lost as connection_lost, translate as driver_translate
from memory.settings import Settings

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
    health: _PoolHealth | None = None

    def connection(self, user_id: str | None = None, *,
                   scope: bool = True) -> AbstractContextManager[psycopg.Connection[Any]]:
        """``with db.connection() as conn:`` is one transaction.

        With ``user_id`` the transaction first sets ``agentmem.user_id`` locally (it ends
        with the transaction, so a pooled connection never carries it to the next user):
        the key of the row-level-security policies that apply when agentmem connects
        through a non-owner role (see ``memory.store.isolation``). The owner bypasses them.
        ``scope=False``: the caller sends that statement itself, as the transaction's first
        (``memory.store.ops.run`` sends it in one round trip with the settings that open a
        search); errors are still reported for ``user_id``.
        """
        return _transaction(self.pool, user_id, self.health, scope)

    def close(self) -> None:
        self.pool.close()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _PoolHealth:
    """When a connection was last found lost, and when each pooled connection was last known good.

    The pool's ``check`` callback pings only connections older than the last loss, so
    healthy operation costs nothing and a restart is absorbed on the next checkout.
    """

    def __init__(self) -> None:
        self.lost_at = 0.0
        self.good_at: weakref.WeakKeyDictionary[psycopg.Connection, float] = weakref.WeakKeyDictionary()

    def configured(self, conn: psycopg.Connection) -> None:
        self.good_at[conn] = time.monotonic()

    def check(self, conn: psycopg.Connection) -> None:
        if self.good_at.get(conn, 0.0) <= self.lost_at:
            ConnectionPool.check_connection(conn)  # raises if dead: the pool discards it and tries another
            self.good_at[conn] = time.monotonic()


def user_scope(user_id: str) -> sql.Composed:
    """The first statement of a user's transaction (see :meth:`Database.connection`)."""
    # SET LOCAL, not set_config(): Citus forwards SET LOCAL commands to the workers
    # (citus.propagate_set_commands = local), where the row-level policies run.
    return sql.SQL("SET LOCAL agentmem.user_id = {}").format(sql.Literal(user_id))


def translate(exc: BaseException, user_id: str | None, used: Any, health: _PoolHealth | None) -> BaseException | None:
    """The agentmem error a transaction's driver or pool error means (None: re-raise it as it is).

    Shared by the sync transaction below and the async one of ``memory.aio``; every
    ``psycopg.Error`` maps through :func:`memory.store.driver_errors.translate`."""
    if isinstance(exc, PoolTimeout):  # the async pool raises the same class
        return DatabaseUnavailableError(
            f"no database connection available: {exc}. Check that the server is running and reachable; "
            "agentmem reconnects by itself once it is.")
    if isinstance(exc, psycopg.Error):
        error = driver_translate(exc, user_id=user_id, conn=used)
        if isinstance(error, DatabaseUnavailableError) and health is not None:
            health.lost_at = time.monotonic()
        return error
    return None


@contextmanager
def _transaction(pool: ConnectionPool, user_id: str | None,
                 health: _PoolHealth | None, scope: bool = True) -> Iterator[psycopg.Connection[Any]]:
    used: psycopg.Connection[Any] | None = None
    try:
        with pool.connection() as conn:
            used = conn
            if user_id is not None and scope:
                conn.execute(user_scope(user_id))
            yield conn
    except (PoolTimeout, psycopg.Error) as exc:  # the one place driver errors become agentmem errors
        mapped = translate(exc, user_id, used, health)
        if mapped is None:
            raise
        raise mapped from exc


def resolve_conninfo(settings: Settings) -> tuple[str, bool]:
    """The connection string to use and whether it is the embedded server."""
    if settings.database_url:
        _conninfo.check_conninfo(settings.database_url)
        return settings.database_url, False
    return embedded.start_server(settings.data_dir / "pg", runtime_dir=settings.runtime_dir), True


#: The schema the ``vector`` extension lives in (configure puts it on the search_path).
VECTOR_SCHEMA = ("SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace"
                 " WHERE e.extname = 'vector'")


def search_path(schema: str, vector_schema: str | None) -> sql.Composed:
    return sql.SQL("SET search_path TO {}, {}").format(sql.Identifier(schema),
                                                       sql.Identifier(vector_schema or "public"))


#: A new backend loads what a search needs the first time a statement uses it: the text
#: search dictionaries, pgvector's library, and each table's catalog entries (the relation,
#: its indexes, its row-level policies), read while the statement is planned. ``configure``
#: loads them on each new pooled connection (~4 ms there), so that its first search does not:
#: at 200 users x 500 messages the first search on a new connection took 15-29 ms of its own
#: time against ~5 for the next, 11-14 ms once warmed (the rest is each statement's first
#: preparation on the connection). Best effort: a failure is logged and changes nothing.
WARM_FUNCTIONS = "SELECT to_tsvector('english', 'warm'), '[1]'::vector <=> '[1]'::vector"

#: The tables of the schema (first on the search_path) the role may read; none on a Citus
#: coordinator, where a read of a distributed table is planned for its shards on the workers
#: (and one over every table could fan out to all of them).
READABLE_TABLES = ("SELECT c.relname FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace"
                   " AND c.relkind IN ('r', 'p') AND NOT c.relispartition AND has_table_privilege(c.oid, 'SELECT')"
                   " AND NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') ORDER BY c.relname")


def warm_tables(names: Sequence[str]) -> sql.Composed | None:
    """One statement that plans a read of each table in ``names`` and reads no row."""
    if not names:
        return None
    return sql.SQL(" UNION ALL ").join(sql.SQL("SELECT 1 FROM {} WHERE false").format(sql.Identifier(n))
                                       for n in names)


def _warm(conn: psycopg.Connection[Any]) -> None:
    try:
        conn.execute(WARM_FUNCTIONS)
        stmt = warm_tables([r[0] for r in conn.execute(READABLE_TABLES).fetchall()])
        if stmt is not None:
            conn.execute(stmt)
        conn.commit()
    except psycopg.Error as exc:
        log.debug("a new connection was not warmed: %s", exc)
        conn.rollback()  # a broken connection raises here, and the pool discards it


def _configure(schema: str, health: _PoolHealth | None = None) -> Callable[[psycopg.Connection[Any]], None]:
    def configure(conn: psycopg.Connection[Any]) -> None:
        ext = conn.execute(VECTOR_SCHEMA).fetchone()
        # search_path first: register_vector looks the types up by name, and the extension
        # may live in a schema of its own (CREATE EXTENSION vector SCHEMA ext, as on Supabase).
        conn.execute(search_path(schema, ext[0] if ext else None))
        register_vector(conn)
        register_clamping_loaders(conn)
        conn.commit()
        _warm(conn)
        if health is not None:
            health.configured(conn)

    return configure


def connect(settings: Settings | None = None, *, dimension: int, model_name: str,
            conninfo: str | None = None, backend: str = "") -> Database:
    """Open (and migrate) the database described by ``settings``."""
    settings = settings or Settings.from_env()
    is_embedded = False
    if conninfo is None:
        conninfo, is_embedded = resolve_conninfo(settings)
    else:
        _conninfo.check_conninfo(conninfo)
    applied = migrations.migrate(conninfo, schema=settings.schema, dimension=dimension, model_name=model_name,
                                 backend=backend, connect_timeout=settings.connect_timeout,
                                 directory=settings.sql_dir)
    if applied:
        log.info("applied migrations: %s", ", ".join(applied))
    health = _PoolHealth()
    pool = ConnectionPool(
        conninfo,
        kwargs=_conninfo.timeout_kwargs(conninfo, settings.connect_timeout),
        min_size=settings.pool_min_size,
        max_size=settings.pool_max_size,
        configure=_configure(settings.schema, health),
        check=health.check,
        open=False,
        name="agentmem",
    )
    try:
        pool.open(wait=True, timeout=30)
    except PoolTimeout as exc:
        pool.close()
        raise DatabaseUnavailableError(f"could not open connections to {_conninfo.redact(conninfo)}: {exc}") from exc
    return Database(conninfo=conninfo, schema=settings.schema, dimension=dimension, pool=pool,
                    embedded=is_embedded, applied=applied, health=health)
