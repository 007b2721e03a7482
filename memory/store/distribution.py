"""Scale-out on Citus: the rules a distributable schema meets, and ``agentmem distribute``.

Citus spreads a hash-distributed table over shards by one column and enforces each
constraint within one shard. agentmem distributes every table with a ``user_id`` on
it, colocated, and turns the tables without one into reference tables (a copy on
every node). :func:`check_schema` reads the catalog and lists what Citus would
refuse, or what would stop working once one user's rows live on one shard and
another user's elsewhere:

``nullable_user_id``
    a per-user table whose ``user_id`` may be NULL (a distribution column cannot be);
``unique_without_user_id``
    a primary key, unique constraint or unique index without ``user_id`` (one shard
    cannot vouch for uniqueness across all of them);
``foreign_key_not_colocated``
    a foreign key between per-user tables that does not pair ``user_id`` with
    ``user_id`` (the referenced row could live on another shard);
``foreign_key_to_distributed``
    a foreign key from a table without ``user_id`` (a reference table) to a per-user
    table, which Citus refuses;
``foreign_key_action``
    ``ON DELETE SET NULL / SET DEFAULT`` or ``ON UPDATE SET NULL / SET DEFAULT /
    CASCADE`` on a key that holds ``user_id`` (Citus refuses them: they would rewrite
    the distribution column);
``user_id_type``
    per-user tables whose ``user_id`` types differ (colocation needs one type);
``narrow_sequence``
    an identity or serial column narrower than ``bigint`` (Citus gives each node its
    own range of a bigint sequence and refuses the others);
``unreviewed_trigger``
    a trigger on a per-user table whose function is not in
    :data:`SHARD_LOCAL_TRIGGER_FUNCTIONS`, the functions reviewed to touch only the
    rows of the row's own user (tests/test_distribution.py also records what they run).

:func:`distribute` runs ``sql/citus_distribute.sql`` (the DBA's script: the order and
the calls live there, once) after that check, and refuses with nothing changed when
the ``citus`` extension is not installed.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.resources.abc import Traversable

import psycopg
from psycopg import sql

from memory.errors import (CitusMissingError, DatabaseUnavailableError, DistributionError, NotDistributableError,
                     NotFoundError)
from memory.store.migrations import sql_dir

#: Trigger functions reviewed to read and write only rows of the triggering row's
#: user (migration 008 passes the user id to every statement they run; the message
#: counts of migration 012 write the count rows of the users the statement wrote).
SHARD_LOCAL_TRIGGER_FUNCTIONS = frozenset({
    "conversational_context_after_insert", "conversational_context_after_delete",
    "conversational_context_after_edit", "conversational_stats_after_insert", "conversational_stats_after_delete",
    "conversational_stats_after_move", "conversational_stats_after_truncate",
    # migration 013: a loop over the writing statement's users, each statement naming one
    "knowledge_terms_after_insert", "knowledge_terms_after_delete", "knowledge_terms_after_update",
    "knowledge_terms_after_truncate",
    # migration 014: the same loop, each statement naming one user's count rows
    "knowledge_stats_after_insert", "knowledge_stats_after_delete", "knowledge_stats_after_move",
    "knowledge_stats_after_truncate",
    # migration 015: the loop of 013 over the users of a write of message windows
    "conversational_terms_after_insert", "conversational_terms_after_delete", "conversational_terms_after_update",
    "conversational_terms_after_truncate",
})

SCRIPT = "citus_distribute.sql"


@dataclass(frozen=True)
class Violation:
    """One thing Citus would refuse, or that would break once users live on different shards."""

    rule: str
    table: str
    detail: str

    def __str__(self) -> str:
        return f"{self.table}: {self.rule}: {self.detail}"


@dataclass(frozen=True)
class Step:
    """One table of the distribution plan, in order."""

    step: int
    table_name: str
    kind: str  # "reference" | "distributed"
    colocate_with: str | None


@dataclass(frozen=True)
class Distribution:
    """What ``distribute`` did (or, with ``dry_run``, would do)."""

    schema: str
    dry_run: bool
    steps: list[Step]
    citus_version: str | None


_TABLES = """
SELECT c.oid, c.relname,
       (SELECT a.attnum FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'user_id'
          AND NOT a.attisdropped),
       (SELECT a.attnotnull FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'user_id'
          AND NOT a.attisdropped),
       (SELECT format_type(a.atttypid, a.atttypmod) FROM pg_attribute a WHERE a.attrelid = c.oid
          AND a.attname = 'user_id' AND NOT a.attisdropped)
