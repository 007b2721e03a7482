"""The benchmark scripts in ``bench/``, as ``agentmem bench`` lists and runs them."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import click

from memory.errors import NotFoundError


def bench_dir(override: Path | None = None) -> Path:
    """``override`` (setting ``bench_dir``, AGENTMEM_BENCH_DIR) or the checkout's ``bench/``."""
    path = Path(override) if override else Path(__file__).resolve().parents[2] / "bench"
    if not path.is_dir():
        raise NotFoundError(f"no benchmark directory at {path} (benchmarks ship with the source checkout)")
    return path


def bench_scripts(directory: Path) -> dict[str, str]:
    """Runnable benchmark name -> first paragraph of its docstring (read without importing it).

    A script is runnable when it has an ``if __name__ == "__main__":`` block; helper
    modules (``_common.py``, data modules) are left out.
    """
    out = {}
    for path in sorted(directory.glob("*.py")):
        if path.name.startswith("_"):
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except SyntaxError:
            continue
        if not any(isinstance(node, ast.If) and "__main__" in ast.unparse(node.test) for node in tree.body):
            continue
        doc = ast.get_docstring(tree) or ""
        out[path.stem] = " ".join(doc.strip().split("\n\n")[0].split())
    return out


def pump(stream: Any, err: bool) -> None:
    for line in iter(stream.readline, ""):
        click.echo(line, nl=False, err=err)
