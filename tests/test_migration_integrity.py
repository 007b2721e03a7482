"""Migration integrity: applied files are checked on every start; status lists without applying."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner, Result
from psycopg import sql

from memory import HashEmbedder, MemoryManager
from memory.store import migrations
from memory.cli.main import main
from memory.errors import MigrationError

ROOT = Path(__file__).resolve().parent.parent


def _migrate(uri: str, schema: str, directory: Path | None = None) -> list[str]:
    return migrations.migrate(uri, schema=schema, dimension=384, model_name="test-model", directory=directory)


@pytest.fixture
def sql_copy(tmp_path: Path) -> Path:
    """A copy of the migrations that this test may edit (passed as ``directory`` / setting ``sql_dir``)."""
    copy = tmp_path / "sql"
    shutil.copytree(ROOT / "sql", copy)
    return copy


def test_changed_applied_migration_is_refused_on_start(pg_uri, fresh_schema, sql_copy, settings):
    _migrate(pg_uri, fresh_schema, sql_copy)
    edited = sql_copy / "003_facts_isolation.sql"
    edited.write_text(edited.read_text() + "\n-- an edit after release\n")
    with pytest.raises(MigrationError, match=r"003_facts_isolation\.sql was changed after it was applied.*"
                                             r"new numbered migration"):
        _migrate(pg_uri, fresh_schema, sql_copy)
    with pytest.raises(MigrationError, match="changed after it was applied"):
        MemoryManager.open(settings.with_(schema=fresh_schema, sql_dir=sql_copy), embedder=HashEmbedder(384))
    states = {s.version: s.state for s in migrations.status(pg_uri, schema=fresh_schema, directory=sql_copy)}
    assert states[3] == "changed" and states[1] == "applied"


def test_line_endings_alone_are_not_a_change(pg_uri, fresh_schema, sql_copy):
    _migrate(pg_uri, fresh_schema, sql_copy)
    path = sql_copy / "001_core_tables.sql"
    path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))
    assert _migrate(pg_uri, fresh_schema, sql_copy) == []


class _Run:
    def __init__(self, result: Result) -> None:
        self.returncode, self.stdout, self.stderr = result.exit_code, result.stdout, result.stderr


def _cli(env_extra: dict[str, str], *args: str) -> _Run:
    result = CliRunner().invoke(main, list(args), env={"AGENTMEM_EMBEDDER": "hash", "COLUMNS": "200", **env_extra})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return _Run(result)


def test_init_status_lists_applied_and_pending_without_applying(pg_uri, fresh_schema):
    env = {"AGENTMEM_DATABASE_URL": pg_uri, "AGENTMEM_SCHEMA": fresh_schema}
    names = [f"{m.version:03d}_{m.name}" for m in migrations.discover()]

    before = _cli(env, "init", "--status", "--json")
    assert before.returncode == 0, before.stderr
    listed = json.loads(before.stdout)
    assert [f"{r['version']:03d}_{r['name']}" for r in listed] == names
    assert {r["state"] for r in listed} == {"pending"}
    with psycopg.connect(pg_uri) as conn:  # nothing was created
        assert conn.execute("SELECT to_regnamespace(%s)", (fresh_schema,)).fetchone() == (None,)

    _migrate(pg_uri, fresh_schema)
    last = migrations.discover()[-1].version
    with psycopg.connect(pg_uri, autocommit=True) as conn:  # as if a newer agentmem brought the last file
        conn.execute(sql.SQL("DELETE FROM {}.schema_migrations WHERE version = %s").format(
            sql.Identifier(fresh_schema)), (last,))
    after = _cli(env, "init", "--status", "--json")
    assert after.returncode == 0, after.stderr
    states = {r["version"]: (r["state"], r["applied_at"]) for r in json.loads(after.stdout)}
    assert states[last] == ("pending", None)
    assert all(state == "applied" and at for v, (state, at) in states.items() if v != last)
    with psycopg.connect(pg_uri) as conn:  # still pending: --status applied nothing
        assert conn.execute(sql.SQL("SELECT count(*) FROM {}.schema_migrations WHERE version = %s").format(
            sql.Identifier(fresh_schema)), (last,)).fetchone() == (0,)

    human = _cli(env, "init", "--status")
    assert human.returncode == 0, human.stderr
    assert "pending" in human.stdout and f"{len(names) - 1} applied, 1 pending" in human.stdout
    assert "run `agentmem init`" in human.stdout


def test_init_refuses_a_changed_file_with_a_clear_error(pg_uri, fresh_schema, sql_copy):
    hashed = HashEmbedder()  # what the CLI opens with (AGENTMEM_EMBEDDER=hash)
    migrations.migrate(pg_uri, schema=fresh_schema, dimension=hashed.dimension, model_name=hashed.name)
    assert _cli({"AGENTMEM_DATABASE_URL": pg_uri, "AGENTMEM_SCHEMA": fresh_schema}, "init").returncode == 0
    (sql_copy / "001_core_tables.sql").write_text("-- rewritten\n")
    res = _cli({"AGENTMEM_DATABASE_URL": pg_uri, "AGENTMEM_SCHEMA": fresh_schema, "AGENTMEM_SQL_DIR": str(sql_copy)},
               "init")
    assert res.returncode == 1
    assert "agentmem: error: migration 001_core_tables.sql was changed after it was applied" in res.stderr
    assert "Traceback" not in res.stderr
