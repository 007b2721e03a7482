"""MemoryManager: the one front door to every memory type.

The manager owns one small object per table (``memory.tables``), each built on the
shared ``Store`` core (pool, embedding service, settings) and given explicitly the
other objects it calls: ``Consolidation`` reads threads through ``Conversations`` and
writes through ``Summaries``; ``Corrections`` supersedes facts through ``Facts``. The
manager's methods keep the design's vocabulary and delegate, one call each.

``user_id`` and ``thread_id`` are keyword-only on every method (both are strings, so a
positional swap would silently read nothing); content arguments stay positional.
``mm.user("alice")`` returns a handle scoped to one user (``memory.scoped``).

Open it with :meth:`MemoryManager.open`, which resolves the database (URL or embedded
server), applies migrations and checks the embedding dimension.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, overload
from collections.abc import Iterable, Mapping, Sequence

from memory.consolidation.monitor import ContextStatus, ContextUsage
from memory.consolidation.summarizer import Summarizer
from memory.consolidation.writeback import Consolidation, ConsolidationResult, ExpandedSummary, Offload
from memory.retrieval.hits import Hit
from memory.retrieval.choice import embedder_from_settings
from memory.retrieval.embeddings import Embedder, EmbeddingService
from memory.scoped import UserMemory
from memory.settings import Settings
from memory.store.db import Database, connect
from memory.store.rows import Entity, Fact, KnowledgeItem, Message, Summary, ToolLogEntry, Workflow
from memory.tables.base import Store
from memory.tables.conversation import Conversations, NewMessage
from memory.tables.corrections import Correction, Corrections
from memory.tables.entities import Entities
from memory.tables.facts import Facts, Remembered
from memory.tables.knowledge import Knowledge
from memory.tables.retention import Retention
from memory.tables.search import MemoryHit, MemorySearch, SearchWeights
from memory.tables.summaries import Summaries
from memory.tables.tool_log import ToolLog
from memory.tables.workflows import Workflows


def embedder_from_env(settings: Settings | None = None) -> Embedder:
    """The embedder ``settings`` choose (see :func:`memory.retrieval.choice.embedder_from_settings`)."""
    return embedder_from_settings(settings or Settings.from_env())


class MemoryManager:
    """Read and write every memory type for many users over one pool.

    Each method delegates to the table object that owns it (``mm.conversations``,
    ``mm.knowledge``, ``mm.workflows``, ``mm.entities``, ``mm.summaries``, ``mm.facts``,
    ``mm.corrections``, ``mm.tool_log``, ``mm.consolidation``, ``mm.retention``,
    ``mm.memory_search``); their docstrings say what each call does.
    """

    def __init__(self, db: Database, embeddings: EmbeddingService, settings: Settings | None = None) -> None:
        self.store = Store(db, embeddings, settings or Settings.from_env())
        self.conversations = Conversations(self.store)
        self.knowledge = Knowledge(self.store)
        self.workflows = Workflows(self.store)
        self.entities = Entities(self.store)
        self.summaries = Summaries(self.store)
        self.facts = Facts(self.store)
        self.corrections = Corrections(self.store, self.facts)
        self.tool_log = ToolLog(self.store)
        self.consolidation = Consolidation(self.store, self.conversations, self.summaries)
        self.retention = Retention(self.store)
        self.memory_search = MemorySearch(self.store)
        self._pg_engine: Any = None

    @property
    def db(self) -> Database:
        return self.store.db

    @property
    def embeddings(self) -> EmbeddingService:
        return self.store.embeddings

    @property
    def settings(self) -> Settings:
        return self.store.settings

    @classmethod
    def open(cls, settings: Settings | None = None, *, embedder: Embedder | None = None,
             conninfo: str | None = None) -> MemoryManager:
        """Connect (starting the embedded server if no URL is set), migrate, and return a manager."""
        settings = settings or Settings.from_env()
        service = EmbeddingService(embedder or embedder_from_env(settings), batch_size=settings.embedding_batch_size,
                                   cache_size=settings.embedding_cache_size)
        db = connect(settings, dimension=service.dimension, model_name=service.name, conninfo=conninfo,
                     backend=service.backend)
        return cls(db, service, settings)

    def close(self) -> None:
        self.db.close()

    def user(self, user_id: str) -> UserMemory:
        """A handle on one user's memory (``user_id`` validated once); ``.thread(id)`` narrows it to a thread."""
        return UserMemory(self, user_id)

    def __enter__(self) -> MemoryManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def as_vectorstore(self, memory_type: str) -> Any:
        """A langchain-postgres ``PGVectorStore`` over one memory table (e.g. ``"knowledge"``)."""
        from langchain_postgres import PGEngine

        from memory.tables.vectorstore import make_vectorstore, sqlalchemy_url

        if self._pg_engine is None:
            # Without an iterative scan, HNSW hands back ef_search candidates and a user
            # filter then discards most of them: with 1 % of rows per user, LangChain's
            # filtered search found 0-2 of 5 (bench/search_latency.py --users 100).
            options = (f"-c hnsw.iterative_scan=strict_order -c hnsw.ef_search={self.settings.hnsw_ef_search}")
            self._pg_engine = PGEngine.from_connection_string(sqlalchemy_url(self.db.conninfo),
                                                              connect_args={"options": options})
        return make_vectorstore(self.db.conninfo, self.db.schema, self.embeddings, memory_type,
                                engine=self._pg_engine)

    def build_context(self, query: str, *, user_id: str, thread_id: str, k: int = 3) -> str:
        """A plain context from every memory type (the agent loop uses ``ContextBuilder``)."""
        from memory.context.plain import build_context_op
        from memory.store.ops import run

        return run(self.db, build_context_op(self, query, user_id=user_id, thread_id=thread_id, k=k))

    # -- conversational memory (Conversations) ---------------------------------------------
    def write_conversational_memory(self, role: str, content: str, *, user_id: str, thread_id: str,
                                    **fields: Any) -> Message:
        """Store one message (``fields``: tool_call_id, tool_name, tool_args, tool_calls, metadata, created_at)."""
        return self.conversations.write_conversational_memory(role, content, user_id=user_id, thread_id=thread_id,
                                                              **fields)

    def write_messages(self, messages: Iterable[NewMessage | Mapping[str, Any]], *, user_id: str, thread_id: str,
                       embed: bool = True) -> list[Message]:
        """Store messages in order, in one transaction; if any is rejected, none is written."""
        return self.conversations.write_messages(messages, user_id=user_id, thread_id=thread_id, embed=embed)

    def read_conversational_memory(self, *, user_id: str, thread_id: str, limit: int | None = None) -> list[Message]:
        """The thread's working set: unsummarized messages, oldest first (the latest ``limit``)."""
        return self.conversations.read_conversational_memory(user_id=user_id, thread_id=thread_id, limit=limit)

    def read_thread(self, *, user_id: str, thread_id: str, include_summarized: bool = True) -> list[Message]:
        """Every message of a thread in order, summarized ones included by default."""
        return self.conversations.read_thread(user_id=user_id, thread_id=thread_id,
                                              include_summarized=include_summarized)

    def list_threads(self, *, user_id: str | None = None) -> list[dict[str, Any]]:
        """Threads with their message counts, summarized vs not (all users when None: schema owner only)."""
        return self.conversations.list_threads(user_id=user_id)

    # -- knowledge, workflows, entities ------------------------------------------------------
    def write_knowledge(self, content: str, source: str = "", metadata: dict[str, Any] | None = None, *,
                        user_id: str) -> KnowledgeItem:
        """Store one passage the agent may cite."""
        return self.knowledge.write_knowledge(content, source, metadata, user_id=user_id)

    def write_knowledge_batch(self, items: Iterable[Mapping[str, Any]], *, user_id: str) -> list[KnowledgeItem]:
        """Store passages (dicts with content, optional source and metadata) in one transaction."""
        return self.knowledge.write_knowledge_batch(items, user_id=user_id)

    def read_knowledge(self, query: str, *, user_id: str, k: int = 5,
                       hybrid: bool = True) -> list[Hit[KnowledgeItem]]:
        """Passages most relevant to ``query``; ``score`` orders them, ``signals["vector"]`` is the cosine."""
        return self.knowledge.read_knowledge(query, user_id=user_id, k=k, hybrid=hybrid)

    def write_workflow(self, name: str, description: str, steps: Sequence[Any], *, user_id: str, query: str = "",
                       outcome: str = "", shared: bool = False) -> Workflow:
        """Store a workflow of ``user_id``; ``shared=True`` (schema owner only) stores a shared one instead."""
        return self.workflows.write_workflow(name, description, steps, user_id=user_id, query=query,
                                             outcome=outcome, shared=shared)

    def publish_workflow(self, workflow_id: str, *, user_id: str) -> Workflow:
        """Copy ``user_id``'s workflow into the shared ones (schema owner only); returns the shared row."""
        return self.workflows.publish_workflow(workflow_id, user_id=user_id)

    def read_workflows(self, query: str, *, user_id: str, k: int = 3, hybrid: bool = True) -> list[Hit[Workflow]]:
        """This user's workflows and shared ones, most relevant first; ``score`` is the cosine similarity."""
        return self.workflows.read_workflows(query, user_id=user_id, k=k, hybrid=hybrid)

    def record_workflow_use(self, workflow_id: str, *, user_id: str, success: bool = True) -> None:
        """Count one use of the user's workflow or of a shared one."""
        self.workflows.record_workflow_use(workflow_id, user_id=user_id, success=success)

    def write_entity(self, name: str, entity_type: str = "unknown", description: str = "", *,
                     user_id: str) -> Entity:
        """Store an entity, or count one more mention of it (keeping the longer description)."""
        return self.entities.write_entity(name, entity_type, description, user_id=user_id)

    @overload
    def read_entities(self, query: None = None, *, user_id: str, k: int = 10) -> list[Entity]: ...

    @overload
    def read_entities(self, query: str, *, user_id: str, k: int = 10) -> list[Hit[Entity]]: ...

    def read_entities(self, query: str | None = None, *, user_id: str,
                      k: int = 10) -> list[Entity] | list[Hit[Entity]]:
        """Entities relevant to ``query`` as hits, or (no query) the most recently seen ones as rows."""
        return self.entities.read_entities(query, user_id=user_id, k=k)

    # -- summaries ---------------------------------------------------------------------------
    def write_summary(self, description: str, content: str, *, user_id: str, thread_id: str | None = None,
                      source_count: int = 0, first_message_at: datetime | None = None,
                      last_message_at: datetime | None = None, metadata: dict[str, Any] | None = None) -> Summary:
        """Store a free-standing summary (no rows marked; see ``summarize_conversation`` for that)."""
        return self.summaries.write_summary(description, content, user_id=user_id, thread_id=thread_id,
                                            source_count=source_count, first_message_at=first_message_at,
                                            last_message_at=last_message_at, metadata=metadata)

    def read_summary_by_id(self, summary_id: str | uuid.UUID, *, user_id: str) -> Summary:
        """The summary, if it is this user's; NotFoundError otherwise."""
        return self.summaries.read_summary_by_id(summary_id, user_id=user_id)

    def read_summaries(self, *, user_id: str, thread_id: str | None = None, limit: int = 50) -> list[Summary]:
        """This user's summaries (of one thread, if given), oldest first."""
        return self.summaries.read_summaries(user_id=user_id, thread_id=thread_id, limit=limit)

    def read_summary_memory(self, query: str, *, user_id: str, k: int = 3,
                            thread_id: str | None = None) -> list[Hit[Summary]]:
        """Summaries most relevant to ``query``; ``score`` orders them, ``signals["vector"]`` is the cosine."""
        return self.summaries.read_summary_memory(query, user_id=user_id, k=k, thread_id=thread_id)

    def summary_references(self, *, user_id: str, thread_id: str | None = None) -> list[str]:
        """``[Summary ID: id] label`` lines for this user's summaries, oldest first."""
        return self.summaries.summary_references(user_id=user_id, thread_id=thread_id)

    # -- durable facts and corrections -----------------------------------------------------
    def remember(self, category: str, content: str, *, user_id: str, replaces: str | uuid.UUID | None = None,
                 source_message_id: int | None = None) -> Remembered:
        """Store a durable fact, updating a near-duplicate or superseding a contradicted one."""
        return self.facts.remember(category, content, user_id=user_id, replaces=replaces,
                                   source_message_id=source_message_id)

    def forget(self, fact_id: str | uuid.UUID, *, user_id: str, purge: bool = False) -> Fact:
        """Retire an active fact (kept as history); ``purge=True`` deletes the row."""
        return self.facts.forget(fact_id, user_id=user_id, purge=purge)

    def read_facts(self, *, user_id: str) -> list[Fact]:
        """The user's active facts, oldest first (what a conversation starts with)."""
        return self.facts.read_facts(user_id=user_id)

    @overload
    def recall(self, query: None = None, *, user_id: str, k: int = 10,
               include_history: bool = False) -> list[Fact]: ...

    @overload
    def recall(self, query: str, *, user_id: str, k: int = 10, include_history: bool = False) -> list[Hit[Fact]]: ...

    def recall(self, query: str | None = None, *, user_id: str, k: int = 10,
               include_history: bool = False) -> list[Fact] | list[Hit[Fact]]:
        """Active facts most relevant to ``query`` as hits (no query: every active fact, as rows)."""
        return self.facts.recall(query, user_id=user_id, k=k, include_history=include_history)

    def fact_history(self, fact_id: str | uuid.UUID, *, user_id: str) -> list[Fact]:
        """Every version in the supersession chain through ``fact_id``, oldest first."""
        return self.facts.fact_history(fact_id, user_id=user_id)

    def facts_section(self, *, user_id: str) -> str:
        """``## Known Facts`` with the rule that what the user says now wins."""
        return self.facts.facts_section(user_id=user_id)

    def correct(self, wrong: str, right: str, *, user_id: str, thread_id: str, message_id: int | None = None,
                fact_id: str | uuid.UUID | None = None) -> Correction:
        """Append an explicit correction to the thread (and supersede ``fact_id`` with ``right``)."""
        return self.corrections.correct(wrong, right, user_id=user_id, thread_id=thread_id, message_id=message_id,
                                        fact_id=fact_id)

    # -- tool log -------------------------------------------------------------------------
    def write_tool_log(self, tool_name: str, args: Any, output: str | None, *, user_id: str,
                       thread_id: str | None = None, status: str = "ok", error: str | None = None,
                       duration_ms: float | None = None, tool_call_id: str | None = None) -> ToolLogEntry:
        """Log one tool call with its full output."""
        return self.tool_log.write_tool_log(tool_name, args, output, user_id=user_id, thread_id=thread_id,
                                            status=status, error=error, duration_ms=duration_ms,
                                            tool_call_id=tool_call_id)

    def read_tool_log(self, *, user_id: str, thread_id: str | None = None, limit: int = 50) -> list[ToolLogEntry]:
        """This user's latest tool calls (of one thread, if given), oldest first."""
        return self.tool_log.read_tool_log(user_id=user_id, thread_id=thread_id, limit=limit)

    def read_tool_log_entry(self, entry_id: int, *, user_id: str) -> ToolLogEntry:
        """One logged call by id, if it is this user's; NotFoundError otherwise."""
        return self.tool_log.read_tool_log_entry(entry_id, user_id=user_id)

    # -- search over past conversation ------------------------------------------------------
    def search_memory(self, query: str, *, user_id: str, k: int = 10, scope: str | Iterable[str] | None = None,
                      thread_id: str | None = None, since: datetime | None = None, until: datetime | None = None,
                      now: datetime | None = None, time_mode: str = "boost", min_score: float | None = None,
                      method: str = "hybrid", weights: SearchWeights | None = None,
                      shape: str = "auto") -> list[MemoryHit]:
        """The user's past messages, summaries and facts most relevant to ``query``, best first."""
        return self.memory_search.search_memory(query, user_id=user_id, k=k, scope=scope, thread_id=thread_id,
                                                since=since, until=until, now=now, time_mode=time_mode,
                                                min_score=min_score, method=method, weights=weights, shape=shape)

    def search_memory_many(self, queries: Sequence[str], *, user_id: str, k: int = 10,
                           scope: str | Iterable[str] | None = None, thread_id: str | None = None,
                           since: datetime | None = None, until: datetime | None = None,
                           now: datetime | None = None, time_mode: str = "boost", min_score: float | None = None,
                           method: str = "hybrid", weights: SearchWeights | None = None,
                           shape: str = "auto") -> list[list[MemoryHit]]:
        """``search_memory`` for several queries of one user (embedded in one batch): one hit list per query."""
        return self.memory_search.search_memory_many(
            queries, user_id=user_id, k=k, scope=scope, thread_id=thread_id, since=since, until=until, now=now,
            time_mode=time_mode, min_score=min_score, method=method, weights=weights, shape=shape)

    def embed_pending_messages(self, *, user_id: str | None = None, batch_size: int = 256,
                               limit: int | None = None) -> int:
        """Embed messages written without an embedding (all users' when None); returns how many."""
        return self.memory_search.embed_pending_messages(user_id=user_id, batch_size=batch_size, limit=limit)

    # -- monitor and consolidation ----------------------------------------------------------
    def calculate_context_usage(self, context: str, model: str | None = None) -> ContextUsage:
        """Tokens of ``context`` against ``model``'s usable window."""
        return self.consolidation.calculate_context_usage(context, model)

    def monitor_context_window(self, context: str, model: str | None = None) -> ContextStatus:
        """The usage plus a status: ok, warning or critical."""
        return self.consolidation.monitor_context_window(context, model)

    def summarizer(self, model: Any | None = None, **kwargs: Any) -> Summarizer:
        """A summariser for ``model`` (None: extractive) sized to that model's window."""
        return self.consolidation.summarizer(model, **kwargs)

    def summarize_conversation(self, *, user_id: str, thread_id: str, keep_recent: int = 0, model: Any | None = None,
                               summarizer: Summarizer | None = None, focus: str | None = None) -> ConsolidationResult:
        """Summarise the thread's unsummarized whole turns and mark them with the summary id, atomically."""
        return self.consolidation.summarize_conversation(user_id=user_id, thread_id=thread_id,
                                                         keep_recent=keep_recent, model=model,
                                                         summarizer=summarizer, focus=focus)

    def read_conversations_by_summary_id(self, summary_id: str | uuid.UUID, *, user_id: str) -> list[Message]:
        """The messages a summary replaced, oldest first (empty for another user's id)."""
        return self.consolidation.read_conversations_by_summary_id(summary_id, user_id=user_id)

    def expand_summary(self, summary_id: str | uuid.UUID, *, user_id: str) -> ExpandedSummary:
        """The summary and every original message, in order; NotFoundError if not this user's."""
        return self.consolidation.expand_summary(summary_id, user_id=user_id)

    def offload_to_summary(self, context: str, *, user_id: str, thread_id: str,
                           summary_id: str | uuid.UUID | None = None, keep_recent: int = 0,
                           model: Any | None = None, summarizer: Summarizer | None = None) -> Offload:
        """Rewrite only ``## Conversation Memory`` of ``context`` into summary references plus the live turns."""
        return self.consolidation.offload_to_summary(context, user_id=user_id, thread_id=thread_id,
                                                     summary_id=summary_id, keep_recent=keep_recent, model=model,
                                                     summarizer=summarizer)

    def undo_consolidation(self, summary_id: str | uuid.UUID, *, user_id: str) -> int:
        """Clear the marks of a consolidation and drop its summary (one transaction); returns the rows cleared."""
        return self.consolidation.undo_consolidation(summary_id, user_id=user_id)

    # -- retention --------------------------------------------------------------------------
    def purge_expired(self, *, now: datetime | None = None) -> dict[str, int]:
        """Delete expired rows (``expires_at`` and ``Settings.retention_days``); counts per table."""
        return self.retention.purge_expired(now=now)

    def forget_user(self, *, user_id: str) -> dict[str, int]:
        """Delete every row of this user in every table, in one transaction; counts per table."""
        return self.retention.forget_user(user_id=user_id)
