"""search_memory's indexed shape (a long history): bounded keyword work that still finds the rare word.

The indexed shape looks up in the gin index only the query words a fixed sample of the
user's rows finds rare, plus the two rarest others; common words are scored on the
candidates but bring none. ``small_bounds`` makes 12 messages a long history, 4 rows the
per-word cap and 20 rows the sample, so a few dozen messages reach every bound. The
keyword candidates are checked against the filters (expiry here) best first, until enough pass.
"""

from __future__ import annotations

import psycopg

from memory import MemoryManager

COMMON = "coffee milk sugar morning kitchen table"


def test_a_rare_word_among_common_ones_is_found(small_bounds: MemoryManager, user: str) -> None:
    mm = small_bounds
    texts = [f"{COMMON} chat {i}" for i in range(80)]
    texts[61] = f"{COMMON} and a narwhal"  # the only row with the rare word, past the sample (the first 20)
    texts[33] = "a narrow hall"  # no query word at all
    ids = [m.id for m in mm.write_messages([dict(role="user", content=t) for t in texts], user_id=user, thread_id="t")]
    hits = mm.search_memory(f"{COMMON} narwhal", user_id=user, k=5, scope="messages", method="keyword")
    assert hits[0].item.message_id == ids[61]
    # every common word (six of them, more than are looked up) counts in its score too:
    # it covers the whole query, the rows after it (the narwhal in their window) less
    assert hits[0].signals["keyword"] > max(h.signals["keyword"] for h in hits[1:])
    exact = mm.search_memory(f"{COMMON} narwhal", user_id=user, k=5, scope="messages", method="keyword",
                             shape="exact")
    assert exact[0].item.message_id == ids[61]


def test_a_query_of_common_words_only_still_brings_keyword_candidates(small_bounds: MemoryManager,
                                                                       user: str) -> None:
    mm = small_bounds
    # 120 rows, more than the vector half's 50 candidates. The query's words are in every
    # row; the first ten (half the sample) also have "teapot": common by the sample, but
    # the least common word of the query, so it is looked up and brings them.
    # The embedder (word and trigram hashes) puts the others closer to the query: they
    # say "tea pot", and the teapot rows have many more words, so the vector half, whose
    # 50 candidates are all others, does not bring the teapot rows.
    filler = "zanzibar quixotic verbose lantern orchestra pineapple glacier ventriloquist hammock saxophone"
    texts = [f"{COMMON} teapot {filler} {i}" for i in range(10)] + [f"{COMMON} tea pot {i}" for i in range(110)]
    ids = [m.id for m in mm.write_messages([dict(role="user", content=t) for t in texts], user_id=user, thread_id="t")]
    query = f"{COMMON} teapot"
    assert not set(ids[:10]) & {h.item.message_id for h in mm.search_memory(query, user_id=user, k=50,
                                                                           scope="messages", method="vector")}
    hits = mm.search_memory(query, user_id=user, k=10, scope="messages", method="keyword")
    # the word brings at most 4 (the cap) of its rows, or the rows after them (in their window)
    assert {h.item.message_id for h in hits[:3]} <= set(ids[:10]) and len(hits) >= 3


def test_an_expired_row_is_never_a_keyword_candidate_and_the_live_ones_still_come(
        small_bounds: MemoryManager, sql_conn: psycopg.Connection, user: str) -> None:
    mm = small_bounds
    texts = [f"{COMMON} chat {i}" for i in range(80)]
    for i in (41, 57, 65):
        texts[i] = f"{COMMON} and a narwhal {i}"
    ids = [m.id for m in mm.write_messages([dict(role="user", content=t) for t in texts], user_id=user, thread_id="t")]
    query = f"{COMMON} narwhal"
    before = mm.search_memory(query, user_id=user, k=3, scope="messages", method="keyword", shape="indexed")
    assert {h.item.message_id for h in before} == {ids[41], ids[57], ids[65]}
    sql_conn.execute("UPDATE conversational_memory SET expires_at = now() - interval '1 hour'"
                     " WHERE user_id = %s AND id = %s", (user, ids[57]))
    after = mm.search_memory(query, user_id=user, k=3, scope="messages", method="keyword", shape="indexed")
    assert ids[57] not in {h.item.message_id for h in after}
    assert [h.item.message_id for h in after[:2]] == [h.item.message_id for h in before if h.item.message_id != ids[57]]
