"""Handles scoped to one user and to one of their threads.

``mm.user("alice")`` validates the user id once and returns a :class:`UserMemory`
whose methods are the manager's user-scoped methods without ``user_id``;
``.thread("t1")`` narrows it to a :class:`ThreadMemory` for one conversation::

    mem = mm.user("alice")
    t = mem.thread("t1")
    t.write("user", "My export job fails with E42")
    context = t.context("export job")
    if t.status(context).status != "ok":
        t.consolidate(keep_recent=2)
    mem.remember("preference", "Alice wants answers in French")

Each method is one call of the :class:`~memory.manager.MemoryManager` method named
in its docstring; a handle holds no state but the ids, so it is cheap to make and
safe to share across threads.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import TYPE_CHECKING, Any, overload
from collections.abc import Iterable, Mapping, Sequence

from memory.store.validation import check_id

if TYPE_CHECKING:
    from memory.consolidation.monitor import ContextStatus
    from memory.consolidation.summarizer import Summarizer
    from memory.consolidation.writeback import ConsolidationResult, ExpandedSummary, Offload
    from memory.manager import MemoryManager
    from memory.retrieval.hits import Hit
    from memory.store.rows import Entity, Fact, KnowledgeItem, Message, Summary, ToolLogEntry, Workflow
    from memory.tables.conversation import NewMessage
    from memory.tables.corrections import Correction
    from memory.tables.facts import Remembered
    from memory.tables.search import MemoryHit, SearchWeights


class UserMemory:
    """Every memory of one user: ``mm.user(user_id)``."""

    def __init__(self, mm: MemoryManager, user_id: str) -> None:
        self.mm = mm
        self.user_id = check_id(user_id, "user_id", max_chars=mm.settings.max_id_chars)

    def __repr__(self) -> str:
        return f"UserMemory({self.user_id!r})"

    def thread(self, thread_id: str) -> ThreadMemory:
        """A handle on one of this user's threads (the id validated once)."""
        return ThreadMemory(self, thread_id)

    # -- search and facts ---------------------------------------------------------------
    def search(self, query: str, *, k: int = 10, scope: str | Iterable[str] | None = None,
               thread_id: str | None = None, since: datetime | None = None, until: datetime | None = None,
               now: datetime | None = None, time_mode: str = "boost", min_score: float | None = None,
               method: str = "hybrid", weights: SearchWeights | None = None) -> list[MemoryHit]:
        """``search_memory``: past messages, summaries and facts most relevant to ``query``."""
        return self.mm.search_memory(query, user_id=self.user_id, k=k, scope=scope, thread_id=thread_id,
                                     since=since, until=until, now=now, time_mode=time_mode, min_score=min_score,
                                     method=method, weights=weights)

    def search_many(self, queries: Sequence[str], *, k: int = 10, scope: str | Iterable[str] | None = None,
                    thread_id: str | None = None, now: datetime | None = None,
                    min_score: float | None = None) -> list[list[MemoryHit]]:
        """``search_memory_many``: one hit list per query, the queries embedded in one batch."""
        return self.mm.search_memory_many(queries, user_id=self.user_id, k=k, scope=scope, thread_id=thread_id,
                                          now=now, min_score=min_score)

    def remember(self, category: str, content: str, *, replaces: str | uuid.UUID | None = None,
                 source_message_id: int | None = None) -> Remembered:
        """``remember``: store a durable fact (updating a near-duplicate, superseding a contradiction)."""
        return self.mm.remember(category, content, user_id=self.user_id, replaces=replaces,
                                source_message_id=source_message_id)

    @overload
    def recall(self, query: None = None, *, k: int = 10, include_history: bool = False) -> list[Fact]: ...

    @overload
    def recall(self, query: str, *, k: int = 10, include_history: bool = False) -> list[Hit[Fact]]: ...

    def recall(self, query: str | None = None, *, k: int = 10,
               include_history: bool = False) -> list[Fact] | list[Hit[Fact]]:
        """``recall``: active facts most relevant to ``query`` as hits (no query: every active fact)."""
        if query is None:
            return self.mm.recall(user_id=self.user_id, k=k, include_history=include_history)
        return self.mm.recall(query, user_id=self.user_id, k=k, include_history=include_history)

    def facts(self) -> list[Fact]:
        """``read_facts``: the active facts, oldest first."""
        return self.mm.read_facts(user_id=self.user_id)

    def fact_history(self, fact_id: str | uuid.UUID) -> list[Fact]:
        """``fact_history``: every version in the supersession chain through ``fact_id``."""
        return self.mm.fact_history(fact_id, user_id=self.user_id)

    def forget_fact(self, fact_id: str | uuid.UUID, *, purge: bool = False) -> Fact:
        """``forget``: retire one fact (kept as history; ``purge=True`` deletes it)."""
        return self.mm.forget(fact_id, user_id=self.user_id, purge=purge)

    def forget(self) -> dict[str, int]:
        """``forget_user``: delete EVERY row of this user in every table; counts per table."""
        return self.mm.forget_user(user_id=self.user_id)

    # -- threads and summaries ------------------------------------------------------------
    def threads(self) -> list[dict[str, Any]]:
        """``list_threads``: this user's threads with their summarized and unsummarized counts."""
        return self.mm.list_threads(user_id=self.user_id)

    def summaries(self, *, limit: int = 50) -> list[Summary]:
        """``read_summaries``: this user's summaries of every thread, oldest first."""
        return self.mm.read_summaries(user_id=self.user_id, limit=limit)

    def summary(self, summary_id: str | uuid.UUID) -> Summary:
        """``read_summary_by_id``: one of this user's summaries; NotFoundError otherwise."""
        return self.mm.read_summary_by_id(summary_id, user_id=self.user_id)

    def expand(self, summary_id: str | uuid.UUID) -> ExpandedSummary:
        """``expand_summary``: the summary and every message it replaced, oldest first."""
        return self.mm.expand_summary(summary_id, user_id=self.user_id)

    def similar_summaries(self, query: str, *, k: int = 3) -> list[Hit[Summary]]:
        """``read_summary_memory``: this user's summaries most relevant to ``query``."""
        return self.mm.read_summary_memory(query, user_id=self.user_id, k=k)

    # -- knowledge, workflows, entities, tool log --------------------------------------
    def write_knowledge(self, content: str, source: str = "",
                        metadata: dict[str, Any] | None = None) -> KnowledgeItem:
        """``write_knowledge``: store one passage the agent may cite."""
        return self.mm.write_knowledge(content, source, metadata, user_id=self.user_id)

    def knowledge(self, query: str, *, k: int = 5, hybrid: bool = True) -> list[Hit[KnowledgeItem]]:
        """``read_knowledge``: passages most relevant to ``query``."""
        return self.mm.read_knowledge(query, user_id=self.user_id, k=k, hybrid=hybrid)

    def write_workflow(self, name: str, description: str, steps: Sequence[Any], *, query: str = "",
                       outcome: str = "") -> Workflow:
        """``write_workflow``: store a procedure that worked (this user's own)."""
        return self.mm.write_workflow(name, description, steps, user_id=self.user_id, query=query, outcome=outcome)

    def workflows(self, query: str, *, k: int = 3, hybrid: bool = True) -> list[Hit[Workflow]]:
        """``read_workflows``: this user's and the shared workflows most relevant to ``query``."""
        return self.mm.read_workflows(query, user_id=self.user_id, k=k, hybrid=hybrid)

    def write_entity(self, name: str, entity_type: str = "unknown", description: str = "") -> Entity:
        """``write_entity``: store an entity or count one more mention of it."""
        return self.mm.write_entity(name, entity_type, description, user_id=self.user_id)

    @overload
    def entities(self, query: None = None, *, k: int = 10) -> list[Entity]: ...

    @overload
    def entities(self, query: str, *, k: int = 10) -> list[Hit[Entity]]: ...

    def entities(self, query: str | None = None, *, k: int = 10) -> list[Entity] | list[Hit[Entity]]:
        """``read_entities``: entities relevant to ``query`` as hits (no query: the latest seen, as rows)."""
        if query is None:
            return self.mm.read_entities(user_id=self.user_id, k=k)
        return self.mm.read_entities(query, user_id=self.user_id, k=k)

    def tool_log(self, *, limit: int = 50) -> list[ToolLogEntry]:
        """``read_tool_log``: this user's latest tool calls, oldest first."""
        return self.mm.read_tool_log(user_id=self.user_id, limit=limit)


