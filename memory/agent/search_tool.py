"""``search_memory`` as a tool the agent calls, and the rendering of its hits.

Like :mod:`memory.agent.memory_tools`, the tool is a plain typed function (docstring =
description, signature = schema) closed over one ``MemoryManager`` and one user: the
model never chooses whose memory it reads. The user may be a zero-argument callable
for a loop serving many users with one toolbox.

A hit is rendered on one line with its date, thread, kind and speaker; a consolidated
message carries its summary's reference, written in full once per summary
(``[S1 = Summary ID: ...]``) and as ``[S1]`` on later hits of it; a summary is shown as
its reference, the range of messages it replaced, its label and a short excerpt, so the
model can call ``expand_summary`` for the rest instead of the search pasting whole
summaries into the context.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import TYPE_CHECKING, Any
from collections.abc import Callable, Sequence

from memory.agent.memory_tools import UserRef, register_functions
from memory.tables.search import MemoryHit

if TYPE_CHECKING:  # pragma: no cover
    from memory.manager import MemoryManager



#: Default threshold of the tool, on search_memory's fused score (MiniLM). Calibrated by
#: ``bench/recall.py --quick`` (chosen where answerable questions keep their evidence):
#: at 0.45, 29 % (tune) / 40 % (held out) of unanswerable questions come back empty
#: while every answerable one keeps a hit and held-out R@5 stays 0.878 (0.5 starts
#: dropping evidence: 0.784). ``bench/_public_memory.py`` prints the same split on
#: LoCoMo (adversarial vs answerable questions). A missed memory costs the agent more
#: than a weak one it is told to judge, so the default leans to recall.
DEFAULT_TOOL_MIN_SCORE = 0.45
EXCERPT_CHARS = 300


def format_hit(hit: MemoryHit, refs: dict[uuid.UUID, str] | None = None) -> str:
    """One line for ``hit``. With ``refs`` (summary id -> short label, filled as lines are
    made), a summary's full ``[Summary ID: ...]`` reference is written on its first line
    only and later hits of the same summary carry its label."""
    m = hit.item
    when = m.created_at.strftime("%Y-%m-%d %H:%M") if m.created_at else "undated"
    where = f" thread {m.thread_id}" if m.thread_id else ""
    ref = _summary_ref(m.summary_id, refs)
    if m.kind == "summary":
        label, _, body = m.content.partition("\n")
        excerpt = " ".join(body.split())[:EXCERPT_CHARS]
        covers = ""
        if m.covers is not None:
            c = m.covers
            covers = (f" (replaces message {c.first_id})" if c.count == 1
                      else f" (replaces {c.count} messages, ids {c.first_id}-{c.last_id})")
        return f"- [{when}{where}] {ref.strip()}{covers} {label}: {excerpt}"
    if m.kind == "fact":
        return f"- [{when}] fact ({m.role}): {m.content}"
    who = f"{m.name} ({m.role})" if m.name else m.role
    return f"- [{when}{where}]{ref} {who}: {m.content}"


def _summary_ref(summary_id: uuid.UUID | None, refs: dict[uuid.UUID, str] | None) -> str:
    if summary_id is None:
        return ""
    if refs is None:
        return f" [Summary ID: {summary_id}]"
    if summary_id in refs:
        return f" [{refs[summary_id]}]"
    refs[summary_id] = label = f"S{len(refs) + 1}"
    return f" [{label} = Summary ID: {summary_id}]"


def format_hits(hits: Sequence[MemoryHit]) -> str:
    """The hits one per line; each summary's id is written once (``[S1 = Summary ID: ...]``),
    later hits of it say ``[S1]``."""
    if not hits:
        return "No matching memories (nothing scored above the threshold)."
    refs: dict[uuid.UUID, str] = {}
    return "\n".join(format_hit(h, refs) for h in hits)


def search_tools(mm: MemoryManager, *, user_id: UserRef, min_score: float | None = DEFAULT_TOOL_MIN_SCORE,
                 now: Callable[[], datetime] | None = None) -> list[Callable[..., str]]:
    """``[search_memory]`` bound to ``mm`` and ``user_id``.

    ``now`` (a callable) is the clock relative expressions are resolved against; the
    current time by default.
    """

    def current_user() -> str:
        return user_id() if callable(user_id) else user_id

    def search_memory(query: str, k: int = 5, thread_id: str | None = None, since: str | None = None,
                      until: str | None = None) -> str:
        """Search everything said in past conversations with this user, including consolidated ones.

        Use it when the user refers to something said earlier that is not in your context
        ("what was the name of that hotel?", "what did I tell you last May?"). Finds past
        messages, conversation summaries and known facts by meaning and by keywords; a time
        expression in the query ("last May", "two weeks ago") favours that period. Each
        result shows its date and thread; a result with a [Summary ID: ...] can be opened
        with expand_summary (a later result marked [S1] belongs to the summary written
        out as [S1 = Summary ID: ...] above it). An empty result means nothing relevant was found: say so
        rather than guess.

        Args:
            query: what to look for, in natural language.
            k: how many results to return (1-20).
            thread_id: only search this conversation thread.
            since: only results from this date on (YYYY-MM-DD).
            until: only results before this date (YYYY-MM-DD).
        """
        hits = mm.search_memory(query, user_id=current_user(), k=max(1, min(int(k), 20)), thread_id=thread_id,
                                since=_date(since, "since"), until=_date(until, "until"),
                                now=now() if now else None, min_score=min_score)
        return format_hits(hits)

    return [search_memory]


def register_search_tools(toolbox: Any, mm: MemoryManager, *, user_id: UserRef, pin: bool = False,
                          **kwargs: Any) -> list[str]:
    """Register ``search_memory`` in ``toolbox`` (optionally pinned); returns the names."""
    return register_functions(toolbox, search_tools(mm, user_id=user_id, **kwargs), pin=pin)


def _date(value: str | None, field: str) -> datetime | None:
    from memory.errors import InvalidInputError

    if value is None or value == "":
        return None
    try:
        return datetime.fromisoformat(value)
    except (TypeError, ValueError):
        raise InvalidInputError(f"{field} must be a date like 2025-05-01, got {value!r}") from None
