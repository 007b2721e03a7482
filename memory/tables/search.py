"""search_memory: one ranked list over a user's past messages, summaries and facts.

The third strategy beside truncation and summary: old turns found again on demand.
Consolidated messages stay in ``conversational_memory`` (only their ``summary_id`` is
set), so they are searched like any other; their hits carry the summary id so the
agent can expand it, and the summaries themselves are in the same list.

Signals per candidate, all absolute so scores mean the same across queries:

* **vector**: cosine similarity of the query with the message's own embedding
  (``name: content``, the role when the message has no speaker name). The query is
  embedded with the speaker names it mentions replaced by a neutral word
  (:mod:`memory.retrieval.speakers`). Candidates are scored exactly over the user's
  rows up to ``search_exact_max_rows`` (an exact scan is a few milliseconds and cannot
  miss what an approximate index would);
* **speaker**: 1 when the query names the message's speaker (``name``, as a word,
  case-insensitively, possessive or not; a longer name before a shorter one it contains:
  :func:`memory.retrieval.speakers.speakers_in` over the user's names);
* **keyword**: IDF-weighted coverage of the query's stemmed words (English
  stemming, numbers kept), computed in SQL over the user's rows: the share of the
  query's information (sum of the IDFs of its words) that the row matches. Messages
  are matched on their context window (``conversational_context``, migration 004:
  the message and its speaker's name at full weight, the two messages before it in
  the thread at ``neighbour_weight``; migrations 004, 009),
  so "Yes, I still use it every day" is found through the question it answers, while
  the hit is the message itself. A query word that appears nowhere lowers the score,
  so an unanswerable question scores low instead of matching on one common word;
  and the denominator is at least ``min_terms`` rare words' worth, so a query with a
  single informative word ("what do I do for a living" -> "live") cannot reach full
  keyword score by matching it.

They are fused linearly: a hit's own score is ``vector + keyword_weight * keyword +
speaker_weight * speaker + time_boost * time``, and a message adds ``adjacent_weight``
times the better own score of the turns just before and after it (when they are
candidates) and ``thread_weight`` times the mean own score of its thread's best three
candidates (see :func:`_rank`). Last, **keyword feedback**: the words the ten best hits
of that ranking share (and the question does not have) lift every candidate that has
them, by ``feedback_weight`` times the share of those words it contains
(:mod:`memory.retrieval.feedback`): "What activities has Melanie done with her family?"
finds "I'm off to go swimming with the kids" through the "kids" her other family turns
talk about. The weights were fitted on two LoCoMo conversations and
checked on the third and on the synthetic set (``bench/_public_memory.py``,
``bench/recall.py``). Rank fusion with a flat constant is available (``fusion="rrf"``)
for comparison. Because the fused score is absolute, a caller can set ``min_score``
and get an empty list rather than invented matches.

Time: a time expression in the query ("last May", "two weeks ago") is resolved
against ``now`` (:mod:`memory.retrieval.time_phrases`) and removed from the words matched; rows in
that range get ``time_boost`` added (``time_mode="boost"``, the default) or the range
becomes a hard filter (``time_mode="filter"``). Explicit ``since``/``until`` are
always filters.

Embeddings of messages written with ``embed=False`` are filled in batches by
:meth:`MemorySearch.embed_pending_messages`; ``search_memory`` runs it for the user
first, so a deferred row is never missed. A role that may only read (SELECT grants,
or a read-only transaction on a replica) searches what is there: the backfill is
skipped from its first refusal on, and the keyword half still finds those rows.
"""

from __future__ import annotations

import functools
import uuid
from dataclasses import dataclass, field
from datetime import datetime, UTC
from typing import Any
from collections.abc import Iterable, Sequence

import psycopg
from psycopg import sql

from memory.retrieval.fusion import KEYWORD_WEIGHT, MIN_TERMS, fuse_rankings
from memory.retrieval.bm25 import prose_terms
from memory.retrieval.feedback import feedback_sets
from memory.retrieval.hits import Hit
from memory.store.ops import Ahead, Call, Op, Sql, numbered, run
from memory.tables.base import (CUSTOM_PLANS, NO_SORT, TERMS_CTE, SizeHints, Table, handed, holds_half,
                                 plans_for, taken)
from memory.tables.conversation import embedding_text
from memory.errors import AccessDeniedError, InvalidInputError
from memory.retrieval.speakers import speakers_in
from memory.retrieval.time_phrases import TimeRange, parse_time_range
from memory.store.validation import check_number, check_positive_int

KINDS = ("messages", "summaries", "facts")
METHODS = ("hybrid", "vector", "keyword")
SHAPES = ("auto", "exact", "indexed")


@dataclass(frozen=True)
class SearchWeights:
    """How the signals are combined (see the module docstring); fitted on two LoCoMo
    conversations and checked on the third and on ``bench/recall.py``'s synthetic set."""

    keyword_weight: float = KEYWORD_WEIGHT
    neighbour_weight: float = 0.5  # keyword window: weight of the two turns before a message
    min_terms: float = MIN_TERMS
    time_boost: float = 0.1
    speaker_weight: float = 0.3  # the message's speaker is named in the query
    adjacent_weight: float = 0.2  # share of the better adjacent turn's score
    thread_weight: float = 0.2  # share of the mean score of the thread's best three turns
    feedback_weight: float = 0.05  # keyword feedback from the first ranking's best hits (memory.retrieval.feedback)
    feedback_top: int = 10  # how many of the first ranking's hits it learns from
    feedback_words: int = 5  # how many of their shared words it adds
    fusion: str = "linear"  # or "rrf"
    rrf_k: int = 60


DEFAULT_WEIGHTS = SearchWeights()

#: The indexed shape looks up the query words with fewer than ``cap`` messages, and this
#: many of the rarest of the others (so a query of common words only still brings rows
#: that share its least common ones).
COMMON_LOOKUPS = 2

#: The indexed shape gives the full keyword score to this many times ``pool`` of the rows
#: the looked-up words bring (pre-ranked by the IDFs of those words), besides the vector half's.
PREPOOL = 4

#: At most this many distinct speaker names of a user are matched against a query.
MAX_NAMES = 200


@dataclass(frozen=True)
class Covered:
    """The messages a summary replaced: ids ``first_id``..``last_id`` (``count`` of them)."""

    first_id: int
    last_id: int
    count: int


@dataclass(frozen=True)
class MemoryItem:
    """One row ``search_memory`` found: a past message, a summary or a fact, as the
    search reads it (what it is, not how it ranked; that is on the :class:`Hit`).

    ``id`` is the message id, summary id or fact id as text (``message_id`` gives a
    message's as an int). ``role`` is a message's role or a fact's category; ``name`` a
    message's speaker. ``summary_id`` is set on consolidated messages and on summaries;
    a summary's ``covers`` says which messages it replaced.
    """

    kind: str  # "message" | "summary" | "fact"
    id: str
    content: str
    created_at: datetime | None
    thread_id: str | None = None
    summary_id: uuid.UUID | None = None
    role: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    name: str | None = None
    covers: Covered | None = None

    @property
    def message_id(self) -> int | None:
        return int(self.id) if self.kind == "message" else None


#: What ``search_memory`` returns, one per found row: ``Hit[MemoryItem]``. ``score`` is
#: the fused score the list is ordered by; ``signals`` has each signal's own value:
#: ``vector``, ``keyword``, ``speaker``, ``neighbour``, ``thread`` and ``feedback`` (hybrid), and
#: ``time`` (1 or 0: in the query's time range) only when the query names a time.
MemoryHit = Hit[MemoryItem]


@dataclass
class _Candidate:
    """A found row while it is ranked (private: callers get the ``Hit``).

    ``row`` is the statement's row; the :class:`MemoryItem` a hit shows is built from it
    when first asked for (``item``), so only for the hits returned: a search ranks ~80
    candidates and returns ``k``, and building the frozen item was ~5 us of the ~7 us
    each candidate cost in Python (LoCoMo questions: 0.6 ms a search).
    """

    row: dict[str, Any]
    vector: float
    keyword: float
    in_range: bool | None
    signals: dict[str, float]
    score: float = 0.0

    @property
    def prev_id(self) -> int | None:  # the turns just before and after a message in its thread
        value: int | None = self.row["prev_id"]
        return value

    @property
    def next_id(self) -> int | None:
        value: int | None = self.row["next_id"]
        return value

    @functools.cached_property
    def item(self) -> MemoryItem:
        row = self.row
        covers = None
        if row["n_covered"]:
            covers = Covered(int(row["first_id"]), int(row["last_id"]), int(row["n_covered"]))
        return MemoryItem(
            kind=row["kind"], id=row["id"], content=row["content"], created_at=row["created_at"],
            thread_id=row["thread_id"], summary_id=row["summary_id"], role=row["role"],
            metadata=row["metadata"] or {}, name=row["name"], covers=covers)


# One statement per search; every table in it is filtered or joined by user_id, so on
# Citus it runs on the user's shard. Every block is literal SQL with bound parameters.
# Per kind, ``matched`` are the user's rows (under the filters) whose keyword text
# (found through its gin index) has any query word; every candidate gets both scores;
# candidates are the top ``pool`` of either signal. This is the exact shape: every
# matching row is scored, so it is used where a user's rows are few (summaries, facts,
# and messages up to ``search_exact_max_rows``). ``lex`` has each query word twice: as
# itself and restricted to weight A (the message and its speaker in the keyword window),
# so the window's own part is matched without rebuilding it (``ts_filter``) per row.
_HEAD = TERMS_CTE + (", lex AS MATERIALIZED (SELECT row_number() OVER () AS ord, lit::tsquery AS tq,"
                     " (lit || ':A')::tsquery AS tq_a, term FROM terms)")

#: The filters of a message row ``m`` (thread, time, expiry).
_M_SCOPE = ("m.user_id = %(uid)s AND (%(tid)s::text IS NULL OR m.thread_id = %(tid)s)"
            " AND (m.created_at < %(until)s OR %(until)s::timestamptz IS NULL)"
            " AND (m.created_at >= %(since)s OR %(since)s::timestamptz IS NULL)")
