"""What a failed MCP call tells the model: what went wrong and how to fix the call.

Every failure of a tool or resource comes back as an MCP error result (``isError``
for a tool), never as a dropped connection or a dead server: :func:`explain` turns an
agentmem error, a driver error or anything unexpected into one text of the form
``<what went wrong> Fix: <what to do>``. A database that is down is one such error per
call; the server keeps running and the next call after the database is back works
(the pool re-checks its connections; a manager that could not open is opened again).
"""

from __future__ import annotations

import logging

from memory.errors import (AccessDeniedError, AgentMemError, ConfigurationError, DatabaseUnavailableError,
                           EmbeddingError, FactRejectedError, InvalidInputError, LLMError, NotFoundError)

log = logging.getLogger("memory.mcp")

FIXES: tuple[tuple[type[BaseException], str], ...] = (
    (FactRejectedError, ""),  # carries its own hint
    (NotFoundError, "check the id: list_threads, search_memory and recall show the ids that exist for you "
                    "(ids of other users never do)."),
    (InvalidInputError, "correct the argument named in the message and call again."),
    (DatabaseUnavailableError, "the memory database is unreachable right now; nothing was changed. Try the call "
                               "again in a moment; if it keeps failing, tell the user that memory is unavailable."),
    (AccessDeniedError, "this is not allowed for this connection; do not retry it."),
    (LLMError, "the summarisation model failed; call again, or ask the operator to check AGENTMEM_LLM_*."),
    (EmbeddingError, "the embedding model failed; call again, or ask the operator to check the server's log."),
    (ConfigurationError, "the server is misconfigured; tell the operator (the message names the setting)."),
)


def explain(exc: BaseException) -> str:
    """``<message> Fix: <fix>`` for any exception a tool or resource raised."""
    if isinstance(exc, FactRejectedError):
        return f"{exc.detail} ({exc.code}). Fix: {exc.hint}"
    if isinstance(exc, AgentMemError):
        fix = next((f for t, f in FIXES if isinstance(exc, t)), "call again; if it keeps failing, report it.")
        return f"{_sentence(str(exc))} Fix: {fix}"
    try:
        import psycopg
    except ImportError:  # pragma: no cover - a core dependency
        psycopg = None  # type: ignore[assignment]
    if psycopg is not None and isinstance(exc, psycopg.Error):
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        log.warning("database error in an MCP call: %s", first)
        return (f"Database error: {_sentence(first)} Fix: nothing was changed; call again, and if it keeps failing, "
                "tell the user that memory is unavailable.")
    log.error("unexpected error in an MCP call", exc_info=exc)
    return (f"Internal error ({type(exc).__name__}): {_sentence(str(exc) or 'no message')} Fix: this is a bug in "
            "agentmem, not in your call; do not retry the same call.")


def _sentence(text: str) -> str:
    text = " ".join(text.split())
    return text if text.endswith((".", "!", "?")) else text + "."
