"""Nothing but AgentMemError leaves the public API: driver errors are wrapped once, cause chained.

Each test provokes a real failure on the real server (a statement timeout, a lock
timeout, a statement the server refuses, an unwritable model cache) through a public
entry point (MemoryManager, its scoped handle, Toolbox, the CLI) and checks the class,
the message (what happened, what to do) and ``__cause__`` (the driver's error).
The lost server and the bad connection string are covered in test_environment.py
(``test_lost_connections_are_database_unavailable_and_the_pool_recovers``,
``test_connection_string_that_is_not_one_is_a_configuration_error``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql

from memory import (AgentMemError, DatabaseError, DatabaseUnavailableError, EmbeddingError, HashEmbedder,
                    MemoryManager, QueryTimeoutError)
from memory.cli.main import main
from memory.store import migrations
from toolbox import Toolbox

TIMEOUTS = {  # the server setting, the driver error it raises, what the message says
    "statement_timeout": (psycopg.errors.QueryCanceled, "cancelled the statement"),
    "lock_timeout": (psycopg.errors.LockNotAvailable, "gave up waiting for a lock"),
}


@pytest.fixture
def migrated(pg_uri: str, fresh_schema: str) -> str:
    hashed = HashEmbedder()
    migrations.migrate(pg_uri, schema=fresh_schema, dimension=hashed.dimension, model_name=hashed.name,
                       backend=hashed.backend)
    return fresh_schema


def _open(settings, schema: str, pg_uri: str, setting: str) -> MemoryManager:
    """A manager whose connections carry a 300 ms ``setting`` (the schema is already migrated)."""
    conninfo = psycopg.conninfo.make_conninfo(pg_uri, options=f"-c {setting}=300")
    return MemoryManager.open(settings.with_(schema=schema, pool_max_size=2), embedder=HashEmbedder(),
                              conninfo=conninfo)


@pytest.fixture
def locked(pg_uri: str, migrated: str) -> Iterator[Callable[[str], None]]:
    """``locked(table)``: hold an ACCESS EXCLUSIVE lock on ``table`` from another session until the test ends."""
    conn = psycopg.connect(pg_uri)

    def lock(table: str) -> None:
        conn.execute(sql.SQL("LOCK TABLE {}.{} IN ACCESS EXCLUSIVE MODE").format(
            sql.Identifier(migrated), sql.Identifier(table)))

    yield lock
    conn.rollback()
    conn.close()


def _assert_wrapped(err: pytest.ExceptionInfo[BaseException], cls: type, cause: type, words: str) -> None:
    assert type(err.value) is cls, repr(err.value)
    assert isinstance(err.value, AgentMemError)
    assert isinstance(err.value.__cause__, cause), repr(err.value.__cause__)
    assert words in str(err.value) and "nothing of the call was kept" in str(err.value)


@pytest.mark.parametrize("setting", sorted(TIMEOUTS))
def test_a_timeout_on_the_server_is_a_query_timeout_error(settings, pg_uri, migrated, locked, user, setting):
    cause, words = TIMEOUTS[setting]
    with _open(settings, migrated, pg_uri, setting) as mm:
        mm.write_conversational_memory("user", "hello", user_id=user, thread_id="t")
        locked("conversational_memory")
        with pytest.raises(QueryTimeoutError) as err:
            mm.read_conversational_memory(user_id=user, thread_id="t")
        _assert_wrapped(err, QueryTimeoutError, cause, words)
        assert "retry" in str(err.value).lower()
        with pytest.raises(QueryTimeoutError) as err:  # the scoped handle goes through the same door
            mm.user(user).thread("t").write("user", "again")
        _assert_wrapped(err, QueryTimeoutError, cause, words)


def test_the_toolbox_wraps_a_timeout_the_same_way(settings, pg_uri, migrated, locked):
    with _open(settings, migrated, pg_uri, "statement_timeout") as mm:
        tools = Toolbox(mm, namespace="timeouts")

        def get_weather(city: str) -> str:
            """Current weather in a city."""
            return city

        locked("toolbox_memory")
        with pytest.raises(QueryTimeoutError) as err:  # registering writes the tool's row
            tools.register_tool(get_weather)
        _assert_wrapped(err, QueryTimeoutError, psycopg.errors.QueryCanceled, "cancelled the statement")


def test_a_statement_the_server_refuses_is_a_database_error(settings, pg_uri, migrated, user):
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(migrated)))
        conn.execute("CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS "
                     "$$ BEGIN RAISE EXCEPTION 'no messages today'; END $$")
        conn.execute("CREATE TRIGGER refuse BEFORE INSERT ON conversational_memory "
                     "FOR EACH ROW EXECUTE FUNCTION refuse()")
    with MemoryManager.open(settings.with_(schema=migrated, pool_max_size=2), embedder=HashEmbedder()) as mm:
        with pytest.raises(DatabaseError) as err:
            mm.write_conversational_memory("user", "hello", user_id=user, thread_id="t")
        assert type(err.value) is DatabaseError and not isinstance(err.value, DatabaseUnavailableError)
        assert isinstance(err.value.__cause__, psycopg.errors.RaiseException)
        message = str(err.value)
        assert "SQLSTATE P0001" in message and "no messages today" in message and "rolled back" in message
        assert mm.read_conversational_memory(user_id=user, thread_id="t") == []  # nothing half-written


def test_the_cli_reports_a_server_timeout_in_one_line(pg_uri, migrated, locked, user):
    conninfo = psycopg.conninfo.make_conninfo(pg_uri, options="-c statement_timeout=300")
    locked("conversational_memory")
    result = CliRunner().invoke(main, ["show", "t", "--user", user], env={
        "AGENTMEM_DATABASE_URL": conninfo, "AGENTMEM_SCHEMA": migrated, "AGENTMEM_EMBEDDER": "hash"})
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith("agentmem: error: PostgreSQL cancelled the statement")
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_an_unwritable_model_cache_is_an_embedding_error(tmp_path: Path):
    from memory.retrieval.onnx_minilm import OnnxMiniLMEmbedder

    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(EmbeddingError, match="AGENTMEM_MODEL_CACHE_DIR to a writable directory") as err:
        OnnxMiniLMEmbedder(blocker / "cache")
    assert isinstance(err.value.__cause__, OSError)
