"""Forward-only schema migrations from ``sql/NNN_name.sql``.

Each file is applied in its own transaction and recorded in ``schema_migrations`` with
the SHA-256 of its text. All of it runs under a session advisory lock keyed on the
schema name, so two processes starting at once are serialised: the second finds the
work done; ``CREATE EXTENSION vector`` takes a second lock, the same for every schema
of the database, so starters of different schemas never race on it. The embedding
dimension is fixed by the first migration (row ``embedding_dim`` in ``agentmem_meta``)
and checked on every start.

Every start also checks what was applied: a recorded checksum that no longer matches
its file is a :class:`MigrationError` (applied files are never edited; changes go in a
new number), and a schema whose vector columns are gone (``DROP EXTENSION vector
CASCADE`` drops them with every embedding) is refused instead of reported up to date.
Migrations are applied only by a role that owns the schema; any other role with
migrations pending gets a :class:`MigrationError` saying to run ``agentmem init`` as the
owner. :func:`status` lists applied and pending migrations without changing anything.

The files live in the repository's top-level ``sql/`` and ship in the wheel as the
data-only package ``memory.sql``, read with ``importlib.resources``: a source checkout
(editable install, or ``PYTHONPATH``) reads its own ``sql/``, an installed wheel its
package data.

Migration files are plain SQL: every character is sent as written (braces, ``%`` and
all), with one exception, the exact token ``{dim}``, which stands for the embedding
dimension (``embedding vector({dim})``): :func:`compose` splits the text on it and joins
the pieces with ``sql.Literal(dim)``, so no ``str.format`` runs over a file and nothing
else in it is interpreted. A statement that needs the dimension as a value can also
read it from ``current_setting('agentmem.embedding_dim')``, set for the transaction of
every migration. The runner sets ``search_path`` so the files use unqualified names.
(Files 001..008 were read with ``sql.SQL(text).format(dim=...)``; they contain no other
braces, so they compose to the very same statements, and their text and checksums are
unchanged.)
"""

from __future__ import annotations

import hashlib
import importlib.resources
import json
import re
from dataclasses import dataclass
from datetime import datetime
from importlib.resources.abc import Traversable
from pathlib import Path

import psycopg
from psycopg import sql

from memory.store import conninfo as _conninfo
from memory.store.driver_errors import translate
from memory.errors import (DimensionMismatchError, EmbeddingModelMismatchError, MigrationError,
                     VectorExtensionMissingError)

_FILE = re.compile(r"^(\d{3})_([a-z0-9_]+)\.sql$")

#: Seconds to wait for the server when the caller passes no setting (Settings.connect_timeout).
DEFAULT_CONNECT_TIMEOUT = 10

#: The vector columns migration 001 creates: what a schema migrated before agentmem
#: recorded its vector columns (``agentmem_meta`` key ``vector_columns``) must still have.
BASE_VECTOR_COLUMNS = tuple(f"{t}.embedding" for t in (
    "conversational_memory", "summary_memory", "workflow_memory", "fact_memory", "knowledge_memory",
    "entity_memory", "toolbox_memory"))


#: The one placeholder a migration file may hold: the embedding dimension.
DIM_PLACEHOLDER = "{dim}"


def compose(text: str, dim: int) -> sql.Composed:
    """The statements of a migration file: its text as written, each ``{dim}`` a ``sql.Literal(dim)``."""
    pieces = text.split(DIM_PLACEHOLDER)
    parts: list[sql.Composable] = [sql.SQL(pieces[0])]  # file text, not a literal
    for piece in pieces[1:]:
        parts += [sql.Literal(dim), sql.SQL(piece)]
    return sql.Composed(parts)


def sql_dir(override: Path | None = None) -> Traversable:
    """Where the migration files are.

    ``override`` (setting ``sql_dir``, ``AGENTMEM_SQL_DIR``) if given; else the ``sql/`` of
    the source checkout this package was imported from (an editable install or
    ``PYTHONPATH``: each checkout reads its own files); else the package data of an
    installed wheel (``memory.sql``).
    """
    if override:
        return Path(override)
    root = Path(__file__).resolve().parents[2]
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
        # Line endings normalised, so a checkout that converts them is not a changed file.
        return hashlib.sha256(self.text.replace("\r\n", "\n").encode()).hexdigest()


