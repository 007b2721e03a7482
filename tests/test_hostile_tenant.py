"""A hostile tenant: the application role with raw SQL, every table, every verb.

Mallory holds the app role's credentials (what every application process has) and
names herself in ``agentmem.user_id``. Alice is the victim; the schema owner has
published a shared workflow and registered a tool. For each of agentmem's tables
(``agentmem_tables``) and each verb (SELECT, INSERT, UPDATE, DELETE, TRUNCATE,
changing ``user_id``, the shared rows, the bookkeeping tables, the views, the
functions), the test asserts what the database refuses and what it allows: an
allowed verb must really work on Mallory's own rows, so a role that can do nothing
cannot pass for a safe one. Every statement runs in a transaction that is rolled
back, so the fixtures' rows are the same for every case.
"""

from __future__ import annotations

import uuid
from typing import Any, Iterator

import psycopg
import pytest
from psycopg import sql

from memory import MemoryManager, create_app_role
from memory.store.isolation import agentmem_tables
from memory_data import populate

ROLE = "agentmem_hostile_test"

#: Per-user tables: (columns of a minimal INSERT, their values, a column to UPDATE).
USER_TABLES: dict[str, tuple[str, str, str]] = {
    "conversational_memory": ("thread_id, role, content", "'t', 'user', 'planted'", "content"),
    "summary_memory": ("description, content", "'d', 'planted'", "content"),
    "workflow_memory": ("name, description", "'n', 'planted'", "description"),
    "fact_memory": ("category, content", "'preference', 'planted'", "content"),
    "knowledge_memory": ("content", "'planted'", "content"),
    "knowledge_terms": ("term, id", "'planted', gen_random_uuid()", "term"),
    "conversational_terms": ("term, message_id", "'planted', %(free_message)s", "term"),
    "entity_memory": ("name", "'planted'", "description"),
    "tool_log": ("tool_name, status", "'planted', 'ok'", "output"),
    "conversational_context": ("message_id, context_tsv", "%(free_message)s, to_tsvector('planted')", "context_tsv"),
    "store_memory": ("namespace, key, value", "ARRAY['planted'], 'planted', to_jsonb('planted'::text)", "value"),
    "store_vectors": ("namespace, key, field_path, embedding",
                      "ARRAY[%(me)s, 'notes'], 'note', 'planted', (SELECT embedding FROM store_vectors LIMIT 1)",
                      "field_path"),
    "conversational_stats": ("messages", "1", "messages"),
    "knowledge_stats": ("slot, passages", "15, 1", "passages"),
}
#: The value an UPDATE sets, where the plain text 'planted' is not of the column's type.
UPDATE_VALUES = {"conversational_context": "to_tsvector('planted')", "store_memory": "to_jsonb('planted'::text)",
                 "conversational_stats": "messages + 1", "knowledge_stats": "passages + 1",
                 "knowledge_terms": "term || 'planted'", "conversational_terms": "term || 'planted'"}  # keys stay distinct
#: A table with one row per user and key (her counts, migrations 012, 014): her rows go first, so her INSERT can succeed.
FREE_FIRST = {"conversational_stats": "DELETE FROM conversational_stats WHERE user_id = %(me)s",
              "knowledge_stats": "DELETE FROM knowledge_stats WHERE user_id = %(me)s"}
SHARED_TABLES = {"toolbox_memory": "description", "shared_workflow_memory": "description"}
BOOKKEEPING = {"schema_migrations": "name", "agentmem_meta": "value", "agentmem_tables": "kind"}
VIEWS = ("consolidation_status", "summary_lineage", "table_sizes", "memory_growth", "fact_history")

REFUSED = (psycopg.errors.InsufficientPrivilege, psycopg.errors.NotNullViolation)


@pytest.fixture(scope="module")
def world(pg_uri: str, session_mm: MemoryManager) -> dict[str, Any]:
    mm = session_mm
    alice, mallory = f"alice-{uuid.uuid4().hex[:8]}", f"mallory-{uuid.uuid4().hex[:8]}"
    thread = f"t-{uuid.uuid4().hex[:6]}"
    populate(mm, alice, thread, f"zq{uuid.uuid4().hex[:8]}")
    populate(mm, mallory, thread, f"zq{uuid.uuid4().hex[:8]}")
    shared = mm.write_workflow(f"shared-{uuid.uuid4().hex[:6]}", "reset a password", ["open", "reset"],
                               user_id="owner", shared=True)
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}, public").format(sql.Identifier(mm.db.schema)))
        tool = conn.execute(
            "INSERT INTO toolbox_memory (namespace, name, description, json_schema, content_hash)"
            " VALUES (%s, 'get_weather', 'Weather of a city', '{}'::jsonb, 'h') RETURNING id",
            (f"hostile-{uuid.uuid4().hex[:6]}",)).fetchone()[0]
        alice_workflow = conn.execute("SELECT id FROM workflow_memory WHERE user_id = %s", (alice,)).fetchone()[0]
        tables = agentmem_tables(conn, mm.db.schema)
    role = create_app_role(pg_uri, ROLE, "hostile-secret", schema=mm.db.schema)
    return {"alice": alice, "mallory": mallory, "shared_workflow": shared.id, "tool": tool, "tables": tables,
            "alice_workflow": alice_workflow, "conninfo": role.conninfo, "schema": mm.db.schema,
            "owner_uri": pg_uri}


