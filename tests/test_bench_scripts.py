"""The benchmark scripts that reach into the library's internals still run.

Most of ``bench/`` goes through the public API, but a few read private parts of the search
(``recall.py`` re-ranks ``search_memory``'s candidates with ``_rank``; ``search_memory_profile.py``
times the statements by wrapping ``memory.store.ops``; ``idle_sends.py`` sets ``ops.IDLE_S``). The
first two had stopped running after a change to those parts, unnoticed until someone ran them.
Each runs here in its smallest form, as a subprocess with its own embedded server, and must
finish and print its table.
No figure is checked: the benches measure, the tests elsewhere decide.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LOCOMO = ROOT.parent / "shared" / "data" / "locomo"  # bench/_public_data.py reads it there


def bench(name: str, *args: str) -> str:
    done = subprocess.run([sys.executable, str(ROOT / "bench" / f"{name}.py"), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"bench/{name}.py failed:\n{done.stderr[-3000:]}"
    return done.stdout


def row(out: str, label: str) -> list[str]:
    """The cells after ``label`` of the first table row that starts with it."""
    for line in out.splitlines():
        if line.startswith(label):
            return line[len(label):].split()
    raise AssertionError(f"no row {label!r} in:\n{out}")


def test_recall_quick_reranks_the_searches_candidates_by_every_method() -> None:
    out = bench("recall", "--quick")
    for phase in ("before consolidation", "after consolidation"):
        table = out.split(f"[{phase}] recall of evidence turns")[1].split("\n\n")[0]
        for method in ("vector", "keyword", "hybrid"):  # R@1, R@5, R@10 over every answerable question
            assert re.search(rf"^{method}\s+all\s+\d+(\s+[01]\.\d{{3}}){{3}}$", table, re.M), table


@pytest.mark.skipif(not LOCOMO.is_dir(), reason="the public LoCoMo dev data (../shared/data) is not on this machine")
def test_search_memory_profile_times_both_statements_of_a_search() -> None:
    out = bench("search_memory_profile", "--rounds", "1", "--queries", "3", "--model-every-time",
                "--torch-threads", "1")
    for part in ("sent before the model", "after the model (one exchange)", "ranking"):
        assert row(out, part)[-1] == "3", out  # n: one sample per search
    assert "EXPLAIN (ANALYZE, BUFFERS) of the keyword statement" in out
    assert "EXPLAIN (ANALYZE, BUFFERS) of the statement after the model" in out


@pytest.mark.skipif(not LOCOMO.is_dir(), reason="the public LoCoMo dev data (../shared/data) is not on this machine")
def test_inline_embeddings_compares_both_layouts() -> None:
    out = bench("inline_embeddings", "--pairs", "1", "--rounds", "1", "--queries", "3")
    layouts = out.split("Tables under each toast_tuple_target")[1].split("\n\n")[0]
    for table in ("conversational_memory", "knowledge_memory"):
        targets = re.findall(rf"^{table}\s+(\d+)\s+[\d,]+\s+(\d+) %", layouts, re.M)
        assert [t for t, _ in targets] == ["2032", "8160"], layouts
        assert targets[1][1] == "0", layouts  # under migration 016 no embedding is out of line
    for call in ("search_memory", "read_knowledge"):
        assert re.search(rf"^1\s+016 / default\s+{call}\s+\d+\.\d{{3}}\s*$", out, re.M), out


@pytest.mark.skipif(not LOCOMO.is_dir(), reason="the public LoCoMo dev data (../shared/data) is not on this machine")
def test_idle_sends_times_every_cell_both_ways() -> None:
    out = bench("idle_sends", "--rounds", "1", "--queries", "3", "--pauses", "0,7", "--async")
    for cell, modes in (("sleep 7 ms", ("caller sends", "helper thread sends")),
                        ("back to back", ("caller sends", "as shipped", "async, as shipped")),
                        ("50 ms idle before each", ("caller sends", "as shipped", "async, as shipped")),
                        ("a CPU burner beside", ("caller sends", "as shipped", "async, as shipped"))):
        for mode in modes:  # p50, p95, p99 and n: one sample per search
            assert re.search(rf"^{cell}\s+{mode}(\s+\d[\d.]*){{3}}\s+3$", out, re.M), (cell, mode, out)
    assert re.search(r"ops.IDLE_S as shipped: \d[\d.]* ms", out), out


def test_idle_wake_times_every_call_after_every_sleep() -> None:
    out = bench("idle_wake", "--rounds", "2", "--pauses", "0,5", "--warm", "5")
    for call in ("one byte", "tokenize", "model"):
        for pause in ("0", "5"):  # p50, p95 and n: one sample per round
            assert re.search(rf"^{call}\s+{pause} ms(\s+\d[\d.]*){{2}}\s+2$", out, re.M), (call, pause, out)
    for call in ("model after a helper's run", "helper's run", "model beside a helper's run"):
        assert re.search(rf"^{call}\s+5 ms(\s+\d[\d.]*){{2}}\s+2$", out, re.M), (call, out)
