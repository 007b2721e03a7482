"""agentmem: durable memory for LLM agents in PostgreSQL + pgvector."""

from .agent import MemoryAgent, TurnResult
from .consolidation import ConsolidationResult, ExpandedSummary, Offload
from .context import BuiltContext, ContextBudgetError, ContextBuilder, ContextParts, Passage
from .conversation import NewMessage
from .corrections import Correction
from .db import Database, connect
from .embeddings import Embedder, EmbeddingService, HashEmbedder, MiniLMEmbedder
from .errors import (AccessDeniedError, AgentMemError, ConfigurationError, ConfigurationWarning, DatabaseUnavailableError,
                     DimensionMismatchError, EmbeddingError, EmbeddingModelMismatchError, FactCategoryError, FactRejectedError, FactTooLongError,
                     InvalidInputError, LLMError, MigrationError, NotFoundError, TooManyFactsError,
                     VectorExtensionMissingError)
from .fact_tools import ToolError, fact_tools, register_fact_tools
from .facts import Remembered
from .isolation import AppRole, create_app_role
from .llm import chat_model_from_env, complete, make_openai_model, with_fallback
from .manager import MemoryManager
from .memory_tools import memory_tools, register_memory_tools
from .models import Entity, Fact, KnowledgeItem, Message, Summary, ToolLogEntry, Workflow
from .monitor import (ConsolidationAdvice, ContextStatus, ContextUsage, calculate_context_usage,
                      monitor_context_window, should_consolidate, usable_budget)
from .search import MemoryHit, SearchWeights
from .search_tools import register_search_tools, search_tools
from .settings import Settings
from .summarizer import StructuredSummary, Summarizer
from .tokens import TokenCount, count_tokens

__all__ = [
    # the front door and its settings
    "MemoryManager", "Settings", "Database", "connect",
    # rows
    "Entity", "Fact", "KnowledgeItem", "Message", "NewMessage", "Summary", "ToolLogEntry", "Workflow",
    "Correction", "Remembered", "MemoryHit", "SearchWeights",
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
    "DimensionMismatchError", "EmbeddingError", "EmbeddingModelMismatchError", "FactCategoryError", "FactRejectedError", "FactTooLongError",
    "InvalidInputError", "LLMError", "MigrationError", "NotFoundError", "TooManyFactsError",
    "VectorExtensionMissingError",
]
