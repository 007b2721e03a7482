"""Shared fixtures: one real embedded PostgreSQL + pgvector per test session.

The server is started in a fresh temporary directory (short path: unix socket
limits) and stopped at the end. Tests isolate themselves by user id (``user``
fixture) or, for schema-level tests, by a fresh schema (``fresh_schema``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Iterator

import psycopg
import pytest

os.environ.pop("AGENTMEM_DATABASE_URL", None)
os.environ.pop("DATABASE_URL", None)

from memory import HashEmbedder, MemoryManager, Settings  # noqa: E402
from memory.store.embedded import start_server, stop_server  # noqa: E402

from fix_llama import llama_url  # noqa: E402,F401  (session fixture: the local llama.cpp server)


@pytest.fixture(scope="session")
def pg_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="amt", dir="/tmp"))
    yield path
    stop_server(path / "pg")
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_uri(pg_dir: Path) -> str:
    return start_server(pg_dir / "pg")


@pytest.fixture(scope="session")
def settings(pg_uri: str) -> Settings:
    return Settings.from_env(database_url=pg_uri, pool_max_size=20)


@pytest.fixture(scope="session")
def session_mm(settings: Settings) -> Iterator[MemoryManager]:
    """A manager with the deterministic hash embedder on the default schema."""
    mm = MemoryManager.open(settings, embedder=HashEmbedder())
    yield mm
    mm.close()


@pytest.fixture
def mm(session_mm: MemoryManager) -> MemoryManager:
    return session_mm


@pytest.fixture
def user() -> str:
    """A user id no other test uses: the isolation unit of these tests."""
    return f"user-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def thread() -> str:
    return f"thread-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def minilm():
    from memory import MiniLMEmbedder

    return MiniLMEmbedder()


@pytest.fixture(scope="session")
def real_mm(settings: Settings, minilm) -> Iterator[MemoryManager]:
    """A manager with the real packaged MiniLM model, on its own schema."""
    mm = MemoryManager.open(settings.with_(schema="am_minilm"), embedder=minilm)
    yield mm
    mm.close()


@pytest.fixture
def fresh_schema(pg_uri: str) -> Iterator[str]:
    name = f"s_{uuid.uuid4().hex[:10]}"
    yield name
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(psycopg.sql.Identifier(name)))


@pytest.fixture
def schema_mm(settings: Settings, fresh_schema: str) -> Iterator[MemoryManager]:
    """A hash-embedder manager on a fresh schema: for rows every user sees (shared workflows),
    which a fresh user id cannot isolate from other tests."""
    mm = MemoryManager.open(settings.with_(schema=fresh_schema, pool_max_size=4), embedder=HashEmbedder())
    yield mm
    mm.close()


@pytest.fixture
def sql_conn(mm: MemoryManager) -> Iterator[psycopg.Connection]:
    """A raw autocommit connection on the test schema, for SQL assertions."""
    with psycopg.connect(mm.db.conninfo, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("SET search_path TO {}, public").format(psycopg.sql.Identifier(mm.db.schema)))
        yield conn


@pytest.fixture
def small_bounds(settings: Settings) -> Iterator[MemoryManager]:
    """A manager whose switch points (search_memory's and the similarity reads'), per-word
    candidate cap and sample are tiny, to reach them with few rows."""
    mm = MemoryManager.open(settings.with_(search_exact_max_rows=12, similar_exact_max_rows=12,
                                           search_term_candidates=4, search_sample_rows=20, pool_max_size=2),
                            embedder=HashEmbedder())
    yield mm
    mm.close()
