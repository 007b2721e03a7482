"""The vector tables as langchain-postgres ``PGVectorStore`` objects.

LangChain users get retrievers over the same rows MemoryManager writes, with the
column mapping of the design. ``user_id`` is exposed as a metadata column, so a
search can (and for per-user data, should) filter on it:
``store.similarity_search(q, filter={"user_id": "alice"})``.
"""

from __future__ import annotations

from typing import Any

import psycopg
from langchain_core.embeddings import Embeddings

from memory.retrieval.embeddings import EmbeddingService
from memory.errors import InvalidInputError

#: memory type -> (table, id column, content column, metadata columns)
VECTOR_TABLES: dict[str, tuple[str, str, str, list[str]]] = {
    "knowledge": ("knowledge_memory", "id", "content", ["user_id", "source", "created_at"]),
    "summary": ("summary_memory", "summary_id", "content", ["user_id", "thread_id", "description", "created_at"]),
    "workflow": ("workflow_memory", "id", "description", ["user_id", "name", "query", "steps"]),
    "entity": ("entity_memory", "id", "description", ["user_id", "name", "entity_type"]),
    "fact": ("fact_memory", "id", "content", ["user_id", "category", "valid_to"]),
    "conversational": ("conversational_memory", "id", "content",
                       ["user_id", "thread_id", "role", "created_at", "summary_id"]),
    "toolbox": ("toolbox_memory", "id", "search_text", ["namespace", "name", "description"]),
}


class LangChainEmbeddings(Embeddings):
    """agentmem's embedding service behind LangChain's ``Embeddings`` interface."""

    def __init__(self, service: EmbeddingService) -> None:
        self.service = service

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [v.tolist() for v in self.service.embed([t[:4000] for t in texts])]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


def sqlalchemy_url(conninfo: str) -> str:
    """A SQLAlchemy URL (``postgresql+psycopg://``) for a libpq connection string or URI."""
    from sqlalchemy.engine import URL

    params = psycopg.conninfo.conninfo_to_dict(conninfo)
    query = {k: str(v) for k, v in params.items() if k not in ("user", "password", "host", "port", "dbname")}
    host = str(params.get("host") or "")
    if host.startswith("/"):  # unix socket: pass it as a query parameter
        query["host"] = host
        host = ""
    return URL.create(
        "postgresql+psycopg", username=str(params.get("user") or "") or None,
        password=str(params.get("password") or "") or None, host=host or None,
        port=int(str(params["port"])) if params.get("port") else None, database=str(params.get("dbname") or "") or None,
        query=query,
    ).render_as_string(hide_password=False)


def make_vectorstore(conninfo: str, schema: str, service: EmbeddingService, memory_type: str,
                     engine: Any = None) -> Any:
    from langchain_postgres import PGEngine, PGVectorStore

    if memory_type not in VECTOR_TABLES:
        raise InvalidInputError(f"unknown memory type {memory_type!r}; one of {', '.join(VECTOR_TABLES)}")
    table, id_col, content_col, meta_cols = VECTOR_TABLES[memory_type]
    engine = engine or PGEngine.from_connection_string(sqlalchemy_url(conninfo))
    return PGVectorStore.create_sync(
        engine=engine, embedding_service=LangChainEmbeddings(service), table_name=table, schema_name=schema,
        id_column=id_col, content_column=content_col, embedding_column="embedding",
        metadata_columns=meta_cols,
        metadata_json_column="metadata" if memory_type != "toolbox" else None,  # type: ignore[arg-type]
    )
