"""The inspector's reads: paged, user-scoped, one bounded statement each.

Everything a page shows about one user is read in a transaction scoped to that user
(``db.connection(user_id)``, which sets ``agentmem.user_id`` for row-level security)
and every statement also filters by ``user_id``: through the application role another
user's rows are invisible, and through the owner they are filtered out, so another
user's summary id is simply not found. The cross-user overview reads the DBA views of
migration 005 (schema owner only; :mod:`memory.store.views`).

No read returns an unbounded list: threads, messages, summary sources, facts and the
usage series are paged (``LIMIT``/``OFFSET`` on the indexes of migration 001) or
bucketed, so a 100,000-message thread costs what one page costs, plus a count.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any
from collections.abc import Sequence

import psycopg
from psycopg import sql
from psycopg.rows import class_row, dict_row

from memory.errors import AccessDeniedError, InvalidInputError, NotFoundError
from memory.settings import Settings
from memory.store.db import Database
from memory.store.rows import Message
from memory.store.validation import check_id, check_uuid
from memory.store.views import FactVersion, TableSize, ThreadStatus, monitor_settings
from memory.tables.base import select_list

#: Columns of ``consolidation_status`` the overview can sort by.
SORTABLE = ("user_id", "thread_id", "total_messages", "unsummarized_messages", "summarized_messages", "summaries",
            "est_unsummarized_tokens", "est_usage_percent", "monitor_status", "last_message_at")
STATUSES = ("ok", "warning", "critical")


@dataclass
class Page:
    """Which slice of a list: 1-based ``number`` of ``size`` rows out of ``total``.

    ``from_end``: pages are cut from the end of the list, so the last (newest) page is
    full and the first one holds the remainder (a thread opens on a full newest page).
    """

    number: int
    size: int
    total: int
    from_end: bool = False

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.size))

    @property
    def offset(self) -> int:
        if self.from_end:
            return max(0, self.total - (self.pages - self.number + 1) * self.size)
        return (self.number - 1) * self.size

    @property
    def limit(self) -> int:
        if self.from_end:
            return self.total - (self.pages - self.number) * self.size - self.offset
        return self.size

    @property
    def first_row(self) -> int:
        return min(self.total, self.offset + 1)

    @property
    def last_row(self) -> int:
        return min(self.total, self.offset + self.limit)


def page_of(number: int | None, size: int, total: int, *, from_end: bool = False) -> Page:
    """Page ``number`` (None or past the end: the last page) of ``total`` rows."""
    last = max(1, -(-total // size))
    if number is None or number > last:
        number = last
    return Page(max(1, number), size, total, from_end)


def _uid(user_id: str) -> str:
    return check_id(user_id, "user_id", max_chars=10_000)


def _tid(thread_id: str) -> str:
    return check_id(thread_id, "thread_id", max_chars=10_000)


def _owner_view(what: str) -> AccessDeniedError:
    return AccessDeniedError(
        f"{what} reads the DBA views, which run with the schema owner's rights and are never granted to the "
        "application role: start `agentmem ui` with the owner's AGENTMEM_DATABASE_URL")


def _set_monitor(conn: Any, settings: Settings) -> None:
    for name, value in monitor_settings(settings).items():
        conn.execute("SELECT set_config(%s, %s, true)", (name, value))


# -- overview ---------------------------------------------------------------------------
@dataclass
class UserTotals:
    user_id: str
    threads: int
    total_messages: int
    unsummarized_messages: int
    summarized_messages: int
    summaries: int
    est_unsummarized_tokens: int
    worst_status: str


@dataclass
class Overview:
    threads: list[ThreadStatus]
    page: Page
    users: list[UserTotals]
    user_page: Page
    context_window: int


_STATUS_RANK = "CASE monitor_status WHEN 'critical' THEN 3 WHEN 'warning' THEN 2 ELSE 1 END"


def overview(db: Database, settings: Settings, *, user_id: str | None = None, text: str = "", status: str = "",
             sort: str = "last_message_at",
             descending: bool = True, page: int | None = 1, size: int = 50, user_page: int | None = 1,
             user_size: int = 25) -> Overview:
    """Threads of ``consolidation_status`` filtered, sorted and paged, and the users' totals.

    ``user_id`` keeps one user's threads; ``text`` keeps threads whose user or thread id
    contains it; ``status`` keeps one monitor status.
    """
    if sort not in SORTABLE:
        raise InvalidInputError(f"sort must be one of {', '.join(SORTABLE)}, got {sort!r}")
    if status and status not in STATUSES:
        raise InvalidInputError(f"status must be one of {', '.join(STATUSES)}, got {status!r}")
    text = check_id(text, "filter", max_chars=200) if text else ""
    pattern = "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    where = sql.SQL("(%(user)s::text IS NULL OR user_id = %(user)s)"
                    " AND (%(text)s = '' OR user_id ILIKE %(pat)s OR thread_id ILIKE %(pat)s)"
                    " AND (%(status)s = '' OR monitor_status = %(status)s)")
    order_col = sql.SQL(_STATUS_RANK) if sort == "monitor_status" else sql.Identifier(sort)
    direction = sql.SQL("DESC NULLS LAST" if descending else "ASC NULLS FIRST")
    params: dict[str, Any] = {"user": _uid(user_id) if user_id is not None else None, "text": text, "pat": pattern,
                              "status": status}
    threads_stmt = sql.SQL(
        "SELECT * FROM {view} WHERE {where} ORDER BY {col} {dir}, user_id, thread_id LIMIT %(n)s OFFSET %(off)s"
    ).format(view=sql.Identifier(db.schema, "consolidation_status"), where=where, col=order_col, dir=direction)
    users_stmt = sql.SQL(
        "SELECT user_id, count(*)::int AS threads, sum(total_messages)::bigint AS total_messages,"
        " sum(unsummarized_messages)::bigint AS unsummarized_messages,"
        " sum(summarized_messages)::bigint AS summarized_messages, sum(summaries)::bigint AS summaries,"
        " sum(est_unsummarized_tokens)::bigint AS est_unsummarized_tokens,"
        " (array['ok', 'warning', 'critical'])[max(" + _STATUS_RANK + ")] AS worst_status"
        " FROM {view} WHERE {where} GROUP BY user_id ORDER BY max(last_message_at) DESC NULLS LAST, user_id"
        " LIMIT %(n)s OFFSET %(off)s"
    ).format(view=sql.Identifier(db.schema, "consolidation_status"), where=where)
    count_stmt = sql.SQL("SELECT count(*), count(DISTINCT user_id) FROM {view} WHERE {where}").format(
        view=sql.Identifier(db.schema, "consolidation_status"), where=where)
    try:
        with db.connection() as conn:
            _set_monitor(conn, settings)
            row = conn.execute(count_stmt, params).fetchone()
            assert row is not None
            thread_page, users_page = page_of(page, size, row[0]), page_of(user_page, user_size, row[1])
            with conn.cursor(row_factory=class_row(ThreadStatus)) as cur:
                threads = cur.execute(threads_stmt, dict(params, n=size, off=thread_page.offset)).fetchall()
            with conn.cursor(row_factory=class_row(UserTotals)) as cur:
                users = cur.execute(users_stmt, dict(params, n=user_size, off=users_page.offset)).fetchall()
            window = conn.execute("SELECT agentmem_context_window()").fetchone()
    except Exception as exc:
        if _denied(exc):
            raise _owner_view("the overview") from exc
        raise
    return Overview(threads, thread_page, users, users_page, int(window[0]) if window else 0)


def _denied(exc: BaseException) -> bool:
    import psycopg

    return isinstance(exc, (AccessDeniedError, psycopg.errors.InsufficientPrivilege))


@dataclass
class GrowthDay:
    day: datetime
    table_name: str
    rows_added: int


def table_sizes(db: Database) -> list[TableSize]:
    from memory.store.views import table_sizes as read

    return read(db)


def growth(db: Database, *, days: int = 30) -> list[GrowthDay]:
    """Rows added per day and memory table over the last ``days`` days (``memory_growth``)."""
    stmt = sql.SQL("SELECT day, table_name, rows_added FROM {} WHERE day > now() - make_interval(days => %s)"
                   " ORDER BY day, table_name").format(sql.Identifier(db.schema, "memory_growth"))
    try:
        with db.connection() as conn, conn.cursor(row_factory=class_row(GrowthDay)) as cur:
            return cur.execute(stmt, (days,)).fetchall()
    except Exception as exc:
        if _denied(exc):
            raise _owner_view("the growth chart") from exc
        raise


# -- a thread ---------------------------------------------------------------------------
@dataclass
class SummaryCard:
    """A summary as the thread page draws it: what it replaced, and how well."""

    summary_id: uuid.UUID
    thread_id: str | None
    label: str
    created_at: datetime
    recorded_source_count: int
    source_rows: int
    first_message_id: int | None
    last_message_id: int | None
    first_message_at: datetime | None
    last_message_at: datetime | None
    source_tokens: int | None
    summary_tokens: int | None
    method: str | None

    @property
    def compression(self) -> float | None:
        if self.source_tokens and self.summary_tokens:
            return self.source_tokens / self.summary_tokens
        return None


@dataclass
class Item:
    """One entry of a thread: a message (with its tool results), or a summary that replaced some."""

    message: Message | None = None
    summary: SummaryCard | None = None
    results: list[Message] = field(default_factory=list)  # tool results of this message's calls

    @property
    def live(self) -> bool:
        return self.message is not None and self.message.summary_id is None


@dataclass
class ThreadPage:
    user_id: str
    thread_id: str
    items: list[Item]
    page: Page
    total_messages: int
    live_messages: int
    summaries: int
    raw: bool


_CARD_COLUMNS = (
    "SELECT s.summary_id, s.thread_id, s.description AS label, s.created_at, s.source_count AS recorded_source_count,"
    " coalesce(m.n, 0)::int AS source_rows, {ids},"
    " s.source_tokens, s.summary_tokens, s.metadata ->> 'method' AS method"
    " FROM summary_memory s LEFT JOIN LATERAL ({sources}) m ON true"
    " WHERE s.user_id = %(uid)s AND s.summary_id = ANY(%(ids)s)"
)
#: Exact lineage: the rows that point at the summary now (their count, first and last id and time).
_CARDS = _CARD_COLUMNS.format(
    ids="m.first_id AS first_message_id, m.last_id AS last_message_id,"
        " coalesce(m.first_at, s.first_message_at) AS first_message_at,"
        " coalesce(m.last_at, s.last_message_at) AS last_message_at",
    sources="SELECT count(*) AS n, min(id) AS first_id, max(id) AS last_id, min(created_at) AS first_at,"
            " max(created_at) AS last_at FROM conversational_memory c"
            " WHERE c.user_id = s.user_id AND c.summary_id = s.summary_id")
#: For a thread page's cards: the count of rows now (an index-only count) and the first and
#: last id and time recorded at consolidation, so a page of cards never reads their rows.
_CARDS_RECORDED = _CARD_COLUMNS.format(
    ids="(s.metadata ->> 'first_id')::bigint AS first_message_id, (s.metadata ->> 'last_id')::bigint"
        " AS last_message_id, s.first_message_at, s.last_message_at",
    sources="SELECT count(*) AS n FROM conversational_memory c"
            " WHERE c.user_id = s.user_id AND c.summary_id = s.summary_id")


def _cards(conn: Any, uid: str, ids: Sequence[uuid.UUID], *, exact: bool = True) -> dict[uuid.UUID, SummaryCard]:
    if not ids:
        return {}
    with conn.cursor(row_factory=class_row(SummaryCard)) as cur:
        stmt = _CARDS if exact else _CARDS_RECORDED
        return {c.summary_id: c for c in cur.execute(stmt, {"uid": uid, "ids": list(ids)}).fetchall()}


def _messages(conn: psycopg.Connection[Any], where: str, params: dict[str, Any], tail: str = "") -> list[Message]:
    stmt = sql.SQL("SELECT {cols} FROM conversational_memory WHERE " + where + tail).format(
        cols=select_list(Message))
    with conn.cursor(row_factory=class_row(Message)) as cur:
        return cur.execute(stmt, params).fetchall()


def _call_ids(m: Message) -> list[str]:
    return [str(c["id"]) for c in (m.tool_calls or []) if isinstance(c, dict) and c.get("id")]


def _attach_results(conn: Any, uid: str, tid: str,
                    messages: list[Message]) -> tuple[dict[int, list[Message]], set[int]]:
    """Tool results of the calls made by ``messages`` (looked up after the first call), and their ids."""
    calls = [(m, _call_ids(m)) for m in messages if m.role == "assistant"]
    wanted = [cid for _, ids in calls for cid in ids]
    if not wanted:
        return {}, set()
    first = min(m.created_at for m, ids in calls if ids)
    found = _messages(conn, "user_id = %(uid)s AND thread_id = %(tid)s AND created_at >= %(first)s"
                      " AND role = 'tool' AND tool_call_id = ANY(%(ids)s)",
                      {"uid": uid, "tid": tid, "first": first, "ids": wanted, "n": 2 * len(wanted)},
                      " ORDER BY created_at, id LIMIT %(n)s")
    by_call: dict[str, list[Message]] = {}
    for r in found:
        by_call.setdefault(str(r.tool_call_id), []).append(r)
    out: dict[int, list[Message]] = {}
    used: set[int] = set()
    for m, ids in calls:
        for cid in ids:
            for r in by_call.get(cid, []):
                if r.id not in used and r.id != m.id:
                    out.setdefault(m.id, []).append(r)
                    used.add(r.id)
    return out, used


def thread_page(db: Database, user_id: str, thread_id: str, *, page: int | None = None, size: int = 100,
                raw: bool = False) -> ThreadPage:
    """One page of a thread, newest page by default.

    Collapsed (default): the thread as its agent now sees it, in time order: the live
    messages (the working set) and, where rows were consolidated, one entry per summary
    saying which rows it replaced. ``raw``: every message, consolidated ones included,
    each with its summary id, so the boundaries can be drawn row by row. Tool results
    come with the assistant message that called them.
    """
    uid, tid = _uid(user_id), _tid(thread_id)
    base = {"uid": uid, "tid": tid}
    with db.connection(uid) as conn:
        counts = conn.execute(
            "SELECT (SELECT count(*) FROM conversational_memory WHERE user_id = %(uid)s AND thread_id = %(tid)s),"
            " (SELECT count(*) FROM conversational_memory WHERE user_id = %(uid)s AND thread_id = %(tid)s"
            "  AND summary_id IS NULL),"
            " (SELECT count(*) FROM summary_memory WHERE user_id = %(uid)s AND thread_id = %(tid)s)", base).fetchone()
        assert counts is not None
        total, live, n_summaries = (int(c) for c in counts)
        if total == 0 and n_summaries == 0:
            raise NotFoundError(f"thread {tid!r} has no messages for user {uid!r}")
        if raw:
            pg = page_of(page, size, total, from_end=True)
            # The page's first key by an index-only scan of the thread index, then the page's rows
            # from there: OFFSET over whole rows would read every skipped row from the heap.
            messages = _messages(conn, "user_id = %(uid)s AND thread_id = %(tid)s AND (created_at, id) >= ("
                                 " SELECT created_at, id FROM conversational_memory"
                                 " WHERE user_id = %(uid)s AND thread_id = %(tid)s"
                                 " ORDER BY created_at, id OFFSET %(off)s LIMIT 1)",
                                 dict(base, n=pg.limit, off=pg.offset), " ORDER BY created_at, id LIMIT %(n)s")
            cards = _cards(conn, uid, sorted({m.summary_id for m in messages if m.summary_id}, key=str), exact=False)
            order: list[tuple[str, Any]] = [("m", m) for m in messages]
        else:
            pg = page_of(page, size, live + n_summaries, from_end=True)
            keys = conn.execute(
                "SELECT mid, sid FROM ("
                " SELECT created_at AS at, id AS mid, NULL::uuid AS sid FROM conversational_memory"
                "  WHERE user_id = %(uid)s AND thread_id = %(tid)s AND summary_id IS NULL"
                " UNION ALL"
                " SELECT coalesce(first_message_at, created_at), NULL, summary_id FROM summary_memory"
                "  WHERE user_id = %(uid)s AND thread_id = %(tid)s) items"
                " ORDER BY at, mid NULLS FIRST, sid LIMIT %(n)s OFFSET %(off)s",
                dict(base, n=pg.limit, off=pg.offset)).fetchall()
            mids = [k[0] for k in keys if k[0] is not None]
            found = {m.id: m for m in _messages(conn, "user_id = %(uid)s AND id = ANY(%(ids)s)",
                                                dict(base, ids=mids))} if mids else {}
            cards = _cards(conn, uid, [k[1] for k in keys if k[1] is not None], exact=False)
            order = [("m", found[k[0]]) if k[0] is not None else ("s", k[1]) for k in keys
                     if (k[0] in found) or (k[1] in cards)]
            messages = [m for kind, m in order if kind == "m"]
        results, used = _attach_results(conn, uid, tid, messages)
    items: list[Item] = []
    for kind, value in order:
        if kind == "s":
            items.append(Item(summary=cards[value]))
        elif value.id not in used:
            items.append(Item(message=value, summary=cards.get(value.summary_id) if raw and value.summary_id else None,
                              results=results.get(value.id, [])))
    return ThreadPage(uid, tid, items, pg, total, live, n_summaries, raw)


# -- a summary --------------------------------------------------------------------------
@dataclass
class SummarySources:
    card: SummaryCard
    messages: list[Message]  # the page's messages but the tool results shown with their call
    page: Page
    results: dict[int, list[Message]] = field(default_factory=dict)


def summary_card(db: Database, user_id: str, summary_id: str | uuid.UUID) -> SummaryCard:
    uid, sid = _uid(user_id), check_uuid(summary_id, "summary_id")
    with db.connection(uid) as conn:
        card = _cards(conn, uid, [sid]).get(sid)
    if card is None:
        raise NotFoundError(f"summary {sid} not found for this user")
    return card


def summary_sources(db: Database, user_id: str, summary_id: str | uuid.UUID, *, page: int | None = 1,
                    size: int = 100) -> SummarySources:
    """One page of the messages a summary replaced, oldest first; NotFoundError if not this user's."""
    uid, sid = _uid(user_id), check_uuid(summary_id, "summary_id")
    with db.connection(uid) as conn:
        card = _cards(conn, uid, [sid]).get(sid)
        if card is None:
            raise NotFoundError(f"summary {sid} not found for this user")
        pg = page_of(page, size, card.source_rows)
        messages = _messages(conn, "user_id = %(uid)s AND summary_id = %(sid)s",
                             {"uid": uid, "sid": sid, "n": size, "off": pg.offset},
                             " ORDER BY created_at, id LIMIT %(n)s OFFSET %(off)s")
        results, used = _attach_results(conn, uid, card.thread_id, messages) if card.thread_id else ({}, set())
    return SummarySources(card, [m for m in messages if m.id not in used], pg, results)


