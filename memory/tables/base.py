"""Shared plumbing of the table objects: the store core, validation, embedding, search SQL.

``Store`` is what every table object is built on (the pool, the embedding service, the
settings); ``Table`` is the small base of the per-table classes (``Conversations``,
``Knowledge`` ...) with the validation and similarity helpers they share. A table
object that needs another one is given it explicitly when it is built (see
``memory.manager.MemoryManager``), never looks it up.

Similarity reads embed the query once and send one statement (after the transaction's
SET LOCAL settings) with two execution shapes, chosen inside it by the number of rows
under the filter (counted up to ``Settings.similar_exact_max_rows`` + 1):

* **exact**, where the rows are few (one user's knowledge, workflows, entities, facts,
  summaries as most users have them): every row read once, each row's distance and
  keyword signal computed exactly, the ``pool`` best of either signal kept;
* **indexed**, where they are many: the nearest rows through HNSW (iterative scan, so the
  filter cannot starve the LIMIT) and bounded keyword candidates (at most
  ``search_max_terms`` words, ``search_term_candidates`` rows per word, document
  frequencies exact below that bound and estimated from a sample above it), scored by the
  same formula. A word's rows come from the gin index (any table and filter), or, for
  ``read_knowledge``, from the postings of migration 013 (``knowledge_terms``: user, word,
  passage), read index-only within the user's key range; its number of rows (the shape's
  switch and the IDFs' ``N``) is then the user's count kept on write (migration 014,
  ``knowledge_stats``), not counted per read.

A read of rows last seen above the switch point (the count each read reports, kept per
statement and user) sends the indexed shape alone: the same branch without the exact one
beside it, which costs PostgreSQL less to plan for its values (0.92 ms instead of 1.31,
median over 40 questions at 100k passages of one user). It returns rows only while the count is still above the
switch point; when it returns none, the read sends the switching statement. The hint
picks the statement, never the hits. Such a read with postings (``read_knowledge``) whose
query is not embedded yet goes in two statements of one transaction instead: the keyword
half, which needs no vector, is sent before the model runs and the server runs it while the
query is embedded (``memory.store.ops.Ahead``); the rest follows with its results, the hits
those of the one statement (:data:`_KEYWORD_AHEAD_FIRST`).

Each candidate, whichever half found it, comes back with both signals computed for it,
fused by :func:`memory.retrieval.fusion.fuse` into an absolute score, ``vector +
keyword_weight x keyword``, the same fusion ``search_memory`` uses (its own signals on
top), so a score means the same in every list and for every query.
``bench/search_latency.py --switch`` measured the switch point.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, TypeVar
from collections.abc import Hashable, Sequence

import numpy as np
from psycopg import sql

from memory.store.db import Database
from memory.store.ops import Ahead, Call, Op, Sql, numbered, run
from memory.retrieval.embeddings import EmbeddingService
from memory.retrieval.speakers import SpeakerNames
from memory.retrieval.fusion import MIN_TERMS, fuse
from memory.retrieval.hits import Hit
from memory.settings import Settings
from memory.errors import AccessDeniedError, InvalidInputError
from memory.store.validation import check_id, check_positive_int, check_text

T = TypeVar("T")

def columns_of(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def select_list(cls: type, alias: str | None = None) -> sql.Composable:
    cols = columns_of(cls)
    if alias:
        return sql.SQL(", ").join(sql.Identifier(alias, c) for c in cols)
    return sql.SQL(", ").join(sql.Identifier(c) for c in cols)


@dataclass
class Store:
    """What every table object needs: the pool, the embedding service and the settings."""

    db: Database
    embeddings: EmbeddingService
    settings: Settings
    speakers: SpeakerNames = field(default_factory=SpeakerNames)  # search's cache of speaker names


class SizeHints:
    """The last row count seen per user (or per user and statement; bounded: ``max_users``,
    ``ttl`` s): only how a search is planned depends on it, never what it finds."""

    def __init__(self, ttl: float = 600.0, max_users: int = 10_000) -> None:
        self.ttl, self.max_users = ttl, max_users
        self._seen: OrderedDict[Hashable, tuple[float, int]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> int | None:
        with self._lock:
            entry = self._seen.get(key)
            return entry[1] if entry is not None and time.monotonic() - entry[0] < self.ttl else None

    def put(self, key: Hashable, n: int) -> None:
        with self._lock:
            self._seen[key] = (time.monotonic(), n)
            self._seen.move_to_end(key)
            while len(self._seen) > self.max_users:
                self._seen.popitem(last=False)


class Table:
    """Base of the per-table objects: the store core plus shared validation and search helpers."""

    def __init__(self, store: Store) -> None:
        self.store = store

    @property
    def db(self) -> Database:
        return self.store.db

    @property
    def embeddings(self) -> EmbeddingService:
        return self.store.embeddings

    @property
    def settings(self) -> Settings:
        return self.store.settings

    # -- validation shortcuts -------------------------------------------------------
    def _uid(self, user_id: Any) -> str:
        return check_id(user_id, "user_id", max_chars=self.settings.max_id_chars)

    def _tid(self, thread_id: Any) -> str:
        return check_id(thread_id, "thread_id", max_chars=self.settings.max_id_chars)

    def _content(self, value: Any, field: str = "content") -> str:
        return check_text(value, field, max_chars=self.settings.max_content_chars)

    def _k(self, k: Any) -> int:
        return check_positive_int(k, "k", maximum=1000)

    # -- embeddings -------------------------------------------------------------------
    def _embed(self, texts: Sequence[str]) -> list[np.ndarray]:
        # The model only reads the first few hundred tokens; do not tokenize megabytes.
        return self.embeddings.embed([t[:EMBED_CHARS] for t in texts])

    def _cached_vectors(self, texts: Sequence[str]) -> list[np.ndarray] | None:
        """:meth:`_embed`'s vectors when every text's is cached (nothing to compute), else None."""
        return self.embeddings.cached([t[:EMBED_CHARS] for t in texts])

    def _query(self, query: Any) -> str:
        """A search query, validated and bounded (see ``Settings.max_query_chars``)."""
        text = check_text(query, "query", max_chars=self.settings.max_content_chars)
        limit = self.settings.max_query_chars
        if len(text) > limit:
            raise InvalidInputError(
                f"search query is {len(text):,} characters; at most {limit:,} are searched: pass the question or "
                f"a few sentences of it (or raise AGENTMEM_MAX_QUERY_CHARS)")
        return text

    # -- search -----------------------------------------------------------------------
    def _search_settings_op(self, user: str | None = None, plans: str | None = None,
                            snapshot: bool = False, postings: str | None = None) -> Op[None]:
        """HNSW keeps scanning until a filtered query (one user's rows) has its LIMIT, in
        exact distance order. SET LOCAL (Citus forwards it to the workers, where the index
        scans run); the driver holds them back and sends them with the statement they are
        for, in its round trip (``memory.store.ops``). ``plans`` "generic" or "custom":
        how PostgreSQL plans the prepared statement (``plan_cache_mode``; None: its own
        choice, a generic plan after five custom ones). The similarity reads ask for
        "custom" unless their rows are known to be few: the generic plan of theirs, blind to
        the user's number of rows and so to the shape that runs, took 0.7-1.2 s instead of
        40-60 ms at 100k rows of one user. "generic" is only asked for where the generic plan
        is known to be the cheaper one; a session that chose a plan mode itself (an
        operator, a test reading the plans) keeps it. "by-count": the server picks one of the
        two from the user's count kept beside ``postings`` (:data:`PLANS_BY_COUNT`).
        "plan-free": the generic plan with sorting off, for a statement written for it (:data:`NO_SORT`).
        ``snapshot``: the transaction is repeatable read (and read only), so that a search in
        two statements reads one state."""
        if snapshot:
            yield Sql(sql.SQL("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"), fetch="none", user=user)
        yield Sql(sql.SQL("SET LOCAL hnsw.ef_search = {}").format(sql.Literal(int(self.settings.hnsw_ef_search))),
                  fetch="none", user=user)
        yield Sql(sql.SQL("SET LOCAL hnsw.iterative_scan = strict_order"), fetch="none", user=user)
        if plans == "custom":
            yield Sql(sql.SQL(CUSTOM_PLANS), fetch="none", user=user)
        elif plans == "plan-free":
            yield from _plan_free_steps(user)
        elif plans == "generic":
            yield Sql(sql.SQL(GENERIC_UNLESS_CHOSEN), fetch="none", user=user)
        elif plans == "by-count" and postings is not None:  # a read of the user's rows, not seen yet
            yield Sql(sql.SQL(PLANS_BY_COUNT).format(stats=sql.Identifier(POSTINGS_COUNTS[postings]),
                                                     user=sql.Literal(user),
                                                     half=sql.Literal(self.settings.similar_exact_max_rows // 2)),
                      fetch="none", user=user)

    def _similar(
        self,
        table: str,
        row_cls: type[T],
        query: str,
        where: sql.Composable,
        params: dict[str, Any],
        *,
        k: int,
        hybrid: bool = True,
        keyword_weight: float | None = None,
        vector_weight: float = 1.0,
        columns: sql.Composable | None = None,
        shape: str = "auto",
        postings: str | None = None,
    ) -> list[Hit[T]]:
        """Rows of ``table`` matching ``where`` ranked for ``query`` (vector + keyword), one statement.

        Each comes back as a :class:`~memory.retrieval.hits.Hit` with two signals:
        ``signals["vector"]``, the cosine similarity of the row to the query (-1..1, 0 for
        a row written without an embedding), and ``signals["keyword"]``, the IDF coverage
        of the query's stemmed words by the row (0..1: the share of the query's summed
        IDF that the row contains, the denominator at least ``MIN_TERMS`` rare words'
        worth; computed for every candidate, whichever half found it). ``score`` is their fusion
        (:func:`memory.retrieval.fusion.fuse`), ``vector_weight x vector + keyword_weight
        x keyword``: absolute, so it compares across queries and lists and can be
        thresholded. ``keyword_weight`` defaults to ``settings.keyword_weight``
        (``bench/similar_reads.py`` chose it).

        The keyword half matches ANY of the query's stemmed words (a sentence query
        ANDed word by word would match almost nothing), at most ``search_max_terms`` of
        them. Up to ``similar_exact_max_rows`` rows under ``where`` (the exact shape)
        every row is read once: the document frequencies are exact and every matching
        row is scored. Beyond (the indexed shape) the work is bounded: each word brings
        at most ``search_term_candidates`` rows from the gin index, or from the postings
        table ``postings`` (user_id, term, key) when given (``where`` is then the user's
        rows, ``user_id = %(uid)s``, possibly narrowed further): a rare word all its rows,
        a common one a bounded sample (through the postings, its first ``4 x pool`` rows: no
        more of them can pass the pre-ranking on that word alone). A word's document frequency is the number
        of rows it brought when below that bound, else estimated from the first
        ``search_sample_rows`` rows under ``where``, among ``N`` rows counted up to
        :data:`DOC_COUNT_CAP` (with postings and ``where`` the user's rows: ``N``, and the
        number of rows that picks the shape, are the user's count kept on write,
        :data:`POSTINGS_COUNTS`); the rows having every common word of the query (the gin
        index intersects their lists) join the candidates. The rows the words brought
        are pre-ranked by the summed IDF of those words and the best ``4 x pool`` get
        the exact keyword signal. In both shapes the best ``pool`` by keyword signal and
        the ``pool`` nearest rows are the candidates, each with both its signals; ``k``
        are returned. ``shape`` ("exact",
        "indexed") forces one shape, for benchmarks and tests.
        ``columns`` replaces the select list of ``row_cls``'s fields (a table that
        lacks one of them selects a constant in its place).
        """
        return run(self.db, self._similar_op(table, row_cls, query, where, params, k=k, hybrid=hybrid,
                                             keyword_weight=keyword_weight, vector_weight=vector_weight,
                                             columns=columns, shape=shape, postings=postings))

    def _similar_op(
        self,
        table: str,
        row_cls: type[T],
        query: str,
        where: sql.Composable,
        params: dict[str, Any],
        *,
        k: int,
        hybrid: bool = True,
        keyword_weight: float | None = None,
        vector_weight: float = 1.0,
        columns: sql.Composable | None = None,
        shape: str = "auto",
        postings: str | None = None,
    ) -> Op[list[Hit[T]]]:
        """:meth:`_similar` as an operation (``memory.store.ops``)."""
        if keyword_weight is None:
            keyword_weight = self.settings.keyword_weight
        query = self._query(query)
        known_vector = self._cached_vectors([query])
        pool = max(k * 4, 20)
        cols = columns if columns is not None else select_list(row_cls, "x")
        text, names = _similar_query(table, where.as_string(), cols.as_string(), postings)
        if shape not in SHAPES:
            raise InvalidInputError(f"shape must be one of {', '.join(SHAPES)}, got {shape!r}")
        switch = {"auto": self.settings.similar_exact_max_rows, "exact": EXACT_ALWAYS, "indexed": -1}[shape]
        args = dict(params, pool=pool, prepool=4 * pool, q=query, hybrid=hybrid,
                    min_terms=MIN_TERMS, n_cap=DOC_COUNT_CAP, max_terms=self.settings.search_max_terms,
                    cap=self.settings.search_term_candidates, sample=self.settings.search_sample_rows,
                    common_rows=4 * pool, k=k, vw=float(vector_weight), kw=float(keyword_weight),
                    switch=switch)
        uid = params.get("uid")
        seen = (text, uid)  # the rows this statement and this user's filter see
        known = self._similar_sizes.get(seen) if shape == "auto" else None
        # The generic plan where the rows are known to be well inside the exact shape (at most
        # half the switch point): 2 ms of a 7 ms read_knowledge at LoCoMo size is planning it
        # for its values; elsewhere for its values (a generic plan is blind to the row count).
        plans = plans_for(known, self.settings.similar_exact_max_rows)
        if known is None and shape == "auto" and _keyword_ahead(where.as_string(), postings):
            plans = "by-count"  # the user's kept count picks, on the server (2 ms at LoCoMo size)
        rows = None
        large_known = known is not None and known > self.settings.similar_exact_max_rows
        if large_known and known_vector is None and _keyword_ahead(where.as_string(), postings):
            # the keyword half runs while the query is embedded; the same hits as the one statement's
            table_rows = yield Call(self._table_rows, (table,))
            # plan-free from the first statement where the user held nearly all of the table when
            # last read (NO_SORT, _PINNED_KEYWORD_REST): the user's share picks the plan, never the hits
            pinned = known is not None and holds_most(known, table_rows)
            first, first_names = _ahead_query(table, where.as_string(), cols.as_string(), postings, 1, pinned)
            second, second_names = _ahead_query(table, where.as_string(), cols.as_string(), postings, 2)
            yield from self._search_settings_op(uid, "plan-free" if pinned else plans, snapshot=True)
            args["slot"] = 0
            # a user holding half the table when last read: plan-free from the first statement on
            # (pinned) or from the second (NO_SORT)
            half = known is not None and holds_half(known, table_rows)
            free = _plan_free_steps(uid) if half and not pinned else []

            def then(vectors: Sequence[Any]) -> list[Sql]:
                # the second statement goes out right behind the model, in the first's pipeline (it
                # reads what the first hands it: ``handed``), and commits: one round trip
                (args["qvec"],) = vectors
                return free + [Sql(second, [args[n] for n in second_names], dict, user=uid, raw=True, last=True)]

            _, (got, rows) = yield Ahead(
                (Sql(first, [args[n] for n in first_names], dict, fetch="one", user=uid, raw=True),),
                Call(self._embed, ([query],)), then)
            if got["n"] <= self.settings.similar_exact_max_rows:
                # no longer above the switch point (the second found nothing then): the switching
                # statement decides
                rows, large_known = None, False
        elif known_vector is not None:
            args["qvec"] = known_vector[0]
        else:
            args["qvec"] = (yield Call(self._embed, ([query],)))[0]
        if rows is None and large_known:
            # Last seen above the switch point: the indexed shape alone, planned in 0.92 ms instead
            # of 1.31 (100k passages of one user). It returns no row unless the rows are still
            # above the switch, and then the switching statement decides: the hint picks the
            # statement, never the hits.
            large, large_names = _similar_query(table, where.as_string(), cols.as_string(), postings, True)
            yield from self._search_settings_op(uid, plans)
            rows = yield Sql(large, [args[n] for n in large_names], dict, user=uid, raw=True, last=True)
        if not rows:
            yield from self._search_settings_op(uid, plans, postings=postings)
            rows = yield Sql(text, [args[n] for n in names], dict, user=uid, raw=True, last=True)
        if rows and shape == "auto":
            self._similar_sizes.put(seen, int(rows[0]["hit_size"]))
        weights = {"vector": float(vector_weight), "keyword": float(keyword_weight)}
        return [_hit(row_cls, row, weights) for row in rows]  # best first, fused in SQL the same way

    @functools.cached_property
    def _rows_read(self) -> dict[str, tuple[float, float]]:
        """Per table, :data:`TABLE_ROWS` and when it was read (``time.monotonic()``)."""
        return {}

    def _table_rows(self, table: str) -> float:
        """:data:`TABLE_ROWS` of ``table``, read again once ``TABLE_ROWS_TTL_S`` have passed; 0 for a
        role that may not read the statistics (its reads are then all planned for their values)."""
        now = time.monotonic()
        known = self._rows_read.get(table)
        if known is not None and now - known[1] < TABLE_ROWS_TTL_S:
            return known[0]
        try:
            row = run(self.db, _table_rows_op(table))
        except AccessDeniedError:
            row = None
        rows = float(row[0]) if row is not None and row[0] is not None else 0.0
        self._rows_read[table] = (rows, now)
        return rows

    @functools.cached_property
    def _similar_sizes(self) -> SizeHints:
        """Per statement and user, the rows under the filter last seen (up to the switch point
        + 1): picks how the next read is planned, never what it finds (the statement picks its
        shape by its own count)."""
        return SizeHints()


def _table_rows_op(table: str) -> Op[Any]:
    """:data:`TABLE_ROWS` of ``table`` in one round trip."""
    return (yield Sql(sql.SQL(TABLE_ROWS), dict(tbl=table), fetch="one", last=True))


def _plan_free_steps(user: str | None) -> list[Sql]:
    """The rest of the transaction on the generic plan, with sorting off (:data:`NO_SORT`)."""
    return [Sql(sql.SQL(setting), fetch="none", user=user) for setting in (GENERIC_PLANS, NO_SORT)]


def holds_half(count: int, table_rows: float) -> bool:
    """Whether a user with ``count`` rows holds at least half of a table of ``table_rows``
    (:data:`TABLE_ROWS`; 0: unknown, and so not)."""
    return table_rows > 0 and 2 * count >= table_rows


def holds_most(count: int, table_rows: float) -> bool:
    """Whether a user with ``count`` rows holds at least nine tenths of a table of ``table_rows``:
    the other users' rows are then at most a ninth of the user's (:data:`_PINNED_KEYWORD_REST`
    reads their matches)."""
    return table_rows > 0 and 10 * count >= 9 * table_rows


def plans_for(known: int | None, switch: int) -> str:
    """How a search statement with an exact/indexed switch at ``switch`` rows is planned for
    rows last seen ``known`` (None: not seen): "generic" well inside the exact shape (at most
    half the switch point), else "custom" (``Table._search_settings_op``)."""
    return "generic" if known is not None and known <= switch // 2 else "custom"


#: Plans made for the values of each run, for the rest of this transaction.
CUSTOM_PLANS = "SET LOCAL plan_cache_mode = force_custom_plan"

#: A table's rows as the server knows them without counting: the planner's estimate or the live
#: rows its statistics count, whichever is more (0 while neither knows of any, and on a Citus
#: coordinator, whose table holds none itself). None for a partitioned table (read as 0): its
#: statements are planned for their values, so that each is pruned to the user's partition as
#: it is planned (the plan-free ones are for a plain table; the keyword statement pinned to the
#: gin index reads every user's matches). A statement of its own, on no user's shard; read at
#: most every ``TABLE_ROWS_TTL_S`` seconds per table object (:meth:`Table._table_rows`).
TABLE_ROWS = ("SELECT greatest(c.reltuples, pg_stat_get_live_tuples(c.oid)) FROM pg_class c"
              " WHERE c.oid = to_regclass(%(tbl)s) AND c.relkind = 'r'")
TABLE_ROWS_TTL_S = 30.0

#: Plan-free: the statement after the embedding, for a user holding at least half of its table
#: (:func:`holds_half`), read without a narrower filter. Its nearest rows can only be the HNSW
#: index's (a sort of the user's rows would read half the table) and its other reads are probes
#: by key, so it runs on the generic plan, with sorting off (``NO_SORT``) so that plan is the
#: index's whatever the other users' rows make the planner expect of an unknown user. No
#: planning per read: at 100k rows of one user, planning it for its values was 0.43 ms of 1.1
#: on the server (``search_memory``) and 0.40 of 1.1 (``read_knowledge``). A table grown since
#: :data:`TABLE_ROWS` was read makes the user's share look larger than it is; that costs the
#: index a longer walk, never rows (the iterative scan reads on in exact order). Any other user
#: keeps the plan for its values: where its rows are a small share of the table, the index
#: would walk far to find them.
NO_SORT = "SET LOCAL enable_sort = off"
GENERIC_PLANS = "SET LOCAL plan_cache_mode = force_generic_plan"

#: The generic plan for this transaction, unless the session set ``plan_cache_mode`` itself.
GENERIC_UNLESS_CHOSEN = ("SELECT set_config('plan_cache_mode', 'force_generic_plan', true)"
                         " WHERE current_setting('plan_cache_mode') = 'auto'")

#: For rows not seen yet where the user's count is kept (``{stats}``, migration 014): the
#: server picks as :func:`plans_for` would from the count of the user (``{user}``) against
#: ``{half}`` (half the switch point): the generic plan (unless the session chose a mode) for
#: a count at most that, else plans for the values. Held back with the other settings, it
#: goes in their round trip, so its values are literals, as in the user scope before it
#: (``memory.store.db.user_scope``); a constant user also keeps it on the user's shard (Citus).
PLANS_BY_COUNT = ("SELECT set_config('plan_cache_mode', CASE"
                  " WHEN coalesce((SELECT sum(passages) FROM {stats} WHERE user_id = {user}), 0) > {half}"
                  " THEN 'force_custom_plan'"
                  " WHEN current_setting('plan_cache_mode') = 'auto' THEN 'force_generic_plan'"
                  " ELSE current_setting('plan_cache_mode') END, true)")

#: The model reads the first few hundred tokens; longer texts are cut before embedding.
EMBED_CHARS = 4000

#: The query's distinct stemmed words in the order they first appear, at most
#: ``%(max_terms)s`` of them, each as a tsquery literal (``'word'``), and their OR.
TERMS_CTE = (
    "terms AS (SELECT '''' || replace(replace(t.lexeme, '\\', '\\\\'), '''', '''''') || '''' AS lit, t.lexeme AS term"
    " FROM unnest(to_tsvector('english', %(q)s)) AS t ORDER BY t.positions[1] LIMIT %(max_terms)s),"
    " tsq AS (SELECT string_agg(lit, ' | ')::tsquery AS tq FROM terms)"
)

#: ``shape="exact"`` (benchmarks, tests): the exact shape whatever the number of rows.
EXACT_ALWAYS = 2**62

#: Rows counted for the document frequencies of the keyword signal in the indexed shape:
#: beyond this many rows under the filter, the IDFs are those of a collection of this size.
DOC_COUNT_CAP = 10_000

#: Which shape reads the rows: ``exact`` (every row under the filter read once) up to
#: ``similar_exact_max_rows`` of them, ``indexed`` (HNSW and the gin index, bounded) above.
SHAPES = ("auto", "exact", "indexed")

#: How many rows are under the filter, counted up to the switch point (bounded).
_SIZE_CTE = " size AS (SELECT count(*) AS n FROM (SELECT 1 FROM {tbl} WHERE ({where}) LIMIT %(switch)s + 1) s)"

#: The exact shape, where the rows under the filter are few: they are read once
#: (``e_rows``: each row's distance to the query and its words), the words' document
#: frequencies are counted exactly among them, every row with a query word gets its
#: keyword signal, and the candidates are the ``%(pool)s`` nearest and the ``%(pool)s``
#: best by the keyword signal. ``e_kw`` is ``kw(key, ks)`` of the indexed shape.
EXACT_CTES = (
    " e_rows AS MATERIALIZED (SELECT {key} AS key, embedding <=> %(qvec)s AS d, search_tsv AS tsv FROM {tbl}"
    "   WHERE ({where}) AND (SELECT n FROM size) <= %(switch)s),"
    " e_n AS (SELECT count(*) AS n FROM e_rows),"
    " e_matched AS MATERIALIZED (SELECT key, d, tsv FROM e_rows"
    "   WHERE tsv @@ (SELECT string_agg(lit, ' | ')::tsquery FROM terms WHERE %(hybrid)s)),"
    " e_idf AS (SELECT lex.tq, ln(1 + (e_n.n - d.df + 0.5) / (d.df + 0.5)) AS idf FROM lex CROSS JOIN e_n"
    "   CROSS JOIN LATERAL (SELECT count(*) AS df FROM e_matched WHERE e_matched.tsv @@ lex.tq) d),"
    " e_den AS (SELECT nullif(greatest((SELECT sum(idf) FROM e_idf),"
    "                            %(min_terms)s * ln(1 + ((SELECT n FROM e_n) + 0.5) / 0.5)), 0) AS den),"
    " e_kw AS (SELECT key, ks FROM (SELECT m.key, m.d, sum(e_idf.idf) / (SELECT den FROM e_den) AS ks"
    "   FROM e_matched m JOIN e_idf ON m.tsv @@ e_idf.tq GROUP BY m.key, m.d) s"
    "   ORDER BY ks DESC, d NULLS LAST, key LIMIT %(pool)s),"
    " e_cand AS (SELECT key FROM (SELECT key FROM e_rows WHERE d IS NOT NULL ORDER BY d, key LIMIT %(pool)s) v"
    "   UNION SELECT key FROM e_kw)"
)

#: The indexed shape's keyword signal (the IDF coverage of :mod:`memory.retrieval.fusion`),
#: after ``TERMS_CTE``: ``kw(key, ks)``, the best ``%(pool)s`` rows by it. ``lex`` are the
#: query's words, ``hits`` the rows each word brings from the gin index (at most
#: ``%(cap)s``), ``idf`` each word's weight: ``n`` rows (counted up to ``%(n_cap)s``), a
#: word's document frequency the rows it brought when fewer than ``%(cap)s``, else
#: estimated from ``%(sample)s`` rows under the filter (``sample``, read only then).
_N_CTE = " n AS (SELECT count(*) AS n FROM (SELECT 1 FROM {tbl} WHERE %(hybrid)s AND ({where}) LIMIT %(n_cap)s) s),"

#: With postings, where the filter is the user's rows: ``n`` and ``size`` are the user's count
#: kept on write (``{stats}``: user_id, slot, passages; migration 014), the sum of its slots,
#: read from the primary key instead of counting the user's rows.
_STATS_N_CTE = " n AS (SELECT n FROM size),"
_STATS_SIZE_CTE = " size AS (SELECT coalesce(sum(passages), 0) AS n FROM {stats} WHERE user_id = %(uid)s)"

#: Each word's rows from the gin index (``hits``, at most ``%(cap)s`` a word, read from the
#: heap) and a common word's document frequency estimated from ``%(sample)s`` rows read.
_GIN_WORDS = (
    " hits AS (SELECT lex.ord, h.key FROM lex CROSS JOIN LATERAL ("
    "   SELECT {key} AS key FROM {tbl} WHERE search_tsv @@ lex.tq AND ({where}) LIMIT %(cap)s) h),"
    " sample AS MATERIALIZED (SELECT search_tsv AS tsv FROM {tbl} WHERE ({where}) ORDER BY {key} LIMIT %(sample)s),"
    " dfs AS (SELECT ord, count(*) AS df FROM hits GROUP BY ord),"
    " idf AS (SELECT lex.ord, lex.tq, ln(1 + (greatest(n.n, d.df) - d.df + 0.5) / (d.df + 0.5)) AS idf"
    "   FROM lex CROSS JOIN n CROSS JOIN LATERAL (SELECT CASE WHEN h.df < %(cap)s THEN h.df::float8"
    "     ELSE greatest(%(cap)s, n.n * (SELECT count(*) FROM sample WHERE sample.tsv @@ lex.tq)::float8"
    "                            / greatest((SELECT count(*) FROM sample), 1)) END AS df"
    "     FROM (SELECT coalesce(max(dfs.df), 0) AS df FROM dfs WHERE dfs.ord = lex.ord) h OFFSET 0) d),"
)

#: The same from the postings table ``{post}`` (user_id, term, key), index-only: each word's
#: number of rows counted up to ``%(cap)s`` (``dfs``), a rare word's rows (fewer than that)
#: all, a common word's first ``%(common_rows)s`` in key order (its rows beyond those are
#: the weakest candidates: one low-IDF word; the rows with every common word are found
#: apart, in ``all_common``); a common word's frequency among the user's first
#: ``%(sample)s`` rows in key order (``bound``: the last of them, found in the primary key;
#: the word's postings up to it are counted, no row is read). Keys are random uuids: key
#: order is a random sample, the same one for every word. ``OFFSET 0`` (here and in
#: ``_GIN_WORDS``) keeps each word's estimate computed once: inlined, its count ran in each
#: of the three uses of ``df``.
_POSTINGS_WORDS = (
    " dfs AS MATERIALIZED (SELECT lex.ord, lex.term, (SELECT count(*) FROM (SELECT 1 FROM {post} p"
    "   WHERE p.user_id = %(uid)s AND p.term = lex.term LIMIT %(cap)s) c) AS df FROM lex),"
    " hits AS (SELECT dfs.ord, h.key FROM dfs CROSS JOIN LATERAL ("
    "   SELECT p.{key} AS key FROM {post} p WHERE p.user_id = %(uid)s AND p.term = dfs.term"
    "   ORDER BY p.{key} LIMIT CASE WHEN dfs.df < %(cap)s THEN %(cap)s ELSE %(common_rows)s END) h),"
    " bound AS (SELECT least(%(sample)s, n.n) AS s, (SELECT {key} FROM {tbl} WHERE ({where}) ORDER BY {key}"
    "   OFFSET greatest(least(%(sample)s, n.n) - 1, 0) LIMIT 1) AS b FROM n),"
    " idf AS (SELECT lex.ord, lex.tq, ln(1 + (greatest(n.n, d.df) - d.df + 0.5) / (d.df + 0.5)) AS idf"
    "   FROM lex CROSS JOIN n JOIN dfs h ON h.ord = lex.ord CROSS JOIN LATERAL (SELECT CASE WHEN h.df < %(cap)s"
    "     THEN h.df::float8 ELSE greatest(%(cap)s, n.n * (SELECT count(*) FROM {post} p WHERE p.user_id = %(uid)s"
    "       AND p.term = lex.term AND p.{key} <= (SELECT b FROM bound))::float8"
    "       / greatest((SELECT s FROM bound), 1)) END AS df OFFSET 0) d),"
)


def handed(name: str, value: str) -> str:
    """A select item that hands ``value`` (an SQL expression, a code constant) from the first of two
    statements of a read to the second, which is sent behind it in the same pipeline before the
    client has read a row (``memory.store.ops.Ahead.then``): a transaction-local setting
    (``set_config(..., true)``: gone at the transaction's end, and one transaction is one user's),
    one per query of the call (``slot``: the query's place in it). Also the value, as text."""
    return f"set_config('agentmem.{name}_' || %(slot)s::text, coalesce(({value})::text, ''), true) AS {name}"


def taken(name: str, type_: str) -> str:
    """The value :func:`handed` set, as ``type_`` ('' is NULL). Not set (planning the second
    statement alone), it reads as NULL (``missing_ok``)."""
    return f"nullif(current_setting('agentmem.{name}_' || %(slot)s::text, true), '')::{type_}"


#: After the words' rows and weights: the candidates and their keyword signal.
_KEYWORD_REST = (
    # pre-ranked by the words that brought each row (cheap), the best %(prepool)s scored exactly
    # the rows with every common word (the gin index intersects their lists, so only
    # those rows are read), credited with all of them: found whatever the samples held.
    # A word's hits are distinct rows: only what all_common adds is checked against them
    # (a UNION de-duplicated every hit; with both changes the first of the two statements
    # at 100k passages of one user took 6-8 % less).
    " den AS (SELECT nullif(greatest((SELECT sum(idf) FROM idf),"
    "                          %(min_terms)s * ln(1 + ((SELECT n FROM n) + 0.5) / 0.5)), 0) AS den),"
    " common AS (SELECT ord FROM dfs WHERE df >= %(cap)s),"
    " all_common AS (SELECT x.{key} AS key FROM {tbl} x WHERE (SELECT count(*) FROM common) > 1"
    "   AND x.search_tsv @@ (SELECT string_agg(lex.tq::text, ' & ')::tsquery FROM lex JOIN common USING (ord))"
    "   AND ({where}) LIMIT %(cap)s),"
    " brought AS (SELECT ord, key FROM hits UNION ALL SELECT common.ord, a.key FROM common CROSS JOIN all_common a"
    "   WHERE NOT EXISTS (SELECT 1 FROM hits h WHERE h.ord = common.ord AND h.key = a.key)),"
    " pre AS (SELECT brought.key FROM brought JOIN idf ON idf.ord = brought.ord"
    "   GROUP BY brought.key ORDER BY sum(idf.idf) DESC, brought.key LIMIT %(prepool)s),"
)
#: ``_KEYWORD_REST`` for a generic plan of a user holding most of the table (:data:`NO_SORT`), where
#: the planner cannot tell a large user from a small one. ``all_common`` reads the gin index
#: alone and applies the user's filter (``USER_ROWS``, the only filter of the read in two
#: statements) after it (``OFFSET 0``): beside many small users, the generic plan of the filtered
#: read intersected the index's matches with a bitmap of the user's primary-key entries, for a
#: large user all of them. Both read the index's matches in table order and keep the user's, so
#: the same rows come back. ``brought`` and ``all_common`` are computed once (``MATERIALIZED``):
#: inlined into the generic plan, they ran again for each word (2.6 ms instead of 1.6 at 100k
#: passages of one user). As it reads the other users' matches before it drops them, it is for a
#: user holding nearly all of the table (:func:`holds_most`): the other users' rows are then at
#: most a ninth as many as the user's, so however they are written, reading their matches adds
#: at most about a ninth to this read. Only for a plain table (:data:`TABLE_ROWS`): on a
#: Citus coordinator or a partitioned table no user holds any share, so this form is never sent
#: there.
_PINNED_KEYWORD_REST = (_KEYWORD_REST
                        .replace(" all_common AS (SELECT x.{key} AS key FROM {tbl} x WHERE",
                                 " all_common AS MATERIALIZED (SELECT a.key FROM (SELECT x.{key} AS key, x.user_id"
                                 " FROM {tbl} x WHERE")
                        .replace("   AND ({where}) LIMIT %(cap)s),",
                                 "   OFFSET 0) a WHERE ({where}) LIMIT %(cap)s),")
                        .replace(" brought AS (", " brought AS MATERIALIZED ("))
assert _PINNED_KEYWORD_REST.count("MATERIALIZED") == 2 and "OFFSET 0) a WHERE" in _PINNED_KEYWORD_REST
_KEYWORD_CANDIDATES = (
    " kw AS (SELECT x.{key} AS key,"
    "   (SELECT sum(idf.idf) FROM idf WHERE x.search_tsv @@ idf.tq) / (SELECT den FROM den) AS ks"
    "   FROM {tbl} x WHERE x.{key} IN (SELECT key FROM pre) AND ({where})"
    "   ORDER BY ks DESC, x.embedding <=> %(qvec)s NULLS LAST, x.{key} LIMIT %(pool)s),"
)
# vector half: the nearest rows through HNSW (the iterative scan, set per transaction,
# keeps a filter from starving the LIMIT)
_NEAREST = " FROM {tbl}   WHERE embedding IS NOT NULL AND ({where}) ORDER BY embedding <=> %(qvec)s LIMIT %(pool)s"
_VEC_CTE = " vec AS (SELECT {key} AS key" + _NEAREST + ")"

KEYWORD_CTES = _N_CTE + _GIN_WORDS + _KEYWORD_REST + _KEYWORD_CANDIDATES + _VEC_CTE
POSTINGS_KEYWORD_CTES = _N_CTE + _POSTINGS_WORDS + _KEYWORD_REST + _KEYWORD_CANDIDATES + _VEC_CTE
STATS_KEYWORD_CTES = _STATS_N_CTE + _POSTINGS_WORDS + _KEYWORD_REST + _KEYWORD_CANDIDATES + _VEC_CTE

#: The per-user count table kept beside each postings table (migration 014).
POSTINGS_COUNTS = {"knowledge_terms": "knowledge_stats"}

#: The filter with which the postings path reads the user's count instead of counting rows.
USER_ROWS = "user_id = %(uid)s"

# Every candidate of either half with both signals (its distance and keyword signal),
# fused and cut to the k best in SQL (``_FUSED_ORDER``), and the count that chose the shape
# (``hit_size``: it picks how the next read is planned); only the branch of the shape chosen by ``size`` runs.
_SIMILAR_SELECT = (
    " SELECT {cols}, x.embedding <=> %(qvec)s AS hit_distance,"
    "   (SELECT sum(w.idf) FROM {idf} w WHERE x.search_tsv @@ w.tq) / (SELECT den FROM {den}) AS hit_keyword,"
    "   x.{key} AS hit_key, (SELECT n FROM size) AS hit_size"
    " FROM {tbl} x JOIN {cand} c ON c.key = x.{key}"
    " WHERE ({where}) AND (SELECT n FROM size) {cmp} %(switch)s"
)
#: The indexed shape's rows (its candidates ``i_cand``, weights ``idf`` and ``den``), above the switch point.
_INDEXED_SELECT = (_SIMILAR_SELECT.replace("{cand}", "i_cand").replace("{idf}", "idf").replace("{den}", "den")
                   .replace("{cmp}", ">"))

# The indexed shape with postings and the user's count in two statements, for a read whose
# query is still being embedded (``Ahead``): the keyword half needs no vector, so the server
# runs it while the model embeds the query. The first scores the pre-ranked rows as ``kw``
# does and returns the user's count, the words' tsqueries and IDFs in word order, the
# denominator, and the rows ranked within ``pool`` by keyword signal alone, ties included
# (``kw`` breaks them by distance, which only the second statement knows). The second
# takes them as they are: ``kw`` and the fused select compute what the one statement's do,
# over the same numbers. The keyword candidates are read by key (a probe per row, kept apart
# by ``OFFSET 0``) and the nearest come from the index scan that finds them, each with every
# column and its distance (both materialised, so each is planned alone; read again by key,
# the nearest rows were a probe each more), so its generic plan reads no more than a plan for
# its values (see :data:`NO_SORT`). Both run in one repeatable-read transaction.
_KEYWORD_AHEAD_WORDS = (
    "WITH " + TERMS_CTE + ","
    " lex AS (SELECT row_number() OVER () AS ord, lit::tsquery AS tq, term FROM terms WHERE %(hybrid)s),"
    + _STATS_SIZE_CTE + "," + _STATS_N_CTE + _POSTINGS_WORDS)
_KEYWORD_AHEAD_RANKED = (
    " scored AS (SELECT x.{key} AS key,"
      "   (SELECT sum(idf.idf) FROM idf WHERE x.search_tsv @@ idf.tq) / (SELECT den FROM den) AS ks"
      "   FROM {tbl} x WHERE x.{key} IN (SELECT key FROM pre) AND ({where}) AND (SELECT n FROM size) > %(switch)s),"
      " ranked AS (SELECT key, ks, rank() OVER (ORDER BY ks DESC) AS r FROM scored)"
      " SELECT (SELECT n FROM size) AS n, " + handed("size", "SELECT n FROM size") + ","
      "   " + handed("den", "SELECT den FROM den") + ","
      "   " + handed("tqs", "ARRAY(SELECT tq::text FROM idf ORDER BY ord)") + ","
      "   " + handed("idfs", "ARRAY(SELECT idf FROM idf ORDER BY ord)") + ","
      "   " + handed("keys", "ARRAY(SELECT key FROM ranked WHERE r <= %(pool)s ORDER BY key)") + ","
      "   " + handed("kss", "ARRAY(SELECT ks FROM ranked WHERE r <= %(pool)s ORDER BY key)")
)
_KEYWORD_AHEAD_FIRST = _KEYWORD_AHEAD_WORDS + _KEYWORD_REST + _KEYWORD_AHEAD_RANKED
#: The first statement for a user holding most of the table, on the generic plan (see ``_PINNED_KEYWORD_REST``).
_KEYWORD_AHEAD_FIRST_PINNED = _KEYWORD_AHEAD_WORDS + _PINNED_KEYWORD_REST + _KEYWORD_AHEAD_RANKED
_KEYWORD_AHEAD_SECOND = (
    "WITH idf AS (SELECT t.ord, t.tq::tsquery AS tq, t.idf"
    "   FROM unnest(" + taken("tqs", "text[]") + ", " + taken("idfs", "float8[]") + ")"
    "   WITH ORDINALITY AS t(tq, idf, ord)),"
    " den AS (SELECT " + taken("den", "float8") + " AS den), size AS (SELECT " + taken("size", "numeric") + " AS n),"
    " kw AS MATERIALIZED (SELECT x.*, x.embedding <=> %(qvec)s AS hit_d"
    "   FROM unnest(" + taken("keys", "uuid[]") + ", " + taken("kss", "float8[]") + ") AS k(key, ks)"
    "   CROSS JOIN LATERAL (SELECT x.* FROM {tbl} x WHERE x.{key} = k.key AND ({where}) OFFSET 0) x"
    "   ORDER BY k.ks DESC, hit_d NULLS LAST, x.{key} LIMIT %(pool)s),"
    " vec AS MATERIALIZED (SELECT *, embedding <=> %(qvec)s AS hit_d" + _NEAREST + "),"
    " i_cand AS (SELECT * FROM vec UNION ALL SELECT * FROM kw WHERE kw.{key} NOT IN (SELECT v.{key} FROM vec v))"
    " SELECT * FROM ("
    " SELECT {cols}, x.hit_d AS hit_distance,"
    "   (SELECT sum(w.idf) FROM idf w WHERE x.search_tsv @@ w.tq) / (SELECT den FROM den) AS hit_keyword,"
    "   x.{key} AS hit_key, (SELECT n FROM size) AS hit_size"
    " FROM i_cand x WHERE (SELECT n FROM size) > %(switch)s) u"
)


def _similar_text(keyword_ctes: str, size_cte: str = _SIZE_CTE, *, large: bool = False) -> str:
    """The switching statement (both shapes, the branch run picked by ``size``), or with
    ``large`` the indexed shape alone (no exact half to plan), which returns no row unless
    ``size`` is above the switch point."""
    exact = (_SIMILAR_SELECT.replace("{cand}", "e_cand").replace("{idf}", "e_idf").replace("{den}", "e_den")
             .replace("{cmp}", "<=") + " UNION ALL")
    return ("WITH " + TERMS_CTE + ","
            " lex AS (SELECT row_number() OVER () AS ord, lit::tsquery AS tq, term FROM terms WHERE %(hybrid)s),"
            + size_cte + "," + ("" if large else EXACT_CTES + ",") + keyword_ctes + ","
            " i_cand AS (SELECT key FROM vec UNION SELECT key FROM kw)"
            " SELECT * FROM ("
            + ("" if large else exact)
            + _INDEXED_SELECT + ") u" + _FUSED_ORDER)


#: The fusion (:func:`memory.retrieval.fusion.fuse` of the two signals, in the same float8
#: arithmetic), best first, ties to the closer row: only the ``%(k)s`` returned are sent back.
_FUSED_ORDER = (" ORDER BY %(vw)s::float8 * (1 - coalesce(hit_distance, 1)) + %(kw)s::float8 * coalesce(hit_keyword, 0)"
                " DESC, hit_distance NULLS LAST, hit_key LIMIT %(k)s")


#: Each statement text by (postings kind, large): no postings, postings, postings with the user's count.
_SIMILAR = {(kind, large): _similar_text(ctes, size, large=large)
            for kind, ctes, size in (("gin", KEYWORD_CTES, _SIZE_CTE), ("postings", POSTINGS_KEYWORD_CTES, _SIZE_CTE),
                                     ("stats", STATS_KEYWORD_CTES, _STATS_SIZE_CTE))
            for large in (False, True)}


def _keyword_ahead(where: str, postings: str | None) -> bool:
    """Whether a read's indexed shape can go in two statements (:data:`_KEYWORD_AHEAD_FIRST`): with
    postings and the user's count, over the user's rows (the postings' table has uuid keys)."""
    return where == USER_ROWS and postings in POSTINGS_COUNTS


@functools.lru_cache(maxsize=16)
def _ahead_query(table: str, where: str, columns: str, postings: str | None,
                 which: int, pinned: bool = False) -> tuple[str, tuple[str, ...]]:
    """The first or second (``which``) statement of the indexed shape in two, numbered as
    :func:`_similar_query` numbers the one statement; ``pinned``: the first one for the
    generic plan of a user holding most of the table (:data:`_KEYWORD_AHEAD_FIRST_PINNED`)."""
    assert postings is not None and _keyword_ahead(where, postings)
    if which == 1:
        text = _KEYWORD_AHEAD_FIRST_PINNED if pinned else _KEYWORD_AHEAD_FIRST
    else:
        text = _KEYWORD_AHEAD_SECOND + _FUSED_ORDER
    names = dict(key=sql.Identifier(key_name(table)), tbl=sql.Identifier(table), where=sql.SQL(where),
                 cols=sql.SQL(columns), post=sql.Identifier(postings), stats=sql.Identifier(POSTINGS_COUNTS[postings]))
    return numbered(sql.SQL(text).format(**names))  # a constant; values are bound


def _hit(row_cls: type[T], row: dict[str, Any], weights: dict[str, float]) -> Hit[T]:
    # A row written without an embedding (plain SQL, a shared row) has no cosine: 0.
    distance, keyword = row.pop("hit_distance"), row.pop("hit_keyword")
    del row["hit_key"], row["hit_size"]
    signals = {"vector": 0.0 if distance is None else 1.0 - float(distance),
               "keyword": 0.0 if keyword is None else float(keyword)}
    return Hit(row_cls(**row), fuse(signals, weights), signals)


@functools.lru_cache(maxsize=64)
def _similar_query(table: str, where: str, columns: str, postings: str | None = None,
                   large: bool = False) -> tuple[str, tuple[str, ...]]:
    """The similarity statement (``where`` and the select list as rendered SQL) with PostgreSQL's
    own placeholders (``$1``...) and the parameter names in their order: composed once per
    table and filter and sent as it is (``Sql.raw``), since psycopg parses a statement longer
    than 4 KB again on every execution. ``large``: the indexed shape alone (:func:`_similar_text`)."""
    return numbered(_similar_statement(table, sql.SQL(where), sql.SQL(columns), postings, large))


def _similar_statement(table: str, where: sql.Composable, columns: sql.Composable,
                       postings: str | None = None, large: bool = False) -> sql.Composed:
    names = dict(key=sql.Identifier(key_name(table)), tbl=sql.Identifier(table), where=where, cols=columns)
    if postings is None:
        return sql.SQL(_SIMILAR["gin", large]).format(**names)  # a constant; values are bound
    if where.as_string() == USER_ROWS and postings in POSTINGS_COUNTS:
        return sql.SQL(_SIMILAR["stats", large]).format(post=sql.Identifier(postings),
                                                        stats=sql.Identifier(POSTINGS_COUNTS[postings]), **names)
    return sql.SQL(_SIMILAR["postings", large]).format(post=sql.Identifier(postings), **names)


def key_name(table: str) -> str:
    return "summary_id" if table == "summary_memory" else "id"

