"""`agentmem demo` end to end: every stage printed, exit 0, SQL counts consistent."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from memory.cli.main import main


@pytest.mark.slow
def test_demo_prints_every_stage_and_exits_0(pg_uri, fresh_schema, monkeypatch):
    monkeypatch.setenv("AGENTMEM_DATABASE_URL", pg_uri)
    monkeypatch.setenv("AGENTMEM_SCHEMA", fresh_schema)
    monkeypatch.delenv("AGENTMEM_EMBEDDER", raising=False)  # the real packaged model
    result = CliRunner().invoke(main, ["demo"], catch_exceptions=False)
    out = result.output
    assert result.exit_code == 0, out
    assert "SCRIPTED" in out  # the model is labelled as scripted
    assert len(re.findall(r"retrieved tools: ", out)) == 9
    assert len(re.findall(r"context: [\d,]+/[\d,]+ tokens \(\d+ %, (ok|warning|critical)", out)) == 9
    assert "called get_weather(city='Oslo') -> ok" in out
    assert "agent-triggered consolidation" in out
    assert re.search(r"expansion returned the summary and its [1-9]\d* original messages", out)
    m = re.search(r"(\d+) messages = (\d+) summarized \+ (\d+) unsummarized; (\d+) summary row", out)
    assert m, out
    total, summarized, unsummarized, summaries = map(int, m.groups())
    assert total == summarized + unsummarized and summarized > 0 and summaries >= 1
