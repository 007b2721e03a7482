"""Keyword feedback in search_memory: words the best hits share find the answer that
shares no word with the question (``memory.retrieval.feedback``).

The function is pinned on plain texts; the search through a real Postgres with the hash
embedder (fixture ``mm``), so what is pinned is how the signal changes the ranking, not
how well MiniLM paraphrases.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

from memory import MemoryManager
from memory.retrieval.feedback import feedback, terms
from memory.store.ops import run
from memory.tables.search import DEFAULT_WEIGHTS, _words

NOW = datetime(2026, 11, 20, 12, 0, tzinfo=timezone.utc)

#: Turns about the question's subject (each has "family"); what else they share is camping and the kids.
ABOUT = ["Our family drove to the lake for camping and the kids swam all day.",
         "The kids asked when the family goes camping again.",
         "Family rule: phones stay in the car when we are camping with the kids.",
         "Camping in the rain taught the kids and the whole family patience.",
         "My family bought a bigger tent so the kids can sleep inside while camping.",
         "The kids roasted marshmallows on our family camping night.",
         "A family from the next site went camping with our kids too.",
         "We let the kids plan the family camping menu this time.",
         "The family camping trip ended early because the kids got sick.",
         "Grandma joined the family for camping and taught the kids to fish.",
         "Next summer the family wants a camping week; the kids vote for the mountains.",
         "Our kids say family camping beats any hotel."]
#: The answer: none of the question's words, two of the words the turns above share.
ANSWER = "We went camping with the kids last Sunday."
#: Turns on other things.
OTHER = [f"Note {i}: the invoice for order {100 + i} is due next month." for i in range(30)]


def test_terms_are_stemmed_words_without_stopwords() -> None:
    assert terms("The kids were camping, and camped again!") == {"kid", "camp", "again"}


def test_a_word_the_top_hits_share_lifts_a_later_candidate_that_has_it() -> None:
    top = [f"family camping with the kids, day {i}" for i in range(10)]
    lift = feedback([*top, "camping with the kids", "an invoice is due"], "what does the family do", top=10, words=5)
    assert lift[10] > 0.0, "the candidate with the shared words gets the signal"
    assert lift[11] == 0.0, "a candidate with none of them does not"
    assert all(0.0 <= x <= 1.0 for x in lift)


def test_the_questions_own_words_and_a_word_only_one_top_hit_has_are_not_feedback() -> None:
    top = [f"family camping {i}" for i in range(9)] + ["family zebra"]
    lift = feedback([*top, "family", "zebra", "camping"], "family", top=10, words=5)
    assert lift[10] == 0.0, "'family' is the question's own word"
    assert lift[11] == 0.0, "'zebra' is in one top hit only"
    assert lift[12] == 1.0, "'camping' is the only feedback word"


def test_too_few_candidates_give_no_feedback() -> None:
    assert feedback([f"family camping {i}" for i in range(9)], "family", top=10) == [0.0] * 9


def test_a_text_said_again_votes_once() -> None:
    """Ten copies of one turn are one text: too few to learn from, so no word is lifted."""
    repeated = ["a standing quad stretch works well"] * 10 + ["family camping"] * 2
    assert feedback([*repeated, "quad stretch"], "family", top=10) == [0.0] * 13


def test_search_finds_the_answer_through_the_words_its_best_hits_share(mm: MemoryManager, user: str) -> None:
    turns = OTHER[:15] + [ANSWER] + OTHER[15:] + ABOUT  # no turn on the subject just before the answer
    msgs = [dict(role="user", content=t, created_at=NOW - timedelta(days=3, minutes=-i)) for i, t in enumerate(turns)]
    rows = mm.write_messages(user_id=user, thread_id="t", messages=msgs)
    answer = rows[15].id
    question = "What activities has the family done?"
    k = len(ABOUT) + 1  # room for the turns on the subject and the answer

    def rank_of_answer(weights=None) -> int | None:
        hits = mm.search_memory(query=question, user_id=user, k=k, scope="messages", weights=weights)
        return next((i for i, h in enumerate(hits) if h.item.message_id == answer), None)

    without = rank_of_answer(replace(DEFAULT_WEIGHTS, feedback_weight=0.0))
    assert without is None, "without feedback the answer is not in the top k (no word of the question)"
    # The hash embedder's vectors are noise, so the weight is set where the signal can outweigh
    # it (MiniLM's vectors would not work against it; the default is calibrated on LoCoMo).
    lifted = replace(DEFAULT_WEIGHTS, feedback_weight=0.2)
    hits = mm.search_memory(query=question, user_id=user, k=k, scope="messages", weights=lifted)
    found = next((h for h in hits if h.item.message_id == answer), None)
    assert found is not None, [h.item.content for h in hits]
    assert found.signals["feedback"] > 0.0 and found.signals["keyword"] == 0.0
    assert all(h.signals["feedback"] == 0.0 for h in hits if "invoice" in h.item.content)


def test_every_shape_gives_each_candidate_its_stored_words(mm: MemoryManager, user: str) -> None:
    """The feedback takes a candidate's words from its row (the lexemes PostgreSQL stored in
    ``search_tsv``), in the exact shape and the indexed one alike, so both rank with the same
    words; a row without them falls back to taking its text apart here."""
    msgs = [dict(role="user", content=t, created_at=NOW - timedelta(days=3, minutes=-i))
            for i, t in enumerate(ABOUT + [ANSWER, "The well-known export job failed again."])]
    mm.write_messages(user_id=user, thread_id="t", messages=msgs)
    with mm.db.connection(user) as conn:
        stored = {str(i): frozenset(lex) for i, lex in conn.execute(
            "SELECT id, tsvector_to_array(search_tsv) FROM conversational_memory WHERE user_id = %s", (user,))}
    # PostgreSQL keeps a hyphenated word whole besides its parts, which no text taken apart here has
    assert {"well-known", "well", "known"} <= next(v for v in stored.values() if "export" in v)
    assert "well-known" not in terms("The well-known export job failed again.")
    for shape in ("exact", "indexed"):
        [found] = run(mm.db, mm.memory_search._found_many_op(["camping export job"], user_id=user, k=20,
                                                              scope="messages", shape=shape, now=NOW))
        assert found, shape
        for c in found:
            assert frozenset(_words(c.row)) == stored[c.item.id], (shape, c.item.content)
    # a row from anywhere else (no stored words): its text, taken apart as the function does
    assert _words({"content": "The kids were camping", "terms": None}) == tuple(sorted(terms("The kids were camping")))