FROM pg_class c
WHERE c.relnamespace = %s::regnamespace AND c.relkind IN ('r', 'p') AND NOT c.relispartition
ORDER BY c.relname
"""

_UNIQUE = """
SELECT x.indrelid, i.relname, x.indkey::int2[], x.indisprimary
FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
WHERE x.indisunique AND i.relnamespace = %s::regnamespace
"""

_FOREIGN_KEYS = """
SELECT k.conname, k.conrelid, k.confrelid, k.conkey, k.confkey, k.confdeltype, k.confupdtype
FROM pg_constraint k WHERE k.contype = 'f' AND k.connamespace = %s::regnamespace
  AND k.conparentid = 0  -- a partitioned table's key, not its copies on the partitions
"""

_SEQUENCES = """
SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod)
FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE c.relnamespace = %s::regnamespace AND c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped
  AND (a.attidentity <> '' OR pg_get_expr(d.adbin, d.adrelid) LIKE 'nextval(%%')
  AND a.atttypid <> 'int8'::regtype
"""

_TRIGGERS = """
SELECT c.relname, t.tgname, p.proname
FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_proc p ON p.oid = t.tgfoid
WHERE NOT t.tgisinternal AND c.relnamespace = %s::regnamespace
"""


def check_schema(conn: psycopg.Connection, schema: str) -> list[Violation]:
    """Everything in ``schema`` that stops it from distributing on ``user_id`` (empty: ready)."""
    tables = {oid: (name, attnum, notnull, typ) for oid, name, attnum, notnull, typ in conn.execute(_TABLES, (schema,))}
    ours = _registered(conn, schema)
    if ours is not None:  # since migration 007: agentmem's own tables only
        tables = {oid: t for oid, t in tables.items() if t[0] in ours}
    per_user = {oid for oid, (_, attnum, _, _) in tables.items() if attnum is not None}
    found: list[Violation] = []
    for oid in sorted(per_user, key=lambda o: tables[o][0]):
        name, _, notnull, _ = tables[oid]
        if not notnull:
            found.append(Violation("nullable_user_id", name, "user_id may be NULL; a distribution column cannot be "
                                   "(shared rows belong in a table without user_id, a reference table)"))
    types = {tables[o][3] for o in per_user}
    if len(types) > 1:
        found.append(Violation("user_id_type", "*", f"user_id has several types ({', '.join(sorted(types))}); "
                               "colocated tables need one"))
    for rel, index, keys, primary in conn.execute(_UNIQUE, (schema,)):
        if rel in per_user and tables[rel][1] not in keys:
            what = "primary key" if primary else "unique index"
            found.append(Violation("unique_without_user_id", tables[rel][0],
                                   f"{what} {index} does not include user_id"))
    for name, child, parent, ckeys, pkeys, on_delete, on_update in conn.execute(_FOREIGN_KEYS, (schema,)):
        if child not in tables:
            continue
        cname, pname = tables[child][0], tables[parent][0] if parent in tables else str(parent)
        if child not in per_user:
            if parent in per_user:
                found.append(Violation("foreign_key_to_distributed", cname,
                                       f"{name} points from a table without user_id to {pname}, a per-user table"))
            continue
        cuser = tables[child][1]
        if parent in per_user:
            pairs = dict(zip(ckeys, pkeys, strict=False))
            if pairs.get(cuser) != tables[parent][1]:
                found.append(Violation("foreign_key_not_colocated", cname,
                                       f"{name} references {pname} without pairing user_id with user_id"))
        if cuser in ckeys and (on_delete in ("n", "d") or on_update in ("n", "d", "c")):
            found.append(Violation("foreign_key_action", cname,
                                   f"{name} holds user_id and has ON DELETE/UPDATE SET NULL, SET DEFAULT or "
                                   "ON UPDATE CASCADE; use NO ACTION (or ON DELETE CASCADE)"))
    for table, column, typ in conn.execute(_SEQUENCES, (schema,)):
        found.append(Violation("narrow_sequence", table, f"{column} is generated from a sequence as {typ}; "
                               "use bigint (Citus hands each node its own range of a bigint sequence)"))
    user_names = {tables[o][0] for o in per_user}
    for table, trigger, function in conn.execute(_TRIGGERS, (schema,)):
        if table in user_names and function not in SHARD_LOCAL_TRIGGER_FUNCTIONS:
            found.append(Violation("unreviewed_trigger", table,
                                   f"trigger {trigger} runs {function}(), not reviewed to stay on one user's shard"))
    return found


def _registered(conn: psycopg.Connection, schema: str) -> set[str] | None:
    """The tables migration 007's registry lists as agentmem's, or None before 007."""
    row = conn.execute("SELECT to_regclass(format('%%I.agentmem_tables', %s::text))", (schema,)).fetchone()
    if row is None or row[0] is None:
        return None
    return {r[0] for r in conn.execute(sql.SQL("SELECT table_name FROM {}").format(
        sql.Identifier(schema, "agentmem_tables")))}


def script_path() -> Traversable:
    """The distribution script, beside the migrations (package data in an installed wheel)."""
    return sql_dir() / SCRIPT


def distribute(conninfo: str, schema: str, *, dry_run: bool = False) -> Distribution:
    """Distribute ``schema`` on the Citus cluster behind ``conninfo`` (see the module docstring).

    Raises :class:`CitusMissingError` if the ``citus`` extension is not installed
    (unless ``dry_run``), then :class:`NotDistributableError` if :func:`check_schema`
    finds anything; in both cases nothing is changed.
    """
    try:
        conn = psycopg.connect(conninfo, autocommit=True)
    except psycopg.OperationalError as exc:
        raise DatabaseUnavailableError(f"cannot connect to PostgreSQL: {exc}".strip()) from exc
    with conn:
        if conn.execute("SELECT to_regclass(format('%%I.schema_migrations', %s::text))",
                        (schema,)).fetchone() == (None,):
            raise NotFoundError(f"schema {schema!r} is not a migrated agentmem schema: run agentmem init first")
        row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'citus'").fetchone()
        version = str(row[0]) if row else None
        if version is None and not dry_run:
            available = conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'citus'").fetchone()
            how = ("Citus is available on this server: CREATE EXTENSION citus; add the workers with "
                   "SELECT citus_add_node(host, port); then run this again" if available else
                   "This server has no Citus: point AGENTMEM_DATABASE_URL at a Citus coordinator (self-hosted, "
                   "or managed, e.g. Azure Cosmos DB for PostgreSQL) and run this again")
            raise CitusMissingError(
                f"the citus extension is not installed in database {conn.info.dbname!r}; nothing was changed. "
                f"{how}. agentmem distribute --dry-run checks the schema and shows the plan without Citus.")
        problems = check_schema(conn, schema)
        if problems:
            raise NotDistributableError(
                f"schema {schema!r} cannot be distributed on user_id; nothing was changed: "
                + "; ".join(str(p) for p in problems))
        try:
            with conn.transaction():  # the whole script, or nothing
                conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(sql.Identifier(schema)))
                conn.execute("SELECT set_config('agentmem.distribute_dry_run', %s, true)",
                             ("on" if dry_run else "off",))
                conn.execute(script_path().read_text(encoding="utf-8"))
                steps = [Step(*row) for row in conn.execute("SELECT * FROM pg_temp.agentmem_distribution_plan()")]
        except psycopg.Error as exc:
            raise DistributionError(f"distributing schema {schema!r} failed and was rolled back, nothing changed: "
                                    f"{exc}".strip()) from exc
    return Distribution(schema, dry_run, steps, version)
