"""The environments agentmem meets: extension layouts, damaged schemas, many starters,
servers that never answer or go away, roles that may only read or do not own the schema,
connection strings that are not one."""

from __future__ import annotations

import multiprocessing as mp
import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Iterator

import psycopg
import pytest
from psycopg import sql

from memory import HashEmbedder, MemoryManager, Settings
from memory.store import migrations
from memory.errors import ConfigurationError, DatabaseUnavailableError, MigrationError
from memory.store.isolation import app_conninfo, create_app_role

from fix_schemas import with_conninfo

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def fresh_db(pg_uri: str) -> Iterator[str]:
    """A new, empty database (no vector extension) on the session server; its conninfo."""
    name = f"db_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    yield with_conninfo(pg_uri, dbname=name)
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture
def role_name(pg_uri: str) -> Iterator[str]:
    """A login role name no other test uses, dropped (with its grants) afterwards."""
    name = f"r_{uuid.uuid4().hex[:10]}"
    yield name
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,)).fetchone():
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def _open(settings: Settings, **changes: object) -> MemoryManager:
    return MemoryManager.open(settings.with_(**changes), embedder=HashEmbedder())


def _vector_columns(uri: str, schema: str = "agent_memory") -> int:
    with psycopg.connect(uri) as conn:
        row = conn.execute("SELECT count(*) FROM information_schema.columns WHERE table_schema = %s"
                           " AND udt_name = 'vector'", (schema,)).fetchone()
    assert row and row[0] >= 7  # at least every table of migration 001 but tool_log
    return int(row[0])


# -- extension layouts and damaged schemas --------------------------------------------------
def test_vector_extension_in_its_own_schema(settings, fresh_db):
    """Supabase's layout: CREATE EXTENSION vector SCHEMA extensions."""
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA extensions")
        conn.execute("CREATE EXTENSION vector SCHEMA extensions")
    with _open(settings, database_url=fresh_db) as mm:
        mm.write_conversational_memory("user", "the zebra export job EXP-41 failed", user_id="u1", thread_id="t1")
        hits = mm.search_memory("zebra export", user_id="u1", method="vector")
        assert hits and "EXP-41" in hits[0].item.content
        assert mm.read_knowledge("anything", user_id="u1") == []


def test_dropped_vector_extension_is_refused_not_up_to_date(settings, fresh_db):
    from click.testing import CliRunner

    from memory.cli.main import main

    _open(settings, database_url=fresh_db).close()
    n = _vector_columns(fresh_db)
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        conn.execute("DROP EXTENSION vector CASCADE")
    with pytest.raises(MigrationError, match=rf"lost {n} of its {n} vector columns.*DROP EXTENSION vector CASCADE"
                                             r".*Restore the database from a backup"):
        _open(settings, database_url=fresh_db)
    result = CliRunner().invoke(main, ["init"], env={"AGENTMEM_DATABASE_URL": fresh_db, "AGENTMEM_EMBEDDER": "hash"})
    assert result.exit_code == 1, result.output
    assert "up to date" not in result.stdout
    assert result.stderr.startswith(f"agentmem: error: schema 'agent_memory' has lost {n} of its {n} vector columns")
    with psycopg.connect(fresh_db) as conn:  # nothing was changed: the extension was not quietly re-created
        assert conn.execute("SELECT count(*) FROM pg_extension WHERE extname = 'vector'").fetchone() == (0,)


def test_one_dropped_vector_column_is_refused(settings, fresh_db):
    _open(settings, database_url=fresh_db).close()
    n = _vector_columns(fresh_db)
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        conn.execute("ALTER TABLE agent_memory.fact_memory DROP COLUMN embedding")
    with pytest.raises(MigrationError, match=rf"lost 1 of its {n} vector columns \(fact_memory\.embedding\)"):
        _open(settings, database_url=fresh_db)


