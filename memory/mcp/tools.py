"""The MCP tools: agentmem's front door as typed functions a model can call.

Each tool is a plain typed function: the SDK builds the JSON schema from the signature
(``Annotated[..., Field(description=..., ge=..., le=...)]`` gives each argument its
description and bounds, so a bad argument is refused by the SDK as a tool error naming
the field) and the description from the docstring. No tool takes a user: every call
acts for the user of the server (stdio) or of the request's bearer token (HTTP), see
:mod:`memory.mcp.auth`. Every failure is raised as the SDK's ``ToolError`` with the text
of :func:`memory.mcp.failures.explain` (what went wrong, and the fix), which the client
receives as a result with ``isError`` set.

Results are JSON objects (dates as ISO 8601 text). Tools are sync: the SDK runs them in
a worker thread, off the event loop, so a slow embedding or database call never stalls
other sessions.
"""

# No ``from __future__ import annotations``: the SDK reads these annotations at run time, and
# some are built from the settings (the fact length in ``remember``).
from datetime import datetime
from typing import Annotated, Any, Literal, TypeVar
from collections.abc import Callable

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from memory.agent.fact_tools import fact_dict
from memory.agent.search_tool import DEFAULT_TOOL_MIN_SCORE
from memory.errors import InvalidInputError
from memory.mcp.failures import explain
from memory.mcp.service import Service

T = TypeVar("T")

ThreadId = Annotated[str, Field(min_length=1, max_length=200,
                                description="The conversation thread (any stable id you choose, e.g. 'support-42').")]
Scope = Literal["messages", "summaries", "facts"]
Category = Literal["preference", "constraint", "stable_fact"]


def iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def message_dict(m: Any) -> dict[str, Any]:
    out = {"id": m.id, "role": m.role, "content": m.content, "created_at": iso(m.created_at)}
    if m.summary_id is not None:
        out["summary_id"] = str(m.summary_id)
    if m.tool_name:
        out["tool_name"] = m.tool_name
    return out


