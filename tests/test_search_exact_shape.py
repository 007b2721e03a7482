"""search_memory's exact shape and its ranking, as written out for speed.

The ranking computes the linear fusion inline (not through ``fusion.fuse``) and the exact
statement finds a message's neighbours with ``lag``/``lead`` over its thread; these tests
pin that the result is still the documented formula, to the bit, and that the neighbours
and candidates are those of the whole thread and of the user's live rows. Hash embedder
(fixture ``mm``).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import psycopg

from memory import MemoryManager, Settings
from memory.retrieval.embeddings import HashEmbedder
from memory.retrieval.fusion import fuse
from memory.store.ops import run
from memory.tables.base import SizeHints
from memory.tables import search as search_mod
from memory.tables.search import DEFAULT_WEIGHTS

from fix_search_shapes import one_conn  # noqa: F401  (a fixture)
from fix_search_shapes import EXACT_NEAR, EXACT_ONLY, INDEXED_FIRST, KEYWORD_FIRST, statement_runs

NOW = datetime(2026, 11, 20, 12, 0, tzinfo=timezone.utc)

TURNS = [
    ("Ann", "Guess what I found at the flea market last weekend!"),
    ("Bob", "No idea, tell me."),
    ("Ann", "An Olympus film camera, it still works."),
    ("Bob", "Nice! Does the film camera need a battery?"),
    ("Ann", "Only for the light meter."),
    ("Bob", "My kids love the beach, we went camping by the sea."),
    ("Ann", "We went swimming with the kids in the lake."),
    ("Bob", "Camping with kids is the best."),
    ("Ann", "The kids built a sand castle at the beach."),
    ("Bob", "Did you take photos of the castle with the Olympus?"),
    ("Ann", "Yes, a whole roll of film."),
    ("Bob", "Send me the photos of the beach."),
]


def write(mm: MemoryManager, user: str, thread: str, start: datetime) -> list[int]:
    msgs = [dict(role="user", name=name, content=text, created_at=start + timedelta(minutes=i))
            for i, (name, text) in enumerate(TURNS)]
    return [m.id for m in mm.write_messages(user_id=user, thread_id=thread, messages=msgs)]


def test_a_hits_score_is_the_one_fusion_plus_its_shares_to_the_bit(mm: MemoryManager, user: str,
                                                                     thread: str) -> None:
    write(mm, user, thread, NOW - timedelta(days=10))
    write(mm, user, thread + "-b", NOW - timedelta(days=2))
    w = DEFAULT_WEIGHTS
    weights = {"vector": 1.0, "keyword": w.keyword_weight, "speaker": w.speaker_weight, "time": w.time_boost}
    seen_feedback = seen_neighbour = False
    for query in ("What did Ann do with the kids at the beach last week?", "Olympus film camera photos"):
        hits = mm.search_memory(query, user_id=user, k=50, scope="messages", now=NOW, shape="exact")
        assert len(hits) == 2 * len(TURNS)
        for h in hits:
            s = h.signals
            own = fuse({"vector": s["vector"], "keyword": s["keyword"], "speaker": s["speaker"],
                        "time": s.get("time", 0.0)}, weights)
            assert h.score == own + (s["neighbour"] + s["thread"]) + w.feedback_weight * s["feedback"]
            seen_feedback |= s["feedback"] > 0
            seen_neighbour |= s["neighbour"] > 0
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert seen_feedback and seen_neighbour  # every part of the formula was exercised


def test_neighbours_are_the_threads_adjacent_turns_and_candidates_only_live_rows(
        mm: MemoryManager, user: str, thread: str) -> None:
    """Each candidate carries the turns just before and after it in its own thread (in time, then
    id order), whichever rows the filters keep; an expired row or one outside the time range
    is a neighbour but never a candidate."""
    start = NOW - timedelta(days=5)
    ids = write(mm, user, thread, start)
    other = write(mm, user, thread + "-b", start + timedelta(seconds=30))  # interleaved in time
    with mm.db.connection() as conn:
        conn.execute("UPDATE conversational_memory SET expires_at = now() - interval '1 hour'"
                     " WHERE user_id = %s AND id = %s", (user, ids[4]))
    order = {i: (t, n) for t in (ids, other) for n, i in enumerate(t)}
    cases = [dict(), dict(thread_id=thread), dict(since=start + timedelta(minutes=3)),
             dict(until=start + timedelta(minutes=8))]
    for filters in cases:
        [found] = run(mm.db, mm.memory_search._found_many_op(
            ["kids beach camera film photos"], user_id=user, k=50, scope="messages", shape="exact", now=NOW,
            **filters))
        keys = {int(c.item.id) for c in found}
        live = {i for i in ids + other if i != ids[4]
                and ("thread_id" not in filters or i in ids)
                and ("since" not in filters or i not in (ids[:3] + other[:3]))
                and ("until" not in filters or i in (ids[:8] + other[:8]))}
        assert keys == live, filters
        for c in found:
            turns, n = order[int(c.item.id)]
            assert c.prev_id == (turns[n - 1] if n > 0 else None), filters
            assert c.next_id == (turns[n + 1] if n + 1 < len(turns) else None), filters


def test_a_thread_search_counts_the_words_of_that_thread_only(mm: MemoryManager, user: str, thread: str) -> None:
    """With a thread, the keyword statistics (how many rows, how many hold each word) are the
    thread's: the user's other threads change no score, as if the thread were all there is."""
    start = NOW - timedelta(days=5)
    write(mm, user, thread, start)
    write(mm, user, thread + "-b", start + timedelta(hours=1))  # the same words again, in another thread
    alone = f"{user}-alone"
    write(mm, alone, thread, start)
    query = "kids beach camera film photos"
    [mine] = run(mm.db, mm.memory_search._found_many_op([query], user_id=user, k=50, scope="messages",
                                                        shape="exact", now=NOW, thread_id=thread))
    [theirs] = run(mm.db, mm.memory_search._found_many_op([query], user_id=alone, k=50, scope="messages",
                                                          shape="exact", now=NOW, thread_id=thread))
    assert any(c.keyword > 0 for c in mine)
    assert [(c.item.content, c.keyword) for c in mine] == [(c.item.content, c.keyword) for c in theirs]


def found(hits: list) -> list[tuple[str, float, tuple[tuple[str, float], ...]]]:
    return [(h.item.id, h.score, tuple(sorted(h.signals.items()))) for h in hits]


QUERIES = ["kids at the beach", "Olympus film camera", "what did Ann find at the flea market last weekend"]


def test_a_small_history_is_searched_by_the_exact_only_statement_with_the_same_hits(one_conn: MemoryManager,
                                                                                    user: str, thread: str) -> None:
    mm = one_conn
    msgs = [dict(role="user", name=name, content=text, created_at=NOW - timedelta(days=3, minutes=-i))
            for i, (name, text) in enumerate(TURNS[:10])]
    mm.write_messages(msgs, user_id=user, thread_id=thread)
    # unseen user, the query not embedded yet: the exact shape in two statements, the keyword half
    # sent ahead of the embedding
    first = found(mm.search_memory(QUERIES[0], user_id=user, k=8, now=NOW))
    assert [statement_runs(mm, s) for s in (KEYWORD_FIRST, EXACT_NEAR, EXACT_ONLY)] == [1, 1, 0]
    # the first query's vector is cached now: nothing to overlap, the exact-only statement alone
    again = {q: found(mm.search_memory(q, user_id=user, k=8, now=NOW)) for q in QUERIES}
    assert [statement_runs(mm, s) for s in (KEYWORD_FIRST, EXACT_NEAR, EXACT_ONLY)] == [len(QUERIES)] * 2 + [1]
    assert again[QUERIES[0]] == first and all(again.values())
    assert again == {q: found(mm.search_memory(q, user_id=user, k=8, now=NOW, shape="exact")) for q in QUERIES}


def test_the_statement_after_the_embedding_carries_summaries_and_facts_only_for_a_user_with_some(
        one_conn: MemoryManager, user: str, thread: str) -> None:
    """The exact shape's keyword statement says whether the user has summaries or facts; the
    statement after the embedding plans and runs their halves only then. The hits are the one
    statement's either way."""
    mm = one_conn
    msgs = [dict(role="user", name=name, content=text, created_at=NOW - timedelta(days=3, minutes=-i))
            for i, (name, text) in enumerate(TURNS[:10])]
    mm.write_messages(msgs, user_id=user, thread_id=thread)
    lean = {q: found(mm.search_memory(q, user_id=user, k=8, now=NOW)) for q in QUERIES}
    assert statement_runs(mm, EXACT_NEAR) == len(QUERIES)
    assert statement_runs(mm, EXACT_NEAR, "s_total AS (") == statement_runs(mm, EXACT_NEAR, "f_total AS (") == 0
    assert lean == {q: found(mm.search_memory(q, user_id=user, k=8, now=NOW, shape="exact")) for q in QUERIES}
    summary = mm.write_summary("Ann's Olympus film camera from the flea market",
                               "Ann found a working Olympus film camera at a flea market.", user_id=user,
                               thread_id=thread)
    mm.remember("stable_fact", "Ann shoots film with an Olympus camera", user_id=user)
    full = {q: mm.search_memory(q + " again", user_id=user, k=8, now=NOW) for q in QUERIES}  # not embedded yet
    # the first of these sent the statement after the embedding as the user was at the last search (behind
    # the keyword statement, before its head row said otherwise), and the one statement searched again;
    # the next ones carried both halves
    assert statement_runs(mm, EXACT_NEAR, "s_total AS (", "f_total AS (") == len(QUERIES) - 1
    assert {h.item.kind for q in QUERIES for h in full[q]} == {"message", "summary", "fact"}
    assert str(summary.summary_id) in {h.item.id for h in full[QUERIES[1]]}
    assert {q: found(full[q]) for q in QUERIES} == {
        q: found(mm.search_memory(q + " again", user_id=user, k=8, now=NOW, shape="exact")) for q in QUERIES}


