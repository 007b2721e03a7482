"""Packaging: a wheel built from the project installs and runs with no source tree.

The wheel is built from a copy of the project's files (so stale ``build/`` output of a
checkout cannot leak into it), installed with ``--no-deps`` into a fresh virtualenv
whose dependencies come from this environment's site-packages through a ``.pth`` line,
and exercised from a temporary directory with ``PYTHONPATH`` unset: ``agentmem init``
creates the schema from the migrations shipped as package data, then one write and one
search go through the installed package.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import uuid
import zipfile
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("pyproject.toml", "README.md", "memory", "toolbox", "sql")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """(the built wheel, the build's output)."""
    base = tmp_path_factory.mktemp("wheel")
    src = base / "src"
    src.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(ROOT / name, src / name)
    out = base / "dist"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-v",
         "-w", str(out), str(src)],
        capture_output=True, text=True, timeout=600, cwd=base,
    )
    log = build.stdout + build.stderr
    assert build.returncode == 0, log[-3000:]
    (built,) = out.glob("agentmem-*.whl")
    return built, log


def test_wheel_ships_every_migration_file(wheel):
    built, _ = wheel
    with zipfile.ZipFile(built) as zf:
        shipped = {Path(n).name: zf.read(n) for n in zf.namelist() if n.startswith("memory/sql/") and n.endswith(".sql")}
    repo = {p.name: p.read_bytes() for p in (ROOT / "sql").glob("*.sql")}
    assert repo and shipped == repo


def test_license_is_an_spdx_expression(wheel):
    built, log = wheel
    assert "project.license` as a TOML table is deprecated" not in log
    with zipfile.ZipFile(built) as zf:
        (meta,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = zf.read(meta).decode()
    assert "License-Expression: MIT" in metadata.splitlines()


@pytest.mark.slow
def test_wheel_installed_in_a_fresh_venv_inits_writes_and_searches(wheel, tmp_path, pg_uri):
    built, _ = wheel
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    # The dependencies (not agentmem: its editable install hooks in through a .pth file of
    # that directory, which a path added by a .pth line never runs) come from this venv.
    Path(site, "_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    # Nothing of the source tree on the path, for pip as for the checks below: a checkout's
    # agentmem.egg-info (left by an editable install) would make pip take the package for
    # installed already.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "AGENTMEM_SQL_DIR")}
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "--no-index",
                    str(built)], check=True, capture_output=True, timeout=300, cwd=tmp_path, env=env)

    schema = f"wheel_{uuid.uuid4().hex[:8]}"
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    env.update(AGENTMEM_DATABASE_URL=pg_uri, AGENTMEM_SCHEMA=schema, AGENTMEM_EMBEDDER="hash")

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(list(args), capture_output=True, text=True, env=env, cwd=cwd, timeout=300)

    try:
        where = run(str(py), "-c", "import memory, memory.store.migrations as m; print(memory.__file__); print(m.discover()[0].path)")
        assert where.returncode == 0, where.stderr
        assert all(line.startswith(site) for line in where.stdout.split()), where.stdout  # no source tree used

        init = run(str(venv / "bin" / "agentmem"), "init")
        assert init.returncode == 0, init.stderr
        assert "applied 001_core_tables" in init.stdout

        write = run(str(py), "-c", "from memory import MemoryManager\n"
                    "with MemoryManager.open() as mm:\n"
                    "    mm.write_conversational_memory('user', 'my zebra export job EXP-7 failed', user_id='wheel-user',\n"
                    "                                   thread_id='t1')\n")
        assert write.returncode == 0, write.stderr

        found = run(str(venv / "bin" / "agentmem"), "search", "zebra export", "--user", "wheel-user", "--json")
        assert found.returncode == 0, found.stderr
        hits = json.loads(found.stdout)
        assert any("EXP-7" in json.dumps(h) for h in hits), hits
    finally:
        with psycopg.connect(pg_uri, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
