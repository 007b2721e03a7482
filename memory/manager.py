"""MemoryManager: the one front door to every memory type.

Each memory type lives in its own mixin module (conversation, knowledge, workflows,
entities, summaries, tool log); this class composes them over one database pool
and one embedding service. Open it with :meth:`MemoryManager.open`, which resolves
the database (URL or embedded server), applies migrations and checks the embedding
dimension.
"""

from __future__ import annotations

import warnings
from typing import Any

from memory.consolidation.writeback import ConsolidationMixin
from memory.tables.conversation import ConversationMixin
from memory.tables.corrections import CorrectionMixin
from memory.store.db import Database, connect
from memory.retrieval.embeddings import Embedder, EmbeddingService, HashEmbedder, MiniLMEmbedder
from memory.errors import ConfigurationError, EmbeddingError
from memory.tables.entities import EntityMixin
from memory.context.render import (format_conversation, format_entities, format_facts, format_knowledge, format_summaries,
                         format_workflows)
from memory.tables.knowledge import KnowledgeMixin
from memory.retrieval.onnx_minilm import OnnxMiniLMEmbedder
from memory.tables.retention import RetentionMixin
from memory.settings import Settings
from memory.tables.search import SearchMixin
from memory.tables.summaries import SummaryMixin
from memory.tables.tool_log import ToolLogMixin
from memory.tables.workflows import WorkflowMixin


def embedder_from_env(settings: Settings | None = None) -> Embedder:
    """The packaged MiniLM model, unless ``AGENTMEM_EMBEDDER=hash`` (TEST ONLY).

    MiniLM runs on ``settings.embedding_backend``: "onnx" (default; int8, exported into
    ``settings.model_cache_dir`` on first use) or "torch". When ONNX Runtime cannot be
    used (not installed, export failed) it falls back to torch with a warning: the two
    backends may share a schema (``memory.retrieval.embeddings.SHARED_VECTOR_SPACE``).

    The hash embedder is a deterministic fake with no notion of meaning; it lets the
    CLI and notebook tests run fast in a subprocess. Never use it for real memory:
    vectors of different embedders must not share a schema.
    """
    import os

    settings = settings or Settings.from_env()
    choice = os.environ.get("AGENTMEM_EMBEDDER", "minilm").strip().lower()
    if choice == "hash":
        return HashEmbedder()
    if choice not in ("", "minilm"):
        raise ConfigurationError(f"AGENTMEM_EMBEDDER={choice!r}: use 'minilm' (default) or 'hash' (tests only)")
    if settings.embedding_backend == "onnx":
        try:
            return OnnxMiniLMEmbedder(settings.model_cache_dir, threads=settings.embedding_threads)
        except EmbeddingError as exc:
            warnings.warn(f"agentmem: the ONNX embedding backend is unavailable ({exc}); using torch",
                          RuntimeWarning, stacklevel=2)
    return MiniLMEmbedder(threads=settings.embedding_threads)


class MemoryManager(ConversationMixin, KnowledgeMixin, WorkflowMixin, EntityMixin, SummaryMixin, ToolLogMixin,
                    SearchMixin, ConsolidationMixin, CorrectionMixin, RetentionMixin):
    """Read and write every memory type for many users over one pool."""

    def __init__(self, db: Database, embeddings: EmbeddingService, settings: Settings | None = None) -> None:
        self.db = db
        self.embeddings = embeddings
        self.settings = settings or Settings.from_env()
        self._pg_engine: Any = None

    @classmethod
    def open(cls, settings: Settings | None = None, *, embedder: Embedder | None = None,
             conninfo: str | None = None) -> "MemoryManager":
        """Connect (starting the embedded server if no URL is set), migrate, and return a manager."""
        settings = settings or Settings.from_env()
        service = EmbeddingService(embedder or embedder_from_env(settings), batch_size=settings.embedding_batch_size,
                                   cache_size=settings.embedding_cache_size)
        db = connect(settings, dimension=service.dimension, model_name=service.name, conninfo=conninfo,
                     backend=service.backend)
        return cls(db, service, settings)

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> "MemoryManager":
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

    def build_context(self, query: str, user_id: str, thread_id: str, *, k: int = 3) -> str:
        """A plain context from every memory type (the agent loop uses ``ContextBuilder``)."""
        sections = [
            format_facts(self.read_facts(user_id)),
            format_summaries(self.read_summaries(user_id, thread_id)),
            format_workflows(self.read_workflows(query, user_id, k=k)),
            format_entities(self.read_entities(user_id, query, k=k)),
            format_knowledge(self.read_knowledge(query, user_id, k=k)),
            format_conversation(self.read_conversational_memory(thread_id, user_id)),
        ]
        return "\n\n".join(sections)