def test_an_unseen_large_history_is_searched_by_the_indexed_shape(one_conn: MemoryManager, user: str,
                                                                  thread: str) -> None:
    mm = one_conn
    write(mm, user, thread, NOW - timedelta(days=9))
    write(mm, user, thread + "-b", NOW - timedelta(days=2))  # 24 messages, never searched: above the switch point
    hits = mm.search_memory(QUERIES[0], user_id=user, k=8, now=NOW)
    # loading the user's speaker names read the message count too: straight to the indexed shape
    assert [statement_runs(mm, s) for s in (KEYWORD_FIRST, EXACT_NEAR, EXACT_ONLY, INDEXED_FIRST)] == [0, 0, 0, 1]
    assert hits and found(hits) == found(mm.search_memory(QUERIES[0], user_id=user, k=8, now=NOW, shape="indexed"))
    # with the names cached and the count not (its hint dropped), the exact shape's keyword half goes
    # first (the rest right behind it, in its round trip), says the user is large, and the switching
    # statement searches
    mm.memory_search.__dict__["_sizes"] = SizeHints()
    hits = mm.search_memory(QUERIES[1], user_id=user, k=8, now=NOW)
    assert [statement_runs(mm, s) for s in (KEYWORD_FIRST, EXACT_NEAR, EXACT_ONLY, INDEXED_FIRST)] == [1, 1, 0, 1]
    assert hits and found(hits) == found(mm.search_memory(QUERIES[1], user_id=user, k=8, now=NOW, shape="indexed"))
    # that statement after the model went out before the keyword statement's count came back, and
    # read none of the large history's rows (like the keyword statement, it works only at or under
    # the switch point): no sort of a large user's rows for an answer that is dropped
    text, names = search_mod._search_query(("messages",), "near")
    args = dict(q=QUERIES[1], max_terms=32, uid=user, speakers=[], qvec=HashEmbedder().embed([QUERIES[1]])[0],
                tid=None, until=None, since=None, pool=50, slot=0)
    with mm.db.connection(user) as conn:
        for switch, expected in ((12, 0), (24, 24)):  # 24 messages: above the switch point, then at it
            rows = psycopg.RawCursor(conn).execute(text, [dict(args, switch=switch)[n] for n in names]).fetchall()
            assert sum(1 for r in rows if r[0] == "message") == expected, switch


