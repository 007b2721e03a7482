"""Durable facts: what the user wants remembered across conversations.

Facts are written on purpose (``remember``), never inferred in bulk: a category
(preference, constraint, stable_fact), one line of at most ``fact_max_chars``
characters, at most ``max_active_facts`` active facts per user. Each rule broken
raises a :class:`~memory.errors.FactRejectedError` whose ``code`` and ``hint`` tell
the model how to fix its call (``memory.agent.fact_tools`` turns them into tool results).

A new fact is compared with the user's active facts (``memory.tables.fact_rules``): the
same words leave the fact unchanged, a near-duplicate updates it in place, a
contradiction supersedes it (the old row gets ``valid_to`` and ``superseded_by`` and
stays as history). ``replaces=fact_id`` makes the supersession explicit. Nothing is
deleted: ``forget`` retires a fact (``valid_to``) unless ``purge=True``.

All of one user's fact writes are serialised by a transaction-level advisory lock,
so the cap and the duplicate check see every concurrent write.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, overload

import numpy as np
from psycopg import sql
from psycopg.rows import class_row

from memory.store.ops import Call, Op, Sql, run, run_on
from memory.tables.base import Table, select_list
from memory.errors import FactCategoryError, FactRejectedError, FactTooLongError, NotFoundError, TooManyFactsError
from memory.tables.fact_rules import Candidate, Decision, decide
from memory.context.render import format_facts
from memory.retrieval.hits import Hit
from memory.store.rows import FACT_CATEGORIES, Fact
from memory.store.validation import check_bool, check_text, check_uuid

_COLS = select_list(Fact)
_ACTIVE = sql.SQL("SELECT {cols} FROM fact_memory WHERE user_id = %s AND valid_to IS NULL"
                  " ORDER BY valid_from, id").format(cols=_COLS)
#: Every write to a user's facts holds this lock (one decision at a time per user).
_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))"
_CANDIDATES = "SELECT id, category, content, embedding FROM fact_memory WHERE user_id = %s AND valid_to IS NULL"
_BY_ID = sql.SQL("SELECT {cols} FROM fact_memory WHERE user_id = %s AND id = %s").format(
    cols=_COLS)
_TOUCH = sql.SQL("UPDATE fact_memory SET updated_at = clock_timestamp() WHERE user_id = %s AND id = %s"
                 " RETURNING {cols}").format(cols=_COLS)
_UPDATE = sql.SQL(
    "UPDATE fact_memory SET content = %s, category = %s, embedding = %s,"
    " source_message_id = coalesce(%s, source_message_id), updated_at = clock_timestamp()"
    " WHERE user_id = %s AND id = %s RETURNING {cols}").format(cols=_COLS)
_INSERT = sql.SQL(
    "INSERT INTO fact_memory (user_id, category, content, source_message_id, embedding)"
    " VALUES (%s, %s, %s, %s, %s) RETURNING {cols}").format(cols=_COLS)
_SUPERSEDE = sql.SQL(
    "UPDATE fact_memory SET valid_to = %s, superseded_by = %s, updated_at = clock_timestamp()"
    " WHERE user_id = %s AND id = %s RETURNING {cols}").format(cols=_COLS)
_UNLINK = "UPDATE fact_memory SET superseded_by = NULL WHERE user_id = %s AND superseded_by = %s"
_DELETE = sql.SQL("DELETE FROM fact_memory WHERE id = %s AND user_id = %s"
                  " RETURNING {cols}").format(cols=_COLS)
_RETIRE = sql.SQL("UPDATE fact_memory SET valid_to = clock_timestamp(), updated_at = clock_timestamp()"
                  " WHERE id = %s AND user_id = %s AND valid_to IS NULL"
                  " RETURNING {cols}").format(cols=_COLS)


#: A fact is one line: every character ``str.splitlines`` breaks on is refused.
_LINE_BREAKS = frozenset("\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")


@dataclass
class Remembered:
    """What ``remember`` did: ``action`` is created, updated, superseded or unchanged."""

    action: str
    fact: Fact
    previous: Fact | None = None
    reason: str = ""


def _cosine(a: Any, b: Any) -> float:
    a, b = np.asarray(a, dtype=np.float32), np.asarray(b, dtype=np.float32)
    denom = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(a @ b) / denom if denom else 0.0


class Facts(Table):
    """``fact_memory``: durable facts, with their supersession history (see the module docstring)."""

    # -- validation -------------------------------------------------------------------
    def _fact_category(self, category: Any) -> str:
        if category not in FACT_CATEGORIES:
            raise FactCategoryError(f"category {str(category)[:40]!r} is not allowed",
                                    hint=f"use one of {', '.join(FACT_CATEGORIES)}")
        return str(category)

    def check_content(self, content: Any) -> str:
        """A fact's text, validated (one line, at most ``fact_max_chars``); FactRejectedError otherwise."""
        text = check_text(content, "content", max_chars=self.settings.max_content_chars)
        if any(c in _LINE_BREAKS for c in text):
            raise FactRejectedError("content spans several lines", code="fact_multiline",
                                    hint="state one fact on one line; call remember once per fact")
        limit = self.settings.fact_max_chars
        if len(text) > limit:
            raise FactTooLongError(f"content is {len(text)} characters; the limit is {limit}",
                                   hint=f"shorten it to one plain sentence of at most {limit} characters")
        return text

    # -- writes ---------------------------------------------------------------------
    def remember(self, category: str, content: str, *, user_id: str, replaces: str | uuid.UUID | None = None,
                 source_message_id: int | None = None) -> Remembered:
        """Store a durable fact, updating a near-duplicate or superseding a contradicted one."""
        return run(self.db, self.remember_op(category, content, user_id=user_id, replaces=replaces,
                                             source_message_id=source_message_id))

    def remember_op(self, category: str, content: str, *, user_id: str, replaces: str | uuid.UUID | None = None,
                    source_message_id: int | None = None) -> Op[Remembered]:
        uid = self._uid(user_id)
        category = self._fact_category(category)
        content = self.check_content(content)
        target = check_uuid(replaces, "replaces") if replaces is not None else None
        if source_message_id is not None and (isinstance(source_message_id, bool)
                                              or not isinstance(source_message_id, int)
                                              or not 0 < source_message_id < 2**63):
            raise FactRejectedError(f"source_message_id {source_message_id!r} is not a message id",
                                    hint="pass the integer id of the message the fact came from, or nothing")
        vec = (yield Call(self._embed, ([content],)))[0]
        return (yield from self.apply_op(category, content, vec, user_id=uid, target=target,
                                         source_message_id=source_message_id))

    def apply(self, conn: Any, category: str, content: str, vec: Any, *, user_id: str,
              target: uuid.UUID | None, source_message_id: int | None) -> Remembered:
        """Decide and write inside the caller's transaction (also used by corrections).

        ``user_id`` must already be validated (it is the transaction's user)."""
        return run_on(conn, self.apply_op(category, content, vec, user_id=user_id, target=target,
                                          source_message_id=source_message_id))

    def apply_op(self, category: str, content: str, vec: Any, *, user_id: str,
                 target: uuid.UUID | None, source_message_id: int | None) -> Op[Remembered]:
        uid = user_id
        yield Sql(_LOCK, ("agentmem.facts:" + uid,), fetch="none", user=uid)
        rows = yield Sql(_CANDIDATES, (uid,), user=uid)
        candidates = [Candidate(r[0], r[1], r[2], _cosine(vec, r[3]) if r[3] is not None else 0.0) for r in rows]
        if target is not None:
            chosen = [c for c in candidates if c.key == target]
            if not chosen:
                raise NotFoundError(f"fact {target} is not an active fact of this user; call recall for current ids")
            decision = Decision("superseded", chosen[0], "replaces was given")
        else:
            s = self.settings
            decision = decide(content, category, candidates, related=s.fact_related_similarity,
                              duplicate=s.fact_duplicate_similarity, swap=s.fact_swap_similarity)
        if decision.action == "created" and len(rows) >= self.settings.max_active_facts:
            raise TooManyFactsError(
                f"this user already has {len(rows)} active facts; the limit is {self.settings.max_active_facts}",
                hint="forget(fact_id) one that no longer matters (recall lists them), "
                     "or restate an existing fact so it is updated instead")
        previous = None
        if decision.target is not None:
            previous = yield Sql(_BY_ID, (uid, decision.target.key), Fact, "one", uid)
        if decision.action == "unchanged":
            assert decision.target is not None
            fact = yield Sql(_TOUCH, (uid, decision.target.key), Fact, "one", uid)
        elif decision.action == "updated":
            assert decision.target is not None
            fact = yield Sql(_UPDATE, (content, category, vec, source_message_id, uid, decision.target.key),
                             Fact, "one", uid)
        else:
            fact = yield Sql(_INSERT, (uid, category, content, source_message_id, vec), Fact, "one", uid)
            if decision.action == "superseded":
                assert fact is not None and decision.target is not None
                previous = yield Sql(_SUPERSEDE, (fact.valid_from, fact.id, uid, decision.target.key),
                                     Fact, "one", uid)
        assert fact is not None
        return Remembered(decision.action, fact, previous, decision.reason)

    def forget(self, fact_id: str | uuid.UUID, *, user_id: str, purge: bool = False) -> Fact:
        """Retire an active fact (``valid_to`` = now, kept as history); ``purge=True`` deletes the row."""
        return run(self.db, self.forget_op(fact_id, user_id=user_id, purge=purge))

    def forget_op(self, fact_id: str | uuid.UUID, *, user_id: str, purge: bool = False) -> Op[Fact]:
        fid, uid = check_uuid(fact_id, "fact_id"), self._uid(user_id)
        check_bool(purge, "purge")
        yield Sql(_LOCK, ("agentmem.facts:" + uid,), fetch="none", user=uid)
        if purge:
            # The fact it superseded stops pointing at it (the key is NO ACTION: migration 008).
            yield Sql(_UNLINK, (uid, fid), fetch="none", user=uid)
        row: Fact | None = yield Sql(_DELETE if purge else _RETIRE, (fid, uid), Fact, "one", uid)
        if row is None:
            raise NotFoundError(f"fact {fid} is not an active fact of this user")
        return row

    # -- reads ----------------------------------------------------------------------
    def read_facts(self, *, user_id: str) -> list[Fact]:
        """The user's active facts, oldest first (what a conversation starts with)."""
        return run(self.db, self.read_facts_op(user_id=user_id))

    def read_facts_op(self, *, user_id: str) -> Op[list[Fact]]:
        uid = self._uid(user_id)
        rows: list[Fact] = yield Sql(_ACTIVE, (uid,), Fact, user=uid)
        return rows

    @overload
    def recall(self, query: None = None, *, user_id: str, k: int = 10,
               include_history: bool = False) -> list[Fact]: ...

    @overload
    def recall(self, query: str, *, user_id: str, k: int = 10, include_history: bool = False) -> list[Hit[Fact]]: ...

    def recall(self, query: str | None = None, *, user_id: str, k: int = 10,
               include_history: bool = False) -> list[Fact] | list[Hit[Fact]]:
        """Active facts most relevant to ``query`` as hits (no query: every active fact, as rows).

        ``include_history`` also returns retired and superseded versions. A hit's
        ``score`` is ``vector + keyword_weight x keyword``, absolute (see
        ``Table._similar``); ``signals["vector"]``: cosine similarity of the fact to the
        query; ``signals["keyword"]``: IDF coverage of the query's words (0..1). A blank query lists the facts
        oldest first as hits of score 0 with no signals.
        """
        return run(self.db, self.recall_op(query, user_id=user_id, k=k, include_history=include_history))

    def recall_op(self, query: str | None = None, *, user_id: str, k: int = 10,
                  include_history: bool = False) -> Op[list[Fact] | list[Hit[Fact]]]:
        uid = self._uid(user_id)
        check_bool(include_history, "include_history")
        active = sql.SQL("") if include_history else sql.SQL(" AND valid_to IS NULL")
        if query is None:
            return (yield from self._listing_op(uid, active, self._k(k)))
        if isinstance(query, str) and not query.strip():
            return [Hit(f, 0.0) for f in (yield from self._listing_op(uid, active, self._k(k)))]
        return (yield from self._similar_op("fact_memory", Fact, query,
                                            sql.Composed([sql.SQL("user_id = %(uid)s"), active]),
                                            {"uid": uid}, k=self._k(k)))

    def _listing_op(self, uid: str, active: sql.SQL, k: int) -> Op[list[Fact]]:
        stmt = sql.SQL("SELECT {cols} FROM fact_memory WHERE user_id = %s{active}"
                       " ORDER BY valid_from, id LIMIT %s").format(cols=_COLS, active=active)
        rows: list[Fact] = yield Sql(stmt, (uid, k), Fact, user=uid)
        return rows

    def fact_history(self, fact_id: str | uuid.UUID, *, user_id: str) -> list[Fact]:
        """Every version in the supersession chain through ``fact_id``, oldest first."""
        fid, uid = check_uuid(fact_id, "fact_id"), self._uid(user_id)
        stmt = sql.SQL(
            "WITH RECURSIVE back(id) AS (SELECT id FROM fact_memory WHERE id = %(fid)s AND user_id = %(uid)s"
            " UNION SELECT f.id FROM fact_memory f JOIN back b ON f.superseded_by = b.id WHERE f.user_id = %(uid)s),"
            " fwd(id) AS (SELECT id FROM fact_memory WHERE id = %(fid)s AND user_id = %(uid)s"
            " UNION SELECT f.superseded_by FROM fact_memory f JOIN fwd ON f.id = fwd.id"
            " WHERE f.superseded_by IS NOT NULL AND f.user_id = %(uid)s)"
            " SELECT {cols} FROM fact_memory WHERE user_id = %(uid)s"
            " AND id IN (SELECT id FROM back UNION SELECT id FROM fwd) ORDER BY valid_from, id"
        ).format(cols=_COLS)
        with self.db.connection(uid) as conn, conn.cursor(row_factory=class_row(Fact)) as cur:
            rows = cur.execute(stmt, {"fid": fid, "uid": uid}).fetchall()
        if not rows:
            raise NotFoundError(f"fact {fid} not found for this user")
        return rows

    def facts_section(self, *, user_id: str) -> str:
        """``## Known Facts`` with the rule that what the user says now wins."""
        return format_facts(self.read_facts(user_id=user_id))
