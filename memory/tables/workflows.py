"""Workflow (procedural) memory: procedures that worked, as ordered steps.

A workflow learned from one user's request stays that user's (``workflow_memory``,
under row-level security: its query may hold personal data). Shared workflows live
in their own table, ``shared_workflow_memory`` (no ``user_id``; migration 007), and
feed every user's context, so only the schema owner writes them: ``publish_workflow``
copies one user's workflow there, ``write_workflow(..., shared=True)`` writes one
directly. Through the app role both are refused with :class:`AccessDeniedError`;
the app role reads shared workflows and counts their uses (``record_workflow_use``
goes through a SECURITY DEFINER function that adds one and nothing else).
Reads return the user's workflows and the shared ones together (``user_id`` None).
"""

from __future__ import annotations

from typing import Any
from collections.abc import Sequence

import psycopg
from psycopg import sql
from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from memory.store.ops import Op, Sql, run
from memory.tables.base import Table, columns_of, select_list
from memory.errors import AccessDeniedError, InvalidInputError, NotFoundError
from memory.retrieval.hits import Hit
from memory.store.rows import Workflow
from memory.store.validation import check_bool, check_json, check_text, check_uuid

SHARED_TABLE = "shared_workflow_memory"


def _shared_columns(alias: str | None = None) -> sql.Composable:
    """The Workflow select list over the shared table, which has no user_id."""
    def col(name: str) -> sql.Composable:
        if name == "user_id":
            return sql.SQL("NULL::text AS user_id")
        return sql.Identifier(alias, name) if alias else sql.Identifier(name)
    return sql.SQL(", ").join(col(c) for c in columns_of(Workflow))


def _owner_only(action: str, exc: Exception) -> AccessDeniedError:
    return AccessDeniedError(
        f"{action}: shared workflows feed every user's context, so only the schema owner may create, change or "
        "delete them. Connect with the owner's database URL (e.g. `agentmem publish-workflow`), not the "
        f"application role ({exc})")


_PUBLISHED_FROM = "SELECT published_from FROM shared_workflow_memory WHERE published_from = ANY(%s)"


class Workflows(Table):
    """``workflow_memory`` and ``shared_workflow_memory``: procedures that worked."""

    def write_workflow(self, name: str, description: str, steps: Sequence[Any], *, user_id: str,
                       query: str = "", outcome: str = "", shared: bool = False) -> Workflow:
        """Store a workflow of ``user_id``; ``shared=True`` (schema owner only) stores a shared one instead."""
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
        values = [name, description, query, Jsonb(list(steps)), outcome, vec]
        if shared:
            stmt = sql.SQL(
                "INSERT INTO shared_workflow_memory (name, description, query, steps, outcome, embedding)"
                " VALUES (%s, %s, %s, %s, %s, %s) RETURNING {cols}"
            ).format(cols=_shared_columns())
        else:
            stmt = sql.SQL(
                "INSERT INTO workflow_memory (user_id, name, description, query, steps, outcome, embedding)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s) RETURNING {cols}"
            ).format(cols=select_list(Workflow))
            values.insert(0, uid)
        try:
            with self.db.connection(uid) as conn, conn.cursor(row_factory=class_row(Workflow)) as cur:
                row = cur.execute(stmt, values).fetchone()
        except AccessDeniedError as exc:
            if shared:
                raise _owner_only("cannot write a shared workflow", exc) from exc
            raise
        assert row is not None
        return row

    def publish_workflow(self, workflow_id: str, *, user_id: str) -> Workflow:
        """Copy ``user_id``'s workflow into the shared ones (schema owner only); returns the shared row.

        The user's own row stays (forgetting the user later does not unpublish it: the
        owner decided to share it). Reads show the shared copy, not the user's twin.
        """
        wid, uid = check_uuid(workflow_id, "workflow_id"), self._uid(user_id)
        stmt = sql.SQL(
            "INSERT INTO shared_workflow_memory (name, description, query, steps, outcome, embedding, published_from)"
            " SELECT name, description, query, steps, outcome, embedding, id FROM workflow_memory"
            " WHERE id = %s AND user_id = %s RETURNING {cols}"
        ).format(cols=_shared_columns())
        try:
            with self.db.connection(uid) as conn, conn.cursor(row_factory=class_row(Workflow)) as cur:
                row = cur.execute(stmt, (wid, uid)).fetchone()
        except AccessDeniedError as exc:
            raise _owner_only(f"cannot publish workflow {wid}", exc) from exc
        if row is None:
            raise NotFoundError(f"workflow {wid} not found for user {uid!r}")
        return row

    def read_workflows(self, query: str, *, user_id: str, k: int = 3, hybrid: bool = True) -> list[Hit[Workflow]]:
        """This user's workflows and shared ones, most relevant first.

        Each table is searched on its own (see ``Table._similar``) and the two lists are
        merged by score, which is absolute (``vector + keyword_weight x keyword``, as in
        every similarity read): ``signals["vector"]`` is the cosine similarity to the
        query (0 for a row without an embedding), ``signals["keyword"]`` the IDF coverage
        of the query's words (0..1).
        """
        return run(self.db, self.read_workflows_op(query, user_id=user_id, k=k, hybrid=hybrid))

    def read_workflows_op(self, query: str, *, user_id: str, k: int = 3,
                          hybrid: bool = True) -> Op[list[Hit[Workflow]]]:
        uid, k = self._uid(user_id), self._k(k)
        check_bool(hybrid, "hybrid")
        own = yield from self._similar_op("workflow_memory", Workflow, query, sql.SQL("user_id = %(uid)s"),
                                          {"uid": uid}, k=k, hybrid=hybrid)
        shared = yield from self._similar_op(SHARED_TABLE, Workflow, query, sql.SQL("true"), {"uid": uid}, k=k,
                                             hybrid=hybrid, columns=_shared_columns())
        if shared and own:
            rows = yield Sql(_PUBLISHED_FROM, ([h.item.id for h in own],), user=uid)
            published = {r[0] for r in rows}
            own = [h for h in own if h.item.id not in published]
        return sorted(own + shared, key=lambda h: -h.score)[:k]

    def record_workflow_use(self, workflow_id: str, *, user_id: str, success: bool = True) -> None:
        """Count one use of the user's workflow or of a shared one."""
        wid, uid = check_uuid(workflow_id, "workflow_id"), self._uid(user_id)
        check_bool(success, "success")
        with self.db.connection(uid) as conn:
            cur = conn.execute(
                "UPDATE workflow_memory SET use_count = use_count + 1,"
                " success_count = success_count + %s, last_used_at = clock_timestamp()"
                " WHERE id = %s AND user_id = %s",
                (1 if success else 0, wid, uid),
            )
            if cur.rowcount:
                return
            try:
                found = conn.execute("SELECT agentmem_record_shared_workflow_use(%s, %s)", (wid, success)).fetchone()
            except psycopg.errors.InsufficientPrivilege as exc:
                raise AccessDeniedError(
                    f"this role may not count uses of shared workflows: run `agentmem create-app-role` again for "
                    f"it (as the schema owner) to grant EXECUTE on agentmem_record_shared_workflow_use ({exc})"
                ) from exc
            if not found or not found[0]:
                raise NotFoundError(f"workflow {wid} not found")