def _init_worker(args: tuple[str, str, object]) -> str:
    uri, schema, barrier = args
    barrier.wait()  # type: ignore[attr-defined]
    try:
        migrations.migrate(uri, schema=schema, dimension=384, model_name="test-model")
        return "ok"
    except Exception as exc:  # reported, not raised: the test shows every failure
        return f"{type(exc).__name__}: {exc}"


def test_eight_processes_init_different_schemas_on_a_fresh_database(fresh_db):
    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager:
        barrier = manager.Barrier(8)
        with ctx.Pool(8) as pool:
            results = pool.map(_init_worker, [(fresh_db, f"s{i}", barrier) for i in range(8)])
    assert results == ["ok"] * 8
    with psycopg.connect(fresh_db) as conn:
        migrated = conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname ~ '^s[0-7]$'").fetchone()
        assert migrated == (8,)


# -- servers that never answer, or go away ---------------------------------------------------
def test_init_against_an_address_that_never_answers_times_out(tmp_path):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as silent:  # listens, never accepts nor answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        env = {**os.environ, "PYTHONPATH": str(ROOT), "AGENTMEM_EMBEDDER": "hash", "AGENTMEM_CONNECT_TIMEOUT": "2",
               "AGENTMEM_DATABASE_URL": f"postgresql://nobody@127.0.0.1:{port}/db"}
        env.pop("PGCONNECT_TIMEOUT", None)
        res = subprocess.run([sys.executable, "-m", "memory.cli.main", "init"], capture_output=True, text=True, env=env,
                             cwd=tmp_path, timeout=90)
    assert res.returncode == 1, res.stderr
    assert res.stderr.startswith("agentmem: error: cannot connect to PostgreSQL at ")
    assert "AGENTMEM_CONNECT_TIMEOUT=2 s" in res.stderr and "Traceback" not in res.stderr


def _terminate(uri: str, app: str) -> int:
    with psycopg.connect(uri, autocommit=True) as conn:
        rows = conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
                            (app,)).fetchall()
    return len(rows)


def test_lost_connections_are_database_unavailable_and_the_pool_recovers(settings, pg_uri, fresh_schema, user):
    app = f"am_lost_{uuid.uuid4().hex[:8]}"
    url = with_conninfo(pg_uri, application_name=app)
    with _open(settings, database_url=url, schema=fresh_schema, pool_min_size=3) as mm:
        mm.db.pool.wait(timeout=30)
        mm.write_conversational_memory("user", "before the server went away", user_id=user, thread_id="t")
        assert _terminate(pg_uri, app) >= 3  # every pooled connection dies, as in a server restart
        with pytest.raises(DatabaseUnavailableError, match="lost the connection to PostgreSQL") as info:
            mm.read_conversational_memory(thread_id="t", user_id=user)
        assert isinstance(info.value.__cause__, psycopg.OperationalError)
        # The server is back: the next calls work, though the pool still held dead connections.
        for _ in range(4):
            assert [m.content for m in mm.read_conversational_memory(thread_id="t",
                                                                     user_id=user)] == ["before the server went away"]
        mm.write_conversational_memory("assistant", "and after", user_id=user, thread_id="t")
        assert len(mm.read_conversational_memory(thread_id="t", user_id=user)) == 2


def test_server_stopped_and_started_again(settings, tmp_path, user):
    """A real restart of a private server: unavailable while down, working once it is back."""
    from memory.store.embedded import server_package, start_server, stop_server

    data = Path("/tmp") / f"amr{uuid.uuid4().hex[:6]}"
    try:
        uri = start_server(data)
        with _open(settings, database_url=uri, schema="agent_memory") as mm:
            mm.write_conversational_memory("user", "kept across the restart", user_id=user, thread_id="t")
            assert stop_server(data)
            with pytest.raises(DatabaseUnavailableError) as info:
                mm.read_conversational_memory(thread_id="t", user_id=user)
            assert isinstance(info.value.__cause__, psycopg.Error)
            server = server_package().get_server(data)
            with server._lock:  # the package's own start path, as after a reboot
                server.ensure_postgres_running()
            assert [m.content for m in mm.read_conversational_memory(thread_id="t",
                                                                     user_id=user)] == ["kept across the restart"]
    finally:
        stop_server(data)
        import shutil

        shutil.rmtree(data, ignore_errors=True)


