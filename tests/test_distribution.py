"""Ready for Citus: the catalog rules, the distribution plan, and ``agentmem distribute`` without Citus.

Citus cannot be installed here, so readiness is shown against the rules Citus
enforces for tables distributed on ``user_id`` (memory.store.distribution.check_schema
reads them from the catalog; each rule is shown to fire on a table that breaks it)
and by the plan ``sql/citus_distribute.sql`` computes, run in its dry-run mode.
"""

from __future__ import annotations

from typing import Iterator

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql

from memory import HashEmbedder, MemoryManager, Settings
from memory.cli.main import main
from memory.store.distribution import check_schema, script_path


@pytest.fixture(scope="module")
def dist_schema(pg_uri: str) -> Iterator[str]:
    """A migrated schema of this module's own (read-only for the tests; DDL is rolled back)."""
    import uuid

    name = f"dist_{uuid.uuid4().hex[:8]}"
    MemoryManager.open(Settings.from_env(database_url=pg_uri, schema=name), embedder=HashEmbedder()).close()
    yield name
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@pytest.fixture
def dist_conn(pg_uri: str, dist_schema: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(pg_uri) as conn:  # not autocommit: every test's DDL is rolled back
        conn.execute(sql.SQL("SET search_path TO {}, public").format(sql.Identifier(dist_schema)))
        yield conn
        conn.rollback()


def _found(conn: psycopg.Connection, schema: str) -> set[tuple[str, str, str]]:
    return {(v.rule, v.table, v.detail) for v in check_schema(conn, schema)}


def _register_new_tables(conn: psycopg.Connection) -> None:
    """Since migration 007 agentmem checks its registered tables only: register the test's x_ tables."""
    if conn.execute("SELECT to_regclass('agentmem_tables')").fetchone() == (None,):
        return
    conn.execute(
        "INSERT INTO agentmem_tables (table_name, kind, added_in)"
        " SELECT c.relname, CASE WHEN EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid"
        " AND a.attname = 'user_id') THEN 'user' ELSE 'shared' END, 999"
        " FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r'"
        " AND c.relname LIKE 'x\\_%' ON CONFLICT DO NOTHING")


PARENT = "CREATE TABLE x_parent (user_id text NOT NULL, id bigint, PRIMARY KEY (user_id, id))"

RULE_CASES = {
    "primary key without user_id": (
        ["CREATE TABLE x_pk (id bigint PRIMARY KEY, user_id text NOT NULL)"],
        {("unique_without_user_id", "x_pk")}),
    "unique constraint without user_id": (
        ["CREATE TABLE x_unique (user_id text NOT NULL, code text, UNIQUE (code))"],
        {("unique_without_user_id", "x_unique")}),
    "unique index without user_id on a shipped table": (
        ["CREATE UNIQUE INDEX x_by_hash ON knowledge_memory (content_hash)"],
        {("unique_without_user_id", "knowledge_memory")}),
    "nullable user_id": (
        ["CREATE TABLE x_null (user_id text, note text)"],
        {("nullable_user_id", "x_null")}),
    "foreign key pairing user_id with another column": (
        [PARENT, "CREATE TABLE x_child (user_id text NOT NULL, owner text NOT NULL, pid bigint,"
                 " PRIMARY KEY (user_id, pid), FOREIGN KEY (owner, pid) REFERENCES x_parent (user_id, id))"],
        {("foreign_key_not_colocated", "x_child")}),
    "foreign key from a reference table to a per-user one": (
        [PARENT, "CREATE TABLE x_ref (id bigint PRIMARY KEY, owner text, pid bigint,"
                 " FOREIGN KEY (owner, pid) REFERENCES x_parent (user_id, id))"],
        {("foreign_key_to_distributed", "x_ref")}),
    "ON DELETE SET NULL on a key holding user_id": (
        [PARENT, "CREATE TABLE x_setnull (user_id text NOT NULL, id bigint, pid bigint, PRIMARY KEY (user_id, id),"
                 " FOREIGN KEY (user_id, pid) REFERENCES x_parent (user_id, id) ON DELETE SET NULL)"],
        {("foreign_key_action", "x_setnull")}),
    "user_id of another type": (
        ["CREATE TABLE x_int (user_id bigint NOT NULL)"],
        {("user_id_type", "*")}),
    "serial narrower than bigint": (
        ["CREATE TABLE x_serial (user_id text NOT NULL, n serial, PRIMARY KEY (user_id, n))"],
        {("narrow_sequence", "x_serial")}),
    "integer identity": (
        ["CREATE TABLE x_ident (user_id text NOT NULL, n integer GENERATED ALWAYS AS IDENTITY,"
         " PRIMARY KEY (user_id, n))"],
        {("narrow_sequence", "x_ident")}),
    "a trigger nobody reviewed": (
        ["CREATE FUNCTION x_touch() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$",
         "CREATE TRIGGER x_touch BEFORE INSERT ON knowledge_memory FOR EACH ROW EXECUTE FUNCTION x_touch()"],
        {("unreviewed_trigger", "knowledge_memory")}),
}


@pytest.mark.parametrize("case", list(RULE_CASES))
def test_each_citus_rule_is_caught_in_the_catalog(dist_conn, dist_schema, case):
    statements, expected = RULE_CASES[case]
    before = _found(dist_conn, dist_schema)
    for stmt in statements:
        dist_conn.execute(stmt)
    _register_new_tables(dist_conn)
    assert {(rule, table) for rule, table, _ in _found(dist_conn, dist_schema) - before} == expected


def test_tables_that_follow_the_rules_raise_nothing(dist_conn, dist_schema):
    before = _found(dist_conn, dist_schema)
    dist_conn.execute(PARENT)
    dist_conn.execute("CREATE TABLE x_good (user_id text NOT NULL, id bigint GENERATED ALWAYS AS IDENTITY, pid bigint,"
                      " tool uuid REFERENCES toolbox_memory (id), PRIMARY KEY (user_id, id),"
                      " FOREIGN KEY (user_id, pid) REFERENCES x_parent (user_id, id) ON DELETE CASCADE)")
    dist_conn.execute("CREATE TABLE x_shared (id bigint PRIMARY KEY, name text UNIQUE)")
    _register_new_tables(dist_conn)
    assert _found(dist_conn, dist_schema) == before


def _plan(conn: psycopg.Connection) -> list[tuple[int, str, str, str | None]]:
    conn.execute("SET agentmem.distribute_dry_run = on")
    conn.execute(script_path().read_text(encoding="utf-8"))
    return [tuple(r) for r in conn.execute("SELECT * FROM pg_temp.agentmem_distribution_plan()")]  # type: ignore


def test_script_plans_reference_tables_then_colocated_tables_in_key_order(dist_conn, dist_schema):
    plan = _plan(dist_conn)
    tables = {r[0]: r[1] for r in dist_conn.execute(
        "SELECT c.relname, EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'user_id')"
        " FROM pg_class c WHERE c.relnamespace = %s::regnamespace AND c.relkind IN ('r', 'p')", (dist_schema,))}
    assert sorted(name for _, name, _, _ in plan) == sorted(tables)  # every table, once
    assert {name: kind for _, name, kind, _ in plan} == {
        t: "distributed" if per_user else "reference" for t, per_user in tables.items()}
    kinds = [kind for _, _, kind, _ in plan]
    assert kinds == sorted(kinds, key=lambda k: k == "distributed")  # reference tables first
    step = {name: n for n, name, _, _ in plan}
    fks = dist_conn.execute(
        "SELECT conrelid::regclass::text, confrelid::regclass::text FROM pg_constraint"
        " WHERE contype = 'f' AND connamespace = %s::regnamespace AND conrelid <> confrelid", (dist_schema,)).fetchall()
    assert fks, "the schema has foreign keys between tables"
    for child, parent in fks:
        assert step[parent.split(".")[-1]] < step[child.split(".")[-1]], (child, parent)
    distributed = [(name, anchor) for _, name, kind, anchor in plan if kind == "distributed"]
    assert distributed[0][1] is None and all(anchor == distributed[0][0] for _, anchor in distributed[1:])


def _catalog(conn: psycopg.Connection, schema: str) -> dict[str, list[tuple[object, ...]]]:
    """What distributing could change: relations, constraints, triggers, policies, functions, extensions."""
    ns = (schema,)
    return {
        "relations": conn.execute("SELECT relname, relkind FROM pg_class WHERE relnamespace = %s::regnamespace"
                                  " ORDER BY 1", ns).fetchall(),
        "constraints": conn.execute("SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid)"
                                    " FROM pg_constraint WHERE connamespace = %s::regnamespace ORDER BY 1, 2",
                                    ns).fetchall(),
        "triggers": conn.execute("SELECT tgrelid::regclass::text, tgname FROM pg_trigger t JOIN pg_class c"
                                 " ON c.oid = t.tgrelid WHERE c.relnamespace = %s::regnamespace ORDER BY 1, 2",
                                 ns).fetchall(),
        "policies": conn.execute("SELECT tablename, policyname, qual FROM pg_policies WHERE schemaname = %s"
                                 " ORDER BY 1, 2", ns).fetchall(),
        "functions": conn.execute("SELECT p.oid::regprocedure::text FROM pg_proc p"
                                  " WHERE p.pronamespace = %s::regnamespace ORDER BY 1", ns).fetchall(),
        "extensions": conn.execute("SELECT extname FROM pg_extension ORDER BY 1").fetchall(),
        "migrations": conn.execute(sql.SQL("SELECT version FROM {}.schema_migrations ORDER BY 1").format(
            sql.Identifier(schema))).fetchall(),
    }


@pytest.mark.parametrize("args", [[], ["--json"]])
def test_distribute_without_citus_says_so_exits_1_and_changes_nothing(pg_uri, dist_schema, args):
    env = {"AGENTMEM_DATABASE_URL": pg_uri, "AGENTMEM_SCHEMA": dist_schema, "AGENTMEM_EMBEDDER": "hash"}
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        before = _catalog(conn, dist_schema)
        assert ("citus",) not in before["extensions"]
        result = CliRunner().invoke(main, ["distribute", *args], env=env)
        assert result.exit_code == 1, result.output
        assert result.stdout == ""  # nothing on stdout, not even with --json
        assert "agentmem: error: the citus extension is not installed" in result.stderr
        assert "nothing was changed" in result.stderr and "Citus coordinator" in result.stderr
        assert "Traceback" not in result.output
        assert _catalog(conn, dist_schema) == before


def test_the_script_alone_refuses_without_citus_and_changes_nothing(pg_uri, dist_schema):
    """What a DBA running sql/citus_distribute.sql with psql sees on a server without Citus."""
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        before = _catalog(conn, dist_schema)
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(dist_schema)))
        with pytest.raises(psycopg.errors.RaiseException, match="citus extension is not installed") as err:
            conn.execute(script_path().read_text(encoding="utf-8"))
        assert "CREATE EXTENSION citus" in (err.value.diag.message_hint or "")
        conn.execute("RESET search_path")  # the snapshot names tables as seen from the default path
        assert _catalog(conn, dist_schema) == before


