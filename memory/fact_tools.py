"""The fact tools the model calls: remember, forget, recall.

Plain typed functions (the docstring is the description, the signature the schema),
bound to one user by :func:`fact_tools` so the model never chooses whose memory it
writes. They never raise for a bad call: they return ``{"ok": False, "error": ...}``
with a code, the problem and how to fix the call, which is what a model can act on.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable

from .errors import FactRejectedError, InvalidInputError, NotFoundError
from .models import Fact


@dataclass(frozen=True)
class ToolError:
    """A structured error for the model: what rule, what went wrong, how to fix the call."""

    code: str
    message: str
    fix: str

    def to_dict(self) -> dict[str, Any]:
        return {"ok": False, "error": asdict(self)}


def tool_error(exc: Exception) -> ToolError:
    if isinstance(exc, FactRejectedError):
        return ToolError(exc.code, exc.detail, exc.hint)
    if isinstance(exc, NotFoundError):
        return ToolError("not_found", str(exc), "call recall to list the current facts and their ids")
    return ToolError("invalid_input", str(exc), "fix the argument named in the message and call again")


def fact_dict(fact: Fact) -> dict[str, Any]:
    return {"id": str(fact.id), "category": fact.category, "content": fact.content,
            "since": fact.valid_from.date().isoformat(), "active": fact.active}


def fact_tools(mm: Any, user_id: str) -> list[Callable[..., dict[str, Any]]]:
    """``[remember, forget, recall]`` bound to ``user_id`` on manager ``mm``."""

    def remember(category: str, content: str, replaces: str | None = None) -> dict[str, Any]:
        """Save one durable fact about the user for future conversations.

        Use only for things that stay true: a preference, a constraint, or a stable fact
        (name, location, role). category: "preference", "constraint" or "stable_fact".
        content: one sentence, at most 180 characters. A restated fact is updated and a
        changed one replaces the old version automatically; pass replaces=<fact id> to
        replace a specific fact explicitly.
        """
        try:
            done = mm.remember(user_id, category, content, replaces=replaces)
        except (InvalidInputError, NotFoundError) as exc:
            return tool_error(exc).to_dict()
        out = {"ok": True, "action": done.action, "fact": fact_dict(done.fact)}
        if done.previous is not None and done.action == "superseded":
            out["replaced"] = fact_dict(done.previous)
        return out

    def forget(fact_id: str) -> dict[str, Any]:
        """Stop using a saved fact (it is kept as history). fact_id comes from recall."""
        try:
            return {"ok": True, "forgotten": fact_dict(mm.forget(fact_id, user_id))}
        except (InvalidInputError, NotFoundError) as exc:
            return tool_error(exc).to_dict()

    def recall(query: str = "") -> dict[str, Any]:
        """List the user's saved facts, most relevant to query first (all of them if query is empty)."""
        try:
            facts = mm.recall(user_id, query or None, k=max(mm.settings.max_active_facts, 1))
        except (InvalidInputError, NotFoundError) as exc:
            return tool_error(exc).to_dict()
        return {"ok": True, "facts": [fact_dict(f) for f in facts]}

    # The docstring promises the configured limit, not the default.
    remember.__doc__ = (remember.__doc__ or "").replace("180", str(mm.settings.fact_max_chars))
    return [remember, forget, recall]
