"""Forward-only schema migrations from ``sql/NNN_name.sql``.

Each file is applied in its own transaction and recorded in ``schema_migrations``.
All of it runs under a session advisory lock keyed on the schema name, so two
processes starting at once are serialised: the second finds the work done. The
embedding dimension is fixed by the first migration (row ``embedding_dim`` in
``agentmem_meta``) and checked on every start.

The files live in the repository's top-level ``sql/`` and ship in the wheel as the
data-only package ``memory.sql``, read with ``importlib.resources``: a source checkout
(editable install, or ``PYTHONPATH``) reads its own ``sql/``, an installed wheel its
package data.

Migration files are psycopg ``sql.SQL`` templates; the only placeholder is ``{dim}``,
filled with ``sql.Literal``. The runner sets ``search_path`` so the files use
unqualified names.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import os
import re
from dataclasses import dataclass
from importlib.resources.abc import Traversable
from pathlib import Path

import psycopg
from psycopg import sql

from .errors import DimensionMismatchError, EmbeddingModelMismatchError, MigrationError, VectorExtensionMissingError

_FILE = re.compile(r"^(\d{3})_([a-z0-9_]+)\.sql$")


def sql_dir() -> Traversable:
    """Where the migration files are.

    ``AGENTMEM_SQL_DIR`` if set; else the ``sql/`` of the source checkout this package
    was imported from (an editable install or ``PYTHONPATH``: each checkout reads its own
    files); else the package data of an installed wheel (``memory.sql``).
    """
    override = os.environ.get("AGENTMEM_SQL_DIR")
    if override:
        return Path(override)
    root = Path(__file__).resolve().parent.parent
    if (root / "pyproject.toml").is_file() and (root / "sql").is_dir():
        return root / "sql"
    try:
        return importlib.resources.files("memory.sql")
    except ModuleNotFoundError:
        raise MigrationError("this agentmem installation has no migration files (package memory.sql is "
                             "missing): reinstall agentmem from a complete wheel") from None


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    path: Traversable

    @property
    def filename(self) -> str:
        return self.path.name

    @property
    def text(self) -> str:
        return self.path.read_text(encoding="utf-8")

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()


def discover(directory: Traversable | None = None) -> list[Migration]:
    directory = directory or sql_dir()
    found = []
    try:
        entries = sorted(directory.iterdir(), key=lambda p: p.name)
    except OSError:
        entries = []
    for path in entries:
        m = _FILE.match(path.name)
        if m and path.is_file():
            found.append(Migration(int(m.group(1)), m.group(2), path))
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise MigrationError(f"two migration files share a number in {directory}")
    if not found:
        raise MigrationError(f"no migration files found in {directory}")
    return found


def _lock_key(schema: str) -> int:
    return int.from_bytes(hashlib.sha256(f"agentmem:{schema}".encode()).digest()[:8], "big", signed=True)


def ensure_vector_extension(conn: psycopg.Connection) -> str:
    """Make sure ``vector`` is installed; return the schema it lives in."""
    row = conn.execute(
        "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace "
        "WHERE e.extname = 'vector'"
    ).fetchone()
    if row:
        return str(row[0])
    available = conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'").fetchone()
    dbname = conn.info.dbname
    if not available:
        raise VectorExtensionMissingError(
            f"the pgvector extension is not available on this PostgreSQL server (database {dbname!r}). "
            "Install pgvector >= 0.7 on the server (e.g. the postgresql-NN-pgvector package), then "
            "run: CREATE EXTENSION vector;  Or unset AGENTMEM_DATABASE_URL to use the embedded server."
        )
    try:
        with conn.transaction():
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    except psycopg.errors.InsufficientPrivilege:
        raise VectorExtensionMissingError(
            f"the pgvector extension is available but not installed in database {dbname!r}, and "
            f"role {conn.info.user!r} may not install it. Ask a superuser or the database owner to run: "
            "CREATE EXTENSION vector;"
        ) from None
    return ensure_vector_extension(conn)


def migrate(conninfo: str, *, schema: str, dimension: int, model_name: str, backend: str = "") -> list[str]:
    """Apply pending migrations; return the names applied (empty when up to date)."""
    applied_now: list[str] = []
    try:
        conn = psycopg.connect(conninfo, autocommit=True)
    except psycopg.OperationalError as exc:
        from .errors import DatabaseUnavailableError

        raise DatabaseUnavailableError(f"cannot connect to PostgreSQL: {exc}".strip()) from exc
    with conn:
        key = _lock_key(schema)
        conn.execute("SELECT pg_advisory_lock(%s)", (key,))
        try:
            ext_schema = ensure_vector_extension(conn)
            schema_id = sql.Identifier(schema)
            if _up_to_date(conn, schema):
                # Nothing to apply, so run no DDL: a non-owner role (row-level security,
                # see memory.isolation) may start agentmem on a migrated schema.
                conn.execute(sql.SQL("SET search_path TO {}, {}").format(schema_id, sql.Identifier(ext_schema)))
                _check_dimension(conn, dimension, model_name, backend)
                return applied_now
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(schema_id))
            path = sql.SQL("SET search_path TO {}, {}").format(schema_id, sql.Identifier(ext_schema))
            conn.execute(path)
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " version integer PRIMARY KEY, name text NOT NULL, checksum text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
            conn.execute(
                "CREATE TABLE IF NOT EXISTS agentmem_meta (key text PRIMARY KEY, value text NOT NULL)"
            )
            dim = _check_dimension(conn, dimension, model_name, backend)
            done = {r[0] for r in conn.execute("SELECT version FROM schema_migrations")}
            for mig in discover():
                if mig.version in done:
                    continue
                try:
                    with conn.transaction():
                        conn.execute(path)
                        conn.execute(sql.SQL(mig.text).format(dim=sql.Literal(dim)))
                        conn.execute(
                            "INSERT INTO schema_migrations (version, name, checksum) VALUES (%s, %s, %s)",
                            (mig.version, mig.name, mig.checksum),
                        )
                except psycopg.Error as exc:
                    raise MigrationError(
                        f"migration {mig.filename} failed and was rolled back: {exc}".strip()
                    ) from exc
                applied_now.append(f"{mig.version:03d}_{mig.name}")
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
    return applied_now


def _up_to_date(conn: psycopg.Connection, schema: str) -> bool:
    """Whether every migration file is recorded in the schema (read-only check)."""
    table = conn.execute("SELECT to_regclass(format('%%I.schema_migrations', %s::text))", (schema,)).fetchone()
    if table is None or table[0] is None:
        return False
    done = {r[0] for r in conn.execute(sql.SQL("SELECT version FROM {}.schema_migrations").format(
        sql.Identifier(schema)))}
    return all(m.version in done for m in discover())


def _check_dimension(conn: psycopg.Connection, dimension: int, model_name: str, backend: str = "") -> int:
    row = conn.execute("SELECT value FROM agentmem_meta WHERE key = 'embedding_dim'").fetchone()
    if row is None:
        conn.execute(
            "INSERT INTO agentmem_meta (key, value) VALUES ('embedding_dim', %s), ('embedding_model', %s),"
            " ('embedding_backend', %s)",
            (str(dimension), model_name, backend),
        )
        return dimension
    stored = int(row[0])
    if stored != dimension:
        model = conn.execute("SELECT value FROM agentmem_meta WHERE key = 'embedding_model'").fetchone()
        raise DimensionMismatchError(
            f"the embedding model {model_name!r} produces {dimension}-dimensional vectors, but this "
            f"schema was created for {stored} dimensions (model {model[0] if model else 'unknown'!r}). "
            "Use the same model, or a new schema (AGENTMEM_SCHEMA) for the new one; vectors of "
            "different models are never mixed."
        )
    model = conn.execute("SELECT value FROM agentmem_meta WHERE key = 'embedding_model'").fetchone()
    if model is not None and model[0] != model_name:
        raise EmbeddingModelMismatchError(
            f"this schema holds vectors of the embedding model {model[0]!r}; {model_name!r} has the same "
            f"dimension ({dimension}) but another vector space, so its vectors would be silently wrong next "
            "to them. Use the same model, or a new schema (AGENTMEM_SCHEMA) for the new one."
        )
    _check_backend(conn, model_name, backend)
    return stored


def _check_backend(conn: psycopg.Connection, model_name: str, backend: str) -> None:
    """Refuse a runtime of the same model whose vectors are not measured to agree (see embeddings)."""
    from .embeddings import LEGACY_BACKENDS, backends_agree

    if not backend:  # an embedder that names no backend gets the model check only
        return
    row = conn.execute("SELECT value FROM agentmem_meta WHERE key = 'embedding_backend'").fetchone()
    # Schemas created before the backend was recorded (or by a caller that named none)
    # got their vectors from the one backend there was then.
    stored = row[0] if row is not None and row[0] else LEGACY_BACKENDS.get(model_name, backend)
    if not backends_agree(model_name, stored, backend):
        raise EmbeddingModelMismatchError(
            f"this schema holds vectors of {model_name!r} computed by the {stored or 'unnamed'!r} backend; "
            f"the {backend or 'unnamed'!r} backend of that model is not known to produce the same vectors, "
            "so mixing them would silently degrade search. Use the schema's backend "
            "(AGENTMEM_EMBEDDING_BACKEND), or a new schema (AGENTMEM_SCHEMA) for this one."
        )


def applied(conn: psycopg.Connection, schema: str) -> list[tuple[int, str]]:
    q = sql.SQL("SELECT version, name FROM {}.schema_migrations ORDER BY version").format(sql.Identifier(schema))
    return [(int(v), str(n)) for v, n in conn.execute(q)]