def summaries_of_thread(db: Database, user_id: str, thread_id: str, *, limit: int = 500) -> list[SummaryCard]:
    uid, tid = _uid(user_id), _tid(thread_id)
    with db.connection(uid) as conn:
        ids = [r[0] for r in conn.execute(
            "SELECT summary_id FROM summary_memory WHERE user_id = %s AND thread_id = %s ORDER BY created_at"
            " LIMIT %s", (uid, tid, limit))]
        cards = _cards(conn, uid, ids)
    return [cards[i] for i in ids if i in cards]


# -- facts ------------------------------------------------------------------------------
@dataclass
class FactChain:
    chain_id: uuid.UUID
    versions: list[FactVersion]

    @property
    def current(self) -> FactVersion:
        return self.versions[-1]


def fact_chains(db: Database, user_id: str, *, page: int | None = 1, size: int = 50) -> tuple[list[FactChain], Page]:
    """The user's fact chains (``fact_history``), newest change first, paged by chain."""
    uid = _uid(user_id)
    view = sql.Identifier(db.schema, "fact_history")
    try:
        with db.connection(uid) as conn:
            row = conn.execute(sql.SQL("SELECT count(DISTINCT chain_id) FROM {} WHERE user_id = %s").format(view),
                               (uid,)).fetchone()
            pg = page_of(page, size, int(row[0]) if row else 0)
            with conn.cursor(row_factory=class_row(FactVersion)) as cur:
                rows = cur.execute(sql.SQL(
                    "WITH chains AS (SELECT chain_id, max(updated_at) AS changed FROM {view} WHERE user_id = %(uid)s"
                    " GROUP BY chain_id ORDER BY changed DESC, chain_id LIMIT %(n)s OFFSET %(off)s)"
                    " SELECT h.* FROM {view} h JOIN chains USING (chain_id) WHERE h.user_id = %(uid)s"
                    " ORDER BY chains.changed DESC, h.chain_id, h.version").format(view=view),
                    {"uid": uid, "n": size, "off": pg.offset}).fetchall()
    except Exception as exc:
        if _denied(exc):
            raise _owner_view("the fact history") from exc
        raise
    chains: dict[uuid.UUID, FactChain] = {}
    for r in rows:
        chains.setdefault(r.chain_id, FactChain(r.chain_id, [])).versions.append(r)
    return list(chains.values()), pg


