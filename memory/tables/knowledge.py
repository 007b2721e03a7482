"""Knowledge memory: documents and passages the agent may cite."""

from __future__ import annotations

import functools
import hashlib
import uuid
from typing import Any
from collections.abc import Iterable, Mapping

from psycopg import sql
from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from memory.store.ops import Op, run
from memory.tables.base import Table, select_list
from memory.errors import InvalidInputError
from memory.retrieval.hits import Hit
from memory.store.rows import KnowledgeItem
from memory.store.validation import check_bool, check_object, check_text


#: Passages per INSERT statement of :meth:`Knowledge.write_knowledge_batch`. One statement
#: for many rows, not one per row: the statement triggers of migrations 013 and 014 (the
#: postings, the user's count) then run once per batch; updating the count row once per
#: row of a batch cost a 50-passage write ~25 % more (``bench/search_latency.py --write-cost``).
INSERT_ROWS = 1_000

_COLUMNS = ("id", "user_id", "content", "source", "metadata", "content_hash", "embedding")


@functools.lru_cache(maxsize=16)
def _insert_statement(n: int) -> sql.Composed:
    """INSERT of ``n`` passages (ids made by the caller, so the rows come back in input order)."""
    row = sql.SQL("({})").format(sql.SQL(", ").join(sql.Placeholder() for _ in _COLUMNS))
    return sql.SQL("INSERT INTO knowledge_memory ({cols}) VALUES {rows} RETURNING {ret}").format(
        cols=sql.SQL(", ").join(sql.Identifier(c) for c in _COLUMNS), rows=sql.SQL(", ").join([row] * n),
        ret=select_list(KnowledgeItem))


class Knowledge(Table):
    """``knowledge_memory``: passages the agent may cite, read by similarity."""

    def write_knowledge(self, content: str, source: str = "", metadata: dict[str, Any] | None = None, *,
                        user_id: str) -> KnowledgeItem:
        """Store one passage; see :meth:`write_knowledge_batch`."""
        return self.write_knowledge_batch([{"content": content, "source": source, "metadata": metadata}],
                                          user_id=user_id)[0]

    def write_knowledge_batch(self, items: Iterable[Mapping[str, Any]], *, user_id: str) -> list[KnowledgeItem]:
        """Store passages (dicts with content, optional source and metadata) in one transaction."""
        uid = self._uid(user_id)
        rows: list[dict[str, Any]] = []
        for item in items:
            if not isinstance(item, Mapping):
                raise InvalidInputError("each knowledge item must be a dict with at least 'content'")
            content = self._content(item.get("content"))
            source = check_text(item.get("source") or "", "source", max_chars=2000, allow_empty=True)
            metadata = check_object(item.get("metadata"), "metadata", max_chars=self.settings.max_content_chars)
            rows.append(dict(user_id=uid, content=content, source=source, metadata=Jsonb(metadata or {}),
                             content_hash=hashlib.sha256(content.encode()).hexdigest()))
        if not rows:
            return []
        for row, vec in zip(rows, self._embed([r["content"] for r in rows]), strict=True):
            row["id"], row["embedding"] = uuid.uuid4(), vec
        written: dict[uuid.UUID, KnowledgeItem] = {}
        with self.db.connection(uid) as conn, conn.cursor(row_factory=class_row(KnowledgeItem)) as cur:
            for start in range(0, len(rows), INSERT_ROWS):
                chunk = rows[start:start + INSERT_ROWS]
                cur.execute(_insert_statement(len(chunk)), [row[c] for row in chunk for c in _COLUMNS])
                written.update((item.id, item) for item in cur.fetchall())
        return [written[row["id"]] for row in rows]

    def read_knowledge(self, query: str, *, user_id: str, k: int = 5,
                       hybrid: bool = True) -> list[Hit[KnowledgeItem]]:
        """Passages of this user most relevant to ``query``, best first.

        ``score``: ``vector + keyword_weight x keyword``, absolute (see ``Table._similar``);
        ``signals["vector"]``: cosine similarity to the query; ``signals["keyword"]``: IDF
        coverage of the query's words by the passage (0..1, 0 if not matched).
        ``hybrid=False`` ranks by the vector alone.
        """
        return run(self.db, self.read_knowledge_op(query, user_id=user_id, k=k, hybrid=hybrid))

    def read_knowledge_op(self, query: str, *, user_id: str, k: int = 5,
                          hybrid: bool = True) -> Op[list[Hit[KnowledgeItem]]]:
        uid = self._uid(user_id)
        check_bool(hybrid, "hybrid")
        return (yield from self._similar_op("knowledge_memory", KnowledgeItem, query, sql.SQL("user_id = %(uid)s"),
                                            {"uid": uid}, k=self._k(k), hybrid=hybrid, postings="knowledge_terms"))
