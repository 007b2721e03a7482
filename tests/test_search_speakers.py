"""Speaker names, neighbouring turns, summary coverage and the batch form of search_memory.

Hash embedder (fixture ``mm``): what is pinned here is how the signals combine, not
how well MiniLM paraphrases.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import psycopg
import pytest

from memory import InvalidInputError, MemoryManager
from memory.agent.search_tool import format_hits
from memory.context.render import format_conversation
from memory.retrieval.speakers import speakers_in
from memory.tables.search import Covered, SearchWeights

NOW = datetime(2026, 11, 20, 12, 0, tzinfo=timezone.utc)
FILLER = ["Can you help me format a table in markdown?", "Use pipes between columns and a dashed line.",
          "What is a good stretch after running?", "A standing quad stretch works well."]


def write(mm: MemoryManager, user: str, thread: str, turns: list[tuple[str | None, str]],
          start: datetime = NOW - timedelta(days=3)) -> list[int]:
    msgs = [dict(role="user", content=text, created_at=start + timedelta(minutes=i), **({"name": name} if name else {}))
            for i, (name, text) in enumerate(turns)]
    return [m.id for m in mm.write_messages(user_id=user, thread_id=thread, messages=msgs)]


def test_a_message_keeps_its_speakers_name_and_renders_it(mm: MemoryManager, user: str, thread: str) -> None:
    m = mm.write_conversational_memory(user_id=user, thread_id=thread, role="user", content="I adopted a cat.",
                                       name="Ann")
    assert m.name == "Ann"
    [read] = mm.read_conversational_memory(thread_id=thread, user_id=user)
    assert read.name == "Ann" and read.content == "I adopted a cat."
    assert "Ann (user): I adopted a cat." in format_conversation([read])


@pytest.mark.parametrize("name", ["", "   ", "Ann\nLee", 42])
def test_a_bad_name_is_rejected_and_nothing_written(mm: MemoryManager, user: str, thread: str, name: object) -> None:
    with pytest.raises(InvalidInputError, match="name"):
        mm.write_messages(user_id=user, thread_id=thread, messages=[
            dict(role="user", content="first"), dict(role="user", content="second", name=name)])
    assert mm.read_thread(thread_id=thread, user_id=user) == []


def test_the_speaker_named_in_the_question_comes_first(mm: MemoryManager, user: str, thread: str) -> None:
    """Two people said the same thing: the question about one of them finds that one's turn."""
    ids = write(mm, user, thread, [(None, FILLER[0]), ("Bob", "I went swimming with the kids."),
                                   (None, FILLER[1]), ("Ann", "I went swimming with the kids."),
                                   (None, FILLER[2])])
    for q in ("What does Ann do with the kids?", "what does ann's family do for fun"):
        hits = mm.search_memory(query=q, user_id=user, k=5, scope="messages")
        assert hits[0].item.message_id == ids[3], q
        assert hits[0].signals["speaker"] == 1.0 and hits[0].item.name == "Ann"
        bob = next(h for h in hits if h.item.message_id == ids[1])
        assert bob.signals["speaker"] == 0.0 and bob.score < hits[0].score
    # The name is keyword text of the message too.
    found = mm.search_memory(query="Bob", user_id=user, k=5, scope="messages", method="keyword")
    assert found and found[0].item.message_id == ids[1]


def test_a_name_is_matched_as_a_word_and_left_out_of_the_embedded_query() -> None:
    assert speakers_in("What did Melanie's kids paint?", ["Melanie", "Mel"]) == (
        frozenset({"melanie"}), "What did someone kids paint?")
    assert speakers_in("Did Annabel call?", ["Ann"]) == (frozenset(), "Did Annabel call?")
    assert speakers_in("Ask ann lee and Ann", ["Ann", "Ann Lee"]) == (
        frozenset({"ann", "ann lee"}), "Ask someone and someone")


def test_a_new_speaker_is_matched_right_after_it_is_written(mm: MemoryManager, user: str, thread: str) -> None:
    write(mm, user, thread, [("Ann", "Hello there.")])
    mm.search_memory(query="hello", user_id=user)  # the user's names are now known to the search
    ids = write(mm, user, thread, [("Zoe", "Hello there.")], start=NOW - timedelta(days=1))
    hits = mm.search_memory(query="what did Zoe say", user_id=user, scope="messages")
    assert hits[0].item.message_id == ids[0] and hits[0].signals["speaker"] == 1.0