_M_LIVE = "(m.expires_at IS NULL OR m.expires_at > now())"
_M_WHERE = _M_SCOPE + " AND " + _M_LIVE
#: The same in two parts: the user and thread (``_M_THREAD``), and the time and expiry filters.
_M_THREAD = "m.user_id = %(uid)s AND (%(tid)s::text IS NULL OR m.thread_id = %(tid)s)"
_M_FILTERS = ("(m.created_at < %(until)s OR %(until)s::timestamptz IS NULL)"
              " AND (m.created_at >= %(since)s OR %(since)s::timestamptz IS NULL) AND " + _M_LIVE)

# The user's messages (of the thread, when the search has one) are read once, narrow
# (``me_rows``: id, thread, time, the distance to the query, and the turns just before and
# after each in its thread, by ``lag``/``lead`` over the thread order; the distance is
# computed below the window's sort, so the sort moves ids and numbers, not vectors). The
# neighbours are taken over every row of the thread, as a lookup through the thread index
# would find them; ``live`` says whether a row is under the time and expiry filters, and
# only those are counted, matched and ranked (a neighbour outside the filters is never a
# candidate, so it weighs nothing in the ranking). The live rows' keyword windows are read
# once (``me_ctx``: the user's windows in one index range, less those of the rows not live
# and, with a thread, those outside it, each a hashed list; the planner, blind to a CTE's
# size, joined them to ``me_rows`` by one index probe per row, 2.8x slower), each query
# word is matched against each window once (``me_match``: the rows holding it, and whether
# in the window's own part, weight A), and the document
# frequencies (one grouped count), IDFs and keyword scores all come from those matches. A
# row's keyword score sums, in word order, the IDF of each query word its window holds, at
# full weight in its own part and ``nw`` in the turns before it, over one denominator
# (``me_den``, computed once: numeric ``ln`` is costly), each word's IDF read from one array by
# its place (joined to the words instead, the matches took a nested loop over every word:
# 0.5 ms of a 3.4 ms statement at LoCoMo size on an AVX2 host); the rows find their scores in one
# jsonb object (``me_kw``, the exact float8 as text) rather than by a join, which the
# planner, blind to a CTE's size, may run as a nested loop over every match. Only the
# candidates (the ``pool`` nearest and the ``pool`` best by keyword) read the columns a hit
# shows (content, role, name, metadata: one primary-key probe each, kept apart by ``OFFSET
# 0``; joined, the planner read all the user's rows to hash the candidates against them),
# and come out in thread order, the order the ranking breaks ties by.
_MSG_ROWS = """,
me_rows AS MATERIALIZED (
    SELECT m.key, m.thread_id, m.created_at, m.d, m.live,
           lag(m.key) OVER w AS prev_id, lead(m.key) OVER w AS next_id
    FROM (SELECT m.id AS key, m.thread_id, m.created_at, m.embedding <=> %(qvec)s AS d,
                 coalesce(""" + _M_FILTERS + """, false) AS live
          FROM conversational_memory m WHERE """ + _M_THREAD + """ OFFSET 0) m
    WINDOW w AS (PARTITION BY m.thread_id ORDER BY m.created_at, m.key))"""
_MSG_KEYWORD = """,
me_ctx AS MATERIALIZED (
    SELECT c.message_id AS key, c.context_tsv AS tsv FROM conversational_context c
    WHERE c.user_id = %(uid)s AND c.message_id NOT IN (SELECT key FROM me_rows WHERE NOT live)
      AND (%(tid)s::text IS NULL OR c.message_id IN (SELECT key FROM me_rows))),
me_total AS (SELECT count(*) AS n FROM me_ctx),
me_match AS MATERIALIZED (
    SELECT r.key, lex.ord, r.tsv @@ lex.tq_a AS own FROM me_ctx r JOIN lex ON r.tsv @@ lex.tq
),
me_df AS (SELECT ord, count(*) AS df FROM me_match GROUP BY ord),
me_idf AS MATERIALIZED (
    SELECT lex.ord, d.idf, d.idf::float8 AS idf8
    FROM lex LEFT JOIN me_df ON me_df.ord = lex.ord CROSS JOIN LATERAL (SELECT coalesce(me_df.df, 0) AS df) f
    CROSS JOIN LATERAL (SELECT ln(1 + ((SELECT n FROM me_total) - f.df + 0.5) / (f.df + 0.5)) AS idf) d
),
me_den AS (
    SELECT nullif(greatest((SELECT sum(idf) FROM me_idf),
                           %(min_terms)s * ln(1 + ((SELECT n FROM me_total) + 0.5) / 0.5)), 0) AS den
),
me_kw_rows AS MATERIALIZED (
    SELECT m.key, sum((SELECT array_agg(idf8 ORDER BY ord) FROM me_idf)[m.ord]
                      * CASE WHEN m.own THEN 1.0 ELSE %(nw)s END ORDER BY m.ord)
                  / (SELECT den FROM me_den) AS ks
    FROM me_match m GROUP BY m.key
),
me_kw AS (SELECT jsonb_object_agg(key::text, ks::text) AS ks FROM me_kw_rows)"""
_MSG_EXACT = _MSG_ROWS + _MSG_KEYWORD

# The indexed shape, for a user with many messages: bounded work whatever the history.
# * vector: the nearest ``pool`` messages through HNSW (iterative scan keeps the user and
#   time filters fed);
# * keyword: N is the user's message count, kept on write (``conversational_stats``,
#   migration 012). Each query word's messages come from the postings of migration 015
#   (``conversational_terms``: user, word, message whose window has it), by index-only
#   scans of the user's key range: a word's number of messages, counted up to ``cap``
#   (``mi_df``), is its exact document frequency below ``cap``; a word with more is
#   common, and how common comes from the user's first ``sample`` messages (its postings
#   up to the last of them, ``mi_bound``: at most ``sample`` index entries). The words
#   with fewer than ``cap`` messages and the ``lookups`` rarest others are looked up,
#   each bringing its first ``cap`` messages: all of a rare word's, and for a common
#   word a bounded part of its thousands, whose rows rank below those with rarer words
#   anyway; every word still counts in the keyword score of every candidate (through the
#   gin index, a common word's lookup read its whole posting list, 1.6 ms a word at 100k
#   messages, and its frequency a sample of 1,000 windows matched per search, 2.4 ms);
# * the looked-up rows are pre-ranked by the summed IDF of the words that brought them,
#   and the best ``prepool`` of them plus the vector candidates get the keyword score of
#   the exact shape (same IDF coverage formula over the window). The IDFs are float8 once
#   computed (numeric sums over a thousand looked-up rows were a tenth of the statement),
#   the denominator is computed once (``mi_den``: a numeric ``ln`` per row was costly), and
#   a word in the window's own part is matched as ``'word':A`` (``tq_a``), not against a
#   weight-A copy of each row's window (``ts_filter``). The scored rows are checked against
#   the filters best first until ``pool`` of them pass (``mi_cand``: ~50 primary-key probes
#   instead of one per scored row, 0.5 ms of a 12 ms statement at 100k messages of one
#   user); ties, here and in the pre-ranking, go to the lower id, as in the exact shape.
#   With a thread or time filter (``filtered``) the pre-ranked rows are filtered first.
_MSG_IDX_WORDS = """,
mi_n AS (SELECT coalesce((SELECT messages FROM conversational_stats WHERE user_id = %(uid)s), 0) AS n),
mi_m AS (SELECT least(%(sample)s, (SELECT n FROM mi_n)) AS m),
mi_bound AS (SELECT (SELECT message_id FROM conversational_context WHERE user_id = %(uid)s ORDER BY message_id
                     OFFSET greatest((SELECT m FROM mi_m) - 1, 0) LIMIT 1) AS b),
mi_df AS MATERIALIZED (
    SELECT lex.ord, lex.tq, lex.tq_a, lex.term, (SELECT count(*) FROM (
        SELECT 1 FROM conversational_terms p WHERE p.user_id = %(uid)s AND p.term = lex.term LIMIT %(cap)s) c) AS df
    FROM lex
),
mi_est AS MATERIALIZED (
    SELECT r.ord, r.tq, r.tq_a, r.term, r.df, r.k, r.df < %(cap)s OR r.rarity <= %(lookups)s AS looked
    FROM (SELECT d.*, s.k, row_number() OVER (ORDER BY d.df, s.k, d.ord) AS rarity
          FROM mi_df d CROSS JOIN LATERAL (
              SELECT CASE WHEN d.df >= %(cap)s THEN (
                  SELECT count(*) FROM conversational_terms p WHERE p.user_id = %(uid)s AND p.term = d.term
                                                              AND p.message_id <= (SELECT b FROM mi_bound)) END AS k) s
    ) r
),
mi_hits AS (
    SELECT e.ord, h.message_id FROM mi_est e CROSS JOIN LATERAL (
        SELECT p.message_id FROM conversational_terms p WHERE p.user_id = %(uid)s AND p.term = e.term
        ORDER BY p.message_id LIMIT %(cap)s) h
    WHERE e.looked
),
mi_idf AS MATERIALIZED (
    SELECT e.ord, e.tq, e.tq_a, ln(1 + (greatest(n.n, d.df) - d.df + 0.5) / (d.df + 0.5))::float8 AS idf
    FROM mi_est e CROSS JOIN mi_n n CROSS JOIN mi_m CROSS JOIN LATERAL (
        SELECT CASE WHEN e.df < %(cap)s THEN e.df::numeric
                    ELSE greatest(%(cap)s, n.n * e.k::numeric / greatest(mi_m.m, 1)) END AS df) d
),
mi_den AS (
    SELECT nullif(greatest((SELECT sum(idf) FROM mi_idf),
                           %(min_terms)s * ln(1 + ((SELECT n FROM mi_n) + 0.5) / 0.5)), 0)::float8 AS den
)"""
#: A row's keyword score in the indexed shape (``c``: its keyword window), from ``mi_idf`` and ``mi_den``.
_MI_SCORE = """(SELECT sum(i.idf * CASE WHEN c.context_tsv @@ i.tq_a THEN 1.0 ELSE %(nw)s END)
            FROM mi_idf i WHERE c.context_tsv @@ i.tq)
           / (SELECT den FROM mi_den)"""
