"""Tenant isolation in the database: row-level security and the application role.

Every read and write of agentmem already filters on ``user_id`` in its SQL. Row-level
security is the second wall, for the day a query forgets: migrations 003 and 007 put
a policy on every per-user table of agentmem (listed in ``agentmem_tables``, never
another application's table of the same schema) comparing ``user_id`` with the
transaction setting ``agentmem.user_id``, which ``Database.connection(user_id)`` sets
with ``SET LOCAL`` (transaction-local, so a pooled connection never carries one user's
id into the next transaction; and the form Citus forwards to its workers, where the
policies run). A transaction that sets nothing sees nothing.

Policies do not bind the table owner, which runs migrations and admin commands
(purge, forget-user, status across users). Applications connect through a separate
login role without ownership, superuser or BYPASSRLS, created by
:func:`create_app_role`; through it even ``SELECT *`` returns only the rows of the user
named in the setting, and a row written for another user is refused (WITH CHECK).

What this does not do: the setting is the identity, so whoever holds the app role's
password can set it to any user. RLS here defends against bugs in the application's
queries, not against a stolen database credential. The shared tables
(``toolbox_memory``: tools of a deployment; ``shared_workflow_memory``: workflows the
owner published) feed every user's prompt, so the app role may only read them; it
counts a use of a shared workflow through a SECURITY DEFINER function that adds one
and does nothing else. Tools are registered by the owner or by a role made with
``tool_registrar=True``. The bookkeeping tables are read-only for it. Views are never
granted: a view runs with its owner's rights and would bypass the policies.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg import sql

from memory.errors import AccessDeniedError, ConfigurationError
from memory.store.validation import check_id, check_text

#: Kinds of the tables agentmem owns (``agentmem_tables``, migration 007).
USER, SHARED, BOOKKEEPING = "user", "shared", "bookkeeping"

#: The one shared table a tool registrar role may write.
TOOL_TABLE = "toolbox_memory"

#: What the app role may do through SECURITY DEFINER functions (and nothing more).
APP_FUNCTIONS = (("agentmem_record_shared_workflow_use", "uuid, boolean"),)


def agentmem_tables(conn: psycopg.Connection, schema: str) -> dict[str, str]:
    """agentmem's own tables in ``schema`` and their kind, as the migrations recorded them.

    Whatever else lives in the schema (another application's tables, with
    ``AGENTMEM_SCHEMA=public``) is not listed, so row-level security, retention and
    ``forget_user`` never touch it.
    """
    stmt = sql.SQL("SELECT table_name, kind FROM {} ORDER BY table_name").format(
        sql.Identifier(schema, "agentmem_tables"))
    return {str(name): str(kind) for name, kind in conn.execute(stmt)}


def user_tables(conn: psycopg.Connection, schema: str) -> list[str]:
    """agentmem's per-user tables of ``schema`` (each keyed by a NOT NULL ``user_id``)."""
    return [t for t, kind in agentmem_tables(conn, schema).items() if kind == USER]


def base_tables(conn: psycopg.Connection, schema: str) -> list[str]:
    """Every table agentmem owns in ``schema`` (per-user, shared and bookkeeping)."""
    return list(agentmem_tables(conn, schema))


def require_owner(conn: psycopg.Connection, what: str) -> None:
    """Refuse work that spans users to a role under row-level security (the app role).

    It would see no row and report nothing (zeros, no threads) as if there were none.
    ``conn``'s search_path must start with the agentmem schema.
    """
    owner = conn.execute("SELECT pg_has_role(current_user, relowner, 'USAGE') FROM pg_class"
                         " WHERE oid = 'conversational_memory'::regclass").fetchone()
    if not owner or not owner[0]:
        raise AccessDeniedError(
            f"{what} spans every user, so it runs as the schema owner: role {conn.info.user!r} is under row-level "
            "security and would see no rows. Run it with the owner's AGENTMEM_DATABASE_URL, or name one user")


def _owned_sequences(conn: psycopg.Connection, schema: str, tables: list[str]) -> list[str]:
    """Sequences that belong to ``tables`` (identity columns), never other sequences of the schema."""
    return [r[0] for r in conn.execute(
        "SELECT DISTINCT s.relname FROM pg_class s"
        " JOIN pg_depend d ON d.objid = s.oid AND d.classid = 'pg_class'::regclass"
        "  AND d.refclassid = 'pg_class'::regclass"
        " JOIN pg_class t ON t.oid = d.refobjid"
        " WHERE s.relkind = 'S' AND t.relname = ANY(%s)"
        "  AND t.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = %s)"
        "  AND s.relnamespace = t.relnamespace ORDER BY 1", (tables, schema))]


@dataclass(frozen=True)
class AppRole:
    """The role created by :func:`create_app_role` and what it was granted."""

    name: str
    conninfo: str
    user_tables: list[str]
    shared_tables: list[str]
    read_only_tables: list[str]
    tool_registrar: bool = False