@pytest.fixture
def mallory(world: dict[str, Any]) -> Iterator[psycopg.Connection]:
    """Mallory's raw connection as the app role, scoped to herself; rolled back at the end."""
    with psycopg.connect(world["conninfo"]) as conn:
        conn.execute(sql.SQL("SET search_path TO {}, public").format(sql.Identifier(world["schema"])))
        conn.execute("SELECT set_config('agentmem.user_id', %s, false)", (world["mallory"],))
        yield conn
        conn.rollback()


def attempt(conn: psycopg.Connection, statement: str | sql.Composable, params: dict[str, Any] | None = None
            ) -> tuple[str, Any]:
    """("ok", rowcount) or ("refused", the error); a savepoint keeps the transaction usable."""
    try:
        with conn.transaction():
            cur = conn.execute(statement, params)
            return "ok", cur.rowcount
    except REFUSED as exc:
        return "refused", exc


def params_for(conn: psycopg.Connection, world: dict[str, Any]) -> dict[str, Any]:
    """Statement parameters; ``free_message`` is a message of Mallory's whose window row is removed
    first, so inserting a window row for it can succeed."""
    me = world["mallory"]
    mid = conn.execute("SELECT id FROM conversational_memory WHERE user_id = %s ORDER BY id LIMIT 1",
                       (me,)).fetchone()[0]
    conn.execute("DELETE FROM conversational_context WHERE message_id = %s", (mid,))
    return {"me": me, "alice": world["alice"], "free_message": mid}


def count(conn: psycopg.Connection, table: str, user: str) -> int:
    return conn.execute(sql.SQL("SELECT count(*) FROM {} WHERE user_id = %s").format(sql.Identifier(table)),
                        (user,)).fetchone()[0]


def test_the_cases_cover_every_table_agentmem_owns(world):
    assert set(world["tables"]) == set(USER_TABLES) | set(SHARED_TABLES) | set(BOOKKEEPING)
    assert {t for t, k in world["tables"].items() if k == "user"} == set(USER_TABLES)
    assert {t for t, k in world["tables"].items() if k == "shared"} == set(SHARED_TABLES)


# -- per-user tables -------------------------------------------------------------------------
@pytest.mark.parametrize("table", sorted(USER_TABLES))
def test_user_table_select(table, world, mallory):
    assert count(mallory, table, world["mallory"]) > 0  # her own rows: allowed
    assert count(mallory, table, world["alice"]) == 0  # Alice's: invisible even when named
    users = {r[0] for r in mallory.execute(sql.SQL("SELECT DISTINCT user_id FROM {}").format(sql.Identifier(table)))}
    assert users == {world["mallory"]}


@pytest.mark.parametrize("table", sorted(USER_TABLES))
@pytest.mark.parametrize("as_user,expected", [("me", "ok"), ("alice", "refused"), ("null", "refused")])
def test_user_table_insert(table, as_user, expected, world, mallory):
    cols, values, _ = USER_TABLES[table]
    p = params_for(mallory, world)
    if table in FREE_FIRST:
        mallory.execute(FREE_FIRST[table], p)
    who = {"me": sql.Placeholder("me"), "alice": sql.Placeholder("alice"), "null": sql.SQL("NULL")}[as_user]
    stmt = sql.SQL("INSERT INTO {} (user_id, " + cols + ") VALUES ({}, " + values + ")").format(
        sql.Identifier(table), who)
    outcome, detail = attempt(mallory, stmt, p)
    assert outcome == expected, detail
    if expected == "ok":
        assert detail == 1


