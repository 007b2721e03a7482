"""search_memory: long-memory recall over messages, summaries and facts.

Fast tests use the hash embedder (fixture ``mm``); the consolidation and paraphrase
test uses the real MiniLM model (``real_mm``).
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

import psycopg
import pytest
from pgvector.psycopg import register_vector

import dataclasses

from memory import Hit, InvalidInputError, MemoryHit, MemoryItem, MemoryManager
from memory.tables.search import SearchWeights
from memory.agent.search_tool import DEFAULT_TOOL_MIN_SCORE, search_tools
from memory.retrieval.time_phrases import parse_time_range

NOW = datetime(2026, 11, 20, 12, 0, tzinfo=timezone.utc)


def chat(mm: MemoryManager, user: str, thread: str, turns: list[tuple[str, str]], start: datetime,
         *, embed: bool = True) -> list[int]:
    """Write alternating user/assistant turns one minute apart; return the message ids."""
    msgs = [dict(role=role, content=text, created_at=start + timedelta(minutes=i))
            for i, (role, text) in enumerate(turns)]
    return [m.id for m in mm.write_messages(msgs, user_id=user, thread_id=thread, embed=embed)]


FILLER = [
    ("user", "Can you help me format a table in markdown?"),
    ("assistant", "Sure, use pipes between columns and a dashed line under the header."),
    ("user", "What is a good stretch after running?"),
    ("assistant", "A standing quad stretch and a calf stretch against a wall work well."),
]


def test_neighbour_window_finds_short_turn(mm: MemoryManager, user: str, thread: str) -> None:
    ids = chat(mm, user, thread, FILLER + [
        ("assistant", "Do you still have the Olympus OM-1 film camera your grandfather gave you?"),
        ("user", "Yes, I still use it every day."),
    ] + FILLER, NOW - timedelta(days=30))
    answer = ids[len(FILLER) + 1]
    hits = mm.search_memory("olympus camera from grandfather", user_id=user, k=5, scope="messages", method="keyword")
    assert answer in [h.item.message_id for h in hits]
    # The window only helps keywords: the hit is the message itself, not its neighbour's text.
    hit = next(h for h in hits if h.item.message_id == answer)
    assert hit.item.content == "Yes, I still use it every day."
    assert hit.signals["keyword"] < next(h for h in hits if h.item.message_id == answer - 1).signals["keyword"]


def test_other_users_messages_never_appear(mm: MemoryManager, user: str, thread: str) -> None:
    other = f"other-{uuid.uuid4().hex[:8]}"
    chat(mm, other, thread, [("user", "My locker code at the gym is 4471.")], NOW - timedelta(days=3))
    mine = chat(mm, user, thread, [("user", "My bike lock code is 9182.")] + FILLER, NOW - timedelta(days=3))
    for method in ("hybrid", "vector", "keyword"):
        hits = mm.search_memory("what is my locker code at the gym 4471", user_id=user, k=20, method=method)
        assert hits, method
        assert all(h.item.kind != "message" or h.item.message_id in mine for h in hits), method
        assert not any("4471" in h.item.content for h in hits), method


def test_time_filters_and_boost(mm: MemoryManager, user: str, thread: str) -> None:
    may = chat(mm, user, thread, [("user", "I bought a new tent for camping.")], datetime(2026, 5, 14, tzinfo=timezone.utc))
    july = chat(mm, user, thread, [("user", "I bought a new tent for camping.")],
                datetime(2026, 7, 2, tzinfo=timezone.utc))
    q = "what did I buy for camping last May?"
    filtered = mm.search_memory(q, user_id=user, k=5, scope="messages", now=NOW, time_mode="filter")
    assert [h.item.message_id for h in filtered] == may
    boosted = mm.search_memory(q, user_id=user, k=5, scope="messages", now=NOW)
    assert [h.item.message_id for h in boosted] == may + july
    assert boosted[0].signals["time"] == 1.0 and boosted[1].signals["time"] == 0.0
    # Explicit bounds filter whatever the query says; a thread filter too.
    explicit = mm.search_memory("camping tent", user_id=user, k=5, since=datetime(2026, 6, 1, tzinfo=timezone.utc))
    assert [h.item.message_id for h in explicit if h.item.kind == "message"] == july
    assert mm.search_memory("camping tent", user_id=user, k=5, thread_id="no-such-thread") == []
    # Without a time expression, no time effect: the same text scores the same.
    plain = mm.search_memory("what did I buy for camping?", user_id=user, k=5, scope="messages", now=NOW)
    assert plain[0].score == pytest.approx(plain[1].score)
    assert all("time" not in h.signals for h in plain)


FACTS = [("user", "My sister Hannah moved to Lisbon for work."),
         ("user", "The dentist appointment is on Friday at nine."),
         ("user", "Our cat Miso only eats salmon pate.")]
ANSWERABLE = {"which city did Hannah move to": 0, "when is my dentist appointment": 1, "what does Miso eat": 2}
UNANSWERABLE = ["what is the registration number of my boat", "which airline did my uncle fly with",
                "how tall is the oak tree in the garden"]


def test_answerable_questions_outscore_unanswerable_ones(mm: MemoryManager, user: str, thread: str) -> None:
    """Scores are absolute (one scale across queries), which is what makes ``min_score`` usable."""
    ids = chat(mm, user, thread, FILLER + FACTS + FILLER, NOW - timedelta(days=10))
    evidence = ids[len(FILLER):len(FILLER) + len(FACTS)]
    answered = {q: mm.search_memory(q, user_id=user, k=3) for q in ANSWERABLE}
    unanswered = {q: mm.search_memory(q, user_id=user, k=3) for q in UNANSWERABLE}
    for q, i in ANSWERABLE.items():
        assert answered[q][0].item.message_id == evidence[i], q
    assert all(unanswered.values()), "without a threshold the best candidates are returned"
    weakest_answer = min(hits[0].score for hits in answered.values())
    assert all(hits[0].score < weakest_answer for hits in unanswered.values()), (answered, unanswered)
    # min_score keeps exactly the hits scoring at least that much, in the same order.
    for q in list(ANSWERABLE) + UNANSWERABLE:
        full = mm.search_memory(q, user_id=user, k=10)
        for t in (0.1, 0.3, 0.5):
            assert mm.search_memory(q, user_id=user, k=10, min_score=t) == [h for h in full if h.score >= t], (q, t)


@pytest.mark.slow
def test_documented_tool_threshold_keeps_the_evidence_real_model(real_mm: MemoryManager, user: str,
                                                                  thread: str) -> None:
    """At ``DEFAULT_TOOL_MIN_SCORE`` (calibrated by bench/recall.py) paraphrased questions keep their evidence."""
    chat(real_mm, user, thread, FILLER + FACTS + FILLER, NOW - timedelta(days=10))
    search_memory = search_tools(real_mm, user_id=user)[0]
    paraphrases = {"Where does my sibling live now?": "Lisbon", "When do I see the dentist?": "Friday at nine",
                   "What food does my pet like?": "salmon pate"}
    for q, needle in paraphrases.items():
        hits = real_mm.search_memory(q, user_id=user, k=5, min_score=DEFAULT_TOOL_MIN_SCORE)
        assert hits and needle in hits[0].item.content, (q, hits)
        assert needle in search_memory(q), q
    weakest_answer = min(real_mm.search_memory(q, user_id=user, k=1)[0].score for q in paraphrases)
    assert all(real_mm.search_memory(q, user_id=user, k=1)[0].score < weakest_answer for q in UNANSWERABLE)


def test_hits_wrap_the_found_row(mm: MemoryManager, user: str, thread: str) -> None:
    """search_memory returns Hit[MemoryItem] like every other search: the row carries no score."""
    ids = chat(mm, user, thread, FILLER + [("user", "The wifi password at the cabin is pinecone77.")],
               NOW - timedelta(days=1))
    mm.remember("constraint", "The cabin wifi resets at midnight", user_id=user)
    hits = mm.search_memory("cabin wifi password", user_id=user, k=10)
    assert MemoryHit == Hit[MemoryItem]
    assert hits and all(isinstance(h, Hit) and isinstance(h.item, MemoryItem) for h in hits)
    assert {h.item.kind for h in hits} == {"message", "fact"}
    assert {f.name for f in dataclasses.fields(MemoryItem)}.isdisjoint(
        {"score", "signals", "vector_score", "keyword_score", "in_time_range", "prev_id", "next_id"})
    top = hits[0]
    assert top.item.message_id == ids[-1] and top.item.thread_id == thread
    assert top.item.content == "The wifi password at the cabin is pinecone77."
    assert {"vector", "keyword", "speaker", "neighbour", "thread"} <= set(top.signals)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    many = mm.search_memory_many(["cabin wifi password"], user_id=user, k=10)
    assert many == [hits]


def test_deferred_embeddings_are_filled_before_search(mm: MemoryManager, user: str, thread: str) -> None:
    ids = chat(mm, user, thread, FILLER + [("user", "The wifi password at the cabin is pinecone77.")],
               NOW - timedelta(days=1), embed=False)
    hits = mm.search_memory("cabin wifi password", user_id=user, k=3, method="vector")
    assert hits[0].item.message_id == ids[-1]
    assert hits[0].signals["vector"] > 0
    assert mm.embed_pending_messages(user_id=user) == 0


def test_window_follows_inserts_out_of_order_and_deletes(mm: MemoryManager, user: str, thread: str,
                                                         sql_conn: psycopg.Connection) -> None:
    """The window is the message and the two before it, kept right by the triggers."""
    start = NOW - timedelta(days=2)
    a, c, d = (chat(mm, user, thread, [("user", word)], start + timedelta(minutes=m))[0]
               for word, m in (("alpha", 0), ("gamma", 2), ("delta", 3)))
    # A message backdated into the middle of the thread enters the windows after it.
    b = chat(mm, user, thread, [("user", "beta")], start + timedelta(minutes=1))[0]

    def window(mid: int) -> set[str]:
        row = sql_conn.execute("SELECT tsvector_to_array(context_tsv) FROM conversational_context"
                               " WHERE message_id = %s", (mid,)).fetchone()
        return set(row[0]) if row else set()

    assert window(a) == {"alpha"} and window(b) == {"alpha", "beta"}
    assert window(c) == {"alpha", "beta", "gamma"} and window(d) == {"beta", "gamma", "delta"}
    sql_conn.execute("DELETE FROM conversational_memory WHERE id = %s", (b,))
    assert window(b) == set() and window(c) == {"alpha", "gamma"} and window(d) == {"alpha", "gamma", "delta"}
    sql_conn.execute("UPDATE conversational_memory SET content = 'omega' WHERE id = %s", (c,))
    assert window(c) == {"alpha", "omega"} and window(d) == {"alpha", "omega", "delta"}
    # Other updates (metadata, summary_id by consolidation) leave windows alone.
    sql_conn.execute("UPDATE conversational_memory SET metadata = jsonb_build_object('x', 1) WHERE id = %s", (d,))
    assert window(d) == {"alpha", "omega", "delta"}


def test_messages_written_together_get_each_window_written_once(mm: MemoryManager, user: str, thread: str) -> None:
    """Migration 017: a refresh writes only the windows that change. Rows of one INSERT no
    longer rewrite each other's windows with the same text; a row backdated by a later
    statement still rewrites the two after it; an edit that changes no window writes none."""
    start = NOW - timedelta(days=2)
    insert = ("INSERT INTO conversational_memory (user_id, thread_id, role, content, created_at)"
              " SELECT %s, %s, 'user', w, %s + n * interval '1 minute'"
              " FROM unnest(%s::text[]) WITH ORDINALITY AS t(w, n) ORDER BY n RETURNING id")
    counts = ("SELECT n_tup_ins, n_tup_upd FROM pg_stat_xact_user_tables"
              " WHERE relid = 'conversational_context'::regclass")
    with psycopg.connect(mm.db.conninfo) as conn:
        conn.execute(psycopg.sql.SQL("SET search_path TO {}, public").format(psycopg.sql.Identifier(mm.db.schema)))
        ins0, upd0 = conn.execute(counts).fetchone()
        words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta"]
        ids = [r[0] for r in conn.execute(insert, (user, thread, start, words)).fetchall()]
        ins1, upd1 = conn.execute(counts).fetchone()
        assert (ins1 - ins0, upd1 - upd0) == (6, 0)
        windows = dict(conn.execute("SELECT message_id, tsvector_to_array(context_tsv) FROM conversational_context"
                                    " WHERE user_id = %s", (user,)).fetchall())
        assert [set(windows[i]) for i in ids] == [set(words[max(0, n - 2):n + 1]) for n in range(6)]
        # Backdated between the first two: the windows of the two rows after it are rewritten.
        conn.execute(insert, (user, thread, start + timedelta(seconds=30), ["omega"]))
        ins2, upd2 = conn.execute(counts).fetchone()
        assert (ins2 - ins1, upd2 - upd1) == (1, 2)
        rows = dict(conn.execute("SELECT message_id, tsvector_to_array(context_tsv) FROM conversational_context"
                                 " WHERE user_id = %s AND message_id = ANY (%s)", (user, ids[1:3])).fetchall())
        assert set(rows[ids[1]]) == {"alpha", "omega", "beta"} and set(rows[ids[2]]) == {"omega", "beta", "gamma"}
        # An edit that leaves every window as it was (a later time, same place) rewrites none.
        conn.execute("UPDATE conversational_memory SET created_at = created_at + interval '1 second'"
                     " WHERE user_id = %s AND id = %s", (user, ids[3]))
        assert conn.execute(counts).fetchone() == (ins2, upd2)


def test_one_insert_of_two_users_and_backdated_rows_gets_every_window_right(mm: MemoryManager, user: str,
                                                                             thread: str) -> None:
    """Migration 018: the insert trigger runs once per statement over all of its rows.
    One INSERT holds rows of two users, two rows backdated next to each other into one
    thread (the older rows after them are refreshed, the one they share once) and a row
    at the end; every window is then its message's word and the two before it."""
    start = NOW - timedelta(days=2)
    other = f"{user}-b"
    rows_sql = ("INSERT INTO conversational_memory (user_id, thread_id, role, content, created_at)"
                " SELECT u, t, 'user', w, %s + s * interval '1 second'"
                " FROM unnest(%s::text[], %s::text[], %s::text[], %s::int[]) AS r(u, t, w, s)")
    with psycopg.connect(mm.db.conninfo) as conn:
        conn.execute(psycopg.sql.SQL("SET search_path TO {}, public").format(psycopg.sql.Identifier(mm.db.schema)))
        first = [f"w{n}" for n in range(6)]
        conn.execute(rows_sql, (start, [user] * 6, [thread] * 6, first, [60 * n for n in range(6)]))
        mixed = [(user, thread, "back1", 30), (user, thread, "back2", 31), (user, thread, "last", 600),
                 (other, "t2", "x0", 0), (other, "t2", "x1", 1), (other, "t2", "x2", 2)]
        plan = conn.execute("EXPLAIN (ANALYZE, COSTS OFF) " + rows_sql,
                            (start, *[list(col) for col in zip(*mixed)])).fetchall()
        calls = [line for (line,) in plan if line.startswith("Trigger conversational_context_insert")]
        assert len(calls) == 1 and calls[0].endswith("calls=1")
        for uid in (user, other):
            ordered = [w for (w,) in conn.execute("SELECT content FROM conversational_memory WHERE user_id = %s"
                                                  " ORDER BY thread_id, created_at, id", (uid,)).fetchall()]
            windows = dict(conn.execute(
                "SELECT m.content, tsvector_to_array(c.context_tsv) FROM conversational_memory m"
                " JOIN conversational_context c ON c.user_id = m.user_id AND c.message_id = m.id"
                " WHERE m.user_id = %s", (uid,)).fetchall())
            assert {w: set(v) for w, v in windows.items()} == {
                w: set(ordered[max(0, n - 2):n + 1]) for n, w in enumerate(ordered)}
        assert len(windows) == 3  # the other user's: its own three rows only


