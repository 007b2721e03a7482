"""The summariser: structure, label, the extractive fallback that invents nothing, map-reduce."""

from __future__ import annotations

import re

import pytest

from memory import LLMError
from memory.consolidation.extractive import extractive_summary, references
from memory.consolidation.summary_shape import HEADINGS, fit_label, parse_sections, render
from memory.consolidation.summarizer import Summarizer, pack
from memory.context.tokens import count_tokens

from fix_consolidation import (GOOD_ANSWER, ScriptedChat, assert_consistent, foreign_label_words, raw_conn, section,
                               seed_thread, thread_state)

UNITS = [
    "[2026-11-29 10:00] user: Hi, I'm Alice Martin from Acme Corp. Our deploy of build 4.2.1 failed with error "
    "E1234 on server db-prod-02.",
    '[2026-11-29 10:01] assistant: Let me check the logs. [calls get_logs({"ticket": "OPS-4411"})]',
    "[2026-11-29 10:01] tool get_logs result (call_1): timeout after 3000 ms connecting to 10.0.0.5:5432",
    "[2026-11-29 10:02] user: This is really frustrating! We need it fixed by 2026-12-01.",
    "[2026-11-29 10:03] assistant: We decided to roll back to 4.1.9 and raise the pool timeout to 30 s. "
    "Should I open a ticket with Bob Smith?",
    "[2026-11-29 10:04] user: Yes please, and cc carol@example.com. See https://wiki.acme.io/runbooks/db.",
]


def _headings(content: str) -> list[str]:
    return [ln for ln in content.splitlines() if ln.startswith("### ")]


def test_extractive_summary_has_the_structure_and_invents_nothing():
    label, content = extractive_summary(UNITS)
    assert _headings(content) == list(HEADINGS)
    transcript = "\n".join(UNITS)
    # The label is the transcript's own date and words, not padding.
    assert label.startswith("Conversation (2026-11-29) about ") and foreign_label_words(label, transcript) == []
    bullets = [ln for ln in content.splitlines() if ln.startswith("- [")]
    assert bullets
    for line in bullets:  # "- [stamp] who: sentence": the sentence is copied verbatim from that message
        m = re.match(r"- \[(?P<stamp>[^\]]+)\] (?P<who>[^:]+): (?P<text>.*)$", line)
        assert m and any(u.startswith(f"[{m['stamp']}] {m['who']}:") and m["text"] in u for u in UNITS), line
    for value in ["E1234", "OPS-4411", "2026-12-01", "4.2.1", "4.1.9", "3000 ms", "30 s", "carol@example.com",
                  "https://wiki.acme.io/runbooks/db", "Alice Martin", "Bob Smith", "get_logs"]:
        assert value in content, value
    refs = [v for values in references(UNITS).values() for v in values]
    assert all(v in transcript for v in refs)  # every listed reference occurs in the transcript
    sections = dict(zip(HEADINGS, re.split(r"^### .*$", content, flags=re.M)[1:]))
    assert "frustrating" in sections["### Emotional Context"]
    assert "decided to roll back" in sections["### Action Items & Decisions"]
    assert "Open questions:" in sections["### Action Items & Decisions"]


def test_extractive_summary_of_nothing_says_none_noted():
    label, content = extractive_summary([])
    assert _headings(content) == list(HEADINGS) and content.count("- None noted.") == 4
    # Nothing to take words from: only the generic label, nothing invented.
    assert label == "Conversation conversation summary with details kept for later"


def test_model_answer_is_normalised_to_exactly_four_headings():
    messy = ("Sure! Here is the summary.\nLabel: **Short**\n**Technical Information**\n- a\n## Entities and references\n"
             "- b\n#### Extra heading\n- c\n### Action items and decisions\n- d\n### Technical Information\n- e")
    label, sections, found = parse_sections(messy)
    assert found and label == "Short"
    content = render(sections)
    assert _headings(content) == list(HEADINGS)
    assert "- None noted." in content.split("### Emotional Context")[1].split("###")[0]
    assert "**Extra heading**" in content and "- e" in content and "Sure! Here is the summary." in content


@pytest.mark.parametrize("text, n", [("one two", 8), ("w " * 20, 12), ("a b c d e f g h i", 9)])
def test_labels_always_have_8_to_12_words(text, n):
    label = fit_label(text, ["alpha", "beta"])
    assert len(label.split()) == n


