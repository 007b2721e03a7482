"""Tenant isolation: every public read API, and raw SQL under row-level security.

Alice's data carries a unique marker; Bob reads through every API (as the owner, and
as the non-owner app role where row-level security applies) and must never see it.
Every check is also run for Alice, so a read that returns nothing for everyone
cannot pass for isolation.
"""

from __future__ import annotations

import json
import uuid
from typing import Any, Callable

import psycopg
import pytest
from psycopg import sql

from memory import AccessDeniedError, ConfigurationError, HashEmbedder, MemoryManager, NotFoundError, create_app_role
from memory.store.isolation import row_security_status, user_tables
from memory_data import populate

APP_ROLE = "agentmem_app_test"


@pytest.fixture(scope="module")
def app_role(pg_uri, session_mm):
    return create_app_role(pg_uri, APP_ROLE, "app-secret-1", schema=session_mm.db.schema)


@pytest.fixture(scope="module")
def app_mm(settings, app_role):
    mm = MemoryManager.open(settings, embedder=HashEmbedder(), conninfo=app_role.conninfo)
    yield mm
    mm.close()


@pytest.fixture
def app_sql(app_role, session_mm):
    """A raw connection as the app role (not autocommit: each test's writes are rolled back)."""
    with psycopg.connect(app_role.conninfo) as conn:
        conn.execute(sql.SQL("SET search_path TO {}, public").format(sql.Identifier(session_mm.db.schema)))
        conn.commit()
        yield conn
        conn.rollback()


def read_everything(mm: MemoryManager, user: str, thread: str, ids: dict[str, Any], marker: str) -> dict[str, Any]:
    """Every public read API, with Alice's ids; NotFoundError recorded as such."""
    sid = ids["summary_id"]
    calls: dict[str, Callable[[], Any]] = {
        "read_conversational_memory": lambda: mm.read_conversational_memory(thread_id=thread, user_id=user),
        "read_thread": lambda: mm.read_thread(thread_id=thread, user_id=user),
        "list_threads": lambda: mm.list_threads(user_id=user),
        "read_knowledge": lambda: mm.read_knowledge(marker, user_id=user),
        "read_workflows": lambda: mm.read_workflows(marker, user_id=user),
        "read_entities": lambda: mm.read_entities(user_id=user),
        "read_entities_query": lambda: mm.read_entities(marker, user_id=user),
        "read_summaries": lambda: mm.read_summaries(user_id=user),
        "read_summary_memory": lambda: mm.read_summary_memory(marker, user_id=user),
        "summary_references": lambda: mm.summary_references(user_id=user),
        "read_summary_by_id": lambda: mm.read_summary_by_id(sid, user_id=user),
        "read_conversations_by_summary_id": lambda: mm.read_conversations_by_summary_id(sid, user_id=user),
        "expand_summary": lambda: mm.expand_summary(sid, user_id=user),
        "read_tool_log": lambda: mm.read_tool_log(user_id=user),
        "read_tool_log_entry": lambda: mm.read_tool_log_entry(ids["tool_log"].id, user_id=user),
        "read_facts": lambda: mm.read_facts(user_id=user),
        "recall": lambda: mm.recall(user_id=user),
        "recall_query": lambda: mm.recall(marker, user_id=user),
        "recall_history": lambda: mm.recall(user_id=user, include_history=True),
        "fact_history": lambda: mm.fact_history(ids["fact"].id, user_id=user),
        "search_memory": lambda: mm.search_memory(marker, user_id=user),
        "build_context": lambda: mm.build_context(marker, user_id=user, thread_id=thread),
    }
    out: dict[str, Any] = {}
    for name, call in calls.items():
        try:
            out[name] = call()
        except NotFoundError:
            out[name] = NotFoundError
    return out


@pytest.mark.parametrize("through", ["owner", "app_role"])
def test_no_public_read_api_crosses_users(through, mm, request, thread):
    reader = mm if through == "owner" else request.getfixturevalue("app_mm")
    alice, bob = f"alice-{uuid.uuid4().hex[:8]}", f"bob-{uuid.uuid4().hex[:8]}"
    marker = f"zq{uuid.uuid4().hex[:10]}"
    ids = populate(reader, alice, thread, marker)
    populate(reader, bob, thread, f"zq{uuid.uuid4().hex[:10]}")  # same thread id, other user
    seen_by_alice = read_everything(reader, alice, thread, ids, marker)
    seen_by_bob = read_everything(reader, bob, thread, ids, marker)
    for name, result in seen_by_alice.items():
        assert result is not NotFoundError and (marker in repr(result) or alice in repr(result)), \
            f"{name} shows Alice nothing of hers"
    for name, result in seen_by_bob.items():
        assert result is NotFoundError or (marker not in repr(result) and alice not in repr(result)), \
            f"{name} leaks Alice's rows to Bob"
    for name in ("read_summary_by_id", "expand_summary", "read_tool_log_entry", "fact_history"):
        assert seen_by_bob[name] is NotFoundError
    # Writes keyed by another user's ids are not found either.
    with pytest.raises(NotFoundError):
        reader.forget(ids["fact"].id, user_id=bob)
    with pytest.raises(NotFoundError):
        reader.record_workflow_use(ids["workflow"].id, user_id=bob)