def test_summaries_and_facts_in_the_same_list(mm: MemoryManager, user: str, thread: str,
                                              sql_conn: psycopg.Connection) -> None:
    ids = chat(mm, user, thread, [("user", "Our release train leaves every second Thursday.")] + FILLER,
               NOW - timedelta(days=40))
    summary = mm.write_summary("Release cadence discussion with the team",
                               "The release train leaves every second Thursday.", user_id=user, thread_id=thread, source_count=1)
    sql_conn.execute("UPDATE conversational_memory SET summary_id = %s WHERE id = %s", (summary.summary_id, ids[0]))
    fact = "The release train leaves on alternate Thursdays"
    register_vector(sql_conn)
    sql_conn.execute("INSERT INTO fact_memory (user_id, category, content, embedding)"
                     " VALUES (%s, 'stable_fact', %s, %s)", (user, fact, mm.embeddings.embed_one(fact)))
    hits = mm.search_memory("when does the release train leave", user_id=user, k=5)
    kinds = {h.item.kind for h in hits[:3]}
    assert kinds == {"message", "summary", "fact"}
    msg = next(h for h in hits if h.item.kind == "message")
    assert msg.item.summary_id == summary.summary_id and msg.item.thread_id == thread
    assert next(h for h in hits if h.item.kind == "summary").item.summary_id == summary.summary_id
    assert {h.item.kind for h in mm.search_memory("release train", user_id=user, scope=["facts"])} == {"fact"}
    # Facts have no thread: a thread filter leaves them out.
    assert "fact" not in {h.item.kind for h in mm.search_memory("release train", user_id=user, thread_id=thread)}


