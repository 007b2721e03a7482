"""Tenant isolation in the database: row-level security and the application role.

Every read and write of agentmem already filters on ``user_id`` in its SQL. Row-level
security is the second wall, for the day a query forgets: migration 003 puts policies
on every table with a ``user_id`` column comparing it with the transaction setting
``agentmem.user_id``, which ``Database.connection(user_id)`` sets with
``set_config(..., true)`` (transaction-local, so a pooled connection never carries one
user's id into the next transaction). A transaction that sets nothing sees nothing.

Policies do not bind the table owner, which runs migrations and admin commands
(purge, forget-user, status across users). Applications connect through a separate
login role without ownership, superuser or BYPASSRLS, created by
:func:`create_app_role`; through it even ``SELECT *`` returns only the rows of the user
named in the setting, and a row written for another user is refused (WITH CHECK).

What this does not do: the setting is the identity, so whoever holds the app role's
password can set it to any user. RLS here defends against bugs in the application's
queries, not against a stolen database credential. Tables without ``user_id``
(``toolbox_memory``: tools shared by a deployment) hold no user data and are granted
to the app role without policies; the bookkeeping tables are read-only for it. Views
are never granted: a view runs with its owner's rights and would bypass the policies.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg import sql

from .errors import ConfigurationError
from .validation import check_id, check_text

#: Tables the app role may only read (the migration runner's bookkeeping).
READ_ONLY_TABLES = ("schema_migrations", "agentmem_meta")

_USER_TABLES = """
SELECT c.relname
FROM pg_class c
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'user_id' AND NOT a.attisdropped
WHERE c.relnamespace = %s::regnamespace AND c.relkind IN ('r', 'p') AND NOT c.relispartition
ORDER BY c.relname
"""

_BASE_TABLES = """
SELECT c.relname FROM pg_class c
WHERE c.relnamespace = %s::regnamespace AND c.relkind IN ('r', 'p') AND NOT c.relispartition
ORDER BY c.relname
"""


def user_tables(conn: psycopg.Connection, schema: str) -> list[str]:
    """Base tables of ``schema`` with a ``user_id`` column, from the catalog."""
    return [r[0] for r in conn.execute(_USER_TABLES, (schema,))]


def base_tables(conn: psycopg.Connection, schema: str) -> list[str]:
    return [r[0] for r in conn.execute(_BASE_TABLES, (schema,))]


@dataclass(frozen=True)
class AppRole:
    """The role created by :func:`create_app_role` and what it was granted."""

    name: str
    conninfo: str
    user_tables: list[str]
    shared_tables: list[str]
    read_only_tables: list[str]


def app_conninfo(conninfo: str, role: str, password: str) -> str:
    """``conninfo`` with its user and password replaced by the app role's."""
    params = psycopg.conninfo.conninfo_to_dict(conninfo)
    params.update(user=role, password=password)
    return psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in params.items() if v is not None})


def enable_row_security(conn: psycopg.Connection, schema: str) -> int:
    """(Re)apply the policies to every table with ``user_id``; returns how many tables."""
    with conn.transaction():
        conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(sql.Identifier(schema)))
        row = conn.execute(sql.SQL("SELECT {}.agentmem_enable_row_security()").format(
            sql.Identifier(schema))).fetchone()
    return int(row[0]) if row else 0


def create_app_role(conninfo: str, role: str, password: str, *, schema: str = "agent_memory") -> AppRole:
    """Create (or update the password of) the non-owner login role applications use.

    ``conninfo`` must connect as the schema owner (or a superuser). The role gets
    USAGE on the schema and the vector extension's schema, DML on every base table,
    read-only access to the bookkeeping tables, and nothing else: no ownership, no
    BYPASSRLS, no CREATE. Row-level security is (re)applied first, so tables added
    since the last migration are covered. Returns the role and a conninfo for it.
    """
    role = check_id(role, "role", max_chars=63)
    password = check_text(password, "password", max_chars=200)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        if conn.execute("SELECT to_regnamespace(%s)", (schema,)).fetchone()[0] is None:  # type: ignore[index]
            raise ConfigurationError(f"schema {schema!r} does not exist: run agentmem init (migrations) first")
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
            with_user = user_tables(conn, schema)
            shared, read_only = [], []
            for table in base_tables(conn, schema):
                qualified = sql.Identifier(schema, table)
                if table in READ_ONLY_TABLES:
                    read_only.append(table)
                    conn.execute(sql.SQL("GRANT SELECT ON {} TO {}").format(qualified, ident))
                    continue
                if table not in with_user:
                    shared.append(table)
                conn.execute(sql.SQL("GRANT SELECT, INSERT, UPDATE, DELETE ON {} TO {}").format(qualified, ident))
            conn.execute(sql.SQL("GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {} TO {}").format(schema_id, ident))
    return AppRole(role, app_conninfo(conninfo, role, password), with_user, shared, read_only)


def row_security_status(conn: psycopg.Connection, schema: str) -> dict[str, dict[str, object]]:
    """Per table with ``user_id``: whether RLS is enabled and its policy names (for tests and status)."""
    rows = conn.execute(
        "SELECT c.relname, c.relrowsecurity, coalesce(array_agg(p.polname ORDER BY p.polname)"
        " FILTER (WHERE p.polname IS NOT NULL), ARRAY[]::name[])"
        " FROM pg_class c LEFT JOIN pg_policy p ON p.polrelid = c.oid"
        " WHERE c.relname = ANY(%s) AND c.relnamespace = %s::regnamespace GROUP BY c.relname, c.relrowsecurity",
        (user_tables(conn, schema), schema),
    ).fetchall()
    return {name: {"enabled": bool(enabled), "policies": list(policies)} for name, enabled, policies in rows}
