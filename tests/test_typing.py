"""The packages type-check (they ship py.typed, so their annotations are a promise)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_mypy_is_clean_over_the_packages():
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.run([sys.executable, "-m", "mypy"], cwd=root, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
