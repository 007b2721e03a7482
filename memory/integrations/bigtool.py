"""The Toolbox as langgraph-bigtool's tool retrieval: a bigtool agent picks tools from agentmem's registry.

``langgraph_bigtool.create_agent`` gives the model one tool, ``retrieve_tools(query)``,
and binds the tools it returns for the next step. Here that search is
``Toolbox.retrieve`` (vector + keyword fusion over the registered descriptions, pinned
tools included), sync and async, and the registry is the Toolbox's tools::

    from memory.integrations.bigtool import create_toolbox_agent
    agent = create_toolbox_agent(llm, toolbox, limit=3, user_id="alice").compile()

With ``user_id`` each call runs through ``Toolbox.execute`` (arguments validated, the
call and its whole output in ``tool_log``, errors returned to the model as results that
say how to fix the call); without it the tools' functions are called directly.

langgraph-bigtool 0.0.3 calls ``ToolNode.inject_tool_args``, which langgraph-prebuilt 1.x
removed (every tool call then fails with ``AttributeError``); importing this module gives
bigtool a ToolNode with that step (a pass-through: the 1.x node injects by itself), and
only when the installed ToolNode lacks it.
"""

from __future__ import annotations

import asyncio
from typing import Any
from collections.abc import Callable

from memory.errors import InvalidInputError
from memory.integrations._extras import missing
from memory.store.validation import check_id, check_positive_int

try:
    import langgraph_bigtool.graph as _bigtool_graph
    from langchain_core.tools import BaseTool, StructuredTool
    from langgraph.prebuilt import ToolNode
    from langgraph_bigtool import create_agent
except ImportError as exc:  # pragma: no cover - exercised in a subprocess without the extra
    raise missing("langgraph", "langgraph-bigtool", exc) from exc


class _ToolNode(ToolNode):
    """langgraph-bigtool 0.0.3 routes each call through ``ToolNode.inject_tool_args``, which
    langgraph-prebuilt 1.x no longer has: its ToolNode injects state and store itself when it
    runs the calls, so the routing step passes each call on unchanged."""

    def inject_tool_args(self, tool_call: Any, input: Any, store: Any) -> Any:
        return tool_call


if not hasattr(ToolNode, "inject_tool_args"):  # only where bigtool would fail (prebuilt >= 1.0)
    _bigtool_graph.ToolNode = _ToolNode

__all__ = ["create_toolbox_agent", "toolbox_registry", "toolbox_retrieval"]


def toolbox_retrieval(toolbox: Any, *, limit: int = 2) -> tuple[Callable[..., list[str]], Callable[..., Any]]:
    """bigtool's ``retrieve_tools_function`` and ``retrieve_tools_coroutine`` over ``toolbox.retrieve``."""
    k = check_positive_int(limit, "limit", maximum=1000)

    def retrieve_tools(query: str) -> list[str]:
        """Retrieve the tools to use, given a search query describing what the tool should do."""
        return [hit.item.name for hit in toolbox.retrieve(query, k)]

    async def aretrieve_tools(query: str) -> list[str]:
        """Retrieve the tools to use, given a search query describing what the tool should do."""
        return await asyncio.to_thread(retrieve_tools, query)

    return retrieve_tools, aretrieve_tools


def toolbox_registry(toolbox: Any, *, user_id: str | None = None, thread_id: str | None = None) -> dict[str, BaseTool]:
    """The Toolbox's tools as LangChain tools, by name (bigtool's ``tool_registry``)."""
    if user_id is not None:
        user_id = check_id(user_id, "user_id", max_chars=toolbox.mm.settings.max_id_chars)
    registry: dict[str, BaseTool] = {}
    for tool in toolbox.tools:
        if user_id is None:
            registry[tool.name] = StructuredTool.from_function(tool.func, name=tool.name,
                                                               description=tool.description)
        else:
            registry[tool.name] = StructuredTool.from_function(
                _executed(toolbox, tool.name, user_id, thread_id), name=tool.name, description=tool.description,
                args_schema=tool.json_schema)
    if not registry:
        raise InvalidInputError("the toolbox has no tools: register some before building a bigtool agent")
    return registry


def _executed(toolbox: Any, name: str, user_id: str, thread_id: str | None) -> Callable[..., str]:
    calls = iter(range(1 << 62))

    def run(**args: Any) -> str:
        call = {"id": f"bigtool-{name}-{next(calls)}", "name": name, "args": args}
        return str(toolbox.execute(call, user_id=user_id, thread_id=thread_id).content)

    return run


def create_toolbox_agent(llm: Any, toolbox: Any, *, limit: int = 2, user_id: str | None = None,
                         thread_id: str | None = None) -> Any:
    """``langgraph_bigtool.create_agent`` with the Toolbox as registry and retrieval (a StateGraph to compile)."""
    func, coro = toolbox_retrieval(toolbox, limit=limit)
    return create_agent(llm, toolbox_registry(toolbox, user_id=user_id, thread_id=thread_id),
                        retrieve_tools_function=func, retrieve_tools_coroutine=coro)
