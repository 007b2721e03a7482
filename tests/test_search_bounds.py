"""Search execution: one statement, bounded work, and input that never crashes it.

* a keyword hit on a row that has no embedding (written by plain SQL, or a shared
  workflow published without a vector) is a hit with score 0, never a TypeError, in
  ``read_knowledge``, ``build_context`` and ``MemoryAgent.run``, for every user;
* a search query is bounded: too long is a clear ``InvalidInputError``, and at most
  ``search_max_terms`` of its words are matched;
* ``search_memory`` has two execution shapes for messages (exact, indexed) that agree
  where the indexed one's bounds are not reached, and the switch between them;
* (that a similarity read and a long-memory search are one round trip each: test_round_trips.py).
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone
from typing import Iterator

import psycopg
import pytest
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage

from memory import InvalidInputError, MemoryManager
from memory.agent.loop import MemoryAgent

NOW = datetime(2026, 11, 20, 12, 0, tzinfo=timezone.utc)


def word() -> str:
    """A word no other test writes (so a shared row cannot meet another test's query)."""
    return "zebra" + uuid.uuid4().hex[:8]


@pytest.fixture
def shared_workflow(sql_conn: psycopg.Connection) -> Iterator[str]:
    """A workflow published to every user (the shared table) by plain SQL, with no embedding."""
    w = word()
    sql_conn.execute("INSERT INTO shared_workflow_memory (name, description) VALUES (%s, %s)",
                     (f"{w} crossing", f"How to handle a {w} crossing"))
    yield w
    sql_conn.execute("DELETE FROM shared_workflow_memory WHERE name = %s", (f"{w} crossing",))


def test_keyword_hit_without_embedding_is_a_hit_not_a_crash(mm: MemoryManager, sql_conn: psycopg.Connection,
                                                           user: str, thread: str, shared_workflow: str) -> None:
    w = shared_workflow
    sql_conn.execute("INSERT INTO knowledge_memory (user_id, content) VALUES (%s, %s)", (user, f"{w} facts"))
    mm.write_knowledge("Zebras have stripes.", user_id=user, source="zoo.md")

    hits = mm.read_knowledge(f"tell me about {w}", user_id=user, k=5)
    plain = next(h for h in hits if h.item.content == f"{w} facts")
    assert plain.signals["vector"] == 0.0 and plain.signals["keyword"] > 0  # no vector: found by its keyword
    assert plain.matched_by == ("keyword",)
    assert all(isinstance(h.score, float) for h in hits)

    # The shared row meets every user who searches its word (a keyword-only hit ranks
    # after the vector ones in the fusion, so ask for enough rows to reach it).
    for someone in (user, f"other-{uuid.uuid4().hex[:8]}"):
        found = mm.read_workflows(f"{w} crossing", user_id=someone, k=200)
        shared = [h for h in found if h.item.name == f"{w} crossing"]
        assert shared and shared[0].signals == {"vector": 0.0, "keyword": shared[0].signals["keyword"]}
        # no vector: the score is the keyword signal's share alone
        assert shared[0].signals["keyword"] > 0
        assert shared[0].score == pytest.approx(mm.settings.keyword_weight * shared[0].signals["keyword"])
        assert all(isinstance(h.score, float) for h in found)

    context = mm.build_context(f"what about the {w}?", user_id=user, thread_id=thread)  # reads the shared workflows too
    assert f"{w} facts" in context

    model = FakeMessagesListChatModel(responses=[AIMessage("Stripes.")])
    result = MemoryAgent(mm, None, model, extract_with_model=False).run(f"what about the {w}?", user_id=user,
                                                                        thread_id=thread)
    assert result.answer == "Stripes."


def test_overlong_query_is_invalid_input_and_a_long_one_is_answered(mm: MemoryManager, user: str,
                                                                   thread: str) -> None:
    mm.write_knowledge("Alpha bravo charlie.", user_id=user)
    mm.write_conversational_memory("user", "Alpha bravo charlie.", user_id=user, thread_id=thread)
    huge = "word " * 40_000  # 200,000 characters: within max_content_chars, far past max_query_chars
    for call in (lambda q: mm.read_knowledge(q, user_id=user), lambda q: mm.search_memory(q, user_id=user),
                 lambda q: mm.read_workflows(q, user_id=user), lambda q: mm.recall(q, user_id=user)):
        with pytest.raises(InvalidInputError, match="search query is 200,000 characters; at most"):
            call(huge)
    # At the limit, thousands of distinct words: a clean answer (the words are bounded).
    long = " ".join(f"w{i}x" for i in range(4000))[: mm.settings.max_query_chars]
    assert isinstance(mm.read_knowledge(long, user_id=user), list)
    assert isinstance(mm.search_memory(long, user_id=user), list)


def test_only_the_first_words_of_a_query_are_matched(mm: MemoryManager, user: str, thread: str) -> None:
    w = word()
    target = mm.write_conversational_memory("user", f"the {w} came back", user_id=user, thread_id=thread).id
    filler = " ".join(f"filler{i}x" for i in range(mm.settings.search_max_terms))
    first = mm.search_memory(f"{w} {filler}", user_id=user, k=5, method="keyword")
    assert [h.item.message_id for h in first] == [target]
    # the same words with the rare one past the bound: it is not matched any more
    assert mm.search_memory(f"{filler} {w}", user_id=user, k=5, method="keyword") == []


TURNS = [
    "My sister Ingrid moved to Tromso last spring.",
    "I'm training for the Bergen marathon in June.",
    "Our cat Miso hates the vacuum cleaner.",
    "The export job EXP-2291 failed with disk quota exceeded.",
    "I switched the team to PostgreSQL 18 last week.",
    "Ingrid says the northern lights in Tromso are unreal.",
    "My marathon pace goal is 5:10 per kilometre.",
    "Miso knocked the coffee off the table again.",
    "We raised the disk quota for EXP jobs to 2 TB.",
    "Coffee with Ingrid on Sunday, she is visiting.",
]


def write_history(mm: MemoryManager, user: str, n_threads: int = 3) -> list[int]:
    ids: list[int] = []
    for t in range(n_threads):
        msgs = [dict(role="user" if i % 2 == 0 else "assistant", content=f"{text} (round {t})",
                     created_at=NOW - timedelta(days=30 - t, minutes=-i)) for i, text in enumerate(TURNS)]
        ids += [m.id for m in mm.write_messages(msgs, user_id=user, thread_id=f"t{t}")]
    return ids


QUERIES = ["where does Ingrid live", "marathon pace", "why did EXP-2291 fail", "what did the cat do",
           "coffee on sunday", "postgresql version"]


def test_indexed_shape_agrees_with_the_exact_one_below_its_bounds(mm: MemoryManager, user: str) -> None:
    write_history(mm, user)
    for q in QUERIES:
        # keyword: the same matching rows with the same scores (the three rounds of a turn
        # tie, so compare every matching row, not an order among ties)
        exact = mm.search_memory(q, user_id=user, k=30, scope="messages", method="keyword", shape="exact")
        indexed = mm.search_memory(q, user_id=user, k=30, scope="messages", method="keyword", shape="indexed")
        assert exact, q
        assert {h.item.id: pytest.approx(h.signals["keyword"]) for h in exact} == {h.item.id: h.signals["keyword"] for h in indexed}, q
        # with the vector half HNSW is approximate (the same turn of the three rounds is a
        # near-tie): the best hit is the exact one, and every hit is among the exact top 16
        for method in ("hybrid", "vector"):
            exact = mm.search_memory(q, user_id=user, k=16, scope="messages", method=method, shape="exact")
            indexed = mm.search_memory(q, user_id=user, k=8, scope="messages", method=method, shape="indexed")
            assert indexed[0].score == pytest.approx(exact[0].score), (q, method)
            assert {h.item.id for h in indexed} <= {h.item.id for h in exact}, (q, method)
        # with a thread filter the keyword statistics stay the user's, the hits the thread's
        exact = mm.search_memory(q, user_id=user, k=30, scope="messages", thread_id="t1", method="keyword",
                                 shape="exact")
        indexed = mm.search_memory(q, user_id=user, k=30, scope="messages", thread_id="t1", method="keyword",
                                   shape="indexed")
        assert {h.item.id for h in indexed} == {h.item.id for h in exact} and all(h.item.thread_id == "t1" for h in indexed)
        found = mm.search_memory(q, user_id=user, k=5, scope="messages", thread_id="t1", shape="indexed")
        assert found and all(h.item.thread_id == "t1" for h in found)


def test_large_history_switches_to_the_indexed_shape(small_bounds: MemoryManager, user: str) -> None:
    mm = small_bounds
    ids = write_history(mm, user)  # 30 messages > 12: the indexed shape
    for q in QUERIES:
        auto = mm.search_memory(q, user_id=user, k=5, scope="messages")
        assert [h.item.id for h in auto] == [h.item.id for h in mm.search_memory(q, user_id=user, k=5, scope="messages",
                                                                       shape="indexed")]
    # "Ingrid" is in 9 rows, more than the cap of 4; "tromso" in 6: the rare word still wins,
    # and a row with both outranks a row with only the common one.
    hits = mm.search_memory("Ingrid Tromso", user_id=user, k=10, scope="messages", method="keyword")
    both = {ids[i] for i in range(len(ids)) if "Tromso" in TURNS[i % len(TURNS)]}
    assert {hits[0].item.message_id, hits[1].item.message_id} <= both
    assert hits[0].signals["keyword"] > hits[-1].signals["keyword"]
    # A user with few rows keeps the exact shape under the same settings.
    other = f"small-{uuid.uuid4().hex[:8]}"
    mm.write_messages([dict(role="user", content=t) for t in TURNS], user_id=other, thread_id="t")
    assert [h.item.id for h in mm.search_memory("marathon pace", user_id=other, k=5)] == \
        [h.item.id for h in mm.search_memory("marathon pace", user_id=other, k=5, shape="exact")]


def test_exact_candidates_know_the_turns_around_them_in_their_thread(mm: MemoryManager, user: str) -> None:
    """The exact shape finds a candidate's neighbours in its own thread, in time order, with a
    thread's rows interleaved in time and id with another's; under a time filter a neighbour
    outside it is never a candidate (so it lends no score)."""
    from memory.store.ops import run

    ids = write_history(mm, user, n_threads=2)
    late = NOW - timedelta(days=28)  # t0 again, after t1's turns
    mine = [m.id for m in mm.write_messages([dict(role="user", content=f"{t} (late)", created_at=late)
                                             for t in TURNS[:2]], user_id=user, thread_id="t0")]
    order = {"t0": ids[:len(TURNS)] + mine, "t1": ids[len(TURNS):]}
    around = {i: (ts[n - 1] if n else None, ts[n + 1] if n + 1 < len(ts) else None)
              for ts in order.values() for n, i in enumerate(ts)}
    found = run(mm.db, mm.memory_search._found_many_op(QUERIES, user_id=user, k=30, scope="messages",
                                                       shape="exact"))
    seen = [c for cands in found for c in cands]
    assert len({c.item.message_id for c in seen}) > len(TURNS)
    for c in seen:
        assert (c.prev_id, c.next_id) == around[c.item.message_id], c.item.content
    [filtered] = run(mm.db, mm.memory_search._found_many_op(["marathon pace"], user_id=user, k=5, scope="messages",
                                                            since=late, shape="exact"))
    assert sorted(c.item.message_id for c in filtered) == mine
    assert around[mine[0]][0] not in {c.item.message_id for c in filtered}