def test_a_history_grown_above_the_switch_since_the_last_search_is_searched_by_the_indexed_shape(
        one_conn: MemoryManager, user: str, thread: str) -> None:
    """Grown by unnamed turns (the user's cached speaker names still hold), the count the last search
    noted is stale: the exact shape's keyword half says the user is large now. Grown by a named turn
    (a new speaker: the names are read again, and the count with them), the search knows it."""
    mm = one_conn
    write(mm, user, thread, NOW - timedelta(days=9))  # 12 messages: at the switch point, exact
    assert mm.search_memory("warm-up", user_id=user, now=NOW)
    mm.write_messages([dict(role="user", content=text, created_at=NOW - timedelta(days=2, minutes=-i))
                       for i, (_, text) in enumerate(TURNS)], user_id=user, thread_id=thread + "-b")  # 24 now
    for q in QUERIES:
        hits = mm.search_memory(q, user_id=user, k=8, now=NOW)
        assert hits and found(hits) == found(mm.search_memory(q, user_id=user, k=8, now=NOW, shape="indexed")), q
    # after the warm-up's, the first search's keyword half said the user is large now (the rest, sent right
    # behind it, was not used) and the switching statement searched; the next searches knew it (the
    # indexed-only statement)
    assert [statement_runs(mm, s) for s in (KEYWORD_FIRST, EXACT_NEAR, EXACT_ONLY)] == [2, 2, 0]
    other = f"{user}-b"
    write(mm, other, thread, NOW - timedelta(days=9))
    assert mm.search_memory("warm-up again", user_id=other, now=NOW)  # not embedded yet: in two statements
    mm.write_messages([dict(role="user", name="Cleo", content=text, created_at=NOW - timedelta(days=2, minutes=-i))
                       for i, (_, text) in enumerate(TURNS)], user_id=other, thread_id=thread + "-b")
    hits = mm.search_memory(QUERIES[0], user_id=other, k=8, now=NOW)
    assert hits and found(hits) == found(mm.search_memory(QUERIES[0], user_id=other, k=8, now=NOW, shape="indexed"))
    assert [statement_runs(mm, s) for s in (KEYWORD_FIRST, EXACT_NEAR, EXACT_ONLY)] == [3, 3, 0]


