"""The inspector's reads (memory.inspector.queries) against the real database: paging and the usage replay."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

import pytest

from memory import MemoryManager
from memory.errors import NotFoundError
from memory.inspector import queries

START = datetime(2026, 1, 5, 9, 0, tzinfo=timezone.utc)


def write_turns(mm: MemoryManager, user: str, thread: str, n: int, start: datetime = START) -> list[str]:
    texts = []
    rows = []
    for i in range(n):
        question, answer = f"question number {i} " + "q" * i, f"answer {i} " + "a" * (2 * i)
        texts += [question, answer]
        rows += [{"role": "user", "content": question, "created_at": start + timedelta(minutes=2 * i)},
                 {"role": "assistant", "content": answer, "created_at": start + timedelta(minutes=2 * i + 1)}]
    mm.write_messages(rows, user_id=user, thread_id=thread)
    return texts


def test_usage_replays_each_turn_and_buckets_keep_their_worst_turn(mm: MemoryManager, user: str) -> None:
    texts = write_turns(mm, user, "t", 12)
    # at user turn i the context holds every earlier message and the question itself
    expected = [math.ceil(sum(len(t) for t in texts[:2 * i + 1]) / 4) for i in range(12)]
    full = queries.context_usage(mm.db, mm.settings, user, "t")
    assert [p.tokens for p in full.points] == expected and full.turns == 12
    assert [(p.first_turn, p.last_turn) for p in full.points] == [(i, i) for i in range(1, 13)]
    bucketed = queries.context_usage(mm.db, mm.settings, user, "t", max_points=4)
    assert [(p.first_turn, p.last_turn) for p in bucketed.points] == [(1, 3), (4, 6), (7, 9), (10, 12)]
    assert [p.tokens for p in bucketed.points] == [max(expected[i:i + 3]) for i in (0, 3, 6, 9)]
    budget = full.budget
    assert [float(p.percent) for p in full.points] == [round(100 * t / budget, 1) for t in expected]


def test_usage_drops_at_a_consolidation_to_the_live_rows_and_the_reference(mm: MemoryManager, user: str) -> None:
    texts = write_turns(mm, user, "t", 4)
    summary = mm.summarize_conversation(user_id=user, thread_id="t", keep_recent=1).summary
    assert summary is not None
    later = START + timedelta(days=1)
    with mm.db.connection(user) as conn:  # as if the consolidation ran before the next turn
        conn.execute("UPDATE summary_memory SET created_at = %s WHERE summary_id = %s",
                     (later - timedelta(minutes=1), summary.summary_id))
    question = "one more question"
    mm.write_messages([{"role": "user", "content": question, "created_at": later}], user_id=user, thread_id="t")
    series = queries.context_usage(mm.db, mm.settings, user, "t")
    live = texts[-2:]  # the kept turn
    assert series.points[-1].tokens == math.ceil((len(summary.reference) + sum(map(len, live)) + len(question)) / 4)
    assert [c[1] for c in series.consolidations] == [summary.summary_id]


def test_a_thread_opens_on_its_newest_page_and_pages_back(mm: MemoryManager, user: str) -> None:
    mm.write_messages([{"role": "user", "content": f"m{i}"} for i in range(250)], user_id=user, thread_id="p")
    newest = queries.thread_page(mm.db, user, "p", size=100)
    assert (newest.page.number, newest.page.pages, newest.total_messages) == (3, 3, 250)
    # pages are cut from the end: the newest is full, the oldest holds the rest
    assert [it.message.content for it in newest.items if it.message] == [f"m{i}" for i in range(150, 250)]
    middle = queries.thread_page(mm.db, user, "p", size=100, page=2)
    assert [it.message.content for it in middle.items if it.message] == [f"m{i}" for i in range(50, 150)]
    first = queries.thread_page(mm.db, user, "p", size=100, page=1)
    assert [it.message.content for it in first.items if it.message] == [f"m{i}" for i in range(50)]
    assert (first.page.first_row, first.page.last_row, newest.page.first_row) == (1, 50, 151)
    for number, expected in ((None, range(150, 250)), (2, range(50, 150)), (1, range(50))):  # every row: the same
        raw = queries.thread_page(mm.db, user, "p", size=100, page=number, raw=True)
        assert [it.message.content for it in raw.items if it.message] == [f"m{i}" for i in expected]


def test_a_consolidated_run_is_one_entry_saying_which_rows_it_replaced(mm: MemoryManager, user: str) -> None:
    write_turns(mm, user, "c", 5)
    summary = mm.summarize_conversation(user_id=user, thread_id="c", keep_recent=2).summary
    assert summary is not None
    tp = queries.thread_page(mm.db, user, "c")
    kinds = ["s" if it.summary else "m" for it in tp.items]
    assert kinds == ["s", "m", "m", "m", "m"]
    card = tp.items[0].summary
    ids = [m.id for m in mm.read_thread(user_id=user, thread_id="c")]
    assert (card.source_rows, card.first_message_id, card.last_message_id) == (6, ids[0], ids[5])
    assert [it.message.id for it in tp.items[1:]] == ids[6:]


def test_another_users_summary_is_not_found_by_any_read(mm: MemoryManager, user: str) -> None:
    other = user + "-other"
    write_turns(mm, other, "x", 2)
    theirs = mm.summarize_conversation(user_id=other, thread_id="x").summary
    assert theirs is not None
    with pytest.raises(NotFoundError):
        queries.summary_card(mm.db, user, theirs.summary_id)
    with pytest.raises(NotFoundError):
        queries.summary_sources(mm.db, user, theirs.summary_id)
    assert queries.summary_sources(mm.db, other, theirs.summary_id).page.total == 4