def app_conninfo(conninfo: str, role: str, password: str) -> str:
    """``conninfo`` with its user and password replaced by the app role's."""
    params = psycopg.conninfo.conninfo_to_dict(conninfo)
    params.update(user=role, password=password)
    return psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in params.items() if v is not None})


def enable_row_security(conn: psycopg.Connection, schema: str) -> int:
    """(Re)apply the policies to agentmem's per-user tables; returns how many tables."""
    with conn.transaction():
        conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(sql.Identifier(schema)))
        row = conn.execute(sql.SQL("SELECT {}.agentmem_enable_row_security()").format(
            sql.Identifier(schema))).fetchone()
    return int(row[0]) if row else 0


def create_app_role(conninfo: str, role: str, password: str, *, schema: str = "agent_memory",
                    tool_registrar: bool = False) -> AppRole:
    """Create (or update) the non-owner login role applications use, and set its rights exactly.

    ``conninfo`` must connect as the schema owner (or a superuser). On agentmem's own
    tables (``agentmem_tables``; nothing else of the schema is touched) the role gets:
    DML on the per-user tables (row-level security limits it to the user its
    transaction names), SELECT on the shared tables (tools, shared workflows) and on
    the bookkeeping tables, EXECUTE on the function that counts a use of a shared
    workflow, and nothing else: no ownership, no BYPASSRLS, no CREATE, no TRUNCATE.
    With ``tool_registrar`` it may also write ``toolbox_memory`` (register tools); give
    that to the deployment job that registers tools, not to the application. Rights it
    held before are revoked first, so running this again converges. Row-level
    security is (re)applied first. Returns the role and a conninfo for it.
    """
    role = check_id(role, "role", max_chars=63)
    password = check_text(password, "password", max_chars=200)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        if conn.execute("SELECT to_regclass(format('%%I.%%I', %s::text, 'agentmem_tables'))",
                        (schema,)).fetchone()[0] is None:  # type: ignore[index]
            raise ConfigurationError(f"schema {schema!r} does not exist or is not migrated: run agentmem init "
                                     "(migrations) first")
        attrs = conn.execute("SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = %s", (role,)).fetchone()
        if attrs and (attrs[0] or attrs[1]):
            raise ConfigurationError(f"role {role!r} exists as a superuser or with BYPASSRLS; "
                                     "row-level security would not apply to it: choose another name")
        ident = sql.Identifier(role)
        with conn.transaction():
            verb = "ALTER" if attrs else "CREATE"
            conn.execute(sql.SQL(verb + " ROLE {} LOGIN PASSWORD {} NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE")
                         .format(ident, sql.Literal(password)))
            conn.execute(sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(
                sql.Identifier(conn.info.dbname), ident))
            schema_id = sql.Identifier(schema)
            conn.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(schema_id, ident))
            ext = conn.execute("SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace"
                               " WHERE e.extname = 'vector'").fetchone()
            if ext:
                conn.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(ext[0]), ident))
        enable_row_security(conn, schema)
        with conn.transaction():
            kinds = agentmem_tables(conn, schema)
            with_user = [t for t, k in kinds.items() if k == USER]
            shared = [t for t, k in kinds.items() if k == SHARED]
            read_only = [t for t, k in kinds.items() if k == BOOKKEEPING]
            for table, kind in kinds.items():
                qualified = sql.Identifier(schema, table)
                conn.execute(sql.SQL("REVOKE ALL ON {} FROM {}").format(qualified, ident))
                if kind == USER or kind == SHARED and table == TOOL_TABLE and tool_registrar:
                    rights = "SELECT, INSERT, UPDATE, DELETE"
                else:
                    rights = "SELECT"
                conn.execute(sql.SQL("GRANT " + rights + " ON {} TO {}").format(qualified, ident))
            for seq in _owned_sequences(conn, schema, with_user):
                conn.execute(sql.SQL("GRANT USAGE, SELECT ON SEQUENCE {} TO {}").format(
                    sql.Identifier(schema, seq), ident))
            for name, args in APP_FUNCTIONS:
                conn.execute(sql.SQL("GRANT EXECUTE ON FUNCTION {}({}) TO {}").format(
                    sql.Identifier(schema, name), sql.SQL(args), ident))
    return AppRole(role, app_conninfo(conninfo, role, password), with_user, shared, read_only, tool_registrar)


def row_security_status(conn: psycopg.Connection, schema: str) -> dict[str, dict[str, object]]:
    """Per table with ``user_id``: whether RLS is enabled and its policy names (for tests and status)."""
    rows = conn.execute(
        "SELECT c.relname, c.relrowsecurity, coalesce(array_agg(p.polname ORDER BY p.polname)"
        " FILTER (WHERE p.polname IS NOT NULL), ARRAY[]::name[])"
        " FROM pg_class c LEFT JOIN pg_policy p ON p.polrelid = c.oid"
        " WHERE c.relname = ANY(%s) AND c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = %s)"
        " GROUP BY c.relname, c.relrowsecurity",
        (user_tables(conn, schema), schema),
    ).fetchall()
    return {name: {"enabled": bool(enabled), "policies": list(policies)} for name, enabled, policies in rows}
