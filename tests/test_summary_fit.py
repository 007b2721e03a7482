"""A summary always fits the content limit: reduced again, most specific details kept,
what was left out said in the summary itself, nothing invented, sources expandable."""

from __future__ import annotations

import re
import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from fix_consolidation import ScriptedChat
from memory import MemoryManager
from memory.consolidation.summary_shape import HEADINGS, render
from memory.consolidation.summarizer import Summarizer
from memory.consolidation.summary_fit import CUT, NOTE_PREFIX, fit_content

UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")


def headings(content: str) -> list[str]:
    return [ln for ln in content.splitlines() if ln.startswith("### ")]


def lines_of(content: str) -> list[str]:
    return [ln for ln in content.splitlines() if ln.strip() and not ln.startswith("### ")]


def test_one_ticket_id_per_message_consolidates_within_the_limit(mm, user: str, thread: str) -> None:
    """The reported case scaled down 10x to keep the suite fast: 10,000 messages with one
    ticket id each against the 200,000 limit is 1,000 messages against 20,000 (the
    extractive summary lists every id, 38,000+ characters of them)."""
    small = MemoryManager(mm.db, mm.embeddings, mm.settings.with_(max_content_chars=20_000))
    ids = [str(uuid.uuid4()) for _ in range(1_000)]
    small.write_messages([{"role": "user", "content": f"Please look at ticket {t} today."} for t in ids], user_id=user,
                         thread_id=thread)
    result = small.summarize_conversation(thread_id=thread, user_id=user)
    assert result.status == "summarized" and result.method == "extractive"
    content = result.summary.content
    assert len(content) <= 20_000
    assert headings(content) == list(HEADINGS)
    listed = set(UUID.findall(content))
    assert listed <= set(ids)  # nothing invented
    [note] = [ln for ln in lines_of(content) if ln.startswith(NOTE_PREFIX)]
    dropped = int(re.search(r"([\d,]+) more references", note).group(1).replace(",", ""))
    assert dropped > 0 and len(listed) + dropped >= len(ids)  # what is not listed is counted
    assert "expand_summary" in note
    expanded = small.expand_summary(result.summary.summary_id, user_id=user)
    assert [m.content for m in expanded.messages] == [f"Please look at ticket {t} today." for t in ids]


def huge_answer(lines: int) -> str:
    body = "\n".join(f"- Step {i}: restarted worker w-{i} after error E{i % 97} on host db-{i % 13}." for i in range(lines))
    return "Label: Worker restarts across the fleet after repeated database errors\n" \
           f"{HEADINGS[0]}\n{body}\n{HEADINGS[1]}\n- The user was worried.\n{HEADINGS[2]}\n- OPS-1\n" \
           f"{HEADINGS[3]}\n- Decided to restart every worker."


def test_a_huge_model_answer_is_reduced_to_fit(mm, user: str, thread: str) -> None:
    answer = huge_answer(100_000)
    assert len(answer) > 6_800_000
    mm.write_messages([{"role": "user", "content": "Restart the workers, see OPS-1."},
                                     {"role": "assistant",
                                      "content": "Restarting all workers now."}], user_id=user, thread_id=thread)
    model = ScriptedChat(answer=answer)
    result = mm.summarize_conversation(thread_id=thread, user_id=user, model=model)
    assert result.status == "summarized" and result.method == "llm"
    content = result.summary.content
    assert len(content) <= mm.settings.max_content_chars
    assert headings(content) == list(HEADINGS)
    original = set(answer.splitlines())
    for line in lines_of(content):  # each line is the model's own, visibly cut, or the note
        assert line in original or line.startswith(NOTE_PREFIX) or \
            (line.endswith(CUT) and any(o.startswith(line[:-len(CUT)]) for o in original)), line
    assert "- The user was worried." in content and "- Decided to restart every worker." in content
    assert any(ln.startswith(NOTE_PREFIX) and "less specific lines" in ln for ln in lines_of(content))
    assert len(model.prompts) == 1  # too long for the window to shorten with the model: capped


def test_the_model_shortens_a_summary_it_can_read_in_one_call() -> None:
    short = f"Label: Worker restarts after database errors on the db hosts\n{HEADINGS[0]}\n- Restarted w-1."
    answers = iter([huge_answer(60), short])
    model = ScriptedChat(answer=lambda prompt: next(answers))
    result = Summarizer(model, limit_chars=3_000).summarize(["[2026-03-02 09:00] user: restart w-1 please"])
    assert len(model.prompts) == 2 and "the limit is 3,000" in model.prompts[1]
    assert result.llm_calls == 2 and result.content == render([["- Restarted w-1."], [], [], []])


def test_a_model_that_does_not_shorten_enough_is_capped() -> None:
    model = ScriptedChat(answer=huge_answer(60))
    result = Summarizer(model, limit_chars=3_000).summarize(["[2026-03-02 09:00] user: restart w-1 please"])
    assert len(model.prompts) == 2
    assert len(result.content) <= 3_000 and headings(result.content) == list(HEADINGS)
    assert any(ln.startswith(NOTE_PREFIX) for ln in lines_of(result.content))


LINE = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Zl", "Zp", "Cc")), min_size=1,
               max_size=300).map(lambda t: "- " + " ".join(t.split())).filter(lambda t: len(t) > 2)
REFS = st.lists(st.from_regex(r"[A-Z]{2,5}-\d{1,6}", fullmatch=True), min_size=1, max_size=200).map(
    lambda xs: "- Ids: " + "; ".join(xs))


@settings(max_examples=30, deadline=None)
@given(sections=st.lists(st.lists(st.one_of(LINE, REFS), max_size=30), min_size=4, max_size=4),
       limit=st.integers(min_value=1_500, max_value=20_000))
def test_fit_content_always_fits_and_only_keeps_or_cuts_original_lines(sections: list[list[str]],
                                                                       limit: int) -> None:
    content = render(sections)
    fitted = fit_content(content, limit)
    assert len(fitted) <= limit
    assert headings(fitted) == list(HEADINGS)
    if len(content) <= limit:
        assert fitted == content
        return
    original = [ln for s in sections for ln in s]
    for line in lines_of(fitted):
        if line.startswith(NOTE_PREFIX) or line == "- None noted.":
            continue
        if line.endswith(CUT):
            assert any(o.startswith(line[:-len(CUT)]) for o in original), line
        elif line.startswith("- Ids: ") and line not in original:
            items = line[len("- Ids: "):].split("; ")
            assert any(o.startswith("- Ids: " + "; ".join(items)) for o in original), line
        else:
            assert line in original, line
    assert any(ln.startswith(NOTE_PREFIX) for ln in lines_of(fitted))  # something was left out: said so