# -- context usage over turns -----------------------------------------------------------
@dataclass
class UsagePoint:
    """The conversation's share of the context at one turn (or the worst of a bucket of turns)."""

    first_turn: int
    last_turn: int
    at: datetime
    message_id: int
    tokens: int
    percent: Decimal
    status: str


@dataclass
class UsageSeries:
    points: list[UsagePoint]
    turns: int
    consolidations: list[tuple[datetime, uuid.UUID, str]]
    budget: int
    context_window: int


def context_usage(db: Database, settings: Settings, user_id: str, thread_id: str, *,
                  max_points: int = 300) -> UsageSeries:
    """Estimated tokens of the conversation in the context at each user turn, as stored history replays it.

    At a turn the context holds every earlier message not yet consolidated then, and a
    reference line (``[Summary ID: ...] label``) for each summary made before it; a
    consolidation replaces its rows by that line at the moment it was made. Tokens are
    ``ceil(characters / 4)`` and the status uses the monitor's budget and thresholds:
    the same estimate as the ``consolidation_status`` view. More turns than
    ``max_points`` are bucketed; each bucket shows its worst turn.
    """
    uid, tid = _uid(user_id), _tid(thread_id)
    stmt = (
        "WITH src AS (SELECT summary_id, sum(char_length(content)) AS chars FROM conversational_memory"
        "   WHERE user_id = %(uid)s AND thread_id = %(tid)s AND summary_id IS NOT NULL GROUP BY summary_id),"
        " ev AS ("
        "   SELECT created_at AS at, id AS seq, char_length(content)::bigint AS d, role = 'user' AS turn"
        "   FROM conversational_memory WHERE user_id = %(uid)s AND thread_id = %(tid)s"
        "   UNION ALL"
        "   SELECT s.created_at, NULL, char_length('[Summary ID: ' || s.summary_id || '] ' || s.description)"
        "     - coalesce(src.chars, 0), false"
        "   FROM summary_memory s LEFT JOIN src USING (summary_id)"
        "   WHERE s.user_id = %(uid)s AND s.thread_id = %(tid)s),"
        " run AS (SELECT at, seq, turn, sum(d) OVER (ORDER BY at, seq NULLS FIRST ROWS UNBOUNDED PRECEDING) AS chars"
        "   FROM ev),"
        " turns AS (SELECT at, seq, agentmem_estimate_tokens(greatest(chars, 0)::bigint) AS tokens,"
        "   row_number() OVER (ORDER BY at, seq) AS n, count(*) OVER () AS total FROM run WHERE turn),"
        " b AS (SELECT n, at, seq, tokens, (n - 1) * %(points)s / greatest(total, 1) AS bucket FROM turns),"
        " span AS (SELECT bucket, min(n) AS first_turn, max(n) AS last_turn FROM b GROUP BY bucket),"
        " worst AS (SELECT DISTINCT ON (bucket) bucket, at, seq, tokens FROM b ORDER BY bucket, tokens DESC, n)"
        # the monitor's functions only for the points drawn, not for every turn
        " SELECT span.first_turn, span.last_turn, worst.at, worst.seq AS message_id, worst.tokens,"
        "   round(100.0 * worst.tokens / agentmem_usable_budget(), 1) AS percent,"
        "   agentmem_monitor_status(worst.tokens) AS status"
        " FROM worst JOIN span USING (bucket) ORDER BY bucket"
    )
    with db.connection(uid) as conn:
        _set_monitor(conn, settings)
        with conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute(stmt, {"uid": uid, "tid": tid, "points": max_points}).fetchall()
            events = conn.execute(
                "SELECT created_at, summary_id, description FROM summary_memory WHERE user_id = %s AND thread_id = %s"
                " ORDER BY created_at LIMIT 1000", (uid, tid)).fetchall()
            limits = conn.execute("SELECT agentmem_usable_budget(), agentmem_context_window()").fetchone()
    assert limits is not None
    points = [UsagePoint(r["first_turn"], r["last_turn"], r["at"], r["message_id"], int(r["tokens"]), r["percent"],
                         r["status"]) for r in rows]
    turns = rows[-1]["last_turn"] if rows else 0
    return UsageSeries(points, int(turns), [(e[0], e[1], e[2]) for e in events], int(limits[0]), int(limits[1]))