def test_model_summary_uses_one_call_and_the_models_text():
    model = ScriptedChat()
    s = Summarizer(model).summarize(UNITS, focus="the rollback")
    assert (s.method, s.llm_calls, len(model.prompts)) == ("llm", 1, 1)
    assert s.label == "Deployment incident triage with rollback decision and follow up tasks"
    assert "- roll back to 4.1.9" in s.content and _headings(s.content) == list(HEADINGS)
    prompt = model.prompts[0]
    assert all(h in prompt for h in HEADINGS) and "the rollback" in prompt and all(u in prompt for u in UNITS)


def test_without_fallback_a_failing_model_raises():
    with pytest.raises(LLMError):
        Summarizer(ScriptedChat(error=True), fallback=False).summarize(UNITS)


def test_pack_keeps_whole_units_and_splits_only_oversized_ones():
    units = [f"[2026-01-01 10:00] user: message {i} " + "word " * (i % 7 * 20) for i in range(50)]
    big = "[2026-01-01 11:00] user: " + " ".join(f"tok{i}" for i in range(3000))
    pieces = pack(units + [big], 300)
    assert all(count_tokens("\n".join(p)).tokens <= 300 for p in pieces)
    assert len(pieces) > 10
    flat = [u for p in pieces for u in p]
    assert flat[:50] == units  # whole units, in order
    assert " ".join(flat[50:]).split() == big.split()  # the big one split, nothing lost


def test_map_reduce_over_ten_windows_summarises_every_piece():
    window = 2000
    model = ScriptedChat()
    summ = Summarizer(model, window_tokens=window, output_tokens=500)
    units = [f"[2026-02-{1 + i // 100:02d} 10:{i % 60:02d}] user: MARK{i:05d} " + "details about the incident " * 12
             for i in range(450)]
    total = count_tokens("\n".join(units)).tokens
    assert total >= 10 * window
    s = summ.summarize(units)
    map_prompts = [p for p in model.prompts if "Transcript part:" in p]
    merge_prompts = [p for p in model.prompts if "Partial summaries:" in p]
    n = len(map_prompts)
    assert n >= 10 and s.pieces == n
    assert sorted(int(re.search(r"part (\d+) of (\d+)", p)[1]) for p in map_prompts) == list(range(1, n + 1))
    for i in range(len(units)):  # every message went to exactly one map call: nothing silently cut
        assert sum(f"MARK{i:05d}" in p for p in map_prompts) == 1
    assert merge_prompts and s.llm_calls == len(model.prompts) == n + len(merge_prompts)
    assert all(count_tokens(p).tokens <= window for p in model.prompts)
    assert s.method == "map-reduce" and _headings(s.content) == list(HEADINGS)
    assert s.label == GOOD_ANSWER.splitlines()[0].removeprefix("Label: ")  # the label of the model's final merge
    assert "- roll back to 4.1.9" in section(s.content, "### Action Items & Decisions")


def test_map_reduce_with_a_failing_merge_concatenates_sections():
    def answer(prompt):
        if "Partial summaries:" in prompt:
            return ""
        part = re.search(r"part (\d+) of", prompt)[1]
        return f"Label: part {part} label words for the test here now\n### Technical Information\n- fact of part {part}"

    units = [f"[2026-02-01 10:00] user: item {i} " + "lorem ipsum dolor " * 30 for i in range(60)]
    s = Summarizer(ScriptedChat(answer=answer), window_tokens=1500, output_tokens=400).summarize(units)
    assert s.pieces > 2 and _headings(s.content) == list(HEADINGS)
    for part in range(1, s.pieces + 1):
        assert f"- fact of part {part}\n" in s.content + "\n"


def test_consolidation_of_a_long_thread_map_reduces_on_a_small_window(mm, user, thread):
    written = seed_thread(mm, user, thread, turns=40)
    model = ScriptedChat()
    result = mm.summarize_conversation(thread_id=thread, user_id=user, summarizer=Summarizer(model, window_tokens=1200,
                                                                           output_tokens=300))
    assert result.status == "summarized" and result.method == "map-reduce"
    assert result.summary.metadata["pieces"] > 1 and result.llm_calls == len(model.prompts)
    assert len(result.source_ids) == len(written)
    with raw_conn(mm) as conn:
        assert_consistent(thread_state(conn, user, thread))
