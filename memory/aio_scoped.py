"""The async twins of the scoped handles: ``amm.user("alice").thread("t1")``, awaited.

:class:`AsyncUserMemory` and :class:`AsyncThreadMemory` are to
:class:`~memory.aio.AsyncMemoryManager` what :class:`~memory.scoped.UserMemory` and
:class:`~memory.scoped.ThreadMemory` are to ``MemoryManager``: the ids validated once
when the handle is made, then every method one awaited call of the manager method named
in its docstring, without ``user_id`` / ``thread_id``::

    mem = amm.user("alice")
    t = mem.thread("t1")
    await t.write("user", "My export job fails with E42")
    context = await t.context("export job")
    if (await t.status(context)).status != "ok":
        await t.consolidate(keep_recent=2)
    await mem.remember("preference", "Alice wants answers in French")

They offer what the async manager offers (its hot path); the method names are those of
the sync handles, so code moves between the two by adding ``await``. A handle holds
nothing but the ids, so it is cheap to make and safe to share between tasks.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import TYPE_CHECKING, Any, overload
from collections.abc import Iterable, Mapping

from memory.store.validation import check_id

if TYPE_CHECKING:
    from memory.aio import AsyncMemoryManager
    from memory.consolidation.monitor import ContextStatus
    from memory.consolidation.summarizer import Summarizer
    from memory.consolidation.writeback import ConsolidationResult, ExpandedSummary
    from memory.retrieval.hits import Hit
    from memory.store.rows import Entity, Fact, KnowledgeItem, Message, Summary, Workflow
    from memory.tables.conversation import NewMessage
    from memory.tables.facts import Remembered
    from memory.tables.search import MemoryHit, SearchWeights


class AsyncUserMemory:
    """Every memory of one user, awaited: ``amm.user(user_id)``."""

    def __init__(self, amm: AsyncMemoryManager, user_id: str) -> None:
        self.amm = amm
        self.user_id = check_id(user_id, "user_id", max_chars=amm.settings.max_id_chars)

    def __repr__(self) -> str:
        return f"AsyncUserMemory({self.user_id!r})"

    def thread(self, thread_id: str) -> AsyncThreadMemory:
        """A handle on one of this user's threads (the id validated once)."""
        return AsyncThreadMemory(self, thread_id)

    # -- search and facts ---------------------------------------------------------------
    async def search(self, query: str, *, k: int = 10, scope: str | Iterable[str] | None = None,
                     thread_id: str | None = None, since: datetime | None = None,
                     until: datetime | None = None, now: datetime | None = None, time_mode: str = "boost",
                     min_score: float | None = None, method: str = "hybrid",
                     weights: SearchWeights | None = None) -> list[MemoryHit]:
        """``search_memory``: past messages, summaries and facts most relevant to ``query``."""
        return await self.amm.search_memory(query, user_id=self.user_id, k=k, scope=scope, thread_id=thread_id,
                                            since=since, until=until, now=now, time_mode=time_mode,
                                            min_score=min_score, method=method, weights=weights)

    async def remember(self, category: str, content: str, *, replaces: str | uuid.UUID | None = None,
                       source_message_id: int | None = None) -> Remembered:
        """``remember``: store a durable fact (updating a near-duplicate, superseding a contradiction)."""
        return await self.amm.remember(category, content, user_id=self.user_id, replaces=replaces,
                                       source_message_id=source_message_id)

    @overload
    async def recall(self, query: None = None, *, k: int = 10, include_history: bool = False) -> list[Fact]: ...

    @overload
    async def recall(self, query: str, *, k: int = 10, include_history: bool = False) -> list[Hit[Fact]]: ...

    async def recall(self, query: str | None = None, *, k: int = 10,
                     include_history: bool = False) -> list[Fact] | list[Hit[Fact]]:
        """``recall``: active facts most relevant to ``query`` as hits (no query: every active fact)."""
        return await self.amm.recall(query, user_id=self.user_id, k=k, include_history=include_history)

    async def facts(self) -> list[Fact]:
        """``read_facts``: the active facts, oldest first."""
        return await self.amm.read_facts(user_id=self.user_id)

    async def forget_fact(self, fact_id: str | uuid.UUID, *, purge: bool = False) -> Fact:
        """``forget``: retire one fact (kept as history; ``purge=True`` deletes it)."""
        return await self.amm.forget(fact_id, user_id=self.user_id, purge=purge)

    # -- summaries ----------------------------------------------------------------------
    async def summaries(self, *, limit: int = 50) -> list[Summary]:
        """``read_summaries``: this user's summaries of every thread, oldest first."""
        return await self.amm.read_summaries(user_id=self.user_id, limit=limit)

    async def summary(self, summary_id: str | uuid.UUID) -> Summary:
        """``read_summary_by_id``: one of this user's summaries; NotFoundError otherwise."""
        return await self.amm.read_summary_by_id(summary_id, user_id=self.user_id)

    async def expand(self, summary_id: str | uuid.UUID) -> ExpandedSummary:
        """``expand_summary``: the summary and every message it replaced, oldest first."""
        return await self.amm.expand_summary(summary_id, user_id=self.user_id)

    # -- knowledge, workflows, entities -------------------------------------------------
    async def knowledge(self, query: str, *, k: int = 5, hybrid: bool = True) -> list[Hit[KnowledgeItem]]:
        """``read_knowledge``: passages most relevant to ``query``."""
        return await self.amm.read_knowledge(query, user_id=self.user_id, k=k, hybrid=hybrid)

    async def workflows(self, query: str, *, k: int = 3, hybrid: bool = True) -> list[Hit[Workflow]]:
        """``read_workflows``: this user's and the shared workflows most relevant to ``query``."""
        return await self.amm.read_workflows(query, user_id=self.user_id, k=k, hybrid=hybrid)

    @overload
    async def entities(self, query: None = None, *, k: int = 10) -> list[Entity]: ...

    @overload
    async def entities(self, query: str, *, k: int = 10) -> list[Hit[Entity]]: ...

    async def entities(self, query: str | None = None, *, k: int = 10) -> list[Entity] | list[Hit[Entity]]:
        """``read_entities``: entities relevant to ``query`` as hits (no query: the latest seen, as rows)."""
        return await self.amm.read_entities(query, user_id=self.user_id, k=k)