def test_every_user_table_is_under_row_level_security(sql_conn, mm, app_role):
    tables = user_tables(sql_conn, mm.db.schema)
    assert {"conversational_memory", "summary_memory", "fact_memory", "tool_log", "workflow_memory"} <= set(tables)
    status = row_security_status(sql_conn, mm.db.schema)
    assert set(status) == set(tables)
    for table, info in status.items():
        assert info["enabled"] and info["policies"], table
    assert sorted(app_role.user_tables) == sorted(tables)
    role = sql_conn.execute("SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = %s", (APP_ROLE,)).fetchone()
    assert role == (False, False)
    owned = sql_conn.execute("SELECT count(*) FROM pg_class c JOIN pg_roles r ON r.oid = c.relowner"
                             " WHERE r.rolname = %s", (APP_ROLE,)).fetchone()[0]
    assert owned == 0


def test_raw_sql_as_app_role_sees_only_the_user_in_the_setting(mm, app_sql, thread):
    alice, bob = f"alice-{uuid.uuid4().hex[:8]}", f"bob-{uuid.uuid4().hex[:8]}"
    populate(mm, alice, thread, f"zq{uuid.uuid4().hex[:8]}")
    populate(mm, bob, thread, f"zq{uuid.uuid4().hex[:8]}")
    tables = user_tables(app_sql, mm.db.schema)
    # No setting: nothing of anyone's (shared workflows aside).
    for table in tables:
        rows = app_sql.execute(sql.SQL("SELECT user_id FROM {}").format(sql.Identifier(table))).fetchall()
        assert all(r[0] is None for r in rows), table
    app_sql.execute("SELECT set_config('agentmem.user_id', %s, false)", (bob,))
    seen_tables = 0
    for table in tables:
        with app_sql.cursor(row_factory=psycopg.rows.dict_row) as cur:
            users = {r["user_id"] for r in cur.execute(sql.SQL("SELECT * FROM {}").format(sql.Identifier(table)))}
        assert users <= {bob, None}, table
        seen_tables += bob in users
        # Even SELECT * with a WHERE naming Alice finds nothing.
        star = app_sql.execute(sql.SQL("SELECT * FROM {} WHERE user_id = %s").format(sql.Identifier(table)),
                               (alice,)).fetchall()
        assert star == [], table
        assert app_sql.execute(sql.SQL("UPDATE {} SET user_id = user_id WHERE user_id = %s").format(
            sql.Identifier(table)), (alice,)).rowcount == 0
        assert app_sql.execute(sql.SQL("DELETE FROM {} WHERE user_id = %s").format(
            sql.Identifier(table)), (alice,)).rowcount == 0
    assert seen_tables >= 7  # Bob sees his own rows: the policies do not just hide everything
    app_sql.rollback()


@pytest.mark.parametrize("statement", [
    "INSERT INTO knowledge_memory (user_id, content) VALUES (%(other)s, 'planted')",
    "INSERT INTO fact_memory (user_id, category, content) VALUES (%(other)s, 'preference', 'planted')",
    "INSERT INTO conversational_memory (user_id, thread_id, role, content) VALUES (%(other)s, 't', 'user', 'x')",
    "INSERT INTO tool_log (user_id, tool_name, status) VALUES (%(other)s, 'x', 'ok')",
    "INSERT INTO summary_memory (user_id, description, content) VALUES (%(other)s, 'x', 'y')",
    "INSERT INTO workflow_memory (user_id, name, description) VALUES (NULL, 'shared', 'planted')",
    "UPDATE knowledge_memory SET user_id = %(other)s WHERE user_id = %(me)s",
])
def test_app_role_cannot_write_rows_of_another_user(mm, app_sql, user, statement):
    mm.write_knowledge("mine", user_id=user)
    app_sql.execute("SELECT set_config('agentmem.user_id', %s, false)", (user,))
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        app_sql.execute(statement, {"other": f"victim-{uuid.uuid4().hex[:6]}", "me": user})