@dataclass(frozen=True)
class MigrationState:
    """One migration as :func:`status` sees it.

    ``state`` is ``applied``, ``pending`` (a file not yet applied), ``changed`` (applied,
    but the file no longer matches the recorded checksum) or ``missing`` (recorded in the
    schema, no such file here: a newer agentmem migrated it).
    """

    version: int
    name: str
    state: str
    applied_at: datetime | None = None


def discover(directory: Traversable | None = None) -> list[Migration]:
    """The migration files of ``directory`` (default :func:`sql_dir`), in order."""
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


#: Advisory locks are per database: one key for every schema's CREATE EXTENSION.
_EXTENSION_LOCK = int.from_bytes(hashlib.sha256(b"agentmem:create-extension:vector").digest()[:8], "big",
                                 signed=True)


def _vector_schema(conn: psycopg.Connection) -> str | None:
    row = conn.execute(
        "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace "
        "WHERE e.extname = 'vector'"
    ).fetchone()
    return str(row[0]) if row else None


def ensure_vector_extension(conn: psycopg.Connection) -> str:
    """Make sure ``vector`` is installed; return the schema it lives in.

    ``conn`` is in autocommit. The extension is created under a database-wide advisory
    lock, so processes migrating different schemas of a fresh database at once never
    race on ``pg_extension`` (a ``UniqueViolation`` otherwise).
    """
    found = _vector_schema(conn)
    if found:
        return found
    available = conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'").fetchone()
    dbname = conn.info.dbname
    if not available:
        raise VectorExtensionMissingError(
            f"the pgvector extension is not available on this PostgreSQL server (database {dbname!r}). "
            "Install pgvector >= 0.7 on the server (e.g. the postgresql-NN-pgvector package), then "
            "run: CREATE EXTENSION vector;  Or unset AGENTMEM_DATABASE_URL to use the embedded server."
        )
    conn.execute("SELECT pg_advisory_lock(%s)", (_EXTENSION_LOCK,))
    try:
        if _vector_schema(conn) is None:
            with conn.transaction():
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    except psycopg.errors.InsufficientPrivilege:
        raise VectorExtensionMissingError(
            f"the pgvector extension is available but not installed in database {dbname!r}, and "
            f"role {conn.info.user!r} may not install it. Ask a superuser or the database owner to run: "
            "CREATE EXTENSION vector;"
        ) from None
    except (psycopg.errors.UniqueViolation, psycopg.errors.DuplicateObject):
        pass  # created at this moment by a process that does not take our lock: it is there now
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s)", (_EXTENSION_LOCK,))
    found = _vector_schema(conn)
    if found is None:  # pragma: no cover - dropped again at once
        raise VectorExtensionMissingError(f"the vector extension disappeared from database {dbname!r} while starting")
    return found


def _recorded(conn: psycopg.Connection, schema: str) -> dict[int, tuple[str, str, datetime]] | None:
    """``{version: (name, checksum, applied_at)}`` from the schema, or None if it was never migrated."""
    table = conn.execute("SELECT to_regclass(format('%%I.schema_migrations', %s::text))", (schema,)).fetchone()
    if table is None or table[0] is None:
        return None
    try:
        rows = conn.execute(sql.SQL("SELECT version, name, checksum, applied_at FROM {}.schema_migrations").format(
            sql.Identifier(schema))).fetchall()
    except psycopg.errors.InsufficientPrivilege:
        raise MigrationError(
            f"role {conn.info.user!r} may not read {schema}.schema_migrations: connect as the schema owner, "
            "or as a role made by `agentmem create-app-role` (it may read the bookkeeping tables)"
        ) from None
    return {int(v): (str(n), str(c), at) for v, n, c, at in rows}


