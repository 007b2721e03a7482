"""agentmem acts on its own tables only, and schema names are checked once, as the SQL needs.

The scenario of issue 11: agentmem in ``AGENTMEM_SCHEMA=public`` next to another
application's ``public.orders``, which has a ``user_id`` column. It runs in a database
of its own on the test server (so ``public`` is not shared with other tests), first
migrated up to 006 as an older agentmem did (which put row-level security on
``orders``), then to the current migrations.
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Iterator

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql

from memory import ConfigurationError, HashEmbedder, MemoryManager, Settings, create_app_role
from memory.store import migrations
from memory.cli.main import main

from fix_schemas import with_conninfo


@pytest.fixture
def other_app_db(pg_uri: str) -> Iterator[str]:
    """A database whose public schema already holds another application's orders (and a sequence)."""
    name = f"amt_public_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    uri = with_conninfo(pg_uri, dbname=name)
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.orders (id serial PRIMARY KEY, user_id text NOT NULL, item text,"
                     " expires_at timestamptz, created_at timestamptz DEFAULT now())")
        conn.execute("INSERT INTO public.orders (user_id, item, expires_at, created_at) VALUES"
                     " ('alice', 'book', now() - interval '1 day', now() - interval '9000 days'), ('bob', 'pen', NULL, now())")
    yield uri
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def _orders(uri: str) -> list[tuple[str, str]]:
    with psycopg.connect(uri) as conn:
        return conn.execute("SELECT user_id, item FROM public.orders ORDER BY id").fetchall()


def _row_security(uri: str) -> tuple[bool, list[str]]:
    with psycopg.connect(uri) as conn:
        enabled = conn.execute("SELECT relrowsecurity FROM pg_class WHERE oid = 'public.orders'::regclass").fetchone()
        policies = conn.execute("SELECT polname FROM pg_policy WHERE polrelid = 'public.orders'::regclass"
                                " ORDER BY polname").fetchall()
    return bool(enabled[0]), [p[0] for p in policies]


def test_in_the_public_schema_agentmem_leaves_another_apps_table_alone(other_app_db, tmp_path: Path, monkeypatch,
                                                                      settings):
    # An older agentmem (migrations 001-006) put its policies on public.orders.
    old = tmp_path / "sql"
    old.mkdir()
    for mig in migrations.discover():
        if mig.version <= 6:
            shutil.copy(mig.path, old / mig.path.name)
    fake = HashEmbedder()
    migrations.migrate(other_app_db, schema="public", dimension=fake.dimension, model_name=fake.name, directory=old)
    assert _row_security(other_app_db) == (True, ["agentmem_own_rows"])  # the damage 007 repairs
    with psycopg.connect(other_app_db, autocommit=True) as conn:  # a shared workflow of those days
        conn.execute("INSERT INTO public.workflow_memory (user_id, name, description, embedding)"
                     " VALUES (NULL, 'old', 'shared', array_fill(0.1::real, ARRAY[%s])::public.vector)",
                     (fake.dimension,))

    mm = MemoryManager.open(settings.with_(schema="public"), embedder=HashEmbedder(), conninfo=other_app_db)
    try:
        assert _row_security(other_app_db) == (False, [])
        mm.write_conversational_memory("user", "hello", user_id="alice", thread_id="t")
        mm.write_knowledge("a note", user_id="alice")
        counts = mm.forget_user(user_id="alice")
        assert "orders" not in counts and counts["conversational_memory"] == 1 and counts["knowledge_memory"] == 1
        purged = mm.purge_expired()  # orders has expires_at and created_at too
        assert "orders" not in purged
        assert _orders(other_app_db) == [("alice", "book"), ("bob", "pen")]
        role = create_app_role(other_app_db, f"agentmem_pub_{uuid.uuid4().hex[:6]}", "pw", schema="public")
        assert "orders" not in role.user_tables + role.shared_tables + role.read_only_tables
        with psycopg.connect(role.conninfo) as conn:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("SELECT * FROM public.orders")
            conn.rollback()
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("SELECT nextval('public.orders_id_seq')")
        with psycopg.connect(other_app_db) as conn:
            sizes = {r[0] for r in conn.execute("SELECT table_name FROM public.table_sizes")}
            # The old shared workflow moved to the shared table; workflow_memory has owners only.
            moved = conn.execute("SELECT name FROM public.shared_workflow_memory").fetchall()
            nulls = conn.execute("SELECT count(*) FROM public.workflow_memory WHERE user_id IS NULL").fetchone()
        assert "orders" not in sizes and "conversational_memory" in sizes
        assert moved == [("old",)] and nulls == (0,)
        assert [h.item.name for h in mm.read_workflows("old shared", user_id="anyone")] == ["old"]
    finally:
        mm.close()


@pytest.mark.parametrize("name", ["AgentMem", "agent-memory", "1memory", "pg_memory", "a" * 64, "", "mémoire"])
def test_unusable_schema_names_are_refused_in_settings(name, monkeypatch):
    with pytest.raises(ConfigurationError, match="lower-case letters"):
        Settings(schema=name)
    with pytest.raises(ConfigurationError, match="lower-case letters"):
        Settings().with_(schema=name)
    if name:
        monkeypatch.setenv("AGENTMEM_SCHEMA", name)
        with pytest.raises(ConfigurationError, match="AGENTMEM_SCHEMA"):
            Settings.from_env()


def test_cli_says_what_schema_name_to_use(pg_uri):
    result = CliRunner().invoke(main, ["init"], env={"AGENTMEM_DATABASE_URL": pg_uri, "AGENTMEM_SCHEMA": "AgentMem",
                                                     "AGENTMEM_EMBEDDER": "hash"})
    assert result.exit_code == 1
    assert result.stderr.startswith("agentmem: error: schema name 'AgentMem'") and "Traceback" not in result.output


@pytest.mark.parametrize("name", ["select", "_x" + "9" * 61])
def test_the_names_the_check_accepts_work_in_every_migration(name, pg_uri, settings):
    """A reserved word and a 63-character name pass the check: the whole schema, RLS and the
    app role must then work with them."""
    try:
        mm = MemoryManager.open(settings.with_(schema=name), embedder=HashEmbedder())
        try:
            mm.write_knowledge("the name works", user_id="zoe")
            role = create_app_role(pg_uri, f"agentmem_nm_{uuid.uuid4().hex[:6]}", "pw", schema=name)
            app = MemoryManager.open(settings.with_(schema=name), embedder=HashEmbedder(), conninfo=role.conninfo)
            try:
                assert [h.item.content for h in app.read_knowledge("name", user_id="zoe")] == ["the name works"]
                assert app.read_knowledge("name", user_id="yan") == []
            finally:
                app.close()
        finally:
            mm.close()
    finally:
        with psycopg.connect(pg_uri, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))
