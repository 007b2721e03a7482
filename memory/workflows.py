"""Workflow (procedural) memory: procedures that worked, as ordered steps.

A workflow learned from one user's request stays that user's; one published with
``shared=True`` has ``user_id`` NULL and is visible to everyone.
"""

from __future__ import annotations

from typing import Any, Sequence

from psycopg import sql
from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from ._store import StoreBase, select_list
from .errors import InvalidInputError, NotFoundError
from .models import Workflow
from .validation import check_bool, check_json, check_text, check_uuid


class WorkflowMixin(StoreBase):
    def write_workflow(self, user_id: str, name: str, description: str, steps: Sequence[Any],
                       *, query: str = "", outcome: str = "", shared: bool = False) -> Workflow:
        uid = self._uid(user_id)
        name = check_text(name, "name", max_chars=200)
        description = self._content(description, "description")
        query = check_text(query, "query", max_chars=self.settings.max_content_chars, allow_empty=True)
        outcome = check_text(outcome, "outcome", max_chars=self.settings.max_content_chars, allow_empty=True)
        check_bool(shared, "shared")
        if isinstance(steps, (str, bytes)) or not isinstance(steps, Sequence) or not steps:
            raise InvalidInputError("steps must be a non-empty list of steps, in order")
        check_json(list(steps), "steps", max_chars=self.settings.max_content_chars)
        vec = self._embed([f"{name}: {description}\n{query}"])[0]
        stmt = sql.SQL(
            "INSERT INTO workflow_memory (user_id, name, description, query, steps, outcome, embedding)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s) RETURNING {cols}, NULL::float8 AS score"
        ).format(cols=select_list(Workflow))
        with self.db.connection(uid) as conn, conn.cursor(row_factory=class_row(Workflow)) as cur:
            row = cur.execute(stmt, (None if shared else uid, name, description, query,
                                     Jsonb(list(steps)), outcome, vec)).fetchone()
        assert row is not None
        return row

    def read_workflows(self, query: str, user_id: str, k: int = 3, *, hybrid: bool = True) -> list[Workflow]:
        """This user's workflows and shared ones, most relevant first."""
        uid = self._uid(user_id)
        check_bool(hybrid, "hybrid")
        return self._similar("workflow_memory", Workflow, query,
                             sql.SQL("(user_id = %(uid)s OR user_id IS NULL)"), {"uid": uid},
                             k=self._k(k), hybrid=hybrid)

    def record_workflow_use(self, workflow_id: str, user_id: str, *, success: bool = True) -> None:
        wid, uid = check_uuid(workflow_id, "workflow_id"), self._uid(user_id)
        check_bool(success, "success")
        with self.db.connection(uid) as conn:
            cur = conn.execute(
                "UPDATE workflow_memory SET use_count = use_count + 1,"
                " success_count = success_count + %s, last_used_at = clock_timestamp()"
                " WHERE id = %s AND (user_id = %s OR user_id IS NULL)",
                (1 if success else 0, wid, uid),
            )
            if cur.rowcount == 0:
                raise NotFoundError(f"workflow {wid} not found")