def _verify_checksums(recorded: dict[int, tuple[str, str, datetime]], files: list[Migration], schema: str) -> None:
    for mig in files:
        if mig.version in recorded and recorded[mig.version][1] != mig.checksum:
            raise MigrationError(
                f"migration {mig.filename} was changed after it was applied to schema {schema!r} (checksum "
                f"recorded {recorded[mig.version][1][:12]}, file now {mig.checksum[:12]}). Applied migrations are "
                f"never edited: restore the file as released (e.g. git checkout -- sql/{mig.filename}) and put "
                "the change in a new numbered migration. `agentmem init --status` lists them."
            )


_VECTOR_COLUMNS = """
SELECT c.relname || '.' || a.attname
FROM pg_attribute a
JOIN pg_class c ON c.oid = a.attrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_type t ON t.oid = a.atttypid
JOIN pg_extension e ON e.extname = 'vector' AND e.extnamespace = t.typnamespace
WHERE n.nspname = %s AND c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped AND t.typname = 'vector'
"""


def _vector_columns(conn: psycopg.Connection, schema: str) -> set[str]:
    return {str(r[0]) for r in conn.execute(_VECTOR_COLUMNS, (schema,))}


def _check_vector_columns(conn: psycopg.Connection, schema: str) -> None:
    """A migrated schema still has every vector column it was given (before ``vector`` is (re)created)."""
    row = conn.execute(sql.SQL("SELECT value FROM {}.agentmem_meta WHERE key = 'vector_columns'").format(
        sql.Identifier(schema))).fetchone()
    expected = set(json.loads(row[0])) if row else set(BASE_VECTOR_COLUMNS)
    lost = sorted(expected - _vector_columns(conn, schema))
    if not lost:
        return
    how = ("the vector extension is not installed any more" if _vector_schema(conn) is None
           else "they were dropped")
    raise MigrationError(
        f"schema {schema!r} has lost {len(lost)} of its {len(expected)} vector columns ({', '.join(lost)}): {how}, "
        "as `DROP EXTENSION vector CASCADE` does, and their embeddings went with them. Nothing was changed. "
        "Restore the database from a backup taken before the drop, or start a new schema "
        "(AGENTMEM_SCHEMA=another name) and write the memory again; the text rows are still in this one."
    )


def _record_vector_columns(conn: psycopg.Connection, schema: str) -> None:
    columns = sorted(_vector_columns(conn, schema))
    conn.execute("INSERT INTO agentmem_meta (key, value) VALUES ('vector_columns', %s)"
                 " ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value", (json.dumps(columns),))


