"""The packages pass ruff's chosen rule set (pyproject.toml, ``[tool.ruff]``): a new finding fails the suite."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _ruff() -> list[str]:
    exe = Path(sys.executable).with_name("ruff")
    if exe.is_file():
        return [str(exe)]
    found = shutil.which("ruff")
    assert found, "ruff is not installed: pip install -e '.[test]' (it is a test dependency)"
    return [found]


def test_ruff_finds_nothing_in_the_packages():
    proc = subprocess.run([*_ruff(), "check", "--no-cache", "--output-format", "concise", "memory", "toolbox"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_the_lint_test_sees_a_new_finding(tmp_path):
    """The same command fails on a file with a finding of the rule set (so the test above can fail)."""
    bad = tmp_path / "memory" / "bad.py"
    bad.parent.mkdir()
    bad.write_text("import os\n")  # F401: unused import
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    proc = subprocess.run([*_ruff(), "check", "--no-cache", "--output-format", "concise", "memory"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "F401" in proc.stdout, proc.stdout + proc.stderr


def test_no_module_is_exempt_from_the_rule_set():
    """Every module of both packages is held to the whole rule set: no per-file or global ignores."""
    lint = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["lint"]
    assert "per-file-ignores" not in lint and "ignore" not in lint, lint
