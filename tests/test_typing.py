"""The packages type-check under ``mypy --strict`` (they ship py.typed, so their annotations are a promise)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The check the suite enforces: every strict flag, over both packages.
COMMAND = [sys.executable, "-m", "mypy", "--strict", "-p", "memory", "-p", "toolbox"]


def test_mypy_strict_is_clean_over_the_packages():
    proc = subprocess.run(COMMAND, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_the_typing_test_sees_a_new_strict_error(tmp_path):
    """The same command fails on a package whose only error is a strict one (so the test above can fail)."""
    for package in ("memory", "toolbox"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "toolbox" / "bad.py").write_text("def double(x):\n    return 2 * x\n")  # untyped: strict only
    strict = subprocess.run(COMMAND, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert strict.returncode == 1 and "toolbox/bad.py:1: error" in strict.stdout, strict.stdout + strict.stderr
    assert "[no-untyped-def]" in strict.stdout
    lax = subprocess.run([a for a in COMMAND if a != "--strict"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=300)
    assert lax.returncode == 0, lax.stdout + lax.stderr  # the error is one only --strict reports