def test_the_turn_before_an_answer_is_lifted_by_it(mm: MemoryManager, user: str, thread: str) -> None:
    """Evidence often spans two turns; the one without the query's words gains from its neighbour."""
    ids = write(mm, user, thread, [(None, FILLER[0]), (None, FILLER[1]), ("Ann", "Guess what I finally found!"),
                                   ("Ann", "An Olympus film camera at the flea market."),
                                   (None, FILLER[2]), (None, FILLER[3])])
    hits = mm.search_memory(query="olympus film camera flea market", user_id=user, k=6, scope="messages")
    by_id = {h.item.message_id: h for h in hits}
    assert hits[0].item.message_id == ids[3]
    assert by_id[ids[2]].signals["neighbour"] > 0
    # (the turns after the answer hold it in their keyword window; the ones before do not)
    assert all(by_id[ids[2]].score > by_id[i].score for i in (ids[0], ids[1]) if i in by_id)
    # Without the neighbour share the lift is gone (the signal is what ranks it).
    from memory.tables.search import SearchWeights
    flat = mm.search_memory(query="olympus film camera flea market", user_id=user, k=6, scope="messages",
                            weights=SearchWeights(adjacent_weight=0.0))
    lifted = next(h for h in flat if h.item.message_id == ids[2])
    assert lifted.signals["neighbour"] == 0.0
    assert lifted.score == pytest.approx(by_id[ids[2]].score - by_id[ids[2]].signals["neighbour"])


def test_a_summary_hit_says_which_messages_it_replaced_and_its_id_is_written_once(
        mm: MemoryManager, user: str, thread: str, sql_conn: psycopg.Connection) -> None:
    ids = write(mm, user, thread, [("Ann", "The release train leaves every second Thursday."),
                                   ("Bob", "The release train needs a sign-off from QA."),
                                   (None, FILLER[0])])
    summary = mm.write_summary("Release train cadence and sign-off",
                               "The release train leaves every second Thursday after QA sign-off.", user_id=user,
                               thread_id=thread, source_count=2)
    sql_conn.execute("UPDATE conversational_memory SET summary_id = %s WHERE user_id = %s AND id = ANY(%s)",
                     (summary.summary_id, user, ids[:2]))
    hits = mm.search_memory(query="when does the release train leave", user_id=user, k=5)
    s = next(h for h in hits if h.item.kind == "summary")
    assert s.item.covers == Covered(first_id=ids[0], last_id=ids[1], count=2)
    text = format_hits(hits)
    assert text.count(str(summary.summary_id)) == 1, text
    assert f"replaces 2 messages, ids {ids[0]}-{ids[1]}" in text
    tagged = [line for line in text.splitlines() if "[S1" in line]
    assert len(tagged) == 3, text  # the summary and both of its messages


def test_search_memory_many_answers_each_query_as_search_memory_does(mm: MemoryManager, user: str,
                                                                     thread: str) -> None:
    write(mm, user, thread, [("Ann", "My sister Hannah moved to Lisbon."), (None, FILLER[0]),
                             ("Bob", "Our cat Miso only eats salmon."), (None, FILLER[2])])
    queries = ["where did Hannah move", "what does Miso eat", "what did Bob say about the cat"]
    many = mm.search_memory_many(queries, user_id=user, k=3)
    assert many == [mm.search_memory(query=q, user_id=user, k=3) for q in queries]
    assert mm.search_memory_many([], user_id=user) == []
    with pytest.raises(InvalidInputError):
        mm.search_memory_many("one query", user_id=user)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        mm.search_memory_many(["ok", ""], user_id=user)


@pytest.mark.slow
def test_a_multi_part_question_finds_both_parts_real_model(real_mm: MemoryManager, user: str) -> None:
    """Evidence said in two sessions, in other words than the question's, among the other speaker's
    turns about the same subject."""
    start = NOW - timedelta(days=60)
    s1 = write(real_mm, user, "s1", [("Bob", "How was your week?"), ("Ann", "I signed up for a pottery class."),
                                     ("Bob", "In my free time I go hiking and I paint."),
                                     ("Ann", "Work has been busy, lots of meetings.")], start)
    s2 = write(real_mm, user, "s2", [("Bob", "Any plans for the weekend?"),
                                     ("Ann", "We went camping at the beach with the kids."),
                                     ("Bob", "My favourite activities are swimming and chess."),
                                     ("Ann", "Good luck with the car.")],
               start + timedelta(days=20))
    hits = real_mm.search_memory(query="What does Ann do in her free time?", user_id=user, k=4,
                                 scope="messages")
    top = [h.item.message_id for h in hits]
    assert s1[1] in top and s2[1] in top, [(h.item.name, h.item.content) for h in hits]


