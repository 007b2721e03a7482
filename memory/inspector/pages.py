"""What each page shows: a function per page from (manager, query parameters, config) to a template.

Page functions run in a worker thread (they block on the database); they validate
their parameters (a bad one is an :class:`~memory.errors.InvalidInputError`, shown as
400) and read through :mod:`memory.inspector.queries` or the manager. Write functions
return the address to go to next; they call the manager's methods with keywords only.
"""

from __future__ import annotations

import json
import re
import uuid
from collections import defaultdict
from datetime import datetime
from typing import TYPE_CHECKING, Any
from collections.abc import Mapping

from memory.errors import InvalidInputError
from memory.inspector import charts, queries
from memory.store.validation import check_id, check_uuid

if TYPE_CHECKING:
    from memory.manager import MemoryManager

#: Characters of one message shown on a page; the rest is summarised in a line.
CONTENT_CHARS = 4_000
SEARCH_PAGE = 20
KINDS = ("messages", "summaries", "facts")


def _int(params: Mapping[str, str], name: str, default: int | None = None, *, maximum: int = 10_000_000) -> int | None:
    raw = params.get(name)
    if raw is None or raw == "":
        return default
    if not raw.isdigit() or not 1 <= int(raw) <= maximum:
        raise InvalidInputError(f"{name} must be a whole number from 1 to {maximum:,}, got {raw[:40]!r}")
    return int(raw)


def _required(params: Mapping[str, str], name: str) -> str:
    value = params.get(name)
    if not value:
        raise InvalidInputError(f"this page needs ?{name}=...")
    return check_id(value, name, max_chars=10_000)


def _flag(params: Mapping[str, str], name: str) -> bool:
    return params.get(name, "") in ("1", "true", "on", "yes")


# -- filters for the templates ---------------------------------------------------------
def when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else ""


def num(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:,.2f}"
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return str(value)


def clip(text: str | None, limit: int = CONTENT_CHARS) -> str:
    text = text or ""
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n… ({len(text) - limit:,} more characters; `agentmem show THREAD --full` prints them)"


def as_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def colour(summary_id: Any) -> str:
    """A stable colour per summary, so the rows of one consolidation share a band."""
    h = uuid.UUID(str(summary_id)).int % 360
    return f"hsl({h}, 55%, 55%)"


FILTERS = {"when": when, "num": num, "clip": clip, "as_json": as_json, "colour": colour}


# -- pages -----------------------------------------------------------------------------
def overview(mm: MemoryManager, params: Mapping[str, str], config: Any) -> tuple[str, dict[str, Any]]:
    sort = params.get("sort") or "last_message_at"
    descending = params.get("dir", "desc") != "asc"
    text, status = params.get("q", ""), params.get("status", "")
    ov = queries.overview(mm.db, mm.settings, text=text, status=status, sort=sort, descending=descending,
                          page=_int(params, "page", 1), user_page=_int(params, "upage", 1))
    sizes = queries.table_sizes(mm.db)
    rows = queries.growth(mm.db, days=30)
    days = sorted({r.day for r in rows})
    tables = sorted({r.table_name for r in rows})
    counts: dict[str, dict[datetime, int]] = defaultdict(dict)
    for r in rows:
        counts[r.table_name][r.day] = int(r.rows_added)
    growth_chart = charts.stacked_bars(days, {t: [counts[t].get(d, 0) for d in days] for t in tables},
                                       title="rows added per day")
    size_chart = charts.hbars([s.table_name for s in sizes], [s.total_bytes for s in sizes],
                              [f"{s.total_size}, {s.row_count:,} rows" for s in sizes])
    return "overview.html", dict(ov=ov, sort=sort, descending=descending, q=text, status=status,
                                 sortable=queries.SORTABLE, statuses=queries.STATUSES, sizes=sizes,
                                 growth_chart=growth_chart, size_chart=size_chart, note=params.get("note", ""))


