"""The LLM layer: LangChain chat models from settings, and one safe way to call them.

Configuration (environment):

* ``AGENTMEM_LLM_BASE_URL`` (or ``OPENAI_BASE_URL``): any OpenAI-compatible endpoint
  (OpenAI, Ollama, vLLM, a llama.cpp server);
* ``AGENTMEM_LLM_MODEL``: the model name; ``AGENTMEM_LLM_API_KEY`` (or ``OPENAI_API_KEY``);
* ``AGENTMEM_LLM_TIMEOUT`` seconds (default 60);
* ``AGENTMEM_LLM_MAX_TOKENS``: a cap on each answer, sent as ``max_tokens`` in the
  request body (ChatOpenAI sends its own ``max_tokens`` as ``max_completion_tokens``,
  which some OpenAI-compatible servers, llama.cpp's among them, ignore);
* ``AGENTMEM_LLM_FALLBACK_MODEL`` / ``AGENTMEM_LLM_FALLBACK_BASE_URL``: a second model
  used on rate limits, 5xx and timeouts, through LangChain's ``with_fallbacks``.

With no model configured, :func:`chat_model_from_env` returns None and every caller
takes its offline path (extractive summaries, docstring-only tool descriptions).
:func:`complete` is the one way agentmem asks a model for text: it enforces a
timeout and turns every failure into :class:`~memory.errors.LLMError`.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:  # langchain is imported lazily: `import memory` stays fast for the CLI
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import BaseMessage

from .errors import ConfigurationError, LLMError

_EXECUTOR = ThreadPoolExecutor(max_workers=4, thread_name_prefix="agentmem-llm")


def _env(*names: str) -> str | None:
    for name in names:
        value = os.environ.get(name)
        if value:
            return value
    return None


def make_openai_model(model: str, *, base_url: str | None = None, api_key: str | None = None,
                      timeout: float = 60.0, max_retries: int = 1, **kwargs: Any) -> "BaseChatModel":
    """``ChatOpenAI`` against any OpenAI-compatible endpoint."""
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(model=model, base_url=base_url, api_key=api_key or "not-needed",  # type: ignore[arg-type]
                      timeout=timeout, max_retries=max_retries, **kwargs)


def chat_model_from_env() -> Any | None:
    """The configured chat model (with its fallback, if any), or None when none is configured."""
    model = _env("AGENTMEM_LLM_MODEL")
    base_url = _env("AGENTMEM_LLM_BASE_URL", "OPENAI_BASE_URL")
    api_key = _env("AGENTMEM_LLM_API_KEY", "OPENAI_API_KEY")
    if not model:
        if base_url:
            raise ConfigurationError("AGENTMEM_LLM_BASE_URL is set but AGENTMEM_LLM_MODEL is not: name the model")
        return None
    try:
        timeout = float(_env("AGENTMEM_LLM_TIMEOUT") or 60)
    except ValueError:
        raise ConfigurationError("AGENTMEM_LLM_TIMEOUT must be a number of seconds") from None
    extra: dict[str, Any] = {}
    max_tokens = _env("AGENTMEM_LLM_MAX_TOKENS")
    if max_tokens:
        if not max_tokens.isdigit() or int(max_tokens) < 1:
            raise ConfigurationError("AGENTMEM_LLM_MAX_TOKENS must be a positive integer")
        extra["extra_body"] = {"max_tokens": int(max_tokens)}
    primary = make_openai_model(model, base_url=base_url, api_key=api_key, timeout=timeout, **extra)
    fallback_name = _env("AGENTMEM_LLM_FALLBACK_MODEL")
    if not fallback_name:
        return primary
    fallback = make_openai_model(fallback_name, base_url=_env("AGENTMEM_LLM_FALLBACK_BASE_URL") or base_url,
                                 api_key=_env("AGENTMEM_LLM_FALLBACK_API_KEY") or api_key, timeout=timeout,
                                 **extra)
    return with_fallback(primary, fallback)


def fallback_exceptions() -> tuple[type[BaseException], ...]:
    """Errors that switch to the fallback model: rate limits, 5xx, timeouts, connection errors."""
    import openai

    return (openai.RateLimitError, openai.InternalServerError, openai.APITimeoutError,
            openai.APIConnectionError, TimeoutError, LLMError)


def with_fallback(primary: Any, fallback: Any) -> Any:
    return primary.with_fallbacks([fallback], exceptions_to_handle=fallback_exceptions())


def invoke(model: Any, messages: Sequence["BaseMessage"], *, timeout: float = 60.0) -> Any:
    """``model.invoke(messages)`` with a timeout; every failure becomes LLMError."""
    future = _EXECUTOR.submit(model.invoke, list(messages))
    try:
        return future.result(timeout=timeout)
    except FutureTimeout:
        future.cancel()
        raise LLMError(f"the model did not answer within {timeout:g}s") from None
    except Exception as exc:
        raise LLMError(f"the model call failed: {exc!r}") from exc


def message_text(message: Any) -> str:
    """The text of a chat message (joining content blocks); LLMError if there is none."""
    content = getattr(message, "content", message)
    if isinstance(content, list):  # content blocks
        content = "".join(part.get("text", "") if isinstance(part, dict) else str(part) for part in content)
    if not isinstance(content, str):
        raise LLMError(f"the model answered with {type(content).__name__}, not text")
    return content


def complete(model: Any, prompt: "str | Sequence[BaseMessage]", *, system: str | None = None,
             timeout: float = 60.0) -> str:
    """Ask ``model`` for text; raise LLMError on failure, timeout or a non-text answer."""
    from langchain_core.messages import HumanMessage, SystemMessage

    messages: list[BaseMessage]
    if isinstance(prompt, str):
        messages = ([SystemMessage(system)] if system else []) + [HumanMessage(prompt)]
    else:
        messages = list(prompt)
    return message_text(invoke(model, messages, timeout=timeout))