#: The ``pool`` nearest live messages through HNSW, after a select list: the indexed shape's vector half.
_M_NEAREST = (" FROM conversational_memory m\n    WHERE " + _M_WHERE
              + " AND m.embedding IS NOT NULL ORDER BY m.embedding <=> %(qvec)s LIMIT %(pool)s")
_MSG_IDX_VEC = """,
mi_vec AS (
    SELECT m.id AS key""" + _M_NEAREST + """
)"""
_MSG_IDX_SCORED = """,
mi_pre AS (
    SELECT key FROM mi_vec UNION SELECT key FROM (
        SELECT h.message_id AS key FROM mi_hits h JOIN mi_idf i ON i.ord = h.ord
        WHERE NOT %(filtered)s OR EXISTS (
            SELECT 1 FROM conversational_memory m WHERE m.id = h.message_id AND """ + _M_WHERE + """)
        GROUP BY h.message_id ORDER BY sum(i.idf) DESC, h.message_id LIMIT %(prepool)s) k
),
mi_kw AS (
    SELECT c.message_id AS key,
           """ + _MI_SCORE + """ AS ks
    FROM conversational_context c JOIN mi_pre ON mi_pre.key = c.message_id AND c.user_id = %(uid)s
)"""


def _terms(alias: str) -> str:
    """The select item ``terms`` of a row ``alias`` (a code constant): its stored lexemes,
    space-separated, the words the keyword feedback reads (see ``_M_HIT_TAIL``)."""
    return f"array_to_string(tsvector_to_array({alias}.search_tsv), ' ') AS terms"


_MSG_IDX_ROWS = """,
mi_cand AS (
    SELECT key FROM mi_vec
    UNION SELECT key FROM (
        SELECT k.key FROM (SELECT key, ks FROM mi_kw WHERE ks > 0 ORDER BY ks DESC, key OFFSET 0) k
        WHERE EXISTS (SELECT 1 FROM conversational_memory m WHERE m.id = k.key AND """ + _M_WHERE + """)
        ORDER BY k.ks DESC, k.key LIMIT %(pool)s) k
),
mi_rows AS MATERIALIZED (
    SELECT m.id AS key, m.content, m.created_at, m.thread_id, m.summary_id, m.role, m.name,
           nullif(m.metadata, '{}') AS metadata, coalesce(1 - (m.embedding <=> %(qvec)s), 0) AS vs,
           coalesce(m.name = ANY (%(speakers)s::text[]), false) AS spk, x.prev_id AS prev,
           """ + _terms("m") + """
    FROM mi_cand JOIN conversational_memory m ON m.user_id = %(uid)s AND m.id = mi_cand.key
    LEFT JOIN conversational_context x ON x.user_id = %(uid)s AND x.message_id = m.id
)"""
_MSG_INDEXED = _MSG_IDX_WORDS + _MSG_IDX_VEC + _MSG_IDX_SCORED + _MSG_IDX_ROWS

#: The user's message count (kept on write, migration 012), to pick the exact or indexed shape.
_SIZE = """,
m_size AS (SELECT coalesce((SELECT messages FROM conversational_stats WHERE user_id = %(uid)s), 0) AS n)"""

# Marker rows (not hits): a kind, the one number they carry in ``vs``, and NULL in every
# other column of the union's row type.
_MARK_COLS = ("NULL::text, NULL::timestamptz, NULL::text, NULL::uuid, NULL::text, NULL::text,"
              " NULL::timestamptz, NULL::timestamptz, NULL::jsonb, ")  # content .. metadata
_MARK_HEAD = "NULL::text, " + _MARK_COLS  # id, then those
_MARK_TAIL = ", NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, false, NULL::text"

#: A message row ``m``'s columns as a hit shows them, up to its distance (``vs``) and from the
#: turn after it on: the two statements of the indexed shape that read whole message rows.
#: Every statement's candidate rows end with ``terms``: the row's words for the keyword
#: feedback as PostgreSQL stored them (its ``search_tsv``'s lexemes, space-separated; NULL in
#: marker rows). Taking a text apart in Python costs ~9 µs, and at 100k messages most
#: candidates of a search are texts the process has not seen (~1 ms a search of one user,
#: against ~0.1 ms to send and read the lexemes); the ranking of both shapes uses the same
#: words. With them LoCoMo's R@5 / R@10 read 0.750 / 0.852 (0.749 / 0.852 with Python's words,
#: R@1 0.451 against 0.457) and ``recall.py``'s hybrid R@5 / R@10 0.861 / 0.902, as before.
_M_HIT_HEAD = ("'message' AS kind, m.id::text AS id, m.content, m.created_at, m.thread_id, m.summary_id, m.role,"
               " m.name,\n       NULL::timestamptz AS t0, NULL::timestamptz AS t1,"
               " nullif(m.metadata, '{}') AS metadata, ")
_M_HIT_TAIL = ("NULL::bigint AS next_id, NULL::bigint AS first_id, NULL::bigint AS last_id,\n"
               "       NULL::bigint AS n_covered, coalesce(m.name = ANY (%(speakers)s::text[]), false) AS spk,\n"
               "       " + _terms("m"))
#: The columns of a message row that those read (its keyword score too, from ``search_tsv``),
#: where a statement reads the row itself rather than its key.
_M_ROW_COLS = "m.id, m.content, m.created_at, m.thread_id, m.summary_id, m.role, m.name, m.metadata, m.search_tsv"

#: Whether the user has any summaries or facts at all: the statement after the embedding carries
#: their halves (planned and run even when they find nothing: ~0.4 ms at LoCoMo size) only then.
_HAS_KINDS = ("EXISTS (SELECT 1 FROM summary_memory WHERE user_id = %(uid)s) AS has_summaries,"
              " EXISTS (SELECT 1 FROM fact_memory WHERE user_id = %(uid)s) AS has_facts")

#: A message row ``m`` by its key (completed by the caller: ``... = key OFFSET 0``), with the
#: turn before it from its window row (``c.prev_id``): the exact shape's two statements.
_M_ROW_PREV = """
    SELECT """ + _M_ROW_COLS + """, c.prev_id
    FROM conversational_memory m
        LEFT JOIN conversational_context c ON c.user_id = %(uid)s AND c.message_id = m.id
    WHERE m.user_id = %(uid)s AND m.id = """

# The exact shape in two statements, for a search whose query is still being embedded
# (``Ahead``): the keyword half needs no vector, so the server runs it while the model
# embeds the query. The first (``_KEYWORD_FIRST``) reads which of the user's rows are live
# (no distance, no neighbours), scores them by keyword as above and returns the ``pool``
# best of them, each with the columns a hit shows and the turn before it (its window row's
# ``prev_id``, migration 015), and a head row: every scored row's keyword score (``me_kw``'s
# object), the user's message count (the exact half does no work above the switch point:
# the search then sends the switching statement), whether messages wait for their embedding
# and whether the user has summaries or facts; and it hands its rows' keys to the second
# (``handed``). The second (``_MSG_EXACT_NEAR``, ``near``) is what needs the vector, sent
# right behind the embedding, before the first's rows are read: the ``pool`` nearest live rows
# by an exact sort of the user's rows (never through HNSW: the ``OFFSET 0`` keeps the distance
# below the sort), each with those columns, the distance of each of the first's rows
# (``_MSG_DISTANCES``), and the summaries' and facts' halves where the user had any when last
# seen. :func:`_two_statement_rows` merges them as the one statement sends its rows (the
# nearest rows' keyword scores from the head's object, ``next_id`` where the turn after a
# candidate is one too: the only case the ranking reads it). Both run in one repeatable-read
# transaction: the rows the second reads are those the first scored.
_KEYWORD_FIRST = ("WITH " + _HEAD + _SIZE + """,
me_rows AS MATERIALIZED (
    SELECT m.id AS key, coalesce(""" + _M_FILTERS + """, false) AS live
    FROM conversational_memory m WHERE """ + _M_THREAD + """ AND (SELECT n FROM m_size) <= %(switch)s)"""
    + _MSG_KEYWORD.replace("WHERE c.user_id = %(uid)s AND",
                           "WHERE c.user_id = %(uid)s AND (SELECT n FROM m_size) <= %(switch)s AND", 1) + """,
me_top AS (SELECT key, ks FROM me_kw_rows WHERE ks IS NOT NULL ORDER BY ks DESC, key LIMIT %(pool)s)
SELECT """ + _M_HIT_HEAD + """NULL::float8 AS vs,
       t.ks, m.prev_id, """ + _M_HIT_TAIL + """,
       NULL::bigint AS n, NULL::jsonb AS kw, NULL::text AS keys, NULL::boolean AS pending,
       NULL::boolean AS has_summaries, NULL::boolean AS has_facts
FROM me_top t CROSS JOIN LATERAL (""" + _M_ROW_PREV + """t.key OFFSET 0) m
UNION ALL
SELECT 'head', """ + _MARK_HEAD + "NULL, NULL" + _MARK_TAIL + """,
       (SELECT n FROM m_size), (SELECT ks FROM me_kw), """ + handed("keys", "ARRAY(SELECT key FROM me_top)") + """,
       EXISTS (SELECT 1 FROM conversational_memory WHERE user_id = %(uid)s AND embedding IS NULL AND content <> ''),
       """ + _HAS_KINDS + """""")
