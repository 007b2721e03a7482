"""Shared plumbing of the MemoryManager mixins: validation, embedding, search SQL.

Similarity reads embed the query once, take the nearest rows by cosine distance
(HNSW, iterative scan so a user filter cannot starve the result) and, where the
table has a ``search_tsv`` column, the best full-text matches, then fuse the two
rankings with weighted reciprocal rank fusion. Each hit keeps its cosine similarity
as ``score`` so callers can apply an absolute threshold.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Sequence, TypeVar

import numpy as np
from psycopg import sql
from psycopg.rows import class_row

from .db import Database
from .embeddings import EmbeddingService
from .settings import Settings
from .validation import check_id, check_positive_int, check_text

T = TypeVar("T")

#: Reciprocal-rank-fusion constant and weights; see ``fuse_rankings``.
RRF_K = 60


def columns_of(cls: type, *, skip: Iterable[str] = ("score",)) -> list[str]:
    skipped = set(skip)
    return [f.name for f in dataclasses.fields(cls) if f.name not in skipped]


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


def fuse_rankings(rankings: Sequence[Sequence[Any]], weights: Sequence[float] | None = None,
                  k: int = RRF_K) -> list[Any]:
    """Weighted reciprocal rank fusion of several ranked id lists, best first."""
    weights = weights or [1.0] * len(rankings)
    scores: dict[Any, float] = {}
    first_seen: dict[Any, int] = {}
    for ranking, weight in zip(rankings, weights):
        for rank, key in enumerate(ranking):
            scores[key] = scores.get(key, 0.0) + weight / (k + rank + 1)
            first_seen.setdefault(key, len(first_seen))
    return sorted(scores, key=lambda key: (-scores[key], first_seen[key]))


class StoreBase:
    """State and helpers shared by every memory-type mixin."""

    db: Database
    settings: Settings
    embeddings: EmbeddingService

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
        return self.embeddings.embed([t[:4000] for t in texts])

    # -- search -----------------------------------------------------------------------
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
    ) -> list[T]:
        """Rows of ``table`` matching ``where`` ranked for ``query`` (vector + keyword).

        The keyword half matches ANY of the query's stemmed words (a sentence query
        ANDed word by word would match almost nothing), ranked by ``ts_rank_cd``, and
        votes with ``settings.keyword_weight`` (0.5: measured on the tool and
        long-memory benchmarks, keyword ranks are noisier than vector ranks).
        ``columns`` replaces the select list of ``row_cls``'s fields (a table that
        lacks one of them selects a constant in its place).
        """
        if keyword_weight is None:
            keyword_weight = self.settings.keyword_weight
        query = check_text(query, "query", max_chars=self.settings.max_content_chars)
        qvec = self._embed([query])[0]
        pool = max(k * 4, 20)
        cols = columns if columns is not None else select_list(row_cls)
        tbl = sql.Identifier(table)
        key = sql.Identifier("summary_id" if table == "summary_memory" else "id")
        args = dict(params, qvec=qvec, pool=pool, q=query)
        vector_sql = sql.SQL(
            "SELECT {cols}, 1 - (embedding <=> %(qvec)s) AS score FROM {tbl} "
            "WHERE embedding IS NOT NULL AND ({where}) ORDER BY embedding <=> %(qvec)s LIMIT %(pool)s"
        ).format(cols=cols, tbl=tbl, where=where)
        keyword_sql = sql.SQL(
            "SELECT {key} FROM {tbl}, to_tsquery('simple', (SELECT string_agg(quote_literal(lexeme), ' | ')"
            " FROM unnest(tsvector_to_array(to_tsvector('english', %(q)s))) AS lexeme)) AS tsq "
            "WHERE search_tsv @@ tsq AND ({where}) "
            "ORDER BY ts_rank_cd(search_tsv, tsq) DESC LIMIT %(pool)s"
        ).format(key=key, tbl=tbl, where=where)
        with self.db.connection(params.get("uid")) as conn:
            conn.execute("SET LOCAL hnsw.iterative_scan = strict_order")
            conn.execute(sql.SQL("SET LOCAL hnsw.ef_search = {}").format(sql.Literal(int(self.settings.hnsw_ef_search))))
            with conn.cursor(row_factory=class_row(row_cls)) as cur:
                vec_rows = cur.execute(vector_sql, args).fetchall()
            kw_ids: list[Any] = []
            if hybrid:
                kw_ids = [r[0] for r in conn.execute(keyword_sql, args)]
        by_id = {getattr(r, key_name(table)): r for r in vec_rows}
        missing = [i for i in kw_ids if i not in by_id]
        if missing:
            fetch = sql.SQL(
                "SELECT {cols}, 1 - (embedding <=> %(qvec)s) AS score FROM {tbl} WHERE {key} = ANY(%(ids)s) AND ({where})"
            ).format(cols=cols, tbl=tbl, key=key, where=where)
            with self.db.connection(params.get("uid")) as conn, conn.cursor(row_factory=class_row(row_cls)) as cur:
                for row in cur.execute(fetch, dict(args, ids=missing)):
                    by_id[getattr(row, key_name(table))] = row
        order = fuse_rankings(
            [[getattr(r, key_name(table)) for r in vec_rows], kw_ids], [vector_weight, keyword_weight]
        )
        hits = [by_id[i] for i in order[:k] if i in by_id]
        for hit in hits:
            hit.score = float(hit.score)  # type: ignore[attr-defined]
        return hits


def key_name(table: str) -> str:
    return "summary_id" if table == "summary_memory" else "id"

