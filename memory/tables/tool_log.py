"""Tool log: every tool call with its arguments and full output."""

from __future__ import annotations

from typing import Any

from psycopg import sql
from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from memory.tables.base import Table, select_list
from memory.errors import NotFoundError
from memory.store.rows import ToolLogEntry
from memory.store.validation import (check_choice, check_duration_ms, check_object, check_optional_text,
                                     check_positive_int, check_text)


class ToolLog(Table):
    """``tool_log``: every tool call with its arguments and full output."""

    def write_tool_log(self, tool_name: str, args: Any, output: str | None, *, user_id: str,
                       thread_id: str | None = None, status: str = "ok", error: str | None = None,
                       duration_ms: float | None = None, tool_call_id: str | None = None) -> ToolLogEntry:
        """Log one tool call (``status`` "ok" or "error")."""
        s = self.settings
        uid = self._uid(user_id)
        tid = self._tid(thread_id) if thread_id is not None else None
        tool_name = check_text(tool_name, "tool_name", max_chars=s.max_id_chars)
        check_object(args if args is not None else {}, "args", max_chars=s.max_content_chars)
        duration_ms = check_duration_ms(duration_ms)
        output = check_optional_text(output, "output", max_chars=s.max_tool_output_chars)
        error = check_optional_text(error, "error", max_chars=s.max_content_chars)
        tool_call_id = check_optional_text(tool_call_id, "tool_call_id", max_chars=s.max_id_chars)
        check_choice(status, "status", ("ok", "error"))
        stmt = sql.SQL(
            "INSERT INTO tool_log (user_id, thread_id, tool_call_id, tool_name, args, output, status, error,"
            " duration_ms) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING {cols}"
        ).format(cols=select_list(ToolLogEntry))
        with self.db.connection(uid) as conn, conn.cursor(row_factory=class_row(ToolLogEntry)) as cur:
            row = cur.execute(stmt, (uid, tid, tool_call_id, tool_name, Jsonb(args if args is not None else {}), output,
                                     status, error, duration_ms)).fetchone()
        assert row is not None
        return row

    def read_tool_log(self, *, user_id: str, thread_id: str | None = None, limit: int = 50) -> list[ToolLogEntry]:
        """This user's latest tool calls (of one thread, if given), oldest first."""
        uid = self._uid(user_id)
        tid = self._tid(thread_id) if thread_id is not None else None
        stmt = sql.SQL(
            "SELECT * FROM (SELECT {cols} FROM tool_log WHERE user_id = %s AND (%s::text IS NULL OR thread_id = %s)"
            " ORDER BY id DESC LIMIT %s) t ORDER BY id"
        ).format(cols=select_list(ToolLogEntry))
        with self.db.connection(uid) as conn, conn.cursor(row_factory=class_row(ToolLogEntry)) as cur:
            return cur.execute(stmt, (uid, tid, tid, check_positive_int(limit, "limit"))).fetchall()

    def read_tool_log_entry(self, entry_id: int, *, user_id: str) -> ToolLogEntry:
        """One logged call by id, if it is this user's; NotFoundError otherwise."""
        uid = self._uid(user_id)
        if isinstance(entry_id, bool) or not isinstance(entry_id, int):
            try:
                entry_id = int(str(entry_id).strip())
            except ValueError:
                raise NotFoundError(f"tool log entry {str(entry_id)[:40]!r} not found") from None
        stmt = sql.SQL("SELECT {cols} FROM tool_log WHERE id = %s AND user_id = %s").format(
            cols=select_list(ToolLogEntry))
        with self.db.connection(uid) as conn, conn.cursor(row_factory=class_row(ToolLogEntry)) as cur:
            row = cur.execute(stmt, (entry_id, uid)).fetchone()
        if row is None:
            raise NotFoundError(f"tool log entry {entry_id} not found for this user")
        return row