#: The ``pool`` nearest live messages by an exact sort, with every column (the keyword score is the
#: first statement's). It is sent before the first statement says whether the user is still at or
#: under the switch point, so, like the first, it reads nothing above it (``m_size``).
_MSG_EXACT_NEAR = """
SELECT """ + _M_HIT_HEAD + """coalesce(1 - v.d, 0) AS vs, NULL::float8 AS ks,
       m.prev_id, """ + _M_HIT_TAIL + """
FROM (SELECT v.key, v.d FROM (
        SELECT m.id AS key, m.embedding <=> %(qvec)s AS d FROM conversational_memory m
        WHERE """ + _M_WHERE + """ AND m.embedding IS NOT NULL AND (SELECT n FROM m_size) <= %(switch)s
        OFFSET 0) v
      ORDER BY v.d, v.key LIMIT %(pool)s) v
CROSS JOIN LATERAL (""" + _M_ROW_PREV + """v.key OFFSET 0) m"""

# The indexed shape in two statements likewise, for a user last seen above the switch
# point. The first (``_INDEXED_FIRST``) finds the words' rows and weights and pre-ranks and
# scores the rows they bring as above, and returns a head row (the user's message count,
# whether messages wait for their embedding and whether the user has summaries or facts at
# all) and the ``pool`` best of those rows by keyword score that pass the filters, each with
# the columns a hit shows and the turn before it: everything but its distance to the query.
# It hands the second the words' tsqueries and IDFs in the order the scores sum them, the
# denominator and its rows' keys (``handed``). It runs while the query is embedded (and, at
# 100k messages of one user, ends about when the model does). The second (``_MSG_IDX_REST``,
# ``large-rest``) is what needs the vector, sent right behind the embedding: the nearest
# rows, each with those columns and its keyword score from the same numbers, the distance
# of each of the first's rows, and the summaries' and facts' halves, only for a user who had
# any when last seen. The keyword candidates are the ``pool`` best of both by keyword score,
# as in the one statement (a row of the first's not among its ``pool`` best has that many
# better ones there), chosen in Python (:func:`_two_statement_rows`), which also sets ``next_id``
# as the one statement does. The scored rows are a subquery of their own (``OFFSET 0``):
# flattened, each row's score was computed twice, for the filter and for the sort (0.2-0.4
# ms of the first statement at 100k messages of one user).
_INDEXED_FIRST = ("WITH " + _HEAD + _SIZE + _MSG_IDX_WORDS + """,
mk_pre AS (
    SELECT h.message_id AS key FROM mi_hits h JOIN mi_idf i ON i.ord = h.ord
    WHERE NOT %(filtered)s
       OR (SELECT true FROM conversational_memory m WHERE m.id = h.message_id AND """ + _M_WHERE + """)
    GROUP BY h.message_id ORDER BY sum(i.idf) DESC, h.message_id LIMIT %(prepool)s
),
mk_top AS (
    SELECT k.key, k.ks, k.prev_id FROM (SELECT k.key, k.ks, k.prev_id FROM (
        SELECT c.message_id AS key, """ + _MI_SCORE + """ AS ks, c.prev_id
        FROM mk_pre CROSS JOIN LATERAL (
            SELECT x.message_id, x.context_tsv, x.prev_id FROM conversational_context x
            WHERE x.user_id = %(uid)s AND x.message_id = mk_pre.key OFFSET 0) c
        OFFSET 0) k WHERE k.ks > 0 ORDER BY k.ks DESC, k.key OFFSET 0) k
    WHERE (SELECT true FROM conversational_memory m WHERE m.id = k.key AND """ + _M_WHERE + """)
    ORDER BY k.ks DESC, k.key LIMIT %(pool)s
)
SELECT """ + _M_HIT_HEAD + """NULL::float8 AS vs,
       t.ks, t.prev_id, """ + _M_HIT_TAIL + """,
       NULL::bigint AS n, NULL::text AS den, NULL::text AS tqs, NULL::text AS tqas, NULL::text AS idfs,
       NULL::text AS keys, NULL::boolean AS pending, NULL::boolean AS has_summaries, NULL::boolean AS has_facts
FROM mk_top t CROSS JOIN LATERAL (
    SELECT """ + _M_ROW_COLS + """
    FROM conversational_memory m WHERE m.user_id = %(uid)s AND m.id = t.key OFFSET 0) m
UNION ALL
SELECT 'head', """ + _MARK_HEAD + "NULL, NULL" + _MARK_TAIL + """,
       (SELECT n FROM m_size), """ + handed("den", "SELECT den FROM mi_den") + """,
       """ + handed("tqs", "ARRAY(SELECT tq::text FROM mi_idf)") + """,
       """ + handed("tqas", "ARRAY(SELECT tq_a::text FROM mi_idf)") + """,
       """ + handed("idfs", "ARRAY(SELECT idf FROM mi_idf)") + """,
       """ + handed("keys", "ARRAY(SELECT key FROM mk_top)") + """,
       EXISTS (SELECT 1 FROM conversational_memory WHERE user_id = %(uid)s AND embedding IS NULL AND content <> ''),
       """ + _HAS_KINDS + """""")
_MSG_IDX_REST = """,
mi_idf AS MATERIALIZED (
    SELECT t.ord, t.tq::tsquery AS tq, t.tq_a::tsquery AS tq_a, t.idf
    FROM unnest(""" + taken("tqs", "text[]") + """,
                """ + taken("tqas", "text[]") + """,
                """ + taken("idfs", "float8[]") + """) WITH ORDINALITY AS t(tq, tq_a, idf, ord)
),
mi_den AS (SELECT """ + taken("den", "float8") + """ AS den),
mi_near AS MATERIALIZED (
    SELECT """ + _M_ROW_COLS + """, m.embedding <=> %(qvec)s AS d""" + _M_NEAREST + """
)"""
#: The nearest rows with every column and their keyword score (NULL without any of the words).
#: The rows come with their columns and distance from the index scan that finds them
#: (``mi_near``: materialised, so planned alone; read again by key, they cost the statement
#: 0.2-0.6 ms of 2.5-3.4 at 100k messages of one user on an AVX2 host), and each one's window
#: is read by key (a probe per row, kept apart by ``OFFSET 0``): so that on the generic plan
#: (:data:`memory.tables.base.NO_SORT`) no estimate of an unknown user's rows can turn it into
#: a read of the user's rows (joined, the generic plan read every row of a user of 3,000 beside
#: 400 small ones and compared each with the nearest).
_MSG_NEAR_SELECT = """
SELECT """ + _M_HIT_HEAD + """
       coalesce(1 - m.d, 0) AS vs, """ + _MI_SCORE + """ AS ks,
       c.prev_id, """ + _M_HIT_TAIL + """
FROM mi_near m
    LEFT JOIN LATERAL (SELECT c.prev_id, c.context_tsv FROM conversational_context c
                       WHERE c.user_id = %(uid)s AND c.message_id = m.id OFFSET 0) c ON true"""
#: The distance of each of the first statement's rows (``keys``; kind ``distance``, in ``vs``).
_MSG_DISTANCES = """
SELECT 'distance', m.id::text, """ + _MARK_COLS + """coalesce(1 - (m.embedding <=> %(qvec)s), 0),
       NULL::float8""" + _MARK_TAIL + """
FROM conversational_memory m WHERE m.user_id = %(uid)s AND m.id = ANY (""" + taken("keys", "bigint[]") + """)"""
#: The same, each row read by key (a probe per row): the indexed shape's, whose statement may run
#: on the generic plan (see ``_MSG_NEAR_SELECT``).
_MSG_DISTANCES_BY_KEY = _MSG_DISTANCES.replace(
    "FROM conversational_memory m WHERE m.user_id = %(uid)s AND m.id = ANY (" + taken("keys", "bigint[]") + ")",
    "FROM unnest(" + taken("keys", "bigint[]") + ") AS k(key) CROSS JOIN LATERAL (SELECT m.id, m.embedding\n"
    "    FROM conversational_memory m WHERE m.user_id = %(uid)s AND m.id = k.key OFFSET 0) m")

# Every kind's rows come out with the same columns; a message brings the ids of the
# turns before and after it in its thread, a summary the range of the messages it
# replaced (the summary index) and the span it covers (``t0``/``t1``; NULL for a message:
# its ``created_at``). ``spk``: the message's speaker is one of the names the query
# mentions (``speakers``, found in Python among the user's speaker names). A message's
# empty metadata comes back as NULL (read as ``{}``): no JSON to parse per row.
_MSG_EXACT_SELECT = """
SELECT 'message' AS kind, r.key::text AS id, m.content, r.created_at, r.thread_id, m.summary_id, m.role, m.name,
       NULL::timestamptz AS t0, NULL::timestamptz AS t1, nullif(m.metadata, '{}') AS metadata,
       coalesce(1 - r.d, 0) AS vs,
       coalesce(((SELECT ks FROM me_kw) ->> r.key::text)::float8, 0) AS ks,
       r.prev_id, r.next_id, NULL::bigint AS first_id, NULL::bigint AS last_id,
       NULL::bigint AS n_covered, coalesce(m.name = ANY (%(speakers)s::text[]), false) AS spk,
       """ + _terms("m") + """
FROM me_rows r CROSS JOIN LATERAL (SELECT m.content, m.summary_id, m.role, m.name, m.metadata, m.search_tsv
    FROM conversational_memory m WHERE m.user_id = %(uid)s AND m.id = r.key OFFSET 0) m
WHERE (r.key IN (SELECT key FROM (SELECT key FROM me_rows WHERE live AND d IS NOT NULL
                                   ORDER BY d, key LIMIT %(pool)s) v)
       OR r.key IN (SELECT key FROM (SELECT key FROM me_kw_rows WHERE ks IS NOT NULL
                                     ORDER BY ks DESC, key LIMIT %(pool)s) k))"""

#: A shape's rows in thread order (the ranking breaks ties of score by the order rows come in,
#: so every statement of either shape sends them in this one).
_MSG_EXACT_ORDER = """
ORDER BY r.thread_id COLLATE "C", r.created_at, r.key"""

