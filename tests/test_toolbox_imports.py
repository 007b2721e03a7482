"""The toolbox depends on memory's public API only, and the two packages import without a cycle."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: What the toolbox may import from memory: the front door and the two public subpackages.
ALLOWED = ("memory", "memory.retrieval", "memory.store")


def _imports(path: Path, *, top_level_only: bool) -> list[tuple[int, str, list[str]]]:
    """(line, module, names) of each import in ``path`` (module-level statements only, if asked)."""
    tree = ast.parse(path.read_text(), str(path))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    out = []
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out.extend((node.lineno, a.name, []) for a in node.names)
    return out


def test_toolbox_imports_only_the_public_api_of_memory() -> None:
    bad = []
    for path in sorted((ROOT / "toolbox").glob("*.py")):
        for line, module, names in _imports(path, top_level_only=False):
            if module != "memory" and not module.startswith("memory."):
                continue
            public = module == "memory" or module.startswith(tuple(p + "." for p in ALLOWED[1:])) \
                or module in ALLOWED
            private = any(part.startswith("_") for part in module.split(".")) or \
                any(n.startswith("_") for n in names)
            if not public or private:
                bad.append(f"{path.name}:{line} imports {module} {names}")
    assert not bad, "\n".join(bad)


def test_no_memory_module_imports_the_toolbox_at_import_time() -> None:
    found = [f"{path.relative_to(ROOT)}:{line} {module}"
             for path in sorted((ROOT / "memory").rglob("*.py"))
             for line, module, _ in _imports(path, top_level_only=True)
             if module == "toolbox" or module.startswith("toolbox.")]
    assert not found, found


def test_importing_toolbox_first_in_a_fresh_interpreter() -> None:
    code = ("import sys, json; import toolbox; print(json.dumps([toolbox.Toolbox.__module__, "
            "sorted(m for m in sys.modules if m.startswith('toolbox'))]))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    module, loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    assert module == "toolbox.toolbox" and "toolbox.schema" in loaded
