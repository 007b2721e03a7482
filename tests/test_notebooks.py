"""The researcher notebooks run top to bottom, executed here with nbclient.

Each notebook runs in a fresh kernel (the ``python3`` kernelspec of the venv, which
starts ``sys.executable``) on a schema of its own on the test server: the kernel
inherits ``AGENTMEM_DATABASE_URL`` and ``AGENTMEM_SCHEMA`` from this process. They
use the real packaged MiniLM model, as on a user's machine. Any cell that raises
fails the test (nbclient raises ``CellExecutionError``); the notebooks also assert
their own claims (e.g. an expanded summary equals the original messages).
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
NAMES = ["01_quickstart", "02_toolbox", "03_consolidation", "04_dba", "05_integrations"]
UNSET = ("AGENTMEM_EMBEDDER", "AGENTMEM_USER", "AGENTMEM_LLM_MODEL", "AGENTMEM_LLM_BASE_URL", "AGENTMEM_LLM_API_KEY",
         "OPENAI_BASE_URL", "OPENAI_API_KEY", "AGENTMEM_DEFAULT_CONTEXT_WINDOW")


def texts(nb: nbformat.NotebookNode) -> str:
    out = []
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            if o.get("output_type") == "stream":
                out.append(o["text"])
            elif "data" in o:
                out.append(o["data"].get("text/plain", ""))
    return "\n".join(out)


def images(nb: nbformat.NotebookNode) -> int:
    return sum("image/png" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", []))


def test_notebooks_are_stored_without_outputs() -> None:
    assert sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb")) == NAMES
    for name in NAMES:
        nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
        nbformat.validate(nb)
        assert nb.metadata.kernelspec.name == "python3"
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert code and all(not c.outputs and c.execution_count is None for c in code), name
        assert nb.cells[0].cell_type == "markdown" and "jupyter-execute" in nb.cells[0].source
        # markdown explains the steps
        assert sum(c.cell_type == "markdown" for c in nb.cells) >= 4


def test_kernel_runs_this_python(tmp_path: Path) -> None:
    """The "python3" kernel the notebooks name starts this very interpreter (the venv's)."""
    from nbformat.v4 import new_code_cell, new_notebook

    nb = new_notebook(cells=[new_code_cell("import sys; print(sys.executable)")])
    NotebookClient(nb, timeout=120, startup_timeout=120, kernel_name="python3").execute()
    assert nb.cells[0].outputs[0]["text"].strip() == sys.executable


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_notebook_runs_top_to_bottom(name: str, pg_uri: str, fresh_schema: str, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTMEM_DATABASE_URL", pg_uri)
    monkeypatch.setenv("AGENTMEM_SCHEMA", fresh_schema)
    for var in UNSET:
        monkeypatch.delenv(var, raising=False)
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    client = NotebookClient(nb, timeout=600, startup_timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOKS)}})
    client.execute()
    nbformat.write(nb, tmp_path / f"{name}.ipynb")
    executed = nbformat.read(tmp_path / f"{name}.ipynb", as_version=4)
    out = texts(executed)
    assert all(c.execution_count for c in executed.cells if c.cell_type == "code")
    assert not [o for c in executed.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert f"schema: {fresh_schema}" in out or name != "01_quickstart"
    if name == "03_consolidation":
        assert images(executed) >= 1, "the consolidation notebook must contain its plot"
        assert "after 40 turns" in out and "original messages restored" in out
    if name == "04_dba":
        assert images(executed) >= 1
        assert "critical" in out and "rows left: 0" in out
    if name == "05_integrations":
        assert "recalled: ['Remember that I am travelling to Bergen in May']" in out
        assert "get_weather" in out and "store items after forget_user: 0" in out