# -- roles -----------------------------------------------------------------------------------
def test_read_only_role_can_search(settings, pg_uri, fresh_schema, role_name, user):
    with _open(settings, schema=fresh_schema) as owner:
        owner.write_conversational_memory("user", "the zebra export job EXP-77 failed", user_id=user, thread_id="t")
        owner.write_messages([{"role": "user", "content": "zebra deferred row, no vector yet"}], user_id=user,
                             thread_id="t", embed=False)
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        ident = sql.Identifier(role_name)
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(ident))
        conn.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(fresh_schema), ident))
        conn.execute(sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA {} TO {}").format(
            sql.Identifier(fresh_schema), ident))
    reader_url = with_conninfo(pg_uri, user=role_name)
    with _open(settings, database_url=reader_url, schema=fresh_schema) as reader:
        for _ in range(2):
            hits = reader.search_memory("zebra export", user_id=user)
            assert {h.item.content for h in hits} >= {"the zebra export job EXP-77 failed",
                                                 "zebra deferred row, no vector yet"}
        assert reader.read_conversational_memory(thread_id="t", user_id=user)
    with psycopg.connect(pg_uri) as conn:  # the reader wrote nothing
        pending = conn.execute(sql.SQL("SELECT count(*) FROM {}.conversational_memory WHERE embedding IS NULL")
                               .format(sql.Identifier(fresh_schema))).fetchone()
        assert pending == (1,)


def test_pending_migration_as_non_owner_says_to_run_init_as_owner(settings, pg_uri, fresh_schema, role_name):
    _open(settings, schema=fresh_schema).close()
    app = create_app_role(pg_uri, role_name, "pw", schema=fresh_schema)
    last = migrations.discover()[-1]
    with psycopg.connect(pg_uri, autocommit=True) as conn:  # as after an upgrade that brings a new file
        conn.execute(sql.SQL("DELETE FROM {}.schema_migrations WHERE version = %s").format(
            sql.Identifier(fresh_schema)), (last.version,))
    with pytest.raises(MigrationError, match=rf"1 migration\(s\) pending on schema '{fresh_schema}' "
                                             rf"\({last.filename}\).*{role_name}.*does not own.*"
                                             r"Run `agentmem init` once as the schema owner"):
        _open(settings, database_url=app.conninfo, schema=fresh_schema)


def test_new_schema_by_a_role_that_may_not_create_it(settings, pg_uri, fresh_schema, role_name):
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role_name)))
    url = app_conninfo(pg_uri, role_name, "")
    with pytest.raises(MigrationError, match=r"may not change schema .*run `agentmem init` as the schema owner"):
        _open(settings, database_url=url, schema=fresh_schema)


# -- connection strings ----------------------------------------------------------------------
@pytest.mark.parametrize("url", ["not a url", "localhost:5432/agentmem", "http://example.com/db", "   ",
                                 "postgresql://me@127.0.0.1:notaport/db", "host=127.0.0.1 port=99999"])
def test_connection_string_that_is_not_one_is_a_configuration_error(settings, url):
    with pytest.raises(ConfigurationError, match="neither a PostgreSQL URL .* nor a conninfo string|is empty|port"):
        _open(settings, database_url=url)
    with pytest.raises(ConfigurationError):
        MemoryManager.open(settings, embedder=HashEmbedder(), conninfo=url)


def test_bad_connection_string_in_the_cli_is_one_line_and_keeps_the_password(tmp_path):
    from click.testing import CliRunner

    from memory.cli.main import main

    result = CliRunner().invoke(main, ["init"], env={"AGENTMEM_DATABASE_URL": "user=me password=s3cret host",
                                                     "AGENTMEM_EMBEDDER": "hash"})
    assert result.exit_code == 1
    assert result.stderr.startswith("agentmem: error: the database URL is neither")
    assert "s3cret" not in result.output and "Traceback" not in result.output
