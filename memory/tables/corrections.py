"""Corrections: a wrong statement is corrected explicitly in the thread's history.

``correct`` appends a system message to the thread saying which statement was wrong
and what is true, with the details in ``metadata["correction"]`` (and the id of the
corrected message, if given). The message is part of the working set like any other,
so later summaries carry the correction instead of the error. Given ``fact_id``, the
durable fact is superseded by the true statement in the same transaction: either
both are written or neither.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from psycopg import sql
from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from memory.tables.base import select_list
from memory.tables.conversation import embedding_text
from memory.errors import InvalidInputError, NotFoundError
from memory.tables.base import Store, Table
from memory.tables.facts import Facts, Remembered
from memory.store.rows import Message
from memory.store.validation import check_text, check_uuid

#: A correction names statements, not documents.
MAX_STATEMENT_CHARS = 4_000


@dataclass
class Correction:
    message: Message
    fact: Remembered | None = None


def correction_text(wrong: str, right: str) -> str:
    return f'Correction: the earlier statement "{wrong}" was wrong. What is true: {right}'


class Corrections(Table):
    """Explicit corrections in a thread's history, superseding a durable fact through ``facts``."""

    def __init__(self, store: Store, facts: Facts) -> None:
        super().__init__(store)
        self.facts = facts

    def correct(self, wrong: str, right: str, *, user_id: str, thread_id: str, message_id: int | None = None,
                fact_id: str | uuid.UUID | None = None) -> Correction:
        """Append an explicit correction to the thread (and supersede ``fact_id`` with ``right``)."""
        uid, tid = self._uid(user_id), self._tid(thread_id)
        wrong = check_text(wrong, "wrong", max_chars=MAX_STATEMENT_CHARS)
        right = check_text(right, "right", max_chars=MAX_STATEMENT_CHARS)
        if message_id is not None and (isinstance(message_id, bool) or not isinstance(message_id, int)):
            raise InvalidInputError(f"message_id must be an integer message id, got {type(message_id).__name__}")
        fid = check_uuid(fact_id, "fact_id") if fact_id is not None else None
        fact_content = self.facts.check_content(right) if fid is not None else None
        text = correction_text(wrong, right)
        texts = [embedding_text("system", text)] + ([fact_content] if fact_content else [])
        vectors = self._embed(texts)
        meta = {"correction": {"wrong": wrong, "right": right, "message_id": message_id,
                               "fact_id": str(fid) if fid else None}}
        with self.db.connection(uid) as conn:
            if message_id is not None:
                found = conn.execute("SELECT 1 FROM conversational_memory WHERE id = %s AND user_id = %s"
                                     " AND thread_id = %s", (message_id if 0 < message_id < 2**63 else -1, uid,
                                                              tid)).fetchone()
                if found is None:
                    raise NotFoundError(f"message {message_id} not found in this thread for this user")
            category: str | None = None
            if fid is not None:
                row = conn.execute("SELECT category FROM fact_memory WHERE id = %s AND user_id = %s"
                                   " AND valid_to IS NULL", (fid, uid)).fetchone()
                if row is None:
                    raise NotFoundError(f"fact {fid} is not an active fact of this user")
                category = row[0]
            stmt = sql.SQL(
                "INSERT INTO conversational_memory (user_id, thread_id, role, content, metadata, embedding)"
                " VALUES (%s, %s, 'system', %s, %s, %s) RETURNING {cols}").format(cols=select_list(Message))
            with conn.cursor(row_factory=class_row(Message)) as cur:
                message = cur.execute(stmt, (uid, tid, text, Jsonb(meta), vectors[0])).fetchone()
            assert message is not None
            fact = None
            if fid is not None:
                assert category is not None and fact_content is not None  # both set above when fid is
                fact = self.facts.apply(conn, category, fact_content, vectors[1], user_id=uid,
                                        target=fid, source_message_id=message.id)
        assert message is not None
        return Correction(message, fact)
