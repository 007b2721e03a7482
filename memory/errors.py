"""The errors agentmem raises. Each class's docstring is its message's gist.

Everything agentmem raises derives from :class:`AgentMemError`, so a caller can catch
one type. Driver errors never leave the public API: ``psycopg`` errors are translated in
one place, the transaction helper ``memory.store.db.Database.connection`` (and the
migration runner's connection), into :class:`DatabaseError` and its subclasses, with
the driver's error kept as ``__cause__``. Errors that mean more where they happen (a
refused grant, a missing extension) are translated there first.
"""

from __future__ import annotations


class AgentMemError(Exception):
    """Base class of every error agentmem raises on purpose."""


class ConfigurationError(AgentMemError):
    """A setting is missing or has a value agentmem cannot use."""


class DatabaseError(AgentMemError):
    """PostgreSQL refused or failed a statement; its transaction was rolled back (the driver error is the cause)."""


class DatabaseUnavailableError(DatabaseError):
    """The PostgreSQL server could not be reached."""


class QueryTimeoutError(DatabaseError):
    """PostgreSQL cancelled a statement that ran past ``statement_timeout`` or waited past ``lock_timeout``."""


class VectorExtensionMissingError(AgentMemError):
    """The pgvector extension (``vector``) is not installed in the database."""


class DimensionMismatchError(AgentMemError):
    """The embedding model's dimension differs from the one the schema was created with."""


class EmbeddingModelMismatchError(DimensionMismatchError):
    """The schema's vectors come from another embedding model (even one of the same dimension)."""


class MigrationError(AgentMemError):
    """A schema migration failed; the database is left at the last migration that succeeded."""


class DistributionError(AgentMemError):
    """Distributing the schema on Citus failed; it was rolled back and nothing changed."""


class CitusMissingError(DistributionError):
    """The citus extension is not installed, so ``agentmem distribute`` has nothing to distribute across."""


class NotDistributableError(DistributionError):
    """The schema breaks a rule Citus enforces for tables distributed on user_id (see memory.store.distribution)."""


class InvalidInputError(AgentMemError, ValueError):
    """An argument was rejected before anything was written (wrong type, NUL byte, too large...)."""


class FactRejectedError(InvalidInputError):
    """A fact call broke a rule the model can fix: ``code`` names the rule, ``hint`` says how."""

    code = "fact_rejected"

    def __init__(self, detail: str, *, hint: str, code: str | None = None) -> None:
        super().__init__(f"{detail}: {hint}")
        self.detail = detail
        self.hint = hint
        if code is not None:
            self.code = code


class FactTooLongError(FactRejectedError):
    """The fact is longer than ``fact_max_chars``."""

    code = "fact_too_long"


class TooManyFactsError(FactRejectedError):
    """The user already has ``max_active_facts`` active facts."""

    code = "too_many_facts"


class FactCategoryError(FactRejectedError):
    """The category is not preference, constraint or stable_fact."""

    code = "invalid_category"


class AccessDeniedError(AgentMemError, PermissionError):
    """The database refused the write: row-level security or a missing grant (see memory.store.isolation)."""


class NotFoundError(AgentMemError, LookupError):
    """No row with that id exists for this user (another user's rows count as not found)."""


class EmbeddingError(AgentMemError):
    """The embedding model failed, timed out, or returned vectors of the wrong shape."""


class LLMError(AgentMemError):
    """The chat model failed, timed out or answered with nothing usable."""


class ConfigurationWarning(UserWarning):
    """An ``AGENTMEM_*`` environment variable is not a setting (a misspelling?) and is ignored."""
