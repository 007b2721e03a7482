"""Summary (semantic) memory: structured summaries of consolidated conversation.

A summary is referenced in a context as ``[Summary ID: <uuid>] <label>``; the
consolidation pipeline (``memory.consolidation.writeback``) writes the summary and marks its
source rows in one transaction. Another user's summary id is simply not found.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from psycopg import sql
from psycopg.types.json import Jsonb

from memory.store.ops import Op, Sql, run, run_on
from memory.tables.base import Table, select_list
from memory.errors import NotFoundError
from memory.retrieval.hits import Hit
from memory.store.rows import Summary
from memory.store.validation import (check_count, check_datetime, check_object, check_optional_count,
                                     check_positive_int, check_text, check_uuid)

_INSERT = sql.SQL(
    "INSERT INTO summary_memory (summary_id, user_id, thread_id, description, content, source_count,"
    " first_message_at, last_message_at, source_tokens, summary_tokens, metadata, embedding)"
    " VALUES (%(summary_id)s, %(user_id)s, %(thread_id)s, %(description)s, %(content)s, %(source_count)s,"
    " %(first_message_at)s, %(last_message_at)s, %(source_tokens)s, %(summary_tokens)s, %(metadata)s,"
    " %(embedding)s) RETURNING {cols}"
).format(cols=select_list(Summary))
BY_ID = sql.SQL("SELECT {cols} FROM summary_memory"
                " WHERE summary_id = %s AND user_id = %s").format(cols=select_list(Summary))
#: The latest %s summaries of the user (of one thread if %s is not NULL), oldest first.
LATEST = sql.SQL(
    "SELECT * FROM (SELECT {cols} FROM summary_memory WHERE user_id = %s"
    " AND (%s::text IS NULL OR thread_id = %s) ORDER BY created_at DESC LIMIT %s) s ORDER BY created_at"
).format(cols=select_list(Summary))


class Summaries(Table):
    """``summary_memory``: structured summaries, by id, by thread or by similarity."""

    def prepare(self, description: str, content: str, *, user_id: str, thread_id: str | None,
                **extra: Any) -> dict[str, Any]:
        """Validated parameters for one summary insert (embedding included)."""
        uid = self._uid(user_id)
        tid = self._tid(thread_id) if thread_id is not None else None
        description = check_text(description, "description", max_chars=500)
        content = self._content(content)
        metadata = check_object(extra.get("metadata"), "metadata", max_chars=self.settings.max_content_chars)
        summary_id = extra.get("summary_id")
        return dict(
            summary_id=check_uuid(summary_id, "summary_id") if summary_id is not None else uuid.uuid4(),
            user_id=uid, thread_id=tid, description=description, content=content,
            source_count=check_count(extra.get("source_count", 0), "source_count"),
            first_message_at=check_datetime(extra.get("first_message_at"), "first_message_at"),
            last_message_at=check_datetime(extra.get("last_message_at"), "last_message_at"),
            source_tokens=check_optional_count(extra.get("source_tokens"), "source_tokens"),
            summary_tokens=check_optional_count(extra.get("summary_tokens"), "summary_tokens"),
            metadata=Jsonb(metadata or {}), embedding=self._embed([f"{description}\n{content}"])[0],
        )

    def insert(self, conn: Any, row: dict[str, Any]) -> Summary:
        """Insert a row made by :meth:`prepare` inside the caller's transaction."""
        return run_on(conn, self.insert_op(row))

    def insert_op(self, row: dict[str, Any]) -> Op[Summary]:
        out: Summary | None = yield Sql(_INSERT, row, Summary, "one", row["user_id"])
        assert out is not None
        return out

    def write_summary(self, description: str, content: str, *, user_id: str, thread_id: str | None = None,
                      source_count: int = 0, first_message_at: datetime | None = None,
                      last_message_at: datetime | None = None, metadata: dict[str, Any] | None = None) -> Summary:
        """Store a free-standing summary (no rows marked; see ``summarize_conversation`` for that)."""
        row = self.prepare(description, content, user_id=user_id, thread_id=thread_id, source_count=source_count,
                                first_message_at=first_message_at, last_message_at=last_message_at,
                                metadata=metadata)
        with self.db.connection(row["user_id"]) as conn:
            return self.insert(conn, row)

    def read_summary_by_id(self, summary_id: str | uuid.UUID, *, user_id: str) -> Summary:
        """The summary, if it is this user's; NotFoundError otherwise."""
        return run(self.db, self.by_id_op(summary_id, user_id=user_id))

    def by_id_op(self, summary_id: str | uuid.UUID, *, user_id: str) -> Op[Summary]:
        sid, uid = check_uuid(summary_id, "summary_id"), self._uid(user_id)
        row: Summary | None = yield Sql(BY_ID, (sid, uid), Summary, "one", uid)
        if row is None:
            raise NotFoundError(f"summary {sid} not found for this user")
        return row

    def read_summaries(self, *, user_id: str, thread_id: str | None = None, limit: int = 50) -> list[Summary]:
        """This user's summaries (of one thread, if given), oldest first."""
        return run(self.db, self.latest_op(user_id=user_id, thread_id=thread_id, limit=limit))

    def latest_op(self, *, user_id: str, thread_id: str | None = None, limit: int = 50) -> Op[list[Summary]]:
        uid = self._uid(user_id)
        tid = self._tid(thread_id) if thread_id is not None else None
        rows: list[Summary] = yield Sql(LATEST, (uid, tid, tid, check_positive_int(limit, "limit", maximum=1000)),
                                        Summary, user=uid)
        return rows

    def read_summary_memory(self, query: str, *, user_id: str, k: int = 3,
                            thread_id: str | None = None) -> list[Hit[Summary]]:
        """Summaries most relevant to ``query`` (of one thread, if given), best first.

        ``score``: ``vector + keyword_weight x keyword``, absolute (see ``Table._similar``);
        ``signals["vector"]``: cosine similarity of label + content to the query;
        ``signals["keyword"]``: IDF coverage of the query's words (0..1, 0 if not matched).
        """
        uid = self._uid(user_id)
        where = sql.SQL("user_id = %(uid)s")
        params: dict[str, Any] = {"uid": uid}
        if thread_id is not None:
            where = sql.SQL("user_id = %(uid)s AND thread_id = %(tid)s")
            params["tid"] = self._tid(thread_id)
        return self._similar("summary_memory", Summary, query, where, params, k=self._k(k))

    def summary_references(self, *, user_id: str, thread_id: str | None = None) -> list[str]:
        """``[Summary ID: id] label`` lines for this user's summaries, oldest first."""
        return [s.reference for s in self.read_summaries(user_id=user_id, thread_id=thread_id)]
