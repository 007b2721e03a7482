"""agentmem: durable memory for LLM agents in PostgreSQL + pgvector."""

from .conversation import NewMessage
from .db import Database, connect
from .embeddings import Embedder, EmbeddingService, HashEmbedder, MiniLMEmbedder
from .errors import (AgentMemError, ConfigurationError, DatabaseUnavailableError, DimensionMismatchError,
                     EmbeddingError, InvalidInputError, LLMError, MigrationError, NotFoundError,
                     VectorExtensionMissingError)
from .corrections import Correction
from .errors import AccessDeniedError, FactCategoryError, FactRejectedError, FactTooLongError, TooManyFactsError
from .fact_tools import ToolError, fact_tools
from .facts import Remembered
from .isolation import AppRole, create_app_role
from .consolidation import ConsolidationResult, ExpandedSummary, Offload
from .manager import MemoryManager
from .memory_tools import memory_tools, register_memory_tools
from .monitor import (ConsolidationAdvice, ContextStatus, ContextUsage, calculate_context_usage,
                      monitor_context_window, should_consolidate)
from .search import MemoryHit, SearchWeights
from .search_tools import register_search_tools, search_tools
from .models import Entity, Fact, KnowledgeItem, Message, Summary, ToolLogEntry, Workflow
from .settings import Settings
from .summarizer import StructuredSummary, Summarizer
from .tokens import TokenCount, count_tokens

__all__ = [
    "AgentMemError", "ConfigurationError", "Database", "DatabaseUnavailableError", "DimensionMismatchError",
    "Embedder", "EmbeddingError", "EmbeddingService", "Entity", "Fact", "HashEmbedder", "InvalidInputError",
    "KnowledgeItem", "LLMError", "MemoryManager", "Message", "MigrationError", "MiniLMEmbedder", "NewMessage",
    "NotFoundError", "Settings", "Summary", "ToolLogEntry", "VectorExtensionMissingError", "Workflow", "connect",
    "AccessDeniedError", "AppRole", "Correction", "FactCategoryError", "FactRejectedError", "FactTooLongError", "Remembered",
    "ToolError", "TooManyFactsError", "create_app_role", "fact_tools",
    "ConsolidationAdvice", "ConsolidationResult", "ContextStatus", "ContextUsage", "ExpandedSummary", "Offload",
    "StructuredSummary", "Summarizer", "TokenCount", "calculate_context_usage", "count_tokens", "memory_tools",
    "monitor_context_window", "register_memory_tools", "should_consolidate",
    "MemoryHit", "SearchWeights", "register_search_tools", "search_tools",
]