def test_bad_input_is_rejected(mm: MemoryManager, user: str) -> None:
    with pytest.raises(InvalidInputError):
        mm.search_memory("", user_id=user)
    with pytest.raises(InvalidInputError):
        mm.search_memory("x", user_id=user, scope="everything")
    with pytest.raises(InvalidInputError):
        mm.search_memory("x", user_id=user, method="magic")
    with pytest.raises(InvalidInputError):
        mm.search_memory("x", user_id=user, since="2024-01-01")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        mm.search_memory("x", user_id=user, weights=SearchWeights(fusion="max"))


@pytest.mark.parametrize("phrase, start, end", [
    ("what did I say last May", datetime(2026, 5, 1), datetime(2026, 6, 1)),
    ("in March 2025", datetime(2025, 3, 1), datetime(2025, 4, 1)),
    ("yesterday", datetime(2026, 11, 19), datetime(2026, 11, 20)),
    ("two weeks ago", datetime(2026, 11, 3), datetime(2026, 11, 10)),
    ("last December", datetime(2025, 12, 1), datetime(2026, 1, 1)),
    ("since June", datetime(2026, 6, 1), NOW.replace(tzinfo=None)),
])
def test_time_expressions(phrase: str, start: datetime, end: datetime) -> None:
    span = parse_time_range(phrase, NOW)
    assert span is not None
    assert (span.start, span.end) == (start.replace(tzinfo=timezone.utc), end.replace(tzinfo=timezone.utc))