@pytest.mark.parametrize("table", sorted(USER_TABLES))
@pytest.mark.parametrize("case,expected", [
    ("edit own rows", "ok"),
    ("edit Alice's rows", 0),
    ("give own rows to Alice", "refused"),
    ("make own rows shared (user_id NULL)", "refused"),
    ("take Alice's rows", 0),
])
def test_user_table_update(table, case, expected, world, mallory):
    column = sql.Identifier(USER_TABLES[table][2])
    p = params_for(mallory, world)
    value = sql.SQL(UPDATE_VALUES.get(table, "'planted'"))
    stmt = {
        "edit own rows": sql.SQL("UPDATE {t} SET {c} = {v} WHERE user_id = %(me)s"),
        "edit Alice's rows": sql.SQL("UPDATE {t} SET {c} = {v} WHERE user_id = %(alice)s"),
        "give own rows to Alice": sql.SQL("UPDATE {t} SET user_id = %(alice)s WHERE user_id = %(me)s"),
        "make own rows shared (user_id NULL)": sql.SQL("UPDATE {t} SET user_id = NULL WHERE user_id = %(me)s"),
        "take Alice's rows": sql.SQL("UPDATE {t} SET user_id = %(me)s WHERE user_id = %(alice)s"),
    }[case].format(t=sql.Identifier(table), c=column, v=value)
    outcome, detail = attempt(mallory, stmt, p)
    if expected == "ok":
        assert outcome == "ok" and detail > 0, detail
    elif expected == 0:
        assert (outcome, detail) == ("ok", 0)  # the rows exist (the owner sees them) but not for her
    else:
        assert outcome == "refused", detail


#: Rows still referenced through a NO ACTION key (migration 008: Citus refuses SET NULL on a
#: key holding user_id) are unlinked by their owner before they can go.
UNLINK_FIRST = {"summary_memory": "UPDATE conversational_memory SET summary_id = NULL WHERE user_id = %(me)s"}


@pytest.mark.parametrize("table", sorted(USER_TABLES))
def test_user_table_delete_and_truncate(table, world, mallory):
    p = params_for(mallory, world)
    assert attempt(mallory, sql.SQL("DELETE FROM {} WHERE user_id = %(alice)s").format(sql.Identifier(table)),
                   p) == ("ok", 0)
    if table in UNLINK_FIRST:
        assert attempt(mallory, UNLINK_FIRST[table], p)[0] == "ok"
    outcome, detail = attempt(mallory, sql.SQL("DELETE FROM {} WHERE user_id = %(me)s").format(
        sql.Identifier(table)), p)
    assert outcome == "ok" and detail > 0
    outcome, detail = attempt(mallory, sql.SQL("TRUNCATE {}").format(sql.Identifier(table)))
    assert outcome == "refused", detail


# -- shared rows: tools and shared workflows ------------------------------------------------------
def _shared_key(table: str, world: dict[str, Any]) -> Any:
    return world["tool"] if table == "toolbox_memory" else world["shared_workflow"]


@pytest.mark.parametrize("table", sorted(SHARED_TABLES))
def test_shared_table_is_readable(table, world, mallory):
    row = mallory.execute(sql.SQL("SELECT description FROM {} WHERE id = %s").format(sql.Identifier(table)),
                          (_shared_key(table, world),)).fetchone()
    assert row is not None and row[0]


SHARED_WRITES = {
    "insert": "INSERT INTO {t} (name, description, json_schema, content_hash) VALUES ('x', 'planted', '{{}}', 'h')",
    "rewrite text": "UPDATE {t} SET description = 'planted' WHERE id = %(id)s",
    "set counters": "UPDATE {t} SET use_count = 1000000 WHERE id = %(id)s",
    "delete": "DELETE FROM {t} WHERE id = %(id)s",
    "truncate": "TRUNCATE {t}",
}


@pytest.mark.parametrize("table", sorted(SHARED_TABLES))
@pytest.mark.parametrize("verb", sorted(SHARED_WRITES))
def test_shared_table_writes_are_refused(table, verb, world, mallory):
    statement = SHARED_WRITES[verb]
    if verb == "set counters" and table == "toolbox_memory":
        statement = "UPDATE {t} SET augmented = true WHERE id = %(id)s"
    if verb == "insert" and table == "shared_workflow_memory":
        statement = "INSERT INTO {t} (name, description) VALUES ('x', 'planted')"
    stmt = sql.SQL(statement).format(t=sql.Identifier(table))
    outcome, detail = attempt(mallory, stmt, {"id": _shared_key(table, world)} if "%(id)s" in statement else None)
    assert outcome == "refused", f"{verb} on {table} was allowed: {detail}"


