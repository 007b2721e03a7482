"""The MCP resources: a thread and a summary, readable without a tool call.

``agentmem://threads/{thread_id}`` is the whole thread as markdown, oldest first, each
consolidated message marked with its summary id; ``agentmem://summaries/{summary_id}``
is a summary with every original message it replaced. Both are resource templates
(the SDK lists them under ``resources/templates/list``) and both act for the user of
the call (:mod:`memory.mcp.auth`): another user's thread or summary reads as not found.
A failure is an MCP error whose message says what to do (:mod:`memory.mcp.failures`).
"""

from __future__ import annotations

from typing import TypeVar
from collections.abc import Callable

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError

from memory.context.render import format_message
from memory.errors import NotFoundError
from memory.mcp.failures import explain
from memory.mcp.service import Service
from memory.scoped import UserMemory

T = TypeVar("T")

THREAD_URI = "agentmem://threads/{thread_id}"
SUMMARY_URI = "agentmem://summaries/{summary_id}"


def register_resources(server: MCPServer, service: Service) -> list[str]:
    """Add the thread and summary resource templates to ``server``; returns their URI templates."""

    def act(ctx: Context, work: Callable[[UserMemory], T]) -> T:
        try:
            return service.run(ctx.headers, work)
        except Exception as exc:
            raise ResourceError(explain(exc)) from exc

    @server.resource(THREAD_URI, name="thread", mime_type="text/markdown",
                     description="A conversation thread of the user: every message, oldest first; consolidated "
                                 "messages carry their [Summary ID: ...].")
    def thread(thread_id: str, ctx: Context) -> str:
        def work(mem: UserMemory) -> str:
            rows = mem.thread(thread_id).history()
            if not rows:
                raise NotFoundError(f"no thread {thread_id!r} for this user")
            lines = [f"# Thread {thread_id}", "",
                     f"{len(rows)} messages, {sum(m.summary_id is not None for m in rows)} consolidated.", ""]
            for m in rows:
                mark = f"[Summary ID: {m.summary_id}] " if m.summary_id is not None else ""
                lines.append(f"- {mark}{format_message(m)}")
            return "\n".join(lines)
        return act(ctx, work)

    @server.resource(SUMMARY_URI, name="summary", mime_type="text/markdown",
                     description="A stored summary and every original message it replaced, oldest first.")
    def summary(summary_id: str, ctx: Context) -> str:
        return act(ctx, lambda mem: mem.expand(summary_id).format())

    return [THREAD_URI, SUMMARY_URI]