def test_no_time_expression_no_range() -> None:
    assert parse_time_range("what may I cook with leeks", NOW) is None
    assert parse_time_range("march the project forward", NOW) is None


def test_search_tool_binds_the_user_and_renders_references(mm: MemoryManager, user: str, thread: str) -> None:
    from memory.agent.search_tool import search_tools

    other = f"other-{uuid.uuid4().hex[:8]}"
    chat(mm, other, thread, [("user", "My passport number is X1234567.")], NOW - timedelta(days=5))
    chat(mm, user, thread, [("user", "My library card number is 55-0192.")], NOW - timedelta(days=5))
    (tool,) = search_tools(mm, user_id=user, min_score=None)
    out = tool("library card number", k=3)
    assert "55-0192" in out and "X1234567" not in out and f"thread {thread}" in out
    assert "X1234567" not in tool("passport number X1234567", k=20)
    (strict,) = search_tools(mm, user_id=user, min_score=5.0)
    assert strict("library card number").startswith("No matching memories")
    with pytest.raises(InvalidInputError):
        tool("library", since="last tuesday")


def test_planted_fact_found_after_consolidation_real_model(real_mm: MemoryManager, user: str, thread: str) -> None:
    """Real MiniLM: a paraphrased question finds the fact after its thread was consolidated."""
    start = NOW - timedelta(days=200)
    turns = []
    for i in range(6):
        turns += FILLER
        if i == 1:
            turns += [("user", "By the way, my sister Hannah just moved to Lisbon for a new job."),
                      ("assistant", "That's exciting news for her!")]
    ids = chat(real_mm, user, thread, turns, start)
    fact_id = ids[len(FILLER) * 2]
    result = real_mm.summarize_conversation(thread_id=thread, user_id=user, keep_recent=2)
    assert result.summary is not None and fact_id in result.source_ids
    sid = result.summary.summary_id

    hits = real_mm.search_memory("Which city did my sibling relocate to?", user_id=user, k=5)
    top = next(h for h in hits if h.item.kind == "message")
    assert top.item.message_id == fact_id and top.item.summary_id == sid
    assert any(h.item.kind == "summary" and h.item.summary_id == sid for h in hits)
    # The agent can open it: the summary expands back to the original message.
    assert fact_id in [m.id for m in real_mm.expand_summary(sid, user_id=user).messages]
    # Unanswerable: clearly lower than the answerable question's best score.
    none = real_mm.search_memory("What is the registration number of my boat?", user_id=user, k=5)
    assert none[0].score < hits[0].score - 0.1