def _check_owner(conn: psycopg.Connection, schema: str, pending: list[Migration]) -> None:
    """Only a role with the schema owner's rights applies migrations; others get what to do."""
    row = conn.execute("SELECT pg_get_userbyid(nspowner), pg_has_role(current_user, nspowner, 'USAGE')"
                       " FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone()
    if row and not row[1]:
        names = ", ".join(m.filename for m in pending)
        raise MigrationError(
            f"{len(pending)} migration(s) pending on schema {schema!r} ({names}), and role {conn.info.user!r} "
            f"does not own the schema (owner: {row[0]!r}), so it may not apply them. Run `agentmem init` once "
            "as the schema owner (AGENTMEM_DATABASE_URL with the owner's role), then start again as this role."
        )


def _not_owner(conn: psycopg.Connection, schema: str, exc: psycopg.Error) -> MigrationError:
    return MigrationError(
        f"role {conn.info.user!r} may not change schema {schema!r} ({str(exc).strip()}): run `agentmem init` "
        "as the schema owner, or as a role allowed to create the schema in this database"
    )


def migrate(conninfo: str, *, schema: str, dimension: int, model_name: str, backend: str = "",
            connect_timeout: int = DEFAULT_CONNECT_TIMEOUT, directory: Path | None = None) -> list[str]:
    """Apply pending migrations (the files of ``directory``, see :func:`sql_dir`); return the names applied."""
    try:
        return _migrate(conninfo, schema, dimension, model_name, backend, connect_timeout, directory)
    except psycopg.Error as exc:
        raise translate(exc) from exc


def _migrate(conninfo: str, schema: str, dimension: int, model_name: str, backend: str, connect_timeout: int,
             directory: Path | None) -> list[str]:
    files = discover(sql_dir(directory))
    applied_now: list[str] = []
    conn = _conninfo.connect(conninfo, connect_timeout, autocommit=True)
    with conn:
        key = _lock_key(schema)
        conn.execute("SELECT pg_advisory_lock(%s)", (key,))
        try:
            recorded = _recorded(conn, schema)
            if recorded:
                _verify_checksums(recorded, files, schema)
                _check_vector_columns(conn, schema)
            ext_schema = ensure_vector_extension(conn)
            schema_id = sql.Identifier(schema)
            path = sql.SQL("SET search_path TO {}, {}").format(schema_id, sql.Identifier(ext_schema))
            pending = [m for m in files if m.version not in (recorded or {})]
            if not pending:
                # Nothing to apply, so run no DDL: a non-owner role (row-level security,
                # see memory.store.isolation) may start agentmem on a migrated schema.
                conn.execute(path)
                _check_dimension(conn, dimension, model_name, backend)
                return applied_now
            _check_owner(conn, schema, pending)
            try:
                conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(schema_id))
                conn.execute(path)
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS schema_migrations ("
                    " version integer PRIMARY KEY, name text NOT NULL, checksum text NOT NULL,"
                    " applied_at timestamptz NOT NULL DEFAULT now())"
                )
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS agentmem_meta (key text PRIMARY KEY, value text NOT NULL)"
                )
            except psycopg.errors.InsufficientPrivilege as exc:
                raise _not_owner(conn, schema, exc) from exc
            dim = _check_dimension(conn, dimension, model_name, backend)
            for mig in pending:
                try:
                    with conn.transaction():
                        conn.execute(path)
                        conn.execute("SELECT set_config('agentmem.embedding_dim', %s, true)", (str(dim),))
                        conn.execute(compose(mig.text, dim))
                        conn.execute(
                            "INSERT INTO schema_migrations (version, name, checksum) VALUES (%s, %s, %s)",
                            (mig.version, mig.name, mig.checksum),
                        )
                except psycopg.errors.InsufficientPrivilege as exc:
                    raise _not_owner(conn, schema, exc) from exc
                except psycopg.Error as exc:
                    raise MigrationError(
                        f"migration {mig.filename} failed and was rolled back: {exc}".strip()
                    ) from exc
                applied_now.append(f"{mig.version:03d}_{mig.name}")
            _record_vector_columns(conn, schema)
        finally:
            if not conn.broken:  # a lost connection released the lock with the session
                conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
    return applied_now


def status(conninfo: str, *, schema: str, connect_timeout: int = DEFAULT_CONNECT_TIMEOUT,
           directory: Path | None = None) -> list[MigrationState]:
    """Every migration, applied or pending, in order, read without applying or locking anything."""
    files = discover(sql_dir(directory))
    try:
        with _conninfo.connect(conninfo, connect_timeout, autocommit=True) as conn:
            recorded = _recorded(conn, schema) or {}
    except psycopg.Error as exc:
        raise translate(exc) from exc
    states = []
    for mig in files:
        if mig.version not in recorded:
            states.append(MigrationState(mig.version, mig.name, "pending"))
        else:
            _, checksum, at = recorded[mig.version]
            states.append(MigrationState(mig.version, mig.name, "applied" if checksum == mig.checksum else "changed",
                                         at))
    known = {m.version for m in files}
    for version, (name, _, at) in recorded.items():
        if version not in known:
            states.append(MigrationState(version, name, "missing", at))
    return sorted(states, key=lambda s: s.version)


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
    from memory.retrieval.embeddings import LEGACY_BACKENDS, backends_agree

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
