"""A consolidation summarised by a real model over HTTP (the local llama.cpp server).

SmolLM2-135M is far too small to summarise well, so this does not judge quality: it
checks that the stored summary is the server's answer (every line of it comes from
what the server returned, the label from its answer or the transcript), normalised to
exactly the four headings, and that the rows are marked. Skipped unless ``./dev test``
provides the server's Python.
"""

from __future__ import annotations

import re
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler

from memory.context.render import format_message
from memory.llm.chat import chat_model_from_env
from memory.consolidation.summary_shape import HEADINGS, NONE_NOTED

from fix_consolidation import assert_consistent, foreign_label_words, raw_conn, seed_thread, thread_state
from fix_llama import needs_llama

pytestmark = needs_llama


class RawAnswers(BaseCallbackHandler):
    """Records what the server sent back for each call, before agentmem normalises it."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.models: list[Any] = []

    def on_llm_end(self, response: Any, **kwargs: Any) -> None:
        self.texts.append(response.generations[0][0].text)
        self.models.append((response.llm_output or {}).get("model_name"))


def test_real_model_summary_is_the_servers_answer_with_the_structure(mm, user, thread, llama_url, monkeypatch):
    monkeypatch.setenv("AGENTMEM_LLM_BASE_URL", llama_url)
    monkeypatch.setenv("AGENTMEM_LLM_MODEL", "smollm2")
    monkeypatch.setenv("AGENTMEM_LLM_MAX_TOKENS", "160")
    monkeypatch.setenv("AGENTMEM_LLM_TIMEOUT", "300")  # a 135M model on a busy CPU: the one timeout, raised
    model = chat_model_from_env()
    raw = RawAnswers()
    model.callbacks = [raw]
    written = seed_thread(mm, user, thread, turns=2)
    result = mm.summarize_conversation(thread_id=thread, user_id=user, summarizer=mm.summarizer(model))
    assert result.status == "summarized" and result.method in ("llm", "llm-retry"), result.errors
    assert result.source_ids == [m.id for m in written]
    # Every call went to the server and came back from it.
    assert len(raw.texts) == result.llm_calls >= 1 and all(m == "smollm2" for m in raw.models), raw.models
    answer = raw.texts[-1]  # the answer that was kept (an empty first one is retried)
    assert answer.strip()
    content = result.summary.content
    assert [ln for ln in content.splitlines() if ln.startswith("### ")] == list(HEADINGS)
    # The stored text is the server's, not the extractive fallback's: every body line is in its answer.
    body = [ln.strip(" *#") for ln in content.splitlines()
            if ln.strip() and not ln.startswith("### ") and ln != NONE_NOTED]
    assert body and all(ln in answer for ln in body), (body, answer)
    # The label: the model's own label words first (if it wrote one), completed from the transcript.
    transcript = "\n".join(format_message(m) for m in written)
    label = result.summary.description
    assert foreign_label_words(label, answer + "\n" + transcript) == [], (label, answer)
    given = re.search(r"^\W*label\W*[:\-]\s*(?P<l>\S.*)$", answer, re.I | re.M)
    if given:
        assert label.split()[0] == given["l"].split()[0].strip("*_\"'`"), (label, answer)
    with raw_conn(mm) as conn:
        assert_consistent(thread_state(conn, user, thread))
