"""Thread operations the adapters need beyond the front door: drop a thread, pop its last message.

Both run in one transaction scoped to the user (so through the app role too) and name
the user in every statement (one shard on Citus).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from psycopg.rows import class_row

from psycopg import sql

from memory.store.rows import Message
from memory.store.validation import check_id
from memory.tables.base import select_list

if TYPE_CHECKING:
    from memory.manager import MemoryManager

_POP = sql.SQL(
    "DELETE FROM conversational_memory WHERE user_id = %(uid)s AND id = ("
    " SELECT id FROM conversational_memory WHERE user_id = %(uid)s AND thread_id = %(tid)s AND summary_id IS NULL"
    " ORDER BY created_at DESC, id DESC LIMIT 1 FOR UPDATE) RETURNING {cols}")


def ids(mm: MemoryManager, user_id: Any, thread_id: Any) -> tuple[str, str]:
    """The user and thread ids, checked as the front door checks them."""
    limit = mm.settings.max_id_chars
    return check_id(user_id, "user_id", max_chars=limit), check_id(thread_id, "thread_id", max_chars=limit)


def clear_thread(mm: MemoryManager, user_id: str, thread_id: str) -> int:
    """Delete every message of the thread and its summaries; the number of messages deleted."""
    uid, tid = ids(mm, user_id, thread_id)
    with mm.db.connection(uid) as conn:
        n = conn.execute("DELETE FROM conversational_memory WHERE user_id = %s AND thread_id = %s",
                         (uid, tid)).rowcount
        conn.execute("DELETE FROM summary_memory s WHERE s.user_id = %s AND s.thread_id = %s AND NOT EXISTS ("
                     " SELECT 1 FROM conversational_memory m WHERE m.user_id = s.user_id"
                     " AND m.summary_id = s.summary_id)", (uid, tid))
        return int(n)


def pop_message(mm: MemoryManager, user_id: str, thread_id: str) -> Message | None:
    """Remove and return the thread's latest unsummarized message (None if there is none)."""
    uid, tid = ids(mm, user_id, thread_id)
    with mm.db.connection(uid) as conn, conn.cursor(row_factory=class_row(Message)) as cur:
        return cur.execute(_POP.format(cols=select_list(Message)), {"uid": uid, "tid": tid}).fetchone()
