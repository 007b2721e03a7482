"""A consolidation summarised by a real model over HTTP (the local llama.cpp server).

SmolLM2-135M is far too small to summarise well; this checks that whatever a real
model writes ends up with exactly the four headings and an 8-12 word label, and that
the rows are marked. Skipped unless ``./dev test`` provides the server's Python.
"""

from __future__ import annotations

import pytest

from memory.llm import chat_model_from_env
from memory.structure import HEADINGS

from fix_consolidation import raw_conn, seed_thread, thread_state, assert_consistent
from fix_llama import needs_llama

pytestmark = needs_llama


def test_real_model_summary_has_the_structure(mm, user, thread, llama_url, monkeypatch):
    monkeypatch.setenv("AGENTMEM_LLM_BASE_URL", llama_url)
    monkeypatch.setenv("AGENTMEM_LLM_MODEL", "smollm2")
    monkeypatch.setenv("AGENTMEM_LLM_MAX_TOKENS", "160")
    model = chat_model_from_env()
    written = seed_thread(mm, user, thread, turns=2)
    result = mm.summarize_conversation(thread, user, summarizer=mm.summarizer(model, timeout=300))
    assert result.status == "summarized" and result.method in ("llm", "llm-retry"), result.errors
    assert [ln for ln in result.summary.content.splitlines() if ln.startswith("### ")] == list(HEADINGS)
    assert 8 <= len(result.summary.description.split()) <= 12
    assert result.source_ids == [m.id for m in written]
    with raw_conn(mm) as conn:
        assert_consistent(thread_state(conn, user, thread))