def test_shared_workflow_use_is_counted_by_one_and_nothing_else(world, mallory):
    wid = world["shared_workflow"]
    before = mallory.execute("SELECT use_count, success_count, description FROM shared_workflow_memory"
                             " WHERE id = %s", (wid,)).fetchone()
    assert mallory.execute("SELECT agentmem_record_shared_workflow_use(%s, true)", (wid,)).fetchone() == (True,)
    after = mallory.execute("SELECT use_count, success_count, description FROM shared_workflow_memory"
                            " WHERE id = %s", (wid,)).fetchone()
    assert after == (before[0] + 1, before[1] + 1, before[2])
    # The function touches shared rows only: Alice's private workflow id is not found.
    assert mallory.execute("SELECT agentmem_record_shared_workflow_use(%s, true)",
                           (world["alice_workflow"],)).fetchone() == (None,)


def test_a_temporary_table_cannot_stand_in_for_the_shared_one(world, mallory):
    """The SECURITY DEFINER function pins its search_path (pg_temp last)."""
    mallory.execute("CREATE TEMPORARY TABLE shared_workflow_memory (id uuid, use_count int, success_count int,"
                    " last_used_at timestamptz)")
    mallory.execute("INSERT INTO pg_temp.shared_workflow_memory VALUES (%s, 0, 0, NULL)", (world["shared_workflow"],))
    before = mallory.execute(sql.SQL("SELECT use_count FROM {} WHERE id = %s").format(
        sql.Identifier(world["schema"], "shared_workflow_memory")), (world["shared_workflow"],)).fetchone()[0]
    mallory.execute("SELECT agentmem_record_shared_workflow_use(%s, false)", (world["shared_workflow"],))
    assert mallory.execute("SELECT use_count FROM pg_temp.shared_workflow_memory").fetchone() == (0,)
    assert mallory.execute(sql.SQL("SELECT use_count FROM {} WHERE id = %s").format(
        sql.Identifier(world["schema"], "shared_workflow_memory")), (world["shared_workflow"],)).fetchone() == (
        before + 1,)


# -- bookkeeping, views, functions, DDL ---------------------------------------------------------
@pytest.mark.parametrize("table", sorted(BOOKKEEPING))
def test_bookkeeping_is_read_only(table, mallory):
    assert mallory.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table))).fetchone()[0] > 0
    column = sql.Identifier(BOOKKEEPING[table])
    for stmt in (sql.SQL("UPDATE {} SET {} = {}").format(sql.Identifier(table), column, column),
                 sql.SQL("DELETE FROM {}").format(sql.Identifier(table)),
                 sql.SQL("TRUNCATE {}").format(sql.Identifier(table))):
        outcome, detail = attempt(mallory, stmt)
        assert outcome == "refused", (stmt.as_string(mallory), detail)
    outcome, detail = attempt(mallory, sql.SQL("INSERT INTO {} SELECT * FROM {} LIMIT 1").format(
        sql.Identifier(table), sql.Identifier(table)))
    assert outcome == "refused", detail


@pytest.mark.parametrize("view", VIEWS)
def test_views_are_not_granted(view, mallory):
    # A view runs with its owner's rights: readable, it would bypass row-level security.
    outcome, detail = attempt(mallory, sql.SQL("SELECT * FROM {}").format(sql.Identifier(view)))
    assert outcome == "refused", detail


@pytest.mark.parametrize("statement", [
    "SELECT agentmem_enable_row_security()",
    "ALTER TABLE knowledge_memory DISABLE ROW LEVEL SECURITY",
    "DROP POLICY agentmem_own_rows ON knowledge_memory",
    "CREATE POLICY everything ON knowledge_memory USING (true)",
    "CREATE TABLE knowledge_memory_copy (x int)",
    "GRANT SELECT ON consolidation_status TO PUBLIC",
    "SET ROLE postgres",
    "ALTER TABLE workflow_memory ALTER COLUMN user_id DROP NOT NULL",
])
def test_no_way_around_the_policies(statement, mallory):
    outcome, detail = attempt(mallory, statement)
    assert outcome == "refused", detail


def test_row_security_off_is_an_error_not_a_bypass(world, mallory):
    mallory.execute("SET row_security = off")
    outcome, detail = attempt(mallory, "SELECT count(*) FROM knowledge_memory")
    assert outcome == "refused" and "row-level security" in str(detail)


def test_without_the_setting_nothing_is_visible_or_writable(world):
    with psycopg.connect(world["conninfo"]) as conn:
        conn.execute(sql.SQL("SET search_path TO {}, public").format(sql.Identifier(world["schema"])))
        for table in USER_TABLES:
            assert conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table))).fetchone() == (0,)
        outcome, _ = attempt(conn, "INSERT INTO knowledge_memory (user_id, content) VALUES (%(u)s, 'x')",
                             {"u": world["alice"]})
        assert outcome == "refused"
        conn.rollback()