def test_the_exact_shape_in_two_statements_finds_what_the_one_statement_finds_under_every_filter(
        one_conn: MemoryManager, user: str, thread: str) -> None:
    """Two threads interleaved in time (11 messages: under the switch point), one row expired, an
    assistant turn without content (a keyword candidate only through the turn before it), then a
    message written without its embedding: for each filter, a query not embedded yet (the keyword
    statement ahead of the model, the nearest rows after it) gets the one statement's hits, scores
    and signals, neighbour shares included."""
    mm = one_conn
    start = NOW - timedelta(days=5)
    msgs = [dict(role="user", name=name, content=text, created_at=start + timedelta(minutes=i))
            for i, (name, text) in enumerate(TURNS[:6])]
    msgs.insert(3, dict(role="assistant", content="", created_at=start + timedelta(minutes=2, seconds=30)))
    ids = [m.id for m in mm.write_messages(msgs, user_id=user, thread_id=thread)]
    mm.write_messages([dict(role="user", name=name, content=text, created_at=start + timedelta(minutes=i, seconds=20))
                       for i, (name, text) in enumerate(TURNS[6:10])], user_id=user, thread_id=thread + "-b")
    with mm.db.connection() as conn:
        conn.execute("UPDATE conversational_memory SET expires_at = now() - interval '1 hour'"
                     " WHERE user_id = %s AND id = %s", (user, ids[5]))
    cases = [dict(), dict(thread_id=thread), dict(since=start + timedelta(minutes=2)),
             dict(until=start + timedelta(minutes=4))]
    asked = 0
    for n, filters in enumerate(cases):
        for q in ("the Olympus film camera still works", "kids camping at the beach"):
            two = found(mm.search_memory(f"{q} ({n})", user_id=user, k=20, now=NOW, **filters))
            asked += 1
            assert statement_runs(mm, EXACT_NEAR) == asked
            one = found(mm.search_memory(f"{q} ({n})", user_id=user, k=20, now=NOW, shape="exact", **filters))
            assert two == one, (q, filters)
            assert any(s["neighbour"] > 0 for _, _, sig in two for s in [dict(sig)]), (q, filters)
    assert str(ids[3]) in {h.item.id for h in mm.search_memory("film camera", user_id=user, k=20, now=NOW)}
    assert str(ids[5]) not in {h.item.id for h in mm.search_memory("light meter", user_id=user, k=20, now=NOW)}
    late = mm.write_messages([dict(role="user", content="Ann sold the Olympus camera to a collector")],
                             user_id=user, thread_id=thread, embed=False)[0]
    hits = mm.search_memory("who bought the Olympus camera", user_id=user, k=20, now=NOW)
    assert str(late.id) in {h.item.id for h in hits}  # embedded, then searched again
    assert found(hits) == found(mm.search_memory("who bought the Olympus camera", user_id=user, k=20, now=NOW,
                                                 shape="exact"))


def test_each_query_of_one_call_reads_its_own_keyword_statements_hand_over(settings: Settings, user: str,
                                                                            thread: str) -> None:
    """Several queries of one call, none embedded yet: every keyword statement goes out before the
    model, and each statement after it reads the candidate keys its own query's keyword statement
    handed over (one setting per query), so a keyword row beyond the 50 nearest gets its own
    distance. 72 messages: more than the nearest rows' pool, so some keyword rows are not among them.
    The hits are those of one search per query, in one statement."""
    mm = MemoryManager.open(settings.with_(pool_min_size=1, pool_max_size=1), embedder=HashEmbedder())
    try:
        for day in range(6):
            write(mm, user, f"{thread}-{day}", NOW - timedelta(days=20 - day))
        queries = ["Olympus film camera battery", "kids camping at the beach", "photos of the sand castle",
                   "flea market last weekend"]
        many = mm.search_memory_many(queries, user_id=user, k=8, now=NOW)
        assert [statement_runs(mm, s) for s in (KEYWORD_FIRST, EXACT_NEAR)] == [len(queries)] * 2
        one = [mm.search_memory(q, user_id=user, k=8, now=NOW, shape="exact") for q in queries]
        assert all(many) and [found(h) for h in many] == [found(h) for h in one]
        assert len({tuple(found(h)) for h in many}) == len(queries)  # four different lists
    finally:
        mm.close()
