"""Shared plumbing of the table objects: the store core, validation, embedding, search SQL.

``Store`` is what every table object is built on (the pool, the embedding service, the
settings); ``Table`` is the small base of the per-table classes (``Conversations``,
``Knowledge`` ...) with the validation and similarity helpers they share. A table
object that needs another one is given it explicitly when it is built (see
``memory.manager.MemoryManager``), never looks it up.

Similarity reads embed the query once and send one statement (after the transaction's
SET LOCAL settings): the nearest rows by cosine distance (HNSW, iterative scan so a user
filter cannot starve the result) and the best keyword matches among a bounded set of
candidates from the gin index, each candidate with both signals. They are fused by
:func:`memory.retrieval.fusion.fuse` into an absolute score, ``vector + keyword_weight x
keyword``, the same fusion ``search_memory`` uses (its own signals on top), so a score
means the same in every list and for every query.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, TypeVar
from collections.abc import Sequence

import numpy as np
from psycopg import sql
from psycopg.rows import class_row

from memory.store.db import Database
from memory.store.ops import Call, Op, Sql, run
from memory.retrieval.embeddings import EmbeddingService
from memory.retrieval.speakers import SpeakerNames
from memory.retrieval.fusion import MIN_TERMS, fuse
from memory.retrieval.hits import Hit
from memory.settings import Settings
from memory.errors import InvalidInputError
from memory.store.validation import check_id, check_positive_int, check_text

T = TypeVar("T")

def columns_of(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def select_list(cls: type, alias: str | None = None) -> sql.Composable:
    cols = columns_of(cls)
    if alias:
        return sql.SQL(", ").join(sql.Identifier(alias, c) for c in cols)
    return sql.SQL(", ").join(sql.Identifier(c) for c in cols)


def insert_returning(conn: Any, stmt: sql.Composable, rows: Sequence[dict[str, Any]], row_cls: type[T]) -> list[T]:
    """Run one INSERT ... RETURNING per row (pipelined by psycopg); the rows in order."""
    out: list[T] = []
    with conn.cursor(row_factory=class_row(row_cls)) as cur:
        cur.executemany(stmt, rows, returning=True)
        while True:
            out.extend(cur.fetchall())
            if not cur.nextset():
                break
    return out


@dataclass
class Store:
    """What every table object needs: the pool, the embedding service and the settings."""

    db: Database
    embeddings: EmbeddingService
    settings: Settings
    speakers: SpeakerNames = field(default_factory=SpeakerNames)  # search's cache of speaker names


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
    def _search_settings(self, conn: Any) -> None:
        conn.execute(self._search_settings_sql().stmt)

    def _search_settings_sql(self, user: str | None = None) -> Sql:
        """HNSW keeps scanning until a filtered query (one user's rows) has its LIMIT, in
        exact distance order. SET LOCAL (Citus forwards it to the workers, where the index
        scans run), both in one simple-protocol round trip."""
        return Sql(sql.SQL("SET LOCAL hnsw.ef_search = {}; SET LOCAL hnsw.iterative_scan = strict_order").format(
            sql.Literal(int(self.settings.hnsw_ef_search))), fetch="none", user=user)

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
    ) -> list[Hit[T]]:
        """Rows of ``table`` matching ``where`` ranked for ``query`` (vector + keyword), one statement.

        Each comes back as a :class:`~memory.retrieval.hits.Hit` with two signals:
        ``signals["vector"]``, the cosine similarity of the row to the query (-1..1, 0 for
        a row written without an embedding), and ``signals["keyword"]``, the IDF coverage
        of the query's stemmed words by the row (0..1: the share of the query's summed
        IDF that the row contains, the denominator at least ``MIN_TERMS`` rare words'
        worth; 0 when the keyword half did not find it). ``score`` is their fusion
        (:func:`memory.retrieval.fusion.fuse`), ``vector_weight x vector + keyword_weight
        x keyword``: absolute, so it compares across queries and lists and can be
        thresholded. ``keyword_weight`` defaults to ``settings.keyword_weight``
        (``bench/similar_reads.py`` chose it).

        The keyword half matches ANY of the query's stemmed words (a sentence query
        ANDed word by word would match almost nothing). Its work is bounded: at most
        ``search_max_terms`` words, and for each word at most ``search_term_candidates``
        rows from the gin index (a rare word brings all its rows, a common one a
        bounded sample). A word's document frequency is the number of rows it brought
        (exact below that bound, the bound above it) among the rows matching ``where``,
        counted up to :data:`DOC_COUNT_CAP`. The rows the words brought are pre-ranked by
        the summed IDF of those words, the best ``4 x pool`` get the exact keyword signal,
        and the best ``pool`` of them and the ``pool`` nearest rows are fused; ``k`` are
        returned.
        ``columns`` replaces the select list of ``row_cls``'s fields (a table that
        lacks one of them selects a constant in its place).
        """
        return run(self.db, self._similar_op(table, row_cls, query, where, params, k=k, hybrid=hybrid,
                                             keyword_weight=keyword_weight, vector_weight=vector_weight,
                                             columns=columns))

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
    ) -> Op[list[Hit[T]]]:
        """:meth:`_similar` as an operation (``memory.store.ops``)."""
        if keyword_weight is None:
            keyword_weight = self.settings.keyword_weight
        query = self._query(query)
        qvec = (yield Call(self._embed, ([query],)))[0]
        pool = max(k * 4, 20)
        stmt = _similar_statement(table, row_cls, where, columns)
        args = dict(params, qvec=qvec, pool=pool, prepool=4 * pool, q=query, hybrid=hybrid,
                    min_terms=MIN_TERMS, n_cap=DOC_COUNT_CAP, max_terms=self.settings.search_max_terms,
                    cap=self.settings.search_term_candidates)
        uid = params.get("uid")
        yield self._search_settings_sql(uid)
        rows = yield Sql(stmt, args, dict, user=uid)
        weights = {"vector": float(vector_weight), "keyword": float(keyword_weight)}
        hits = [_hit(row_cls, row, weights) for row in rows]  # in vector order: ties go to the closer row
        hits.sort(key=lambda h: -h.score)
        return hits[:k]


#: The model reads the first few hundred tokens; longer texts are cut before embedding.
EMBED_CHARS = 4000

#: The query's distinct stemmed words in the order they first appear, at most
#: ``%(max_terms)s`` of them, each as a tsquery literal (``'word'``), and their OR.
TERMS_CTE = (
    "terms AS (SELECT '''' || replace(replace(t.lexeme, '\\', '\\\\'), '''', '''''') || '''' AS lit"
    " FROM unnest(to_tsvector('english', %(q)s)) AS t ORDER BY t.positions[1] LIMIT %(max_terms)s),"
    " tsq AS (SELECT string_agg(lit, ' | ')::tsquery AS tq FROM terms)"
)

#: Rows counted for the document frequencies of the keyword signal: beyond this many
#: rows under the filter, the IDFs are those of a collection of this size.
DOC_COUNT_CAP = 10_000

#: The keyword signal of one table (the IDF coverage of :mod:`memory.retrieval.fusion`),
#: after ``TERMS_CTE``: ``kw(key, ks)``, the best ``%(pool)s`` rows by it. ``lex`` are the
#: query's words, ``hits`` the rows each word brings from the gin index (at most
#: ``%(cap)s``), ``idf`` each word's weight (``n`` rows, ``df`` of them with the word).
KEYWORD_CTES = (
    " lex AS (SELECT row_number() OVER () AS ord, lit::tsquery AS tq FROM terms WHERE %(hybrid)s),"
    " n AS (SELECT count(*) AS n FROM (SELECT 1 FROM {tbl} WHERE %(hybrid)s AND ({where}) LIMIT %(n_cap)s) s),"
    " hits AS (SELECT lex.ord, h.key FROM lex CROSS JOIN LATERAL ("
    "   SELECT {key} AS key FROM {tbl} WHERE search_tsv @@ lex.tq AND ({where}) LIMIT %(cap)s) h),"
    " dfs AS (SELECT ord, count(*) AS df FROM hits GROUP BY ord),"
    " idf AS (SELECT lex.ord, lex.tq, ln(1 + (greatest(n.n, d.df) - d.df + 0.5) / (d.df + 0.5)) AS idf"
    "   FROM lex CROSS JOIN n CROSS JOIN LATERAL (SELECT coalesce(max(dfs.df), 0) AS df FROM dfs"
    "     WHERE dfs.ord = lex.ord) d),"
    # pre-ranked by the words that brought each row (cheap), the best %(prepool)s scored exactly
    " pre AS (SELECT hits.key FROM hits JOIN idf ON idf.ord = hits.ord"
    "   GROUP BY hits.key ORDER BY sum(idf.idf) DESC, hits.key LIMIT %(prepool)s),"
    " kw AS (SELECT x.{key} AS key,"
    "   (SELECT sum(idf.idf) FROM idf WHERE x.search_tsv @@ idf.tq)"
    "   / nullif(greatest((SELECT sum(idf) FROM idf),"
    "                     %(min_terms)s * ln(1 + ((SELECT n FROM n) + 0.5) / 0.5)), 0) AS ks"
    "   FROM {tbl} x WHERE x.{key} IN (SELECT key FROM pre) AND ({where})"
    "   ORDER BY ks DESC, x.embedding <=> %(qvec)s NULLS LAST, x.{key} LIMIT %(pool)s)"
)

_SIMILAR = (
    "WITH " + TERMS_CTE + "," + KEYWORD_CTES + ","
    # vector half: nearest rows by cosine distance (HNSW where the planner finds it cheaper
    # than reading the user's rows; the iterative scan, set per connection, keeps filters fed)
    " vec AS (SELECT {key} AS key FROM {tbl}"
    "   WHERE embedding IS NOT NULL AND ({where}) ORDER BY embedding <=> %(qvec)s LIMIT %(pool)s)"
    # every candidate of either half with both signals, closest first (fused in Python)
    " SELECT {cols}, 1 - (x.embedding <=> %(qvec)s) AS hit_vector, kw.ks AS hit_keyword"
    " FROM {tbl} x LEFT JOIN kw ON kw.key = x.{key}"
    " WHERE x.{key} IN (SELECT key FROM vec UNION SELECT key FROM kw) AND ({where})"
    " ORDER BY x.embedding <=> %(qvec)s NULLS LAST, x.{key}"
)


def _hit(row_cls: type[T], row: dict[str, Any], weights: dict[str, float]) -> Hit[T]:
    # A row written without an embedding (plain SQL, a shared row) has no cosine: 0.
    vector, keyword = row.pop("hit_vector"), row.pop("hit_keyword")
    signals = {"vector": 0.0 if vector is None else float(vector),
               "keyword": 0.0 if keyword is None else float(keyword)}
    return Hit(row_cls(**row), fuse(signals, weights), signals)


def _similar_statement(table: str, row_cls: type, where: sql.Composable,
                       columns: sql.Composable | None = None) -> sql.Composed:
    return sql.SQL(_SIMILAR).format(  # a constant; values are bound
        key=sql.Identifier(key_name(table)), tbl=sql.Identifier(table), where=where,
        cols=columns if columns is not None else select_list(row_cls, "x"))


def key_name(table: str) -> str:
    return "summary_id" if table == "summary_memory" else "id"