@pytest.mark.parametrize("shape", ["exact", "indexed"])
def test_the_neighbour_share_comes_from_the_adjacent_turns_of_the_thread_whatever_the_filters(
        mm: MemoryManager, user: str, thread: str, shape: str) -> None:
    """A hit's neighbour share is ``adjacent_weight`` x the better own score of the turns just
    before and after it in its thread, counted only when they are hits too. A turn the search
    drops (expired, or outside the time range) is still the neighbour: the turn beyond it never is."""
    start = NOW - timedelta(days=3)
    turns = [(None, FILLER[0]), ("Ann", "Guess what I finally found!"), ("Ann", "Oh and the weather is nice."),
             ("Ann", "An Olympus film camera at the flea market."), (None, FILLER[1]), (None, FILLER[2]),
             (None, FILLER[3])]
    ids = write(mm, user, thread, turns, start=start)
    other = write(mm, user, thread + "-b", [(None, "Olympus film camera flea market, again.")],
                  start=start + timedelta(minutes=2, seconds=30))  # between turns 2 and 3 in time, another thread
    with mm.db.connection() as conn:  # turn 2 expired: the search drops it, it still separates turns 1 and 3
        conn.execute("UPDATE conversational_memory SET expires_at = now() - interval '1 hour'"
                     " WHERE user_id = %s AND id = %s", (user, ids[2]))
    order = {i: n for n, i in enumerate(ids)}
    w = SearchWeights()
    query = "olympus film camera flea market found"
    cases = [dict(), dict(thread_id=thread), dict(until=start + timedelta(minutes=3, seconds=30)),
             dict(since=start + timedelta(minutes=2, seconds=30))]
    for filters in cases:
        hits = mm.search_memory(query=query, user_id=user, k=50, scope="messages", shape=shape, **filters)
        own = {h.item.message_id: h.score - h.signals["neighbour"] - h.signals["thread"] for h in hits}
        assert ids[2] not in own and ids[3] in own
        assert (other[0] in own) == ("thread_id" not in filters)
        for h in hits:
            mid = h.item.message_id
            if mid not in order:
                assert h.signals["neighbour"] == 0.0  # alone in its thread
                continue
            around = [own[ids[j]] for j in (order[mid] - 1, order[mid] + 1) if 0 <= j < len(ids) and ids[j] in own]
            assert h.signals["neighbour"] == pytest.approx(w.adjacent_weight * max(around, default=0.0)), (filters, mid)
        if "until" not in filters and "since" not in filters:
            assert own[ids[3]] > own[ids[0]]  # so turn 3 as turn 1's neighbour would show
            lifted = next(h for h in hits if h.item.message_id == ids[1])
            assert lifted.signals["neighbour"] == pytest.approx(w.adjacent_weight * own[ids[0]])  # not turn 3's


def test_the_speaker_signal_is_the_named_speakers_own_turns_only(mm: MemoryManager, user: str, thread: str) -> None:
    ids = write(mm, user, thread, [("Ann", "I went hiking on Sunday."), ("Anna", "I went hiking too."),
                                   ("Ann Lee", "Hiking is fun."), (None, "Hiking boots are on sale."),
                                   ("ann", "Lowercase hiking note.")])
    hits = mm.search_memory(query="Where did Ann's hiking trip go?", user_id=user, k=10, scope="messages")
    speaker = {h.item.message_id: h.signals["speaker"] for h in hits}
    assert speaker == {ids[0]: 1.0, ids[1]: 0.0, ids[2]: 0.0, ids[3]: 0.0, ids[4]: 1.0}
    # A longer name is matched before a shorter one it contains: the question is about Ann Lee.
    hits = mm.search_memory(query="what did ann lee say about hiking", user_id=user, k=10, scope="messages")
    assert {h.item.message_id for h in hits if h.signals["speaker"] == 1.0} == {ids[2]}