# The indexed shape reads the turn just before each candidate in its thread from the
# candidate's window row (``prev_id``, migration 015: the window's refresh finds it); the
# turn just after it matters to the ranking only when it is a candidate too, and then it is
# the candidate whose turn before is this one. So ``next_id`` is set only where that turn
# is a candidate. An empty metadata comes back as NULL, as in the exact shape.
_MSG_INDEXED_SELECT = """
SELECT 'message' AS kind, r.key::text AS id, r.content, r.created_at, r.thread_id, r.summary_id, r.role, r.name,
       NULL::timestamptz AS t0, NULL::timestamptz AS t1, r.metadata, r.vs, coalesce(kw.ks, 0) AS ks,
       r.prev AS prev_id, nx.key AS next_id,
       NULL::bigint AS first_id, NULL::bigint AS last_id, NULL::bigint AS n_covered, r.spk, r.terms
FROM mi_rows r LEFT JOIN mi_rows nx ON nx.prev = r.key LEFT JOIN mi_kw kw ON kw.key = r.key
WHERE true"""

_S_WHERE = ("s.user_id = %(uid)s AND (%(tid)s::text IS NULL OR s.thread_id = %(tid)s)"
            " AND (coalesce(s.first_message_at, s.created_at) < %(until)s OR %(until)s::timestamptz IS NULL)"
            " AND (coalesce(s.last_message_at, s.created_at) >= %(since)s OR %(since)s::timestamptz IS NULL)"
            " AND (s.expires_at IS NULL OR s.expires_at > now())")

_SUMMARIES = """,
s_total AS (SELECT count(*) AS n FROM summary_memory s WHERE """ + _S_WHERE + """),
s_matched AS (
    SELECT s.summary_id AS key, s.search_tsv AS tsv FROM summary_memory s
    WHERE """ + _S_WHERE + """ AND s.search_tsv @@ (SELECT tq FROM tsq)
),
s_idf AS (
    SELECT lex.tq, ln(1 + ((SELECT n FROM s_total) - d.n + 0.5) / (d.n + 0.5)) AS idf
    FROM lex CROSS JOIN LATERAL (SELECT count(*) AS n FROM s_matched WHERE s_matched.tsv @@ lex.tq) d
),
s_kw AS (
    SELECT s_matched.key, sum(s_idf.idf)
           / nullif(greatest((SELECT sum(idf) FROM s_idf),
                             %(min_terms)s * ln(1 + ((SELECT n FROM s_total) + 0.5) / 0.5)), 0) AS ks
    FROM s_matched JOIN s_idf ON s_matched.tsv @@ s_idf.tq GROUP BY s_matched.key
),
s_vec AS (
    SELECT s.summary_id AS key FROM summary_memory s
    WHERE """ + _S_WHERE + """ AND s.embedding IS NOT NULL ORDER BY s.embedding <=> %(qvec)s LIMIT %(pool)s
),
s_cand AS (
    SELECT key FROM s_vec UNION SELECT key FROM (SELECT key FROM s_kw ORDER BY ks DESC LIMIT %(pool)s) k
)"""

_SUMMARIES_SELECT = """
SELECT 'summary' AS kind, s.summary_id::text AS id, s.description || E'\\n' || s.content AS content,
       coalesce(s.last_message_at, s.created_at) AS created_at, s.thread_id, s.summary_id, NULL AS role,
       NULL AS name, coalesce(s.first_message_at, s.created_at) AS t0, coalesce(s.last_message_at, s.created_at) AS t1,
       s.metadata, coalesce(1 - (s.embedding <=> %(qvec)s), 0) AS vs, coalesce(s_kw.ks, 0) AS ks,
       NULL::bigint AS prev_id, NULL::bigint AS next_id, cov.first_id, cov.last_id, cov.n AS n_covered, false AS spk,
       """ + _terms("s") + """
FROM summary_memory s JOIN s_cand ON s_cand.key = s.summary_id LEFT JOIN s_kw ON s_kw.key = s.summary_id
LEFT JOIN LATERAL (SELECT min(c.id) AS first_id, max(c.id) AS last_id, count(*) AS n FROM conversational_memory c
    WHERE c.user_id = %(uid)s AND c.summary_id = s.summary_id) cov ON true
WHERE s.user_id = %(uid)s"""

# Facts belong to the user, not to a thread: a thread filter leaves them out.
_F_WHERE = ("f.user_id = %(uid)s AND f.valid_to IS NULL AND %(tid)s::text IS NULL"
            " AND (f.valid_from < %(until)s OR %(until)s::timestamptz IS NULL)"
            " AND (f.valid_from >= %(since)s OR %(since)s::timestamptz IS NULL)"
            " AND (f.expires_at IS NULL OR f.expires_at > now())")

_FACTS = """,
f_total AS (SELECT count(*) AS n FROM fact_memory f WHERE """ + _F_WHERE + """),
f_matched AS (
    SELECT f.id AS key, f.search_tsv AS tsv FROM fact_memory f
    WHERE """ + _F_WHERE + """ AND f.search_tsv @@ (SELECT tq FROM tsq)
),
f_idf AS (
    SELECT lex.tq, ln(1 + ((SELECT n FROM f_total) - d.n + 0.5) / (d.n + 0.5)) AS idf
    FROM lex CROSS JOIN LATERAL (SELECT count(*) AS n FROM f_matched WHERE f_matched.tsv @@ lex.tq) d
),
f_kw AS (
    SELECT f_matched.key, sum(f_idf.idf)
           / nullif(greatest((SELECT sum(idf) FROM f_idf),
                             %(min_terms)s * ln(1 + ((SELECT n FROM f_total) + 0.5) / 0.5)), 0) AS ks
    FROM f_matched JOIN f_idf ON f_matched.tsv @@ f_idf.tq GROUP BY f_matched.key
),
f_vec AS (
    SELECT f.id AS key FROM fact_memory f
    WHERE """ + _F_WHERE + """ AND f.embedding IS NOT NULL ORDER BY f.embedding <=> %(qvec)s LIMIT %(pool)s
),
f_cand AS (
    SELECT key FROM f_vec UNION SELECT key FROM (SELECT key FROM f_kw ORDER BY ks DESC LIMIT %(pool)s) k
)"""

_FACTS_SELECT = """
SELECT 'fact' AS kind, f.id::text AS id, f.content, f.valid_from AS created_at, NULL AS thread_id,
       NULL::uuid AS summary_id, f.category AS role, NULL AS name, f.valid_from AS t0, f.valid_from AS t1, f.metadata,
       coalesce(1 - (f.embedding <=> %(qvec)s), 0) AS vs, coalesce(f_kw.ks, 0) AS ks,
       NULL::bigint AS prev_id, NULL::bigint AS next_id, NULL::bigint AS first_id, NULL::bigint AS last_id,
       NULL::bigint AS n_covered, false AS spk, """ + _terms("f") + """
FROM fact_memory f JOIN f_cand ON f_cand.key = f.id LEFT JOIN f_kw ON f_kw.key = f.id
WHERE f.user_id = %(uid)s"""


# A last row says that some of the user's messages still wait for their embedding, so
# the search embeds them and runs again (the common case stays one statement).
_PENDING_ROW = ("\nSELECT 'pending', " + _MARK_HEAD + "0::float8, 0::float8" + _MARK_TAIL
                + "\nWHERE EXISTS (SELECT 1 FROM conversational_memory WHERE user_id = %(uid)s AND embedding IS NULL"
                  " AND content <> '')")

# In the switching shape, a row with the user's message count (up to the switch point + 1,
# in ``vs``): the next search of the user picks how the statement is planned by it.
_SIZE_ROW = "\nSELECT 'size', " + _MARK_HEAD + "(SELECT n FROM m_size)::float8, 0::float8" + _MARK_TAIL

# In the indexed-only statement (``large``, sent for a user last seen above the switch
# point), a row saying that the user's history is no longer above it: the search runs
# again with the switching statement, so what a search finds never depends on the hint.
_SMALL_ROW = ("\nSELECT 'small', " + _MARK_HEAD + "0::float8, 0::float8" + _MARK_TAIL
              + "\nWHERE (SELECT n FROM m_size) <= %(switch)s")

# In the exact-only statement (``small``, sent for a user last seen at or under the switch
# point), a row saying that the user's history is now above it: the exact half then does no
# work (its guard), and the search runs again with the switching statement.
_LARGE_ROW = ("\nSELECT 'large', " + _MARK_HEAD + "0::float8, 0::float8" + _MARK_TAIL
              + "\nWHERE (SELECT n FROM m_size) > %(switch)s")

_UNION = "\nUNION ALL"


@functools.lru_cache(maxsize=2)
def _keyword_first_query(shape: str) -> tuple[str, tuple[str, ...]]:
    """The first of the two statements of the exact (``small``) or indexed (``large``) shape,
    numbered as :func:`_search_query` numbers the search statement."""
    return numbered(sql.SQL(_KEYWORD_FIRST if shape == "small" else _INDEXED_FIRST))


@functools.lru_cache(maxsize=32)
def _search_query(kinds: tuple[str, ...], shape: str = "auto") -> tuple[str, tuple[str, ...]]:
    """:func:`_search_statement` with PostgreSQL's own placeholders (``$1``...), and the
    parameter names in their order: sent as it is (``Sql.raw``), not parsed per search."""
    return numbered(_search_statement(kinds, shape))


