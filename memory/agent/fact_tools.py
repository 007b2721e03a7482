"""The fact tools the model calls: remember, forget, recall.

Plain typed functions (the docstring is the description, the signature the schema),
made by :func:`fact_tools` as closures over one manager and one user, so the model
never chooses whose memory it writes; the user is a fixed id or a zero-argument
callable (as in ``memory.agent.memory_tools``), and :func:`register_fact_tools` puts them
in a toolbox. They never raise for a bad call: they return the toolbox's structured
error shape, ``{"status": "error", "error": code, "message": ..., "fix": ...}``,
which says what rule was broken and how to fix the call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal
from collections.abc import Callable

from memory.errors import FactRejectedError, InvalidInputError, NotFoundError
from memory.agent.memory_tools import UserRef, register_functions
from memory.store.rows import Fact


Category = Literal["preference", "constraint", "stable_fact"]


@dataclass(frozen=True)
class ToolError:
    """A structured error for the model: which rule, what went wrong, how to fix the call."""

    code: str
    message: str
    fix: str

    def to_dict(self) -> dict[str, Any]:
        return {"status": "error", "error": self.code, "message": self.message, "fix": self.fix}


def tool_error(exc: Exception) -> ToolError:
    if isinstance(exc, FactRejectedError):
        return ToolError(exc.code, exc.detail, exc.hint)
    if isinstance(exc, NotFoundError):
        return ToolError("not_found", str(exc), "call recall to list the current facts and their ids")
    return ToolError("invalid_input", str(exc), "fix the argument named in the message and call again")


def fact_dict(fact: Fact) -> dict[str, Any]:
    return {"id": str(fact.id), "category": fact.category, "content": fact.content,
            "since": fact.valid_from.date().isoformat(), "active": fact.active}


def fact_tools(mm: Any, *, user_id: UserRef) -> list[Callable[..., dict[str, Any]]]:
    """``[remember, forget, recall]`` bound to ``user_id`` on manager ``mm``."""

    def user() -> str:
        return user_id() if callable(user_id) else user_id

    def remember(category: Category, content: str, replaces: str | None = None) -> dict[str, Any]:
        """Save one durable fact about the user for future conversations.

        Only for what stays true: a preference, a constraint, or a stable fact (name,
        home town, role). A restated fact is updated and a changed one replaces the old
        version automatically.

        Args:
            category: preference, constraint or stable_fact.
            content: one sentence on one line, at most 180 characters.
            replaces: id of a saved fact this one replaces (from recall), if any.
        """
        try:
            done = mm.remember(category, content, user_id=user(), replaces=replaces)
        except (InvalidInputError, NotFoundError) as exc:
            return tool_error(exc).to_dict()
        out = {"status": "ok", "action": done.action, "fact": fact_dict(done.fact)}
        if done.previous is not None and done.action == "superseded":
            out["replaced"] = fact_dict(done.previous)
        return out

    def forget(fact_id: str) -> dict[str, Any]:
        """Stop using a saved fact; it is kept as history.

        Args:
            fact_id: the id of the fact, from recall.
        """
        try:
            return {"status": "ok", "forgotten": fact_dict(mm.forget(fact_id, user_id=user()))}
        except (InvalidInputError, NotFoundError) as exc:
            return tool_error(exc).to_dict()

    def recall(query: str = "") -> dict[str, Any]:
        """List the user's saved facts with their ids, most relevant first.

        Args:
            query: what to look for; empty lists every saved fact.
        """
        try:
            k = max(mm.settings.max_active_facts, 1)
            facts = [h.item for h in mm.recall(query, user_id=user(), k=k)] if query else mm.recall(user_id=user(), k=k)
        except (InvalidInputError, NotFoundError) as exc:
            return tool_error(exc).to_dict()
        return {"status": "ok", "facts": [fact_dict(f) for f in facts]}

    # The docstring promises the configured limit, not the default.
    remember.__doc__ = (remember.__doc__ or "").replace("180", str(mm.settings.fact_max_chars))
    return [remember, forget, recall]


def register_fact_tools(toolbox: Any, mm: Any, *, user_id: UserRef, pin: bool = False) -> list[str]:
    """Register remember, forget and recall in ``toolbox`` (optionally pinned); returns their names."""
    return register_functions(toolbox, list(fact_tools(mm, user_id=user_id)), pin=pin)
