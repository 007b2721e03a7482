"""Shared plumbing of the table objects: the store core, validation, embedding, search SQL.

``Store`` is what every table object is built on (the pool, the embedding service, the
settings); ``Table`` is the small base of the per-table classes (``Conversations``,
``Knowledge`` ...) with the validation and similarity helpers they share. A table
object that needs another one is given it explicitly when it is built (see
``memory.manager.MemoryManager``), never looks it up.

Similarity reads embed the query once and send one statement (after the transaction's
SET LOCAL settings): the nearest rows by
cosine distance (HNSW, iterative scan so a user filter cannot starve the result), the
best full-text matches among a bounded set of candidates from the gin index, and
their weighted reciprocal rank fusion, all in SQL. Each hit keeps its cosine
similarity as its ``"vector"`` signal so callers can apply an absolute threshold (0
for a row written without an embedding).
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
from memory.retrieval.fusion import RRF_K
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

        Each comes back as a :class:`~memory.retrieval.hits.Hit`: ``score`` is the weighted
        reciprocal rank fusion the list is ordered by (``vector_weight / (60 + vector rank)
        + keyword_weight / (60 + keyword rank)``, a rank score: compare it within one
        result list only); ``signals["vector"]`` is the cosine similarity of the row to the
        query (-1..1, 0 for a row written without an embedding), the value to apply an
        absolute threshold to; ``signals["keyword"]`` is the ``ts_rank_cd`` of the
        query's words in the row (0 when the keyword half did not rank it).

        The keyword half matches ANY of the query's stemmed words (a sentence query
        ANDed word by word would match almost nothing), ranked by ``ts_rank_cd``, and
        votes with ``settings.keyword_weight`` (0.5: measured on the tool and
        long-memory benchmarks, keyword ranks are noisier than vector ranks). Its work
        is bounded: at most ``search_max_terms`` words, and for each word at most
        ``search_term_candidates`` rows from the gin index are ranked (a rare word
        brings all its rows, a word in half the table a bounded sample of them).
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
        args = dict(params, qvec=qvec, pool=pool, q=query, k=k, hybrid=hybrid, vw=float(vector_weight),
                    kww=float(keyword_weight), rrf_k=RRF_K, max_terms=self.settings.search_max_terms,
                    cap=self.settings.search_term_candidates)
        uid = params.get("uid")
        yield self._search_settings_sql(uid)
        rows = yield Sql(stmt, args, dict, user=uid)
        return [_hit(row_cls, row) for row in rows]


#: The model reads the first few hundred tokens; longer texts are cut before embedding.
EMBED_CHARS = 4000

#: The query's distinct stemmed words in the order they first appear, at most
#: ``%(max_terms)s`` of them, each as a tsquery literal (``'word'``), and their OR.
TERMS_CTE = (
    "terms AS (SELECT '''' || replace(replace(t.lexeme, '\\', '\\\\'), '''', '''''') || '''' AS lit"
    " FROM unnest(to_tsvector('english', %(q)s)) AS t ORDER BY t.positions[1] LIMIT %(max_terms)s),"
    " tsq AS (SELECT string_agg(lit, ' | ')::tsquery AS tq FROM terms)"
)

_SIMILAR = (
    "WITH " + TERMS_CTE + ","
    # vector half: nearest rows by cosine distance (HNSW where the planner finds it cheaper
    # than reading the user's rows; the iterative scan, set per connection, keeps filters fed)
    " vec AS (SELECT key, row_number() OVER (ORDER BY d, key) AS r FROM ("
    "   SELECT {key} AS key, embedding <=> %(qvec)s AS d FROM {tbl}"
    "   WHERE embedding IS NOT NULL AND ({where}) ORDER BY embedding <=> %(qvec)s LIMIT %(pool)s) v),"
    # keyword half: each word's first rows through the gin index (bounded), ranked together
    " kwc AS (SELECT DISTINCT c.key FROM terms CROSS JOIN LATERAL ("
    "   SELECT {key} AS key FROM {tbl} WHERE %(hybrid)s AND search_tsv @@ terms.lit::tsquery AND ({where})"
    "   LIMIT %(cap)s) c),"
    # (equal keyword ranks, common with short texts, go to the row closer to the query)
    " kw AS (SELECT key, rank, row_number() OVER (ORDER BY rank DESC, d NULLS LAST, key) AS r FROM ("
    "   SELECT x.{key} AS key, ts_rank_cd(x.search_tsv, tsq.tq) AS rank, x.embedding <=> %(qvec)s AS d"
    "   FROM {tbl} x JOIN kwc ON kwc.key = x.{key} CROSS JOIN tsq WHERE ({where})"
    "   ORDER BY rank DESC, d NULLS LAST, key LIMIT %(pool)s) k),"
    # weighted reciprocal rank fusion; ties keep the vector order, then the keyword order
    " fused AS (SELECT key, sum(w / (%(rrf_k)s + r)) AS f, min(tb) AS tb FROM ("
    "   SELECT key, r, %(vw)s::float8 AS w, r AS tb FROM vec"
    "   UNION ALL SELECT key, r, %(kww)s::float8, %(pool)s + r FROM kw) u"
    "   GROUP BY key ORDER BY f DESC, tb LIMIT %(k)s)"
    " SELECT {cols}, fused.f AS hit_score, 1 - (x.embedding <=> %(qvec)s) AS hit_vector, kw.rank AS hit_keyword"
    " FROM {tbl} x JOIN fused ON fused.key = x.{key} LEFT JOIN kw ON kw.key = x.{key}"
    " WHERE ({where}) ORDER BY fused.f DESC, fused.tb"
)


def _hit(row_cls: type[T], row: dict[str, Any]) -> Hit[T]:
    # A row written without an embedding (plain SQL, a shared row) has no cosine: 0.
    score, vector, keyword = row.pop("hit_score"), row.pop("hit_vector"), row.pop("hit_keyword")
    signals = {"vector": 0.0 if vector is None else float(vector),
               "keyword": 0.0 if keyword is None else float(keyword)}
    return Hit(row_cls(**row), float(score), signals)


def _similar_statement(table: str, row_cls: type, where: sql.Composable,
                       columns: sql.Composable | None = None) -> sql.Composed:
    return sql.SQL(_SIMILAR).format(  # a constant; values are bound
        key=sql.Identifier(key_name(table)), tbl=sql.Identifier(table), where=where,
        cols=columns if columns is not None else select_list(row_cls, "x"))


def key_name(table: str) -> str:
    return "summary_id" if table == "summary_memory" else "id"