def register_tools(server: Any, service: Service) -> list[str]:
    """Add every agentmem tool to ``server`` (an ``MCPServer``); returns their names."""
    def act(ctx: Context, work: Callable[[Any], T]) -> T:
        try:
            return service.run(ctx.headers if ctx is not None else None, work)
        except ToolError:
            raise
        except Exception as exc:  # every failure is a tool error with its fix, never a dropped call
            raise ToolError(explain(exc)) from exc

    def search_memory(
        query: Annotated[str, Field(min_length=1, description="What to look for, in natural language. A time "
                                    "phrase ('last May', 'two weeks ago') favours that period.")],
        k: Annotated[int, Field(ge=1, le=20, description="How many results (1-20).")] = 5,
        scope: Annotated[list[Scope] | None, Field(description="Only these kinds: messages, summaries, facts "
                                                   "(default: all three).")] = None,
        thread_id: Annotated[str | None, Field(description="Only this conversation thread.")] = None,
        since: Annotated[str | None, Field(description="Only results from this date on (YYYY-MM-DD).")] = None,
        until: Annotated[str | None, Field(description="Only results before this date (YYYY-MM-DD).")] = None,
        ctx: Context = None,  # type: ignore[assignment]
    ) -> dict[str, Any]:
        """Search everything the user said in past conversations: messages (consolidated ones too), summaries
        and saved facts, by meaning and by keywords, best first.

        Use it when the user refers to something said earlier that is not in your context. Each result has
        its kind, date, thread and score; a result with a summary_id can be opened with expand_summary (or
        read as the resource agentmem://summaries/{summary_id}). An empty list means nothing relevant was
        found: say so rather than guess."""
        def work(mem: Any) -> dict[str, Any]:
            hits = mem.search(query, k=k, scope=scope, thread_id=thread_id, since=_date(since, "since"),
                              until=_date(until, "until"), min_score=DEFAULT_TOOL_MIN_SCORE)
            return {"results": [
                {"kind": m.kind, "id": m.id, "content": m.content, "score": round(h.score, 4),
                 "created_at": iso(m.created_at), "thread_id": m.thread_id,
                 "summary_id": str(m.summary_id) if m.summary_id else None, "role": m.role}
                for h in hits for m in (h.item,)]}
        return act(ctx, work)

    def write_message(
        thread_id: ThreadId,
        role: Annotated[Literal["user", "assistant", "system"], Field(description="Who said it.")],
        content: Annotated[str, Field(description="The message text, whole.")],
        ctx: Context = None,  # type: ignore[assignment]
    ) -> dict[str, Any]:
        """Store one message of a conversation in the user's durable memory (embedded for search).

        Write every user message and every answer you give, in order, to the same thread_id, so that
        build_context, search_memory and summarize_and_store can use them later."""
        def work(mem: Any) -> dict[str, Any]:
            m = mem.thread(thread_id).write(role, content)
            return {"status": "ok", "thread_id": m.thread_id, "message": message_dict(m)}
        return act(ctx, work)

    def build_context(
        query: Annotated[str, Field(min_length=1, description="The request you are about to answer.")],
        thread_id: ThreadId,
        k: Annotated[int, Field(ge=1, le=20, description="How many items per retrieved section.")] = 3,
        ctx: Context = None,  # type: ignore[assignment]
    ) -> dict[str, Any]:
        """Build the memory context for a request: known facts, summaries of the thread, relevant workflows,
        entities and knowledge, and the thread's live (unconsolidated) messages, as markdown sections.

        Put the returned context before the request. `status` is the context monitor's verdict on it
        (ok / warning / critical): at warning or critical, call summarize_and_store for the thread."""
        def work(mem: Any) -> dict[str, Any]:
            thread = mem.thread(thread_id)
            text = thread.context(query, k=k)
            return {"context": text, **_status(thread.status(text))}
        return act(ctx, work)

    def context_status(
        thread_id: Annotated[str | None, Field(description="Measure the context agentmem builds for this thread.")]
        = None,
        text: Annotated[str | None, Field(description="Or measure this text (e.g. your whole current context).")]
        = None,
        model: Annotated[str | None, Field(description="The model whose context window to measure against, e.g. "
                                           "'gpt-4o' (default: the configured default window).")] = None,
        ctx: Context = None,  # type: ignore[assignment]
    ) -> dict[str, Any]:
        """How full the context window is: tokens, the usable budget, percent, and a status of ok (below 50 %),
        warning (below 80 %) or critical. Give exactly one of thread_id or text.

        At warning or critical, consolidate older conversation with summarize_and_store."""
        def work(mem: Any) -> dict[str, Any]:
            if (thread_id is None) == (text is None):
                raise InvalidInputError("give exactly one of thread_id (measure that thread's context) or text")
            if text is not None:
                measured = text
            else:  # the context built for the thread's latest message, the request being answered
                thread = mem.thread(thread_id)
                latest = thread.messages(limit=1)
                measured = thread.context(latest[0].content if latest and latest[0].content.strip() else thread_id)
            return _status(mem.mm.monitor_context_window(measured, model))
        return act(ctx, work)

    def summarize_and_store(
        thread_id: ThreadId,
        keep_recent: Annotated[int, Field(ge=0, le=100, description="How many of the latest turns to keep live "
                                          "(unconsolidated).")] = 1,
        focus: Annotated[str | None, Field(max_length=2000, description="What the summary should focus on, "
                                           "if anything.")] = None,
        ctx: Context = None,  # type: ignore[assignment]
    ) -> dict[str, Any]:
        """Consolidate a thread: summarise its older whole turns into one stored summary and mark exactly those
        messages with its summary_id, in one transaction. Nothing is deleted: expand_summary gives the
        originals back.

        Call it when context_status or build_context reports warning or critical. The result names the
        summary; its reference `[Summary ID: ...] label` replaces those turns in later contexts."""
        def work(mem: Any) -> dict[str, Any]:
            r = mem.thread(thread_id).consolidate(keep_recent=keep_recent, model=service.model(), focus=focus or None)
            out: dict[str, Any] = {"status": r.status, "message": r.message, "consolidated_messages": len(r.source_ids),
                                   "kept_turns": r.kept_turns}
            if r.summary is not None:
                out.update(summary_id=str(r.summary.summary_id), label=r.summary.description,
                           reference=r.summary.reference, method=r.method, source_tokens=r.source_tokens,
                           summary_tokens=r.summary_tokens)
            return out
        return act(ctx, work)

    def expand_summary(
        summary_id: Annotated[str, Field(description="The id in a `[Summary ID: ...]` reference or a search "
                                         "result.")],
        ctx: Context = None,  # type: ignore[assignment]
    ) -> dict[str, Any]:
        """Open a stored summary: its text and every original message it replaced, oldest first.

        Use it when a `[Summary ID: ...]` reference hides a detail you need."""
        def work(mem: Any) -> dict[str, Any]:
            e = mem.expand(summary_id)
            return {"summary_id": str(e.summary.summary_id), "label": e.summary.description,
                    "thread_id": e.summary.thread_id, "content": e.summary.content,
                    "messages": [message_dict(m) for m in e.messages]}
        return act(ctx, work)

    def remember(
        category: Annotated[Category, Field(description="preference, constraint or stable_fact.")],
        content: Annotated[str, Field(min_length=1, description=f"One sentence on one line, at most "
                                      f"{service.settings.fact_max_chars} characters.")],
        replaces: Annotated[str | None, Field(description="The id of a saved fact (from recall) this one "
                                              "replaces, if any.")] = None,
        ctx: Context = None,  # type: ignore[assignment]
    ) -> dict[str, Any]:
        """Save one durable fact about the user for future conversations: only what stays true (a preference,
        a constraint, a stable fact such as their name or role).

        A restated fact updates the saved one; a contradicting one replaces it (the old one stays as
        history)."""
        def work(mem: Any) -> dict[str, Any]:
            done = mem.remember(category, content, replaces=replaces)
            out = {"status": "ok", "action": done.action, "fact": fact_dict(done.fact)}
            if done.previous is not None and done.action == "superseded":
                out["replaced"] = fact_dict(done.previous)
            return out
        return act(ctx, work)

    def forget(
        fact_id: Annotated[str, Field(description="The id of the fact, from recall.")],
        ctx: Context = None,  # type: ignore[assignment]
    ) -> dict[str, Any]:
        """Stop using a saved fact (it is kept as history, no longer recalled or put in contexts)."""
        return act(ctx, lambda mem: {"status": "ok", "forgotten": fact_dict(mem.forget_fact(fact_id))})

    def recall(
        query: Annotated[str, Field(description="What to look for; empty lists every saved fact.")] = "",
        ctx: Context = None,  # type: ignore[assignment]
    ) -> dict[str, Any]:
        """List the user's saved facts with their ids, most relevant to the query first."""
        def work(mem: Any) -> dict[str, Any]:
            k = max(mem.mm.settings.max_active_facts, 1)
            # with a query recall ranks hits (Hit[Fact]); without one it lists the facts
            facts = [h.item for h in mem.recall(query, k=k)] if query else mem.recall(k=k)
            return {"facts": [fact_dict(f) for f in facts]}
        return act(ctx, work)

    def list_threads(ctx: Context = None) -> dict[str, Any]:  # type: ignore[assignment]
        """The user's conversation threads, most recent first, with how many messages each has and how many
        of them are consolidated into summaries. Read one as the resource agentmem://threads/{thread_id}."""
        def work(mem: Any) -> dict[str, Any]:
            return {"threads": [
                {"thread_id": t["thread_id"], "messages": t["total"], "unsummarized": t["unsummarized"],
                 "summarized": t["summarized"], "first_at": iso(t["first_at"]), "last_at": iso(t["last_at"])}
                for t in mem.threads()]}
        return act(ctx, work)

    def find_tools(
        request: Annotated[str, Field(min_length=1, description="The user's request the tools are for.")],
        k: Annotated[int, Field(ge=1, le=50, description="How many tools.")] = 5,
        ctx: Context = None,  # type: ignore[assignment]
    ) -> dict[str, Any]:
        """Find the stored tools most relevant to a request among all the tools registered in agentmem's
        toolbox (ranked by meaning and keywords), with their descriptions and parameter names."""
        from toolbox.catalog import search_tools

        def work(mem: Any) -> dict[str, Any]:
            hits = search_tools(mem.mm, request, service.namespace, k)
            return {"namespace": service.namespace, "tools": [
                {"name": h.item.name, "description": h.item.description, "parameters": h.item.parameters,
                 "score": round(h.score, 4)} for h in hits]}
        return act(ctx, work)

    tools: list[Callable[..., Any]] = [search_memory, write_message, build_context, context_status,
                                       summarize_and_store, expand_summary, remember, forget, recall, list_threads,
                                       find_tools]
    for fn in tools:
        server.add_tool(fn, description=_description(fn))
    return [fn.__name__ for fn in tools]


def _status(s: Any) -> dict[str, Any]:
    return {"status": s.status, "tokens": s.tokens, "max_tokens": s.max_tokens, "percent": round(s.percent, 1),
            "method": s.method, "advice": s.message}


def _description(fn: Callable[..., Any]) -> str:
    """The docstring as prose: lines joined, paragraphs kept."""
    paragraphs = (fn.__doc__ or "").strip().split("\n\n")
    return "\n\n".join(" ".join(p.split()) for p in paragraphs)


def _date(value: str | None, field: str) -> datetime | None:
    if value is None or value == "":
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise InvalidInputError(f"{field} must be a date like 2025-05-01, got {value!r}") from None