class ThreadMemory:
    """One conversation of one user: ``mm.user(user_id).thread(thread_id)``."""

    def __init__(self, user: UserMemory, thread_id: str) -> None:
        self.user = user
        self.mm = user.mm
        self.user_id = user.user_id
        self.thread_id = check_id(thread_id, "thread_id", max_chars=self.mm.settings.max_id_chars)

    def __repr__(self) -> str:
        return f"ThreadMemory({self.user_id!r}, {self.thread_id!r})"

    # -- messages --------------------------------------------------------------------------
    def write(self, role: str, content: str, **fields: Any) -> Message:
        """``write_conversational_memory``: store one message (tool_call_id, tool_calls, metadata ...)."""
        return self.mm.write_conversational_memory(role, content, user_id=self.user_id, thread_id=self.thread_id,
                                                   **fields)

    def write_many(self, messages: Iterable[NewMessage | Mapping[str, Any]], *, embed: bool = True) -> list[Message]:
        """``write_messages``: store messages in order, all or none."""
        return self.mm.write_messages(messages, user_id=self.user_id, thread_id=self.thread_id, embed=embed)

    def messages(self, *, limit: int | None = None) -> list[Message]:
        """``read_conversational_memory``: the working set (unsummarized messages), oldest first."""
        return self.mm.read_conversational_memory(user_id=self.user_id, thread_id=self.thread_id, limit=limit)

    def history(self, *, include_summarized: bool = True) -> list[Message]:
        """``read_thread``: every message of the thread in order, summarized ones included."""
        return self.mm.read_thread(user_id=self.user_id, thread_id=self.thread_id,
                                   include_summarized=include_summarized)

    def correct(self, wrong: str, right: str, *, message_id: int | None = None,
                fact_id: str | uuid.UUID | None = None) -> Correction:
        """``correct``: append an explicit correction (and supersede ``fact_id`` with ``right``)."""
        return self.mm.correct(wrong, right, user_id=self.user_id, thread_id=self.thread_id, message_id=message_id,
                               fact_id=fact_id)

    def search(self, query: str, *, k: int = 10, scope: str | Iterable[str] | None = None) -> list[MemoryHit]:
        """``search_memory`` within this thread."""
        return self.mm.search_memory(query, user_id=self.user_id, thread_id=self.thread_id, k=k, scope=scope)

    # -- context, monitor, consolidation ------------------------------------------------
    def context(self, query: str, *, k: int = 3) -> str:
        """``build_context``: a plain context from every memory type for ``query``."""
        return self.mm.build_context(query, user_id=self.user_id, thread_id=self.thread_id, k=k)

    def status(self, context: str, model: str | None = None) -> ContextStatus:
        """``monitor_context_window``: how full ``context`` makes ``model``'s window (ok/warning/critical)."""
        return self.mm.monitor_context_window(context, model)

    def consolidate(self, *, keep_recent: int = 0, model: Any | None = None, summarizer: Summarizer | None = None,
                    focus: str | None = None) -> ConsolidationResult:
        """``summarize_conversation``: summarise the unsummarized whole turns and mark them, atomically."""
        return self.mm.summarize_conversation(user_id=self.user_id, thread_id=self.thread_id,
                                              keep_recent=keep_recent, model=model, summarizer=summarizer,
                                              focus=focus)

    def offload(self, context: str, *, summary_id: str | uuid.UUID | None = None, keep_recent: int = 0,
                model: Any | None = None, summarizer: Summarizer | None = None) -> Offload:
        """``offload_to_summary``: rewrite the conversation section of ``context`` into summary references."""
        return self.mm.offload_to_summary(context, user_id=self.user_id, thread_id=self.thread_id,
                                          summary_id=summary_id, keep_recent=keep_recent, model=model,
                                          summarizer=summarizer)

    def expand(self, summary_id: str | uuid.UUID) -> ExpandedSummary:
        """``expand_summary``: the summary and every message it replaced."""
        return self.mm.expand_summary(summary_id, user_id=self.user_id)

    def summaries(self, *, limit: int = 50) -> list[Summary]:
        """``read_summaries`` of this thread, oldest first."""
        return self.mm.read_summaries(user_id=self.user_id, thread_id=self.thread_id, limit=limit)

    def tool_log(self, *, limit: int = 50) -> list[ToolLogEntry]:
        """``read_tool_log`` of this thread, oldest first."""
        return self.mm.read_tool_log(user_id=self.user_id, thread_id=self.thread_id, limit=limit)