def _search_statement(kinds: tuple[str, ...], shape: str = "auto") -> sql.SQL:
    """The one statement of a search over ``kinds``; ``shape`` exact / indexed / auto (switch),
    or ``large``: the indexed shape alone, for a user last seen above the switch point, which
    says so (``_SMALL_ROW``) if the user no longer is (planning the exact shape's half of the
    switching statement was a fifth of a search at 100k messages of one user); or ``small``:
    the exact shape alone, for a user last seen at or under it, which says so (``_LARGE_ROW``)
    if the user no longer is (planning the switching statement cost the server 1.4x the
    exact-only one at LoCoMo size; PostgreSQL plans it for its values five times per
    connection before it keeps a generic plan, and a smaller plan starts faster every run);
    or ``near``: what the exact shape needs the vector for (the second of ``_KEYWORD_FIRST``'s
    two statements); ``large-rest`` what the indexed one needs it for (the second of
    ``_INDEXED_FIRST``'s); :func:`_two_statement_rows` merges either pair.

    Assembled from the literal blocks above (no text is formatted into them).
    """
    ctes = [_HEAD]
    selects = []
    if "messages" in kinds and shape == "near":
        ctes.append(_SIZE)
        selects.append(_MSG_EXACT_NEAR + _UNION + _MSG_DISTANCES)
    elif "messages" in kinds and shape == "large-rest":
        ctes.append(_MSG_IDX_REST)
        selects.append(_MSG_NEAR_SELECT + _UNION + _MSG_DISTANCES_BY_KEY)
    elif "messages" in kinds:
        if shape in ("exact", "auto", "small"):
            ctes.append(_MSG_EXACT)
        if shape in ("indexed", "auto", "large"):
            ctes.append(_MSG_INDEXED)
        if shape in ("auto", "large", "small"):
            ctes.append(_SIZE)
        if shape in ("auto", "small"):
            selects.append("(" + _MSG_EXACT_SELECT + " AND (SELECT n FROM m_size) <= %(switch)s"
                           + _MSG_EXACT_ORDER + ")")
        if shape in ("auto", "large"):
            selects.append("(" + _MSG_INDEXED_SELECT + " AND (SELECT n FROM m_size) > %(switch)s"
                           + _MSG_EXACT_ORDER + ")")
        elif shape != "small":
            selects.append("(" + (_MSG_EXACT_SELECT if shape == "exact" else _MSG_INDEXED_SELECT)
                           + _MSG_EXACT_ORDER + ")")
    if "summaries" in kinds:
        ctes.append(_SUMMARIES)
        selects.append(_SUMMARIES_SELECT)
    if "facts" in kinds:
        ctes.append(_FACTS)
        selects.append(_FACTS_SELECT)
    if "messages" in kinds:
        if shape in ("auto", "large", "small"):
            selects.append(_SIZE_ROW)
        if shape == "large":
            selects.append(_SMALL_ROW)
        if shape == "small":
            selects.append(_LARGE_ROW)
        if shape not in ("near", "large-rest"):  # the first statement said whether messages wait for embedding
            selects.append(_PENDING_ROW)
    return sql.SQL("WITH " + "".join(ctes) + _UNION.join(selects))  # literal blocks


#: The distinct speaker names of one user, by a loose scan of the names index (one
#: probe per distinct name, however many messages), the user's message count (kept on
#: write, migration 012) and whether the user has summaries and facts: read together when a
#: user's names are not cached, so a user's first search is planned as the shape its history
#: needs (unseen, it was planned for its values, and an unseen large history sent the
#: exact-only statement first, to be told so) and sends the halves its kinds need.
_NAMES = """
WITH RECURSIVE n AS (
    (SELECT name FROM conversational_memory WHERE user_id = %(uid)s AND name IS NOT NULL ORDER BY name LIMIT 1)
    UNION ALL
    SELECT (SELECT c.name FROM conversational_memory c WHERE c.user_id = %(uid)s AND c.name > n.name
            ORDER BY c.name LIMIT 1) FROM n WHERE n.name IS NOT NULL
) SELECT ARRAY(SELECT name FROM n WHERE name IS NOT NULL LIMIT %(max)s) AS names,
         coalesce((SELECT messages FROM conversational_stats WHERE user_id = %(uid)s), 0) AS messages,
         """ + _HAS_KINDS


_PENDING = sql.SQL(
    "SELECT user_id, id, role, content, name FROM conversational_memory"
    " WHERE embedding IS NULL AND content <> ''{user} ORDER BY id LIMIT %(n)s FOR UPDATE SKIP LOCKED")
_USER_FILTER = sql.SQL(" AND user_id = %(uid)s")