def test_the_migrated_schema_breaks_no_citus_rule(dist_conn, dist_schema):
    """After every migration (008 made the keys (user_id, ...)), nothing is left for Citus to refuse."""
    assert check_schema(dist_conn, dist_schema) == []


def test_dry_run_checks_the_schema_and_lists_the_plan_without_citus(pg_uri, dist_schema):
    import json

    env = {"AGENTMEM_DATABASE_URL": pg_uri, "AGENTMEM_SCHEMA": dist_schema, "AGENTMEM_EMBEDDER": "hash"}
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        before = _catalog(conn, dist_schema)
        result = CliRunner().invoke(main, ["distribute", "--dry-run", "--json"], env=env)
        assert result.exit_code == 0, result.stderr
        plan = json.loads(result.stdout)
        assert plan["dry_run"] is True and plan["citus_version"] is None
        kinds = {s["table_name"]: s["kind"] for s in plan["steps"]}
        assert kinds["toolbox_memory"] == kinds["shared_workflow_memory"] == "reference"
        assert kinds["conversational_memory"] == kinds["workflow_memory"] == "distributed"
        assert _catalog(conn, dist_schema) == before


def test_purging_a_fact_that_superseded_another_unlinks_it(mm, user, sql_conn):
    """The successor key is NO ACTION since 008 (Citus refuses SET NULL on it): forget clears the link first."""
    old = mm.remember("stable_fact", "Lives in Oslo", user_id=user).fact
    new = mm.remember("stable_fact", "Lives in Bergen, not Oslo", user_id=user, replaces=old.id).fact
    mm.forget(new.id, user_id=user, purge=True)
    assert sql_conn.execute("SELECT superseded_by, valid_to IS NOT NULL FROM fact_memory WHERE user_id = %s"
                            " AND id = %s", (user, old.id)).fetchone() == (None, True)
