"""What the toolbox hands out: registered tools and the results of running them."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable

from pydantic import TypeAdapter

from memory.retrieval.hits import Hit


@dataclass
class Tool:
    """A registered tool: the function, and how the model sees it.

    ``openai_schema`` is the OpenAI tools format, accepted as is by the OpenAI API and by
    ``ChatOpenAI(...).bind_tools([...])``. ``func`` is None for a tool registered from a
    schema without a handler: it can be retrieved and its calls checked, not run here.
    ``category``: the group it belongs to (MCP server, API, toolkit), "" for none.
    """

    name: str
    description: str
    json_schema: dict[str, Any]
    func: Callable[..., Any] | None
    docstring: str = ""
    queries: list[str] = field(default_factory=list)
    augmented: bool = False
    namespace: str = "default"
    content_hash: str = ""
    signature: str = ""
    adapters: dict[str, TypeAdapter[Any]] = field(default_factory=dict, repr=False)
    category: str = ""
    embedding: Any = field(default=None, repr=False)  # the stored embedding retrieval compares with
    timeout: float | None = None  # seconds this tool may run; None: the toolbox's ``tool_timeout``

    @property
    def openai_schema(self) -> dict[str, Any]:
        return {"type": "function",
                "function": {"name": self.name, "description": self.description,
                             "parameters": self.json_schema}}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.func is None:
            from .errors import ToolNotRunnableError

            raise ToolNotRunnableError(
                f"tool {self.name!r} was registered from a schema without a handler")
        return self.func(*args, **kwargs)


#: The one signal of a pinned tool that :meth:`Toolbox.retrieve` added beyond its ranking.
PINNED = "pinned"


class Retrieved(list[Hit[Tool]]):
    """What :meth:`Toolbox.retrieve` returns: a ``Hit`` per tool, best first, and whether any suits the request.

    Each hit's ``item`` is the :class:`Tool`, ``score`` its fused score and ``signals``
    the values behind it (``vector``, ``keyword``, ``group``: ``toolbox/index.py``). A
    pinned tool the ranking did not place in the top ``k`` is added after the ranked
    tools with score 0.0 and the one signal ``{"pinned": 1.0}`` (:data:`PINNED`), so
    every tool to offer the model is in the list; :attr:`tools` gives them as tools.

    ``best_score`` is the top ranked tool's score (None when nothing was ranked);
    ``suitable`` is False when it is below the toolbox's ``min_score`` (see
    ``toolbox/index.py``, ``NO_TOOL_SCORE``): the request most likely needs a tool this
    catalogue does not have. The tools are returned either way.
    """

    best_score: float | None = None
    suitable: bool = True

    @property
    def tools(self) -> list[Tool]:
        """The tools themselves, in order: what to hand to the model."""
        return [hit.item for hit in self]

    @property
    def names(self) -> list[str]:
        """The tools' names, in order."""
        return [hit.item.name for hit in self]


@dataclass
class ToolResult:
    """The outcome of one tool call, ready to go back to the model.

    ``content`` is what the model reads: the output (or its preview) when ``status`` is
    ``"ok"``; a JSON object with ``error``, ``message`` and ``fix`` when it is ``"error"``.
    ``log_id`` is the ``tool_log`` row holding the call's arguments and full output.
    """

    status: str
    content: str
    name: str
    tool_call_id: str | None = None
    log_id: int | None = None
    error: str | None = None  # error kind: unknown_tool, invalid_arguments, tool_error, ...
    hint: str | None = None  # how the model can fix the call
    duration_ms: float | None = None
    truncated: bool = False
    output: Any = field(default=None, repr=False)  # the function's return value (not sent to the model)
    traceback: str | None = field(default=None, repr=False)  # of a tool that raised (kept in tool_log)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_message(self) -> Any:
        """A LangChain ``ToolMessage`` answering the call."""
        from langchain_core.messages import ToolMessage

        return ToolMessage(content=self.content, tool_call_id=self.tool_call_id or "", name=self.name,
                           status="success" if self.ok else "error")

    def to_openai_message(self) -> dict[str, Any]:
        """The ``{"role": "tool", ...}`` message of the OpenAI chat API."""
        return {"role": "tool", "tool_call_id": self.tool_call_id or "", "content": self.content}

    @staticmethod
    def error_content(kind: str, message: str, fix: str, **extra: Any) -> str:
        return json.dumps({"status": "error", "error": kind, "message": message, "fix": fix, **extra},
                          ensure_ascii=False, default=str)