class MemorySearch(Table):
    """``search_memory``: one ranked list over a user's past messages, summaries and facts."""

    def search_memory(
        self,
        query: str,
        *,
        user_id: str,
        k: int = 10,
        scope: str | Iterable[str] | None = None,
        thread_id: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        now: datetime | None = None,
        time_mode: str = "boost",
        min_score: float | None = None,
        method: str = "hybrid",
        weights: SearchWeights | None = None,
        shape: str = "auto",
    ) -> list[MemoryHit]:
        """The user's past messages, summaries and facts most relevant to ``query``, best first.

        ``scope``: "messages", "summaries", "facts", or several of them (default: all).
        ``thread_id``, ``since`` and ``until`` filter; a time expression in the query
        ("last May") is resolved against ``now`` and boosts (or, with
        ``time_mode="filter"``, filters to) that range. Hits scoring below
        ``min_score`` are dropped, so an unanswerable question can return nothing.
        ``shape`` is for benchmarks: "exact" or "indexed" forces one execution shape for
        messages; "auto" (the default) picks by the user's message count.
        """
        return run(self.db, self.search_op(query, user_id=user_id, k=k, scope=scope, thread_id=thread_id,
                                           since=since, until=until, now=now, time_mode=time_mode,
                                           min_score=min_score, method=method, weights=weights, shape=shape))

    def search_op(self, query: str, *, user_id: str, k: int = 10, scope: str | Iterable[str] | None = None,
                  thread_id: str | None = None, since: datetime | None = None, until: datetime | None = None,
                  now: datetime | None = None, time_mode: str = "boost", min_score: float | None = None,
                  method: str = "hybrid", weights: SearchWeights | None = None,
                  shape: str = "auto") -> Op[list[MemoryHit]]:
        """:meth:`search_memory` as an operation (``memory.store.ops``)."""
        results = yield from self.search_many_op(
            [query], user_id=user_id, k=k, scope=scope, thread_id=thread_id, since=since, until=until, now=now,
            time_mode=time_mode, min_score=min_score, method=method, weights=weights, shape=shape)
        return results[0]

    def search_memory_many(
        self,
        queries: Sequence[str],
        *,
        user_id: str,
        k: int = 10,
        scope: str | Iterable[str] | None = None,
        thread_id: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        now: datetime | None = None,
        time_mode: str = "boost",
        min_score: float | None = None,
        method: str = "hybrid",
        weights: SearchWeights | None = None,
        shape: str = "auto",
    ) -> list[list[MemoryHit]]:
        """:meth:`search_memory` for several queries of one user: one list of hits per query.

        The queries are embedded in one batch and searched on one connection.
        """
        return run(self.db, self.search_many_op(
            queries, user_id=user_id, k=k, scope=scope, thread_id=thread_id, since=since, until=until, now=now,
            time_mode=time_mode, min_score=min_score, method=method, weights=weights, shape=shape))

    def search_many_op(self, queries: Sequence[str], *, user_id: str, k: int = 10,
                       scope: str | Iterable[str] | None = None, thread_id: str | None = None,
                       since: datetime | None = None, until: datetime | None = None, now: datetime | None = None,
                       time_mode: str = "boost", min_score: float | None = None, method: str = "hybrid",
                       weights: SearchWeights | None = None, shape: str = "auto") -> Op[list[list[MemoryHit]]]:
        """:meth:`search_memory_many` as an operation (``memory.store.ops``)."""
        if min_score is not None:
            min_score = check_number(min_score, "min_score")
        found = yield from self._found_many_op(queries, user_id=user_id, k=k, scope=scope, thread_id=thread_id,
                                               since=since, until=until, now=now, time_mode=time_mode,
                                               method=method, weights=weights, shape=shape)
        w = weights or DEFAULT_WEIGHTS
        return [_rank(candidates, method, w, query, self._k(k), min_score)
                for query, candidates in zip(queries, found, strict=True)]

    def _found_many_op(self, queries: Sequence[str], *, user_id: str, k: int = 10,
                       scope: str | Iterable[str] | None = None, thread_id: str | None = None,
                       since: datetime | None = None, until: datetime | None = None, now: datetime | None = None,
                       time_mode: str = "boost", method: str = "hybrid", weights: SearchWeights | None = None,
                       shape: str = "auto") -> Op[list[list[_Candidate]]]:
        """Each query's found rows, not yet ranked (private shape; ``bench/recall.py`` ranks
        the same rows again under other weights)."""
        if isinstance(queries, (str, bytes)) or not isinstance(queries, Sequence):
            raise InvalidInputError("queries must be a list of query strings")
        if len(queries) > self.settings.max_batch:
            raise InvalidInputError(f"at most {self.settings.max_batch} queries per call")
        texts = [self._query(q) for q in queries]
        uid = self._uid(user_id)
        tid = self._tid(thread_id) if thread_id is not None else None
        k = self._k(k)
        kinds = _check_scope(scope)
        if method not in METHODS:
            raise InvalidInputError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
        if time_mode not in ("boost", "filter", "off"):
            raise InvalidInputError("time_mode must be 'boost', 'filter' or 'off'")
        for name, value in (("since", since), ("until", until), ("now", now)):
            if value is not None and not isinstance(value, datetime):
                raise InvalidInputError(f"{name} must be a datetime")
        if weights is not None and not isinstance(weights, SearchWeights):
            raise InvalidInputError(f"weights must be a SearchWeights, got {type(weights).__name__}")
        w = weights or DEFAULT_WEIGHTS
        if w.fusion not in ("linear", "rrf"):
            raise InvalidInputError("fusion must be 'linear' or 'rrf'")
        if shape not in SHAPES:
            raise InvalidInputError(f"shape must be one of {', '.join(SHAPES)}, got {shape!r}")
        if not texts:
            return []

        names = (yield Call(self._speaker_names, (uid,))) if "messages" in kinds else []
        plans = []
        for query in texts:
            span = parse_time_range(query, now) if time_mode != "off" else None
            text = span.strip(query) if span and span.strip(query) else query
            lo, hi = _aware(since), _aware(until)
            if span is not None and time_mode == "filter":
                lo = max(lo, span.start) if lo else span.start
                hi = min(hi, span.end) if hi else span.end
            named, semantic = speakers_in(text, names)
            speakers = [n for n in names if n.casefold() in named]
            plans.append((span, text, lo, hi, speakers, semantic))
        semantics = [p[5] for p in plans]
        known = self._cached_vectors(semantics)
        s = self.settings
        pool = max(4 * k, 50)
        params = [dict(uid=uid, tid=tid, since=lo, until=hi, pool=pool, prepool=PREPOOL * pool,
                       speakers=speakers, nw=w.neighbour_weight, min_terms=w.min_terms, q=text,
                       max_terms=s.search_max_terms, cap=s.search_term_candidates, sample=s.search_sample_rows,
                       lookups=COMMON_LOOKUPS, switch=s.search_exact_max_rows,
                       filtered=tid is not None or lo is not None or hi is not None)
                  for (_, text, lo, hi, speakers, _) in plans]
        planning = self._planning(uid, kinds, shape)
        shaped = self._statement_shape(uid, kinds, shape)
        stmt = _search_query(kinds, shaped)
        if shaped in ("small", "large") and known is None:
            # the keyword half runs while the queries are embedded (the rows are those ``stmt`` finds)
            rows = yield from self._keyword_ahead_op(kinds, shaped, params, Call(self._embed, (semantics,)),
                                                     planning)
        else:
            for p, qvec in zip(params, known or (yield Call(self._embed, (semantics,))), strict=True):
                p["qvec"] = qvec
            rows = yield from self._search_rows_op(stmt, params, planning)
        if rows is None or any(row["kind"] in ("small", "large") for row in rows[0]):
            # The user is not on the side of the switch point the statement was sent for (the
            # history crossed it since it was seen, or an unseen user is large): the switching
            # statement decides, planned for its values.
            stmt, planning = _search_query(kinds, shape), "custom"
            rows = yield from self._search_rows_op(stmt, params, planning)
        if rows[0] and rows[0][-1]["kind"] == "pending":
            # Messages written with embed=False: embed them, then search again.
            yield Call(self.embed_pending_messages, kwargs={"user_id": uid})
            rows = yield from self._search_rows_op(stmt, params, planning)
        for row in rows[0]:
            if row["kind"] == "size":
                self._sizes.put(uid, int(row["vs"]))
        return [[_candidate(row, span) for row in found if row["kind"] not in ("pending", "size", "small", "large")]
                for (span, *_), found in zip(plans, rows, strict=False)]

    def _keyword_ahead_op(self, kinds: tuple[str, ...], shaped: str, params: Sequence[dict[str, Any]],
                          embed: Call, planning: str | None) -> Op[list[list[dict[str, Any]]] | None]:
        """The exact (``shaped`` "small") or indexed ("large") shape in two statements
        (``_KEYWORD_FIRST``, ``_INDEXED_FIRST``): the keyword half goes out before the queries
        are embedded and runs while they are, the rest goes out right behind the embedding, in
        the same pipeline (``Ahead.then``: the first hands it what it needs through settings,
        ``handed``), and the transaction commits there: one round trip. Each query's rows, or
        None (the transaction ended) when the user's history is no longer on that side of the
        switch point, or has summaries or facts that the rest was sent without (it is sent for
        the kinds the user had at the last search: :meth:`_expected_kinds`), for the switching
        statement to search. Sets each query's ``qvec`` in ``params``."""
        uid = params[0]["uid"]
        large = shaped == "large"
        first, first_names = _keyword_first_query(shaped)
        # The indexed shape's keyword statement reads by primary keys only, every join a probe per
        # row (LATERAL ... OFFSET 0), so its generic plan is the plan for any user, and saves
        # planning it per search (~1 ms at 100k messages); what needs the vector is planned for
        # its values (the nearest rows through HNSW or, for a user of a few thousand rows among
        # millions, by a sort of that user's rows).
        table_rows = (yield Call(self._table_rows, ("conversational_memory",))) if large and not params[0]["filtered"] \
            else 0.0
        yield from self._search_settings_op(uid, "generic" if large else planning, snapshot=True)
        expected = self._expected_kinds(uid, kinds)
        rest, rest_names = _search_query(expected, "large-rest" if large else "near")
        for slot, p in enumerate(params):
            p["slot"] = slot

        plan = []
        if large and expected == ("messages",) and holds_half(self._sizes.get(uid) or 0, table_rows):
            # plan-free (base.NO_SORT), on the generic plan asked for above; with summaries' or facts'
            # halves (whose share of their tables is not known here) it is planned for its values
            plan = [Sql(sql.SQL(NO_SORT), fetch="none", user=uid)]
        elif large:
            plan = [Sql(sql.SQL(CUSTOM_PLANS), fetch="none", user=uid)]

        def then(vectors: Sequence[Any]) -> list[Sql]:
            for p, qvec in zip(params, vectors, strict=True):
                p["qvec"] = qvec
            return plan + [Sql(rest, [p[n] for n in rest_names], dict, user=uid, raw=True, last=i == len(params) - 1)
                           for i, p in enumerate(params)]

        _, got = yield Ahead(tuple(Sql(first, [p[n] for n in first_names], dict, user=uid, raw=True)
                                   for p in params), embed, then)
        firsts, rests = got[:len(params)], got[len(params):]
        head = next(r for r in firsts[0] if r["kind"] == "head")
        self._kinds_seen.put(uid, _kinds_number(head))
        if (head["n"] > self.settings.search_exact_max_rows) != large:
            return None
        self._sizes.put(uid, int(head["n"]))
        if head["pending"]:  # messages to embed first: the caller does, and searches again
            return [[{"kind": "pending"}] for _ in params]
        if any(head["has_" + k] and k not in expected for k in ("summaries", "facts")):
            return None  # summaries or facts since the last search: the switching statement has them
        rows = []
        for p, got1, got2 in zip(params, firsts, rests, strict=True):
            if not large:  # the nearest rows' keyword scores, from every scored row's (exact float8 as text)
                scores = next(r for r in got1 if r["kind"] == "head")["kw"] or {}
                for r in got2:
                    if r["kind"] == "message":
                        r["ks"] = float(scores[r["id"]]) if r["id"] in scores else None
            rows.append(_two_statement_rows(got1, got2, p["pool"]))
        return rows

    def _expected_kinds(self, uid: str, kinds: tuple[str, ...]) -> tuple[str, ...]:
        """The kinds the statement after the embedding searches (sent before the first statement says
        which the user has): messages, and summaries and facts if the user had any at the last search,
        or, not seen for a while, every kind asked for (a half that finds nothing costs ~0.4 ms at
        LoCoMo size; one left out costs the search again, the one statement)."""
        seen = self._kinds_seen.get(uid)
        return tuple(k for k in kinds if k == "messages" or seen is None
                     or seen & (1 if k == "summaries" else 2))

    @functools.cached_property
    def _kinds_seen(self) -> SizeHints:
        """Per user, whether they had summaries (1) and facts (2) when last seen (:func:`_kinds_number`)."""
        return SizeHints()

    def _statement_shape(self, uid: str, kinds: tuple[str, ...], shape: str) -> str:
        """``large`` (the indexed shape alone, checking the user's size itself) for a user
        last seen above the switch point, ``small`` (the exact shape alone, likewise) for one
        seen at or under it and for one not seen yet (the speaker names' statement notes the
        count, so a user is rarely unseen; planned for its values, the exact-only statement
        costs the server about 0.85x the switching one at LoCoMo size; an unseen large history
        is told by its marker row and searched by the switching statement next); else the
        shape asked for."""
        if shape != "auto" or "messages" not in kinds:
            return shape
        known = self._sizes.get(uid)
        return "large" if known is not None and known > self.settings.search_exact_max_rows else "small"

    def _planning(self, uid: str, kinds: tuple[str, ...], shape: str) -> str | None:
        """How the search statement is planned (``Table._search_settings_op``): the generic
        plan at once where the user is known to be well inside the exact shape (at most half
        the switch point), else for its values ("custom"). A generic plan, blind to the
        user's row count, can take a hundred times longer on a large history; where the
        exact shape runs it is the cheaper (planning the statement costs more than running
        it there), and PostgreSQL's own choice would plan the first five runs on each
        connection for their values before it settles on it (2.2 ms more per run at LoCoMo
        size)."""
        if "messages" not in kinds or shape == "exact":
            return None
        known = self._sizes.get(uid) if shape == "auto" else None
        return plans_for(known, self.settings.search_exact_max_rows)

    @functools.cached_property
    def _sizes(self) -> SizeHints:
        return SizeHints()

    def _search_rows_op(self, stmt: tuple[str, tuple[str, ...]], params: Sequence[dict[str, Any]],
                        planning: str | None = None) -> Op[list[list[dict[str, Any]]]]:
        """Every query's rows, in one transaction (its search settings first; one round trip for
        one query: ``memory.store.ops``); ``stmt`` is :func:`_search_query`'s text and parameter names."""
        text, names = stmt
        uid = params[0]["uid"]
        yield from self._search_settings_op(uid, planning)
        rows = []
        for i, p in enumerate(params):
            rows.append((yield Sql(text, [p[n] for n in names], dict, user=uid, raw=True, last=i == len(params) - 1)))
        return rows

    def _speaker_names(self, uid: str) -> list[str]:
        """The user's distinct speaker names (``name`` of their messages), at most ``MAX_NAMES``
        (cached for a while: :class:`memory.retrieval.speakers.SpeakerNames`); loading them
        notes the user's message count too (``_sizes``)."""
        def load() -> list[str]:
            names, count, kinds = run(self.db, self._names_op(uid))
            self._sizes.put(uid, int(count))
            self._kinds_seen.put(uid, kinds)
            return list(names)

        return self.store.speakers.get(uid, load)

    def _names_op(self, uid: str) -> Op[tuple[list[str], int, int]]:
        """The user's speaker names, message count and kinds (:meth:`_kinds_seen`'s number): BEGIN,
        the user scope, the statement and COMMIT in one round trip (opened as ``db.connection``
        opens a transaction: four)."""
        row = yield Sql(sql.SQL(_NAMES), dict(uid=uid, max=MAX_NAMES), dict, fetch="one", user=uid, last=True)
        return (row["names"], row["messages"], _kinds_number(row)) if row is not None else ([], 0, 0)

    _backfill_refused = False

    def embed_pending_messages(self, *, user_id: str | None = None, batch_size: int = 256,
                               limit: int | None = None) -> int:
        """Embed messages written without an embedding, in batches; return how many.

        Rows are claimed with ``FOR UPDATE SKIP LOCKED``, so concurrent callers share the
        work instead of embedding the same rows twice.
        """
        uid = self._uid(user_id) if user_id is not None else None
        batch_size = check_positive_int(batch_size, "batch_size", maximum=10_000)
        if limit is not None:
            limit = check_positive_int(limit, "limit")
        done = 0
        while not self._backfill_refused and (limit is None or done < limit):
            size = batch_size if limit is None else min(batch_size, limit - done)
            try:
                with self.db.connection(uid) as conn:
                    # One user's rows by ``user_id = %s`` (one shard on Citus); every user's without.
                    rows = conn.execute(_PENDING.format(user=_USER_FILTER if uid is not None else sql.SQL("")),
                                        dict(uid=uid, n=size)).fetchall()
                    if not rows:
                        break
                    vectors = self._embed([embedding_text(role, content, name) for _, _, role, content, name in rows])
                    with conn.cursor() as cur:
                        cur.executemany(
                            "UPDATE conversational_memory SET embedding = %s WHERE user_id = %s AND id = %s",
                            [(vec, ruid, rid) for (ruid, rid, _, _, _), vec in zip(rows, vectors, strict=False)])
            except (AccessDeniedError, psycopg.errors.InsufficientPrivilege, psycopg.errors.ReadOnlySqlTransaction):
                # A role with only SELECT (or a read-only replica) may not fill embeddings in:
                # it reads what is there, and stops asking.
                self._backfill_refused = True
                break
            done += len(rows)
            if len(rows) < size:
                break
        return done


