"""agentmem: durable memory for LLM agents in PostgreSQL + pgvector."""

from memory.agent.loop import MemoryAgent, TurnResult
from memory.consolidation.writeback import ConsolidationResult, ExpandedSummary, Offload
from memory.context.builder import BuiltContext, ContextBudgetError, ContextBuilder, ContextParts, Passage
from memory.tables.conversation import NewMessage
from memory.tables.corrections import Correction
from memory.store.db import Database, connect
from memory.retrieval.embeddings import Embedder, EmbeddingService, HashEmbedder, MiniLMEmbedder
from memory.retrieval.hits import Hit
from memory.errors import (AccessDeniedError, AgentMemError, ConfigurationError, ConfigurationWarning,
                           DatabaseError, DatabaseUnavailableError, DimensionMismatchError, EmbeddingError,
                           EmbeddingModelMismatchError, FactCategoryError, FactRejectedError, FactTooLongError,
                           InvalidInputError, LLMError, MigrationError, NotFoundError, QueryTimeoutError,
                           TooManyFactsError, VectorExtensionMissingError)
from memory.agent.fact_tools import ToolError, fact_tools, register_fact_tools
from memory.tables.facts import Remembered
from memory.store.isolation import AppRole, create_app_role
from memory.llm.chat import chat_model_from_env, complete, make_openai_model, with_fallback
from memory.manager import MemoryManager
from memory.agent.memory_tools import memory_tools, register_memory_tools
from memory.store.rows import Entity, Fact, KnowledgeItem, Message, Summary, ToolLogEntry, Workflow
from memory.consolidation.monitor import (ConsolidationAdvice, ContextStatus, ContextUsage, calculate_context_usage,
                      monitor_context_window, should_consolidate, usable_budget)
from memory.tables.search import MemoryHit, MemoryItem, SearchWeights
from memory.agent.search_tool import register_search_tools, search_tools
from memory.scoped import ThreadMemory, UserMemory
from memory.settings import Settings
from memory.consolidation.summarizer import StructuredSummary, Summarizer
from memory.context.tokens import TokenCount, count_tokens

__all__ = [
    # the front door and its settings
    "MemoryManager", "UserMemory", "ThreadMemory", "Settings", "Database", "connect",
    # rows
    "Entity", "Fact", "KnowledgeItem", "Message", "NewMessage", "Summary", "ToolLogEntry", "Workflow",
    "Correction", "Remembered", "Hit", "MemoryHit", "MemoryItem", "SearchWeights",
    # embeddings
    "Embedder", "EmbeddingService", "HashEmbedder", "MiniLMEmbedder",
    # monitor and consolidation
    "ConsolidationAdvice", "ContextStatus", "ContextUsage", "calculate_context_usage", "monitor_context_window",
    "should_consolidate", "usable_budget", "TokenCount", "count_tokens",
    "ConsolidationResult", "ExpandedSummary", "Offload", "StructuredSummary", "Summarizer",
    # context builder, agent loop, LLM layer
    "BuiltContext", "ContextBudgetError", "ContextBuilder", "ContextParts", "Passage",
    "MemoryAgent", "TurnResult", "chat_model_from_env", "complete", "make_openai_model", "with_fallback",
    # tools the agent is given
    "ToolError", "fact_tools", "register_fact_tools", "memory_tools", "register_memory_tools",
    "register_search_tools", "search_tools",
    # isolation
    "AppRole", "create_app_role",
    # errors
    "AgentMemError", "AccessDeniedError", "ConfigurationError", "ConfigurationWarning", "DatabaseUnavailableError",
    "DimensionMismatchError", "EmbeddingError", "EmbeddingModelMismatchError", "FactCategoryError", "FactRejectedError",
    "FactTooLongError", "DatabaseError", "QueryTimeoutError",
    "InvalidInputError", "LLMError", "MigrationError", "NotFoundError", "TooManyFactsError",
    "VectorExtensionMissingError",
]
