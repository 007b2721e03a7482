"""One settings object: only memory/settings.py reads the environment, and agentmem never changes it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from memory import HashEmbedder, MemoryManager, Settings
from memory.errors import ConfigurationError
from memory.store.embedded import stop_server

ROOT = Path(__file__).resolve().parent.parent

#: Reads of the environment allowed outside memory/settings.py: the file and the one
#: variable each line may name (variables a library interprets on its own terms,
#: documented in memory/settings.py's docstring).
EXCEPTIONS = {"memory/cli/output.py": "COLUMNS", "memory/store/conninfo.py": "PGCONNECT_TIMEOUT"}
#: Variables the torch stack sets in the process when MiniLM runs under torch, not
#: agentmem: scikit-learn at import (imported by sentence-transformers) and torch's inductor.
THIRD_PARTY = frozenset({"KMP_DUPLICATE_LIB_OK", "KMP_INIT_AT_FORK", "TORCHINDUCTOR_CACHE_DIR"})
_READ = re.compile(r"\bos\.environ\b|\bgetenv\s*\(|\benviron\s*\[|\benviron\.get\b")
_WRITE = re.compile(r"\bos\.environ\s*\[[^\]]*\]\s*=|\bos\.environ\.(setdefault|update|pop|clear|__setitem__)\b"
                    r"|\bputenv\s*\(|\bunsetenv\s*\(|\bos\.environ\s*=")


def environment_uses(path: str, text: str) -> list[str]:
    """The lines of ``text`` (file ``path`` of the packages) that read or change the environment wrongly."""
    found = []
    for no, line in enumerate(text.splitlines(), 1):
        code = line.split("#", 1)[0]
        if _WRITE.search(code):
            found.append(f"{path}:{no}: changes the environment: {line.strip()}")
        elif _READ.search(code) and path != "memory/settings.py" and EXCEPTIONS.get(path, "\0") not in code:
            found.append(f"{path}:{no}: reads the environment outside memory/settings.py: {line.strip()}")
    return found


def test_only_settings_reads_the_environment_and_nothing_changes_it():
    found = []
    for package in ("memory", "toolbox"):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            found += environment_uses(rel, path.read_text(encoding="utf-8"))
    assert not found, "\n".join(found)


@pytest.mark.parametrize("line, why", [
    ('choice = os.environ.get("AGENTMEM_EMBEDDER", "minilm")', "reads"),
    ('x = os.getenv("HOME")', "reads"),
    ('os.environ.setdefault("HF_HUB_OFFLINE", "1")', "changes"),
    ('os.environ["XDG_RUNTIME_DIR"] = str(path)', "changes"),
    ('os.putenv("A", "b")', "changes"),
])
def test_the_scan_finds_reads_and_changes(line, why):
    assert why in " ".join(environment_uses("memory/store/embedded.py", f"import os\n{line}\n"))
    if why == "changes":  # not even settings.py may change it
        assert environment_uses("memory/settings.py", line)
    else:
        assert not environment_uses("memory/settings.py", line)


def test_the_embedder_and_file_locations_are_settings(tmp_path):
    s = Settings.from_env({"AGENTMEM_EMBEDDER": " HASH ", "AGENTMEM_SQL_DIR": str(tmp_path / "sql"),
                           "AGENTMEM_BENCH_DIR": str(tmp_path / "bench"), "AGENTMEM_RUNTIME_DIR": str(tmp_path / "r"),
                           "AGENTMEM_DATABASE_URL": "postgresql://x@localhost/db"})
    assert (s.embedder, s.sql_dir, s.bench_dir, s.runtime_dir) == (
        "hash", tmp_path / "sql", tmp_path / "bench", tmp_path / "r")
    defaults = Settings.from_env({"AGENTMEM_DATABASE_URL": "postgresql://x@localhost/db"})
    assert (defaults.embedder, defaults.sql_dir, defaults.bench_dir) == ("minilm", None, None)
    runtime = Settings.from_env({"AGENTMEM_DATABASE_URL": "postgresql://x@localhost/db"}).runtime_dir
    assert runtime == (Path(os.environ["XDG_RUNTIME_DIR"]) if os.environ.get("XDG_RUNTIME_DIR")
                       else Path(f"/tmp/agentmem-run-{os.getuid()}"))


def test_an_unknown_embedder_is_a_configuration_error():
    with pytest.raises(ConfigurationError, match=r"AGENTMEM_EMBEDDER=bogus is not allowed: .*'minilm', 'hash'"):
        Settings.from_env({"AGENTMEM_EMBEDDER": "bogus", "AGENTMEM_DATABASE_URL": "postgresql://x@h/db"})
    with pytest.raises(ConfigurationError, match="AGENTMEM_EMBEDDER"):
        Settings(embedder="word2vec")


def test_the_embedder_setting_is_passed_down_to_open(settings, fresh_schema, monkeypatch):
    monkeypatch.delenv("AGENTMEM_EMBEDDER", raising=False)
    with MemoryManager.open(settings.with_(schema=fresh_schema, embedder="hash")) as mm:
        assert mm.embeddings.name == HashEmbedder().name  # from the object, not from the environment


@pytest.mark.slow
def test_opening_a_manager_leaves_the_environment_unchanged(tmp_path, monkeypatch):
    """The embedded server (runtime directory) and MiniLM under torch (offline loading) once set variables."""
    ours = ("XDG_RUNTIME_DIR", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")  # what agentmem used to set
    for name in (*ours, "AGENTMEM_EMBEDDER"):
        monkeypatch.delenv(name, raising=False)
    before = dict(os.environ)
    data = Path(f"/tmp/amenv-{os.getpid()}")
    settings = Settings(data_dir=data, embedding_backend="torch", pool_max_size=2)
    try:
        with MemoryManager.open(settings) as mm:
            assert mm.db.embedded and mm.embeddings.backend == "torch-fp32"
            mm.write_conversational_memory(user_id="u", thread_id="t", role="user", content="hello")
        after = {k: v for k, v in os.environ.items() if k not in THIRD_PARTY or k in before}
        assert after == before
        assert not any(name in os.environ for name in ours)
    finally:
        stop_server(data / "pg")
        subprocess.run(["rm", "-rf", str(data)], check=False)


def test_the_embedded_server_uses_the_runtime_dir_setting(tmp_path):
    """A process without XDG_RUNTIME_DIR puts pgserver's lock and socket where AGENTMEM_RUNTIME_DIR says."""
    data, run = Path(f"/tmp/amrun-{os.getpid()}"), tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_RUNTIME_DIR",) and not k.startswith("AGENTMEM_")}
    env.update(PYTHONPATH=str(ROOT), AGENTMEM_DATA_DIR=str(data), AGENTMEM_RUNTIME_DIR=str(run),
               AGENTMEM_EMBEDDER="hash")
    code = ("import os, sys\n"
            "from memory.store.db import resolve_conninfo\n"
            "from memory.settings import Settings\n"
            "uri, embedded = resolve_conninfo(Settings.from_env())\n"
            "import psycopg\n"
            "with psycopg.connect(uri) as c:\n"
            "    print(c.execute('SHOW unix_socket_directories').fetchone()[0])\n"
            "print('XDG_RUNTIME_DIR' in os.environ)\n")
    try:
        proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        socket_dir, changed = proc.stdout.split()
        assert (run / "python_PostgresServer" / ".lockfile").exists()
        assert Path(socket_dir).is_relative_to(run) or Path(socket_dir).is_relative_to(data), socket_dir
        assert changed == "False"
    finally:
        stop_server(data / "pg")
        subprocess.run(["rm", "-rf", str(data)], check=False)