def _kinds_number(row: Any) -> int:
    """A row's ``has_summaries`` and ``has_facts`` (``_HAS_KINDS``) as one number: 1 and 2 added."""
    return int(row["has_summaries"]) + 2 * int(row["has_facts"])


def _two_statement_rows(first: Sequence[dict[str, Any]], rest: Sequence[dict[str, Any]],
                        pool: int) -> list[dict[str, Any]]:
    """A shape's rows from its two statements (``_KEYWORD_FIRST`` and ``near``, ``_INDEXED_FIRST``
    and ``large-rest``) as its one statement sends them: the nearest messages and the ``pool``
    best of both statements' by keyword score (ties to the lower id), each with its distance, its
    keyword score (0 without any of the words) and ``next_id`` where the turn after it is a
    candidate too, in thread order; then the summaries' and facts' rows. The rows are the
    statements' own dicts, completed in place."""
    distance = {r["id"]: r["vs"] for r in rest if r["kind"] == "distance"}
    found = {r["id"]: r for r in rest if r["kind"] == "message"}
    scored = [r for r in first if r["kind"] == "message" and r["id"] not in found]
    scored += [r for r in found.values() if r["ks"] is not None and r["ks"] > 0]
    scored.sort(key=lambda r: (-r["ks"], int(r["id"])))
    for r in scored[:pool]:
        if r["id"] not in found:
            r["vs"] = distance[r["id"]]
            found[r["id"]] = r
    after = {r["prev_id"]: int(key) for key, r in found.items() if r["prev_id"] is not None}
    for key, r in found.items():
        r["ks"] = r["ks"] or 0.0
        r["next_id"] = after.get(int(key))
    messages = sorted(found.values(), key=lambda r: (r["thread_id"], r["created_at"], int(r["id"])))
    return messages + [r for r in rest if r["kind"] not in ("message", "distance")]


def _check_scope(scope: str | Iterable[str] | None) -> tuple[str, ...]:
    if scope is None or scope == "all":
        return KINDS
    chosen = (scope,) if isinstance(scope, str) else tuple(scope)
    bad = [s for s in chosen if s not in KINDS]
    if bad or not chosen:
        raise InvalidInputError(f"scope must be 'all' or among {', '.join(KINDS)}; got {list(chosen)!r}")
    return tuple(dict.fromkeys(chosen))


def _aware(value: datetime | None) -> datetime | None:
    if value is not None and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value


def _candidate(row: dict[str, Any], span: TimeRange | None) -> _Candidate:
    in_range = None
    if span is not None:
        # a message is at one time (t0/t1 come only with summaries: the span they cover)
        t0, t1 = (row["t0"], row["t1"]) if row["t0"] is not None else (row["created_at"], row["created_at"])
        in_range = bool(t0 < span.end and t1 >= span.start)
    vs, ks = float(row["vs"]), float(row["ks"])
    signals = dict(vector=vs, keyword=ks, speaker=1.0 if row["spk"] else 0.0)
    if in_range is not None:
        signals["time"] = 1.0 if in_range else 0.0
    return _Candidate(row, vs, ks, in_range, signals)


def _words(row: dict[str, Any]) -> tuple[str, ...]:
    """A candidate's words for the keyword feedback, distinct and sorted: its row's stored
    lexemes (``terms``: a tsvector's, which are), or its text taken apart here for a row that
    came without them. (A tuple: splitting into one costs half what a frozenset does, and
    ``feedback_sets`` needs only equal words to be equal.)"""
    terms = row.get("terms")
    return tuple(terms.split()) if terms is not None else tuple(sorted(prose_terms(row["content"] or "")))


def _rank(found: Sequence[_Candidate], method: str, w: SearchWeights, query: str, k: int,
          min_score: float | None = None) -> list[MemoryHit]:
    """The ``k`` best of the found rows as hits, best first (:func:`_order`), those under
    ``min_score`` left out."""
    ranked = _order(found, method, w, query)
    if min_score is not None:
        ranked = [c for c in ranked if c.score >= min_score]
    return [Hit(c.item, c.score, c.signals) for c in ranked[:k]]


def _order(found: Sequence[_Candidate], method: str, w: SearchWeights, query: str) -> list[_Candidate]:
    """Order the found rows by the chosen method; ``score`` is the fused score, ``signals`` its parts.
    The caller's candidates stay as they were: each is copied (a plain constructor call:
    dataclasses.replace costs as much as the rest of the ranking).

    Hybrid (linear): :func:`_linear`. Rank fusion (``fusion="rrf"``) has no absolute scale: a
    score derived from the rank, in (0, 1].
    """
    def time_bonus(c: _Candidate) -> float:
        return w.time_boost if c.in_range else 0.0

    def key(c: _Candidate) -> tuple[str, str]:
        return (c.row["kind"], c.row["id"])

    if method == "hybrid" and w.fusion == "linear":
        return sorted(_linear(found, w, query), key=lambda c: -c.score)
    out = [_Candidate(c.row, c.vector, c.keyword, c.in_range, dict(c.signals), c.score) for c in found]
    if method == "vector":
        for c in out:
            c.score = c.vector + time_bonus(c)
    elif method == "keyword":
        for c in out:
            c.score = c.keyword + time_bonus(c)
        out = [c for c in out if c.keyword > 0]
    else:
        by_key = {key(c): c for c in out}
        vec = sorted(by_key, key=lambda k: -by_key[k].vector)
        kw = sorted((k for k in by_key if by_key[k].keyword > 0), key=lambda k: -by_key[k].keyword)
        order = fuse_rankings([vec, kw], [1.0, w.keyword_weight], k=w.rrf_k)
        n = len(order)
        for rank, k in enumerate(order):
            c = by_key[k]
            c.score = (n - rank) / n + time_bonus(c)
    return sorted(out, key=lambda c: -c.score)


def _linear(found: Sequence[_Candidate], w: SearchWeights, query: str) -> list[_Candidate]:
    """The hybrid ranking's scores, on copies of ``found``, in its order.

    Each hit's own score is ``vector + keyword_weight * keyword + speaker_weight * speaker +
    time_boost * time``: the one fusion of every reader (memory.retrieval.fusion.fuse: the
    weighted sum of the signals vector, keyword, speaker, time, in that order) written out,
    as it runs for every candidate of every search; the same sums, so the same floats. A
    message then gains ``adjacent_weight`` times the better own score of the turns just
    before and after it (when they are candidates too: evidence often spans two turns,
    "did you go?" / "yes, on Sunday"), and ``thread_weight`` times the mean own score of its
    thread's best three candidates (a thread that is about the question lifts its turns).
    Last, every hit gains ``feedback_weight`` times its keyword feedback
    (:func:`memory.retrieval.feedback.feedback_sets`) from the ranking so far.
    """
    kw_w, sp_w, tb = w.keyword_weight, w.speaker_weight, w.time_boost
    out, messages = [], []
    by_id: dict[int, float] = {}
    best: dict[str, list[float]] = {}
    for c in found:
        row, signals = c.row, dict(c.signals)
        own = c.vector + kw_w * c.keyword + sp_w * signals.get("speaker", 0.0) + tb * (1.0 if c.in_range else 0.0)
        mine = _Candidate(row, c.vector, c.keyword, c.in_range, signals, own)
        out.append(mine)
        if row["kind"] == "message":
            messages.append(mine)
            by_id[int(row["id"])] = own
            if row["thread_id"] is not None:
                best.setdefault(row["thread_id"], []).append(own)
    thread_mean = {t: sum(sorted(v, reverse=True)[:3]) / min(len(v), 3) for t, v in best.items()}
    aw, tw = w.adjacent_weight, w.thread_weight
    for c in messages:
        row = c.row
        before, after = by_id.get(row["prev_id"]), by_id.get(row["next_id"])
        adjacent = after if before is None else before if after is None else max(before, after)
        neighbour = aw * (0.0 if adjacent is None else adjacent)
        thread = tw * thread_mean.get(row["thread_id"] or "", 0.0)
        c.signals["neighbour"] = neighbour
        c.signals["thread"] = thread
        c.score += neighbour + thread
    if w.feedback_weight:
        out.sort(key=lambda c: -c.score)
        lift = feedback_sets([_words(c.row) for c in out], prose_terms(query), top=w.feedback_top,
                             words=w.feedback_words)
        for c, f in zip(out, lift, strict=True):
            c.signals["feedback"] = f
            c.score += w.feedback_weight * f
    return out