def test_app_role_cannot_turn_security_off(app_sql):
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        app_sql.execute("ALTER TABLE fact_memory DISABLE ROW LEVEL SECURITY")
    app_sql.rollback()
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        app_sql.execute("DROP POLICY agentmem_own_rows ON fact_memory")


def test_setting_does_not_outlive_the_transaction(app_mm, user):
    app_mm.remember("preference", "User likes quiet carriages", user_id=user)
    assert len(app_mm.read_facts(user_id=user)) == 1
    for _ in range(app_mm.settings.pool_max_size):  # whichever pooled connection comes back
        with app_mm.db.connection() as conn:
            assert conn.execute("SELECT count(*) FROM fact_memory").fetchone()[0] == 0
            assert conn.execute("SELECT current_setting('agentmem.user_id', true)").fetchone()[0] in (None, "")


def test_shared_workflows_are_read_by_all_but_written_by_the_owner_only(mm, app_mm, sql_conn):
    alice, bob = f"alice-{uuid.uuid4().hex[:8]}", f"bob-{uuid.uuid4().hex[:8]}"
    mine = app_mm.write_workflow(f"rotate-{uuid.uuid4().hex[:6]}", "rotate the api key", ["open the console",
                                                                                          "rotate"], user_id=alice)
    assert mine.user_id == alice
    # Through the app role, nothing becomes shared: neither a new row nor a published one.
    with pytest.raises(AccessDeniedError, match="schema owner"):
        app_mm.write_workflow("planted", "planted shared workflow", ["do it"], user_id=alice, shared=True)
    with pytest.raises(AccessDeniedError, match="schema owner"):
        app_mm.publish_workflow(str(mine.id), user_id=alice)
    assert [h.item.name for h in app_mm.read_workflows("rotate the api key", user_id=bob, k=10)
            if h.item.name == mine.name] == []
    # The owner publishes it: a copy without user_id that every user reads.
    shared = mm.publish_workflow(str(mine.id), user_id=alice)
    assert shared.user_id is None and shared.id != mine.id and shared.name == mine.name
    seen_by_bob = app_mm.read_workflows("rotate the api key", user_id=bob, k=10)
    assert [(h.item.id, h.item.user_id) for h in seen_by_bob if h.item.name == mine.name] == [(shared.id, None)]
    seen_by_alice = app_mm.read_workflows("rotate the api key", user_id=alice, k=10)
    assert [h.item.id for h in seen_by_alice if h.item.name == mine.name] == [shared.id]  # not her twin as well
    # Bob may count a use of it, by exactly one; nothing else of it changes.
    before = sql_conn.execute("SELECT use_count, success_count FROM shared_workflow_memory WHERE id = %s",
                              (shared.id,)).fetchone()
    app_mm.record_workflow_use(str(shared.id), user_id=bob, success=False)
    after = sql_conn.execute("SELECT use_count, success_count FROM shared_workflow_memory WHERE id = %s",
                             (shared.id,)).fetchone()
    assert after == (before[0] + 1, before[1])
    with pytest.raises(NotFoundError):
        mm.publish_workflow(str(mine.id), user_id=bob)  # not Bob's workflow


def test_tools_are_registered_by_the_owner_or_a_registrar_and_read_by_the_app(pg_uri, mm, app_mm, settings):
    from toolbox import Toolbox

    ns = f"iso-{uuid.uuid4().hex[:6]}"

    def get_weather(city: str) -> str:
        """Current weather of a city."""
        return city

    def send_invoice(customer_id: str) -> str:
        """Send the invoice of a customer."""
        return customer_id

    with pytest.raises(AccessDeniedError, match="--tool-registrar") as denied:
        Toolbox(app_mm, namespace=ns).register_tool(get_weather)
    assert APP_ROLE in str(denied.value)
    Toolbox(mm, namespace=ns).register_tool(get_weather)  # the owner registers it
    app_tools = Toolbox(app_mm, namespace=ns)
    app_tools.register_tool(get_weather)  # unchanged: reused as stored, no write
    assert app_tools.retrieve("weather in Paris", k=1).names == ["get_weather"]
    registrar = create_app_role(pg_uri, "agentmem_registrar_test", "reg-secret", schema=mm.db.schema,
                                tool_registrar=True)
    assert registrar.tool_registrar
    reg_mm = MemoryManager.open(settings, embedder=HashEmbedder(), conninfo=registrar.conninfo)
    try:
        Toolbox(reg_mm, namespace=ns).register_tool(send_invoice)
    finally:
        reg_mm.close()
    Toolbox(app_mm, namespace=ns).register_tool(send_invoice)