class AsyncThreadMemory:
    """One conversation of one user, awaited: ``amm.user(user_id).thread(thread_id)``."""

    def __init__(self, user: AsyncUserMemory, thread_id: str) -> None:
        self.user = user
        self.amm = user.amm
        self.user_id = user.user_id
        self.thread_id = check_id(thread_id, "thread_id", max_chars=self.amm.settings.max_id_chars)

    def __repr__(self) -> str:
        return f"AsyncThreadMemory({self.user_id!r}, {self.thread_id!r})"

    # -- messages --------------------------------------------------------------------------
    async def write(self, role: str, content: str, **fields: Any) -> Message:
        """``write_conversational_memory``: store one message (tool_call_id, tool_calls, metadata ...)."""
        return await self.amm.write_conversational_memory(role, content, user_id=self.user_id,
                                                          thread_id=self.thread_id, **fields)

    async def write_many(self, messages: Iterable[NewMessage | Mapping[str, Any]], *,
                         embed: bool = True) -> list[Message]:
        """``write_messages``: store messages in order, all or none."""
        return await self.amm.write_messages(messages, user_id=self.user_id, thread_id=self.thread_id,
                                             embed=embed)

    async def messages(self, *, limit: int | None = None) -> list[Message]:
        """``read_conversational_memory``: the working set (unsummarized messages), oldest first."""
        return await self.amm.read_conversational_memory(user_id=self.user_id, thread_id=self.thread_id,
                                                         limit=limit)

    async def history(self, *, include_summarized: bool = True) -> list[Message]:
        """``read_thread``: every message of the thread in order, summarized ones included."""
        return await self.amm.read_thread(user_id=self.user_id, thread_id=self.thread_id,
                                          include_summarized=include_summarized)

    async def search(self, query: str, *, k: int = 10,
                     scope: str | Iterable[str] | None = None) -> list[MemoryHit]:
        """``search_memory`` within this thread."""
        return await self.amm.search_memory(query, user_id=self.user_id, thread_id=self.thread_id, k=k,
                                            scope=scope)

    # -- context, monitor, consolidation ------------------------------------------------
    async def context(self, query: str, *, k: int = 3) -> str:
        """``build_context``: a plain context from every memory type for ``query``."""
        return await self.amm.build_context(query, user_id=self.user_id, thread_id=self.thread_id, k=k)

    async def status(self, context: str, model: str | None = None) -> ContextStatus:
        """``monitor_context_window``: how full ``context`` makes ``model``'s window (ok/warning/critical)."""
        return await self.amm.monitor_context_window(context, model)

    async def consolidate(self, *, keep_recent: int = 0, model: Any | None = None,
                          summarizer: Summarizer | None = None, focus: str | None = None) -> ConsolidationResult:
        """``summarize_conversation``: summarise the unsummarized whole turns and mark them, atomically."""
        return await self.amm.summarize_conversation(user_id=self.user_id, thread_id=self.thread_id,
                                                     keep_recent=keep_recent, model=model,
                                                     summarizer=summarizer, focus=focus)

    async def expand(self, summary_id: str | uuid.UUID) -> ExpandedSummary:
        """``expand_summary``: the summary and every message it replaced."""
        return await self.amm.expand_summary(summary_id, user_id=self.user_id)

    async def summaries(self, *, limit: int = 50) -> list[Summary]:
        """``read_summaries`` of this thread, oldest first."""
        return await self.amm.read_summaries(user_id=self.user_id, thread_id=self.thread_id, limit=limit)