def user(mm: MemoryManager, params: Mapping[str, str], config: Any) -> tuple[str, dict[str, Any]]:
    uid = _required(params, "user")
    ov = queries.overview(mm.db, mm.settings, user_id=uid, page=_int(params, "page", 1))
    return "user.html", dict(user=uid, ov=ov)


def thread(mm: MemoryManager, params: Mapping[str, str], config: Any) -> tuple[str, dict[str, Any]]:
    uid, tid = _required(params, "user"), _required(params, "thread")
    raw = _flag(params, "raw")
    tp = queries.thread_page(mm.db, uid, tid, page=_int(params, "page"), size=config.page_size, raw=raw)
    from memory.llm.chat import chat_model_from_env

    model = chat_model_from_env(mm.settings) if config.allow_writes else None
    return "thread.html", dict(tp=tp, user=uid, thread=tid, raw=raw, note=params.get("note", ""),
                               model_name=getattr(model, "model_name", None) if model is not None else None)


def usage(mm: MemoryManager, params: Mapping[str, str], config: Any) -> tuple[str, dict[str, Any]]:
    uid, tid = _required(params, "user"), _required(params, "thread")
    series = queries.context_usage(mm.db, mm.settings, uid, tid)
    points = [(p.last_turn, float(p.percent), p.status,
               (f"turn {p.first_turn}" if p.first_turn == p.last_turn else f"turns {p.first_turn}-{p.last_turn}")
               + f" ({when(p.at)}): ~{p.tokens:,} tokens, {p.percent}% of the budget, {p.status}")
              for p in series.points]
    markers = []
    for at, _sid, label in series.consolidations:
        turn = next((p.first_turn for p in series.points if p.at >= at), series.turns)
        markers.append((max(turn, 1), f"consolidated {when(at)}: {label}"))
    chart = charts.usage_line(points, warning=mm.settings.warning_threshold, critical=mm.settings.critical_threshold,
                              markers=markers)
    return "usage.html", dict(user=uid, thread=tid, series=series, chart=chart,
                              warning=mm.settings.warning_threshold, critical=mm.settings.critical_threshold)


_HEADING = re.compile(r"^#{2,4}\s+(.*\S)\s*$")


def sections(content: str) -> list[tuple[str, str]]:
    """(heading, text) of each ``### `` section of a summary; text before any heading under ''."""
    out: list[tuple[str, list[str]]] = [("", [])]
    for line in content.splitlines():
        m = _HEADING.match(line)
        if m:
            out.append((m.group(1), []))
        else:
            out[-1][1].append(line)
    return [(h, "\n".join(lines).strip()) for h, lines in out if h or "\n".join(lines).strip()]


def summary(mm: MemoryManager, params: Mapping[str, str], config: Any) -> tuple[str, dict[str, Any]]:
    uid = _required(params, "user")
    sid = check_uuid(_required(params, "id"), "summary id")
    row = mm.read_summary_by_id(summary_id=sid, user_id=uid)
    src = queries.summary_sources(mm.db, uid, sid, page=_int(params, "page", 1))
    return "summary.html", dict(user=uid, s=row, card=src.card, src=src, sections=sections(row.content))


def sources(mm: MemoryManager, params: Mapping[str, str], config: Any) -> tuple[str, dict[str, Any]]:
    uid = _required(params, "user")
    sid = check_uuid(_required(params, "id"), "summary id")
    return "sources.html", dict(user=uid, src=queries.summary_sources(mm.db, uid, sid, page=_int(params, "page", 1)))


def facts(mm: MemoryManager, params: Mapping[str, str], config: Any) -> tuple[str, dict[str, Any]]:
    uid = _required(params, "user")
    chains, pg = queries.fact_chains(mm.db, uid, page=_int(params, "page", 1))
    return "facts.html", dict(user=uid, chains=chains, page=pg)