def test_create_app_role_is_idempotent_and_refuses_privileged_roles(pg_uri, mm, app_role):
    again = create_app_role(pg_uri, APP_ROLE, "app-secret-2", schema=mm.db.schema)
    with psycopg.connect(again.conninfo) as conn:
        assert conn.execute("SELECT current_user").fetchone()[0] == APP_ROLE
    with pytest.raises(ConfigurationError):
        create_app_role(pg_uri, "postgres", "x", schema=mm.db.schema)
    with pytest.raises(ConfigurationError):
        create_app_role(pg_uri, "agentmem_nowhere", "x", schema="no_such_schema")
    create_app_role(pg_uri, APP_ROLE, "app-secret-1", schema=mm.db.schema)  # restore for other tests


def test_cli_creates_the_app_role(pg_uri, mm, sql_conn):
    from click.testing import CliRunner

    from memory.cli.main import main

    role = f"agentmem_cli_{uuid.uuid4().hex[:6]}"
    env = {"AGENTMEM_DATABASE_URL": pg_uri, "AGENTMEM_SCHEMA": mm.db.schema, "AGENTMEM_EMBEDDER": "hash",
           "AGENTMEM_APP_PASSWORD": "cli-secret"}
    result = CliRunner().invoke(main, ["create-app-role", role, "--json"], env=env)
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["role"] == role and "fact_memory" in out["row_level_security"]
    assert "cli-secret" not in result.output
    assert sql_conn.execute("SELECT rolbypassrls FROM pg_roles WHERE rolname = %s", (role,)).fetchone() == (False,)
    bad = CliRunner().invoke(main, ["create-app-role", "postgres", "--json"], env=env)
    assert bad.exit_code != 0 and "BYPASSRLS" in bad.output


def test_cli_forget_user_through_the_app_role_counts_and_deletes_the_users_rows(pg_uri, mm, app_role, thread):
    """The count before the question runs in a transaction scoped to the user: under row-level
    security an unscoped count saw nothing and said "has no rows" (exit 3)."""
    from click.testing import CliRunner

    from memory.cli.main import main
    from memory.tables.retention import rows_of_user

    alice, bob = f"alice-{uuid.uuid4().hex[:8]}", f"bob-{uuid.uuid4().hex[:8]}"
    populate(mm, alice, thread, f"zq{uuid.uuid4().hex[:8]}")
    populate(mm, bob, thread, f"zq{uuid.uuid4().hex[:8]}")
    with psycopg.connect(pg_uri) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(mm.db.schema)))
        held = sum(rows_of_user(conn, mm.db.schema, user_id=alice).values())
        bob_held = rows_of_user(conn, mm.db.schema, user_id=bob)
    env = {"AGENTMEM_DATABASE_URL": app_role.conninfo, "AGENTMEM_SCHEMA": mm.db.schema, "AGENTMEM_EMBEDDER": "hash"}
    declined = CliRunner().invoke(main, ["forget-user", alice], input="n\n", env=env)
    assert declined.exit_code == 1 and f"Delete {held} rows of user {alice!r}" in declined.stderr
    done = CliRunner().invoke(main, ["forget-user", alice, "--yes", "--json"], env=env)
    assert done.exit_code == 0, done.stderr
    assert json.loads(done.stdout)["total"] == held
    with psycopg.connect(pg_uri) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(mm.db.schema)))
        assert sum(rows_of_user(conn, mm.db.schema, user_id=alice).values()) == 0
        assert rows_of_user(conn, mm.db.schema, user_id=bob) == bob_held
    again = CliRunner().invoke(main, ["forget-user", alice, "--yes"], env=env)
    assert again.exit_code == 3 and "has no rows" in again.stderr


def test_cross_user_work_through_the_app_role_is_refused_not_silently_empty(app_mm, mm, user):
    """purge, the DBA views and listing every user's threads span users: through the app role
    they would see nothing and say so as if there were nothing."""
    from memory.store import views

    with pytest.raises(AccessDeniedError, match="schema owner"):
        app_mm.purge_expired()
    with pytest.raises(AccessDeniedError, match="schema owner"):
        app_mm.list_threads()
    app_mm.write_conversational_memory("user", "hello", user_id=user, thread_id="t")
    assert [t["thread_id"] for t in app_mm.list_threads(user_id=user)] == ["t"]  # one user's: scoped, allowed
    with pytest.raises(AccessDeniedError, match="schema owner"):
        views.consolidation_status(app_mm.db, app_mm.settings)
    with pytest.raises(AccessDeniedError, match="schema owner"):
        views.fact_history(app_mm.db, user_id=user)
    assert isinstance(mm.purge_expired(), dict)  # the owner may
