"""search_memory: one ranked list over a user's past messages, summaries and facts.

The third strategy beside truncation and summary: old turns found again on demand.
Consolidated messages stay in ``conversational_memory`` (only their ``summary_id`` is
set), so they are searched like any other; their hits carry the summary id so the
agent can expand it, and the summaries themselves are in the same list.

Two signals per candidate, both absolute so scores mean the same across queries:

* **vector**: cosine similarity of the query with the message's own embedding
  (``role: content``). Candidates are scored exactly over the user's rows (a user has
  hundreds to thousands of rows: an exact scan is a few milliseconds and cannot miss
  what an approximate index would);
* **keyword**: IDF-weighted coverage of the query's stemmed words (English
  stemming, numbers kept), computed in SQL over the user's rows: the share of the
  query's information (sum of the IDFs of its words) that the row matches. Messages
  are matched on their context window (``conversational_context``, migration 004:
  the message at full weight, the two messages before it in the thread at
  ``neighbour_weight``),
  so "Yes, I still use it every day" is found through the question it answers, while
  the hit is the message itself. A query word that appears nowhere lowers the score,
  so an unanswerable question scores low instead of matching on one common word;
  and the denominator is at least ``min_terms`` rare words' worth, so a query with a
  single informative word ("what do I do for a living" -> "live") cannot reach full
  keyword score by matching it.

They are fused linearly (``score = vector + keyword_weight * keyword``); rank fusion
with a flat constant is available (``fusion="rrf"``) for comparison, and
``bench/recall.py`` measures both. Because the fused score is absolute, a caller can
set ``min_score`` and get an empty list rather than invented matches.

Time: a time expression in the query ("last May", "two weeks ago") is resolved
against ``now`` (:mod:`memory.retrieval.time_phrases`) and removed from the words matched; rows in
that range get ``time_boost`` added (``time_mode="boost"``, the default) or the range
becomes a hard filter (``time_mode="filter"``). Explicit ``since``/``until`` are
always filters.

Embeddings of messages written with ``embed=False`` are filled in batches by
:meth:`SearchMixin.embed_pending_messages`; ``search_memory`` runs it for the user
first, so a deferred row is never missed. A role that may only read (SELECT grants,
or a read-only transaction on a replica) searches what is there: the backfill is
skipped from its first refusal on, and the keyword half still finds those rows.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, Iterable, Sequence

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from memory.retrieval.fusion import fuse_rankings
from memory.tables.base import TERMS_CTE, Table
from memory.tables.conversation import embedding_text
from memory.errors import AccessDeniedError, InvalidInputError
from memory.retrieval.time_phrases import TimeRange, parse_time_range
from memory.store.validation import check_number, check_positive_int, check_text

KINDS = ("messages", "summaries", "facts")
METHODS = ("hybrid", "vector", "keyword")
SHAPES = ("auto", "exact", "indexed")


@dataclass(frozen=True)
class SearchWeights:
    """How the signals are combined; ``bench/recall.py`` measures the choices."""

    keyword_weight: float = 0.5
    neighbour_weight: float = 0.5
    min_terms: float = 2.0
    time_boost: float = 0.15
    fusion: str = "linear"  # or "rrf"
    rrf_k: int = 60


DEFAULT_WEIGHTS = SearchWeights()


@dataclass
class MemoryHit:
    """One search result. ``summary_id`` is set on consolidated messages and on summaries."""

    kind: str  # "message" | "summary" | "fact"
    id: str  # message id, summary id or fact id (as text)
    content: str
    score: float
    created_at: datetime | None
    thread_id: str | None = None
    summary_id: uuid.UUID | None = None
    role: str | None = None  # message role, or the fact's category
    vector_score: float = 0.0
    keyword_score: float = 0.0
    in_time_range: bool | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def message_id(self) -> int | None:
        return int(self.id) if self.kind == "message" else None


# One statement per search; every table in it is filtered or joined by user_id, so on
# Citus it runs on the user's shard. Per kind, ``matched`` are the user's rows (under the filters)
# whose keyword text (``tsv``, found through its gin index) has any query word; ``tsv_a``
# is the full-weight part (the message itself, not its neighbours). Every candidate gets
# both scores; candidates are the top ``pool`` of either signal. This is the exact shape:
# every matching row is scored, so it is used where a user's rows are few (summaries,
# facts, and messages up to ``search_exact_max_rows``).
_EXACT = """
{p}_total AS (SELECT count(*) AS n FROM {source} WHERE {where}),
{p}_matched AS (
    SELECT {key} AS key, {tsv} AS tsv, {tsv_a} AS tsv_a FROM {source}
    WHERE {where} AND {tsv} @@ (SELECT tq FROM tsq)
),
{p}_idf AS (
    SELECT lex.tq, ln(1 + ((SELECT n FROM {p}_total) - d.n + 0.5) / (d.n + 0.5)) AS idf
    FROM lex CROSS JOIN LATERAL (SELECT count(*) AS n FROM {p}_matched WHERE {p}_matched.tsv @@ lex.tq) d
),
{p}_kw AS (
    SELECT {p}_matched.key,
           sum({p}_idf.idf * CASE WHEN {p}_matched.tsv_a @@ {p}_idf.tq THEN 1.0 ELSE %(nw)s END)
           / nullif(greatest((SELECT sum(idf) FROM {p}_idf),
                             %(min_terms)s * ln(1 + ((SELECT n FROM {p}_total) + 0.5) / 0.5)), 0) AS ks
    FROM {p}_matched JOIN {p}_idf ON {p}_matched.tsv @@ {p}_idf.tq GROUP BY {p}_matched.key
),
{p}_vec AS (
    SELECT {key} AS key, 1 - ({alias}.embedding <=> %(qvec)s) AS vs FROM {source}
    WHERE {where} AND {alias}.embedding IS NOT NULL ORDER BY vs DESC LIMIT %(pool)s
),
{p}_cand AS (
    SELECT key FROM {p}_vec UNION SELECT key FROM (SELECT key FROM {p}_kw ORDER BY ks DESC LIMIT %(pool)s) k
)"""

_EXACT_SELECT = """
SELECT {cols}, coalesce(1 - ({alias}.embedding <=> %(qvec)s), 0) AS vs, coalesce({p}_kw.ks, 0) AS ks
FROM {source} JOIN {p}_cand ON {p}_cand.key = {key} LEFT JOIN {p}_kw ON {p}_kw.key = {key}
WHERE {alias}.user_id = %(uid)s"""

# The indexed shape, for a user with many messages: bounded work whatever the history.
# * vector: the nearest ``pool`` messages through HNSW (iterative scan keeps the user and
#   time filters fed);
# * keyword: each query word brings at most ``cap`` of the user's rows from the gin index;
#   a word with fewer rows than that has its exact document frequency, a more common one
#   an estimate from a fixed sample of the user's rows (``sample``), so a common word
#   weighs little, as in the exact shape;
# * those rows are pre-ranked by the summed IDF of the words that brought them, and the
#   best ``prepool`` of them plus the vector candidates get the keyword score of the
#   exact shape (same IDF coverage formula over the window), N the user's message count.
_INDEXED = """
{p}_n AS (SELECT count(*) AS n FROM conversational_context WHERE user_id = %(uid)s),
{p}_sample AS (SELECT context_tsv AS tsv FROM conversational_context WHERE user_id = %(uid)s LIMIT %(sample)s),
{p}_hits AS (
    SELECT lex.ord, h.message_id FROM lex CROSS JOIN LATERAL (
        SELECT message_id FROM conversational_context
        WHERE user_id = %(uid)s AND context_tsv @@ lex.tq LIMIT %(cap)s) h
),
{p}_idf AS (
    SELECT lex.ord, lex.tq, ln(1 + ((SELECT n FROM {p}_n) - d.df + 0.5) / (d.df + 0.5)) AS idf
    FROM lex CROSS JOIN LATERAL (
        SELECT CASE WHEN h.n < %(cap)s THEN h.n::numeric
                    ELSE greatest(%(cap)s, (SELECT n FROM {p}_n)
                                  * (SELECT count(*) FROM {p}_sample s WHERE s.tsv @@ lex.tq)::numeric
                                  / greatest((SELECT count(*) FROM {p}_sample), 1)) END AS df
        FROM (SELECT count(*) AS n FROM {p}_hits WHERE {p}_hits.ord = lex.ord) h) d
),
{p}_vec AS (
    SELECT m.id AS key FROM conversational_memory m
    WHERE {where} AND m.embedding IS NOT NULL ORDER BY m.embedding <=> %(qvec)s LIMIT %(pool)s
),
{p}_pre AS (
    SELECT key FROM {p}_vec UNION SELECT key FROM (
        SELECT h.message_id AS key FROM {p}_hits h JOIN {p}_idf i ON i.ord = h.ord {pre_filter}
        GROUP BY h.message_id ORDER BY sum(i.idf) DESC LIMIT %(prepool)s) k
),
{p}_kw AS (
    SELECT c.message_id AS key,
           (SELECT sum(i.idf * CASE WHEN a.tsv_a @@ i.tq THEN 1.0 ELSE %(nw)s END)
            FROM {p}_idf i WHERE c.context_tsv @@ i.tq)
           / nullif(greatest((SELECT sum(idf) FROM {p}_idf),
                             %(min_terms)s * ln(1 + ((SELECT n FROM {p}_n) + 0.5) / 0.5)), 0) AS ks
    FROM conversational_context c JOIN {p}_pre ON {p}_pre.key = c.message_id AND c.user_id = %(uid)s
    CROSS JOIN LATERAL (SELECT ts_filter(c.context_tsv, ARRAY['a']::"char"[]) AS tsv_a) a
),
{p}_cand AS (
    SELECT key FROM {p}_vec
    UNION SELECT key FROM (
        SELECT {p}_kw.key FROM {p}_kw JOIN conversational_memory m ON m.id = {p}_kw.key
        WHERE {where} AND {p}_kw.ks > 0 ORDER BY {p}_kw.ks DESC LIMIT %(pool)s) k
)"""

#: With a thread or time filter, the pre-ranked keyword rows are filtered first (else the
#: filter applies to the few hundred pre-ranked ones only, which is cheaper).
_PRE_FILTER = "JOIN conversational_memory m ON m.id = h.message_id WHERE {where}"

_FILTERS = (" AND ({t0} < %(until)s OR %(until)s::timestamptz IS NULL)"
            " AND ({t1} >= %(since)s OR %(since)s::timestamptz IS NULL)"
            " AND ({alias}.expires_at IS NULL OR {alias}.expires_at > now())")

_KIND_SQL = {
    "messages": dict(
        source="conversational_memory m JOIN conversational_context c ON c.user_id = m.user_id AND c.message_id = m.id",
        alias="m", key="m.id", tsv="c.context_tsv",
        tsv_a="ts_filter(c.context_tsv, ARRAY['a']::\"char\"[])",
        where="m.user_id = %(uid)s AND (%(tid)s::text IS NULL OR m.thread_id = %(tid)s)",
        t0="m.created_at", t1="m.created_at",
        cols="'message' AS kind, m.id::text AS id, m.content, m.created_at, m.thread_id, m.summary_id, m.role,"
             " m.created_at AS t0, m.created_at AS t1, m.metadata",
    ),
    "summaries": dict(
        source="summary_memory s", alias="s", key="s.summary_id", tsv="s.search_tsv", tsv_a="s.search_tsv",
        where="s.user_id = %(uid)s AND (%(tid)s::text IS NULL OR s.thread_id = %(tid)s)",
        t0="coalesce(s.first_message_at, s.created_at)", t1="coalesce(s.last_message_at, s.created_at)",
        cols="'summary' AS kind, s.summary_id::text AS id, s.description || E'\\n' || s.content AS content,"
             " coalesce(s.last_message_at, s.created_at) AS created_at, s.thread_id, s.summary_id, NULL AS role,"
             " coalesce(s.first_message_at, s.created_at) AS t0, coalesce(s.last_message_at, s.created_at) AS t1,"
             " s.metadata",
    ),
    "facts": dict(
        source="fact_memory f", alias="f", key="f.id", tsv="f.search_tsv", tsv_a="f.search_tsv",
        # Facts belong to the user, not to a thread: a thread filter leaves them out.
        where="f.user_id = %(uid)s AND f.valid_to IS NULL AND %(tid)s::text IS NULL",
        t0="f.valid_from", t1="f.valid_from",
        cols="'fact' AS kind, f.id::text AS id, f.content, f.valid_from AS created_at, NULL AS thread_id,"
             " NULL::uuid AS summary_id, f.category AS role, f.valid_from AS t0, f.valid_from AS t1, f.metadata",
    ),
}

# A last row says that some of the user's messages still wait for their embedding, so
# the search embeds them and runs again (the common case stays one statement).
_PENDING_ROW = ("SELECT 'pending', NULL::text, NULL::text, NULL::timestamptz, NULL::text, NULL::uuid, NULL::text,"
            " NULL::timestamptz, NULL::timestamptz, NULL::jsonb, 0::float8, 0::float8"
            " WHERE EXISTS (SELECT 1 FROM conversational_memory WHERE user_id = %(uid)s"
            " AND embedding IS NULL AND content <> '')")

#: Counts a user's messages up to the switch point (bounded), to pick the exact or indexed shape.
_SIZE = ("m_size AS (SELECT count(*) AS n FROM (SELECT 1 FROM conversational_context"
         " WHERE user_id = %(uid)s LIMIT %(switch)s + 1) s)")


def _parts(kind: str) -> dict[str, str]:
    parts = dict(_KIND_SQL[kind])
    parts["where"] = ("(" + parts["where"] + ")"
                      + _FILTERS.format(t0=parts["t0"], t1=parts["t1"], alias=parts["alias"]))
    return parts


def _search_statement(kinds: tuple[str, ...], shape: str = "auto", filtered: bool = False) -> sql.SQL:
    """The one statement of a search over ``kinds``; ``shape`` exact / indexed / auto (switch)."""
    ctes = [TERMS_CTE, "lex AS (SELECT row_number() OVER () AS ord, lit::tsquery AS tq FROM terms)"]
    selects = []
    for kind in kinds:
        parts = _parts(kind)
        if kind != "messages":
            ctes.append(_EXACT.format(p=kind[0], **parts))
            selects.append(_EXACT_SELECT.format(p=kind[0], **parts))
            continue
        exact_sel = _EXACT_SELECT.format(p="me", **parts)
        indexed_sel = _EXACT_SELECT.format(p="mi", **parts)
        if shape in ("exact", "auto"):
            ctes.append(_EXACT.format(p="me", **parts))
        if shape in ("indexed", "auto"):
            pre_filter = _PRE_FILTER.format(where=parts["where"]) if filtered else ""
            ctes.append(_INDEXED.format(p="mi", pre_filter=pre_filter, **parts))
        if shape == "auto":
            ctes.append(_SIZE)
            selects.append(exact_sel + " AND (SELECT n FROM m_size) <= %(switch)s")
            selects.append(indexed_sel + " AND (SELECT n FROM m_size) > %(switch)s")
        else:
            selects.append(exact_sel if shape == "exact" else indexed_sel)
    if "messages" in kinds:
        selects.append(_PENDING_ROW)
    text = "WITH " + ",\n".join(ctes) + "\n" + "\nUNION ALL\n".join(selects)
    return sql.SQL(text)  # type: ignore[arg-type]  # built from the constants above; values are bound


_PENDING = sql.SQL(
    "SELECT user_id, id, role, content FROM conversational_memory"
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
        query = self._query(query)
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
        if min_score is not None:
            min_score = check_number(min_score, "min_score")
        if w.fusion not in ("linear", "rrf"):
            raise InvalidInputError("fusion must be 'linear' or 'rrf'")
        if shape not in SHAPES:
            raise InvalidInputError(f"shape must be one of {', '.join(SHAPES)}, got {shape!r}")

        span = parse_time_range(query, now) if time_mode != "off" else None
        text = span.strip(query) if span and span.strip(query) else query
        lo, hi = _aware(since), _aware(until)
        if span is not None and time_mode == "filter":
            lo = max(lo, span.start) if lo else span.start
            hi = min(hi, span.end) if hi else span.end

        qvec = self._embed([text])[0]
        s = self.settings
        pool = max(4 * k, 50)
        params = dict(uid=uid, tid=tid, since=lo, until=hi, qvec=qvec, pool=pool, prepool=4 * pool,
                      nw=w.neighbour_weight, min_terms=w.min_terms, q=text, max_terms=s.search_max_terms,
                      cap=s.search_term_candidates, sample=s.search_sample_rows, switch=s.search_exact_max_rows)
        stmt = _search_statement(kinds, shape, filtered=tid is not None or lo is not None or hi is not None)
        for attempt in range(2):
            with self.db.connection(uid) as conn, conn.cursor(row_factory=dict_row) as cur:
                self._search_settings(conn)
                rows = cur.execute(stmt, params).fetchall()
            if attempt == 0 and rows and rows[-1]["kind"] == "pending":
                # Messages written with embed=False: embed them, then search again.
                self.embed_pending_messages(user_id=uid)
                continue
            break
        hits = [_hit(row, span) for row in rows if row["kind"] != "pending"]
        ranked = _rank(hits, method, w)
        if min_score is not None:
            ranked = [h for h in ranked if h.score >= min_score]
        return ranked[:k]

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
                    vectors = self._embed([embedding_text(role, content) for _, _, role, content in rows])
                    with conn.cursor() as cur:
                        cur.executemany("UPDATE conversational_memory SET embedding = %s WHERE user_id = %s AND id = %s",
                                        [(vec, ruid, rid) for (ruid, rid, _, _), vec in zip(rows, vectors)])
            except (AccessDeniedError, psycopg.errors.InsufficientPrivilege, psycopg.errors.ReadOnlySqlTransaction):
                # A role with only SELECT (or a read-only replica) may not fill embeddings in:
                # it reads what is there, and stops asking.
                self._backfill_refused = True
                break
            done += len(rows)
            if len(rows) < size:
                break
        return done


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
        return value.replace(tzinfo=timezone.utc)
    return value


def _hit(row: dict[str, Any], span: TimeRange | None) -> MemoryHit:
    in_range = None
    if span is not None:
        in_range = bool(row["t0"] < span.end and row["t1"] >= span.start)
    return MemoryHit(
        kind=row["kind"], id=row["id"], content=row["content"], score=0.0, created_at=row["created_at"],
        thread_id=row["thread_id"], summary_id=row["summary_id"], role=row["role"],
        vector_score=float(row["vs"]), keyword_score=float(row["ks"]), in_time_range=in_range,
        metadata=row["metadata"] or {},
    )


def _rank(hits: Sequence[MemoryHit], method: str, w: SearchWeights) -> list[MemoryHit]:
    """Order hits by the chosen method; ``score`` is the fused score."""
    def time_bonus(h: MemoryHit) -> float:
        return w.time_boost if h.in_time_range else 0.0

    out = [replace(h) for h in hits]
    if method == "vector":
        for h in out:
            h.score = h.vector_score + time_bonus(h)
    elif method == "keyword":
        for h in out:
            h.score = h.keyword_score + time_bonus(h)
        out = [h for h in out if h.keyword_score > 0]
    elif w.fusion == "linear":
        for h in out:
            h.score = h.vector_score + w.keyword_weight * h.keyword_score + time_bonus(h)
    else:
        by_key = {(h.kind, h.id): h for h in out}
        vec = sorted(by_key, key=lambda key: -by_key[key].vector_score)
        kw = sorted((key for key in by_key if by_key[key].keyword_score > 0),
                    key=lambda key: -by_key[key].keyword_score)
        order = fuse_rankings([vec, kw], [1.0, w.keyword_weight], k=w.rrf_k)
        n = len(order)
        for rank, key in enumerate(order):
            h = by_key[key]
            # Rank fusion has no absolute scale; keep a rank-derived score in (0, 1].
            h.score = (n - rank) / n + time_bonus(h)
    return sorted(out, key=lambda h: -h.score)
