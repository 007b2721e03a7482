"""Migrations: from an empty database, twice, concurrently; the resulting schema checked."""

from __future__ import annotations

import multiprocessing as mp

import psycopg
import pytest
from psycopg import sql

from memory.store import migrations
from memory.errors import DimensionMismatchError, VectorExtensionMissingError

TABLES = {
    "conversational_memory", "summary_memory", "workflow_memory", "fact_memory", "knowledge_memory",
    "entity_memory", "toolbox_memory", "tool_log", "shared_workflow_memory", "store_memory", "store_vectors",
}


def _migrate(uri: str, schema: str, dim: int = 384) -> list[str]:
    return migrations.migrate(uri, schema=schema, dimension=dim, model_name="test-model")


def test_every_table_the_migrations_create_is_registered_with_its_kind(pg_uri, fresh_schema):
    """agentmem_tables is what RLS, retention and forget_user act on: a migration that adds a
    table and forgets to register it fails here."""
    _migrate(pg_uri, fresh_schema)
    with psycopg.connect(pg_uri) as conn:
        tables = {r[0] for r in conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s AND c.relkind IN ('r', 'p')", (fresh_schema,))}
        registry = dict(conn.execute(sql.SQL("SELECT table_name, kind FROM {}").format(
            sql.Identifier(fresh_schema, "agentmem_tables"))).fetchall())
        assert set(registry) == tables
        user_id = dict(conn.execute(
            "SELECT c.table_name, c.is_nullable FROM information_schema.columns c"
            " JOIN information_schema.tables t USING (table_schema, table_name)"
            " WHERE c.table_schema = %s AND c.column_name = 'user_id' AND t.table_type = 'BASE TABLE'",
            (fresh_schema,)).fetchall())
    # Per-user tables: user_id present and NOT NULL (no "shared" rows hiding in them);
    # shared and bookkeeping tables: no user_id at all.
    assert {t for t, k in registry.items() if k == "user"} == set(user_id)
    assert set(user_id.values()) == {"NO"}
    assert {t for t, k in registry.items() if k == "shared"} == {"toolbox_memory", "shared_workflow_memory"}


def test_migrate_empty_schema_creates_every_table_and_index(pg_uri, fresh_schema):
    applied = _migrate(pg_uri, fresh_schema)
    assert applied == [f"{m.version:03d}_{m.name}" for m in migrations.discover()]
    with psycopg.connect(pg_uri) as conn:
        tables = {r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (fresh_schema,))}
        assert TABLES <= tables
        # Every table but the shared ones carries user_id (the tenant boundary).
        with_user = {r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.columns WHERE table_schema = %s AND column_name = 'user_id'",
            (fresh_schema,))}
        assert TABLES - with_user == {"toolbox_memory", "shared_workflow_memory"}
        # HNSW (cosine) on every embedding column.
        idx = {r[0]: r[1] for r in conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s", (fresh_schema,))}
        emb_tables = {r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.columns WHERE table_schema = %s AND column_name = 'embedding'",
            (fresh_schema,))}
        assert emb_tables == TABLES - {"tool_log", "store_memory"}
        for table in emb_tables:
            assert any(f"ON {fresh_schema}.{table} USING hnsw (embedding vector_cosine_ops)" in d
                       for d in idx.values()), table
        # The partial working-set index.
        ws = idx["conversational_memory_working_set"]
        assert "WHERE (summary_id IS NULL)" in ws and "(user_id, thread_id, created_at" in ws
        # Full-text indexes where keyword search is offered.
        assert any("USING gin (search_tsv)" in d and "knowledge_memory" in d for d in idx.values())
        # The embedding column has the dimension fixed at the first migration.
        typ = conn.execute(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = %s::regclass"
            " AND attname = 'embedding'", (f"{fresh_schema}.knowledge_memory",)).fetchone()
        assert typ == ("vector(384)",)
        recorded = conn.execute(sql.SQL("SELECT count(*) FROM {}.schema_migrations").format(
            sql.Identifier(fresh_schema))).fetchone()
        assert recorded == (len(migrations.discover()),)


def test_migrate_twice_is_harmless(pg_uri, fresh_schema):
    assert _migrate(pg_uri, fresh_schema)
    assert _migrate(pg_uri, fresh_schema) == []


def _worker(args: tuple[str, str]) -> list[str]:
    uri, schema = args
    return _migrate(uri, schema)


def test_concurrent_migrations_apply_each_file_once(pg_uri, fresh_schema):
    ctx = mp.get_context("spawn")
    with ctx.Pool(4) as pool:
        results = pool.map(_worker, [(pg_uri, fresh_schema)] * 4)
    # Exactly one process applied the migrations; the others found them done.
    assert sorted(len(r) for r in results) == [0, 0, 0, len(migrations.discover())]


def test_dimension_mismatch_is_a_clear_error(pg_uri, fresh_schema):
    _migrate(pg_uri, fresh_schema, dim=384)
    with pytest.raises(DimensionMismatchError, match=r"768-dimensional.*384 dimensions"):
        _migrate(pg_uri, fresh_schema, dim=768)


def test_dimension_mismatch_through_memory_manager(settings, fresh_schema):
    from memory import HashEmbedder, MemoryManager

    MemoryManager.open(settings.with_(schema=fresh_schema), embedder=HashEmbedder(384)).close()
    with pytest.raises(DimensionMismatchError):
        MemoryManager.open(settings.with_(schema=fresh_schema), embedder=HashEmbedder(128))


def test_missing_vector_extension_is_a_clear_error(pg_uri):
    """A database without pgvector, reached by a role that may not install it."""
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS novector")
        conn.execute("DROP ROLE IF EXISTS plainuser")
        conn.execute("CREATE ROLE plainuser LOGIN")
        conn.execute("CREATE DATABASE novector OWNER postgres")
        conn.execute("GRANT CREATE, CONNECT ON DATABASE novector TO plainuser")
    params = psycopg.conninfo.conninfo_to_dict(pg_uri)
    uri = psycopg.conninfo.make_conninfo(**{**params, "dbname": "novector", "user": "plainuser"})
    try:
        with pytest.raises(VectorExtensionMissingError, match="CREATE EXTENSION vector"):
            _migrate(uri, "agent_memory")
        with psycopg.connect(uri) as conn:  # nothing was created
            assert conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = 'agent_memory'").fetchone() == (0,)
    finally:
        with psycopg.connect(pg_uri, autocommit=True) as conn:
            conn.execute("DROP DATABASE IF EXISTS novector")
            conn.execute("DROP ROLE IF EXISTS plainuser")


def test_unreachable_server_is_a_clear_error(tmp_path):
    from memory.errors import DatabaseUnavailableError

    uri = f"postgresql://nobody@/postgres?host={tmp_path}&connect_timeout=2"
    with pytest.raises(DatabaseUnavailableError, match="cannot connect"):
        _migrate(uri, "agent_memory")


def test_same_dimension_other_model_is_refused(pg_uri, fresh_schema):
    from memory.errors import EmbeddingModelMismatchError

    migrations.migrate(pg_uri, schema=fresh_schema, dimension=384, model_name="all-MiniLM-L6-v2")
    assert migrations.migrate(pg_uri, schema=fresh_schema, dimension=384, model_name="all-MiniLM-L6-v2") == []
    with pytest.raises(EmbeddingModelMismatchError, match="another vector space"):
        migrations.migrate(pg_uri, schema=fresh_schema, dimension=384, model_name="hash-embedder")