def search(mm: MemoryManager, params: Mapping[str, str], config: Any) -> tuple[str, dict[str, Any]]:
    uid = _required(params, "user")
    query = params.get("q", "").strip()
    kinds = [k for k in KINDS if _flag(params, k)]
    number = _int(params, "page", 1, maximum=1000 // SEARCH_PAGE) or 1
    hits: list[Any] = []
    more = False
    if query:
        want = number * SEARCH_PAGE
        found = mm.search_memory(query=query, user_id=uid, k=min(want + 1, 1000), scope=kinds or None)
        hits, more = found[want - SEARCH_PAGE:want], len(found) > want
    return "search.html", dict(user=uid, q=query, kinds=kinds, all_kinds=KINDS, hits=hits, number=number,
                               more=more, first=(number - 1) * SEARCH_PAGE)


def forget_form(mm: MemoryManager, params: Mapping[str, str], config: Any) -> tuple[str, dict[str, Any]]:
    from memory.tables.retention import rows_of_user

    uid = _required(params, "user")
    with mm.db.connection(uid) as conn:
        held = {t: n for t, n in rows_of_user(conn, mm.db.schema, user_id=uid).items() if n}
    return "forget.html", dict(user=uid, held=held, total=sum(held.values()))


# -- writes ------------------------------------------------------------------------------
def consolidate(mm: MemoryManager, form: Mapping[str, str]) -> str:
    from memory.inspector.app import url
    from memory.llm.chat import chat_model_from_env

    uid, tid = _required(form, "user"), _required(form, "thread")
    method = form.get("method", "extractive")
    if method not in ("extractive", "model"):
        raise InvalidInputError(f"method must be 'extractive' or 'model', got {method[:40]!r}")
    keep = form.get("keep_recent", "0") or "0"
    if not keep.isdigit() or int(keep) > 10_000:
        raise InvalidInputError(f"keep_recent must be a whole number from 0 to 10,000, got {keep[:40]!r}")
    model = None
    if method == "model":
        model = chat_model_from_env(mm.settings)
        if model is None:
            raise InvalidInputError("no chat model is configured (AGENTMEM_LLM_MODEL, AGENTMEM_LLM_BASE_URL): "
                                    "use the extractive summariser, or restart the inspector with a model set")
    result = mm.summarize_conversation(thread_id=tid, user_id=uid, keep_recent=int(keep), model=model)
    if result.summary is not None:
        note = (f"consolidated {len(result.source_ids):,} messages into summary {result.summary.summary_id} "
                f"({result.method}; {result.source_tokens:,} → {result.summary_tokens:,} tokens)")
    else:
        note = f"nothing consolidated ({result.status}): {result.message}"
    return url("/thread", user=uid, thread=tid, note=note)


def undo(mm: MemoryManager, form: Mapping[str, str]) -> str:
    from memory.inspector.app import url

    uid = _required(form, "user")
    sid = check_uuid(_required(form, "id"), "summary id")
    row = mm.read_summary_by_id(summary_id=sid, user_id=uid)
    cleared = mm.undo_consolidation(summary_id=sid, user_id=uid)
    note = f"undid summary {sid}: {cleared:,} messages are unsummarized again"
    if row.thread_id is None:
        return url("/user", user=uid, note=note)
    return url("/thread", user=uid, thread=row.thread_id, note=note)


def forget(mm: MemoryManager, form: Mapping[str, str]) -> str:
    from memory.inspector.app import url

    uid = _required(form, "user")
    if form.get("confirm", "") != uid:
        raise InvalidInputError(f"type the user id ({uid!r}) exactly to confirm; nothing was deleted")
    counts = mm.forget_user(user_id=uid)
    total = sum(counts.values())
    detail = ", ".join(f"{t} {n:,}" for t, n in counts.items() if n) or "no rows"
    return url("/", note=f"forgot user {uid!r}: {total:,} rows deleted ({detail})")

