"""The LLM layer: LangChain chat models from settings, and one safe way to call them.

Configuration (settings, see :mod:`memory.settings` and the README):

* ``AGENTMEM_LLM_BASE_URL`` (or ``OPENAI_BASE_URL``): any OpenAI-compatible endpoint
  (OpenAI, Ollama, vLLM, a llama.cpp server);
* ``AGENTMEM_LLM_MODEL``: the model name; ``AGENTMEM_LLM_API_KEY`` (or ``OPENAI_API_KEY``);
* ``AGENTMEM_LLM_TIMEOUT`` seconds (default 60) and ``AGENTMEM_LLM_MAX_RETRIES`` (default 1);
* ``AGENTMEM_LLM_MAX_TOKENS``: a cap on each answer, sent as ``max_tokens`` in the
  request body (ChatOpenAI sends its own ``max_tokens`` as ``max_completion_tokens``,
  which some OpenAI-compatible servers, llama.cpp's among them, ignore);
* ``AGENTMEM_LLM_FALLBACK_MODEL`` / ``AGENTMEM_LLM_FALLBACK_BASE_URL``: a second model
  used on rate limits, 5xx and timeouts, through LangChain's ``with_fallbacks``.

**Timeouts.** There is one timeout, the client's own: ``ChatOpenAI(timeout=...,
max_retries=...)``, set from ``llm_timeout`` and ``llm_max_retries`` and honoured by
every caller (summaries, tool augmentation, entity extraction, the agent loop, the
CLI), which all call the model they are given directly, in their own thread. httpx
applies a timeout to each network read, so a server that trickles a byte a second
would never time out: the models built here use an httpx transport that makes the
request's timeout a bound on the whole attempt (connect, headers and body). When it
expires it shuts the attempt's socket down, which really stops the call (no thread is
left waiting on it), and the client sees ``httpx.ReadTimeout`` as it would a slow read:
the OpenAI client retries it ``max_retries`` times, then the fallback model (if any)
gets its turn. A call to one model therefore takes at most (1 + ``llm_max_retries``)
x ``llm_timeout`` seconds plus the client's short back-off between attempts. A model
built elsewhere is bounded by its own client's settings.

With no model configured, :func:`chat_model_from_env` returns None and every caller
takes its offline path (extractive summaries, docstring-only tool descriptions).
:func:`complete` is the one way agentmem asks a model for text: it turns every failure
into :class:`~memory.errors.LLMError`.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import TYPE_CHECKING, Any
from collections.abc import Iterator, Sequence

import httpx

if TYPE_CHECKING:  # langchain is imported lazily: `import memory` stays fast for the CLI
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import BaseMessage

from memory.errors import ConfigurationError, LLMError
from memory.settings import Settings

_CONNECTED = ("connection.connect_tcp.complete", "connection.start_tls.complete")


class _Watchdog:
    """Shuts an attempt's socket down when its time is up (a blocked read then returns)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.fired = False
        self._stream: Any = None
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True

    def start(self) -> None:
        self._timer.start()

    def cancel(self) -> None:
        self._timer.cancel()

    def attach(self, stream: Any) -> None:
        with self._lock:
            self._stream = stream
            if self.fired:
                self._shutdown()

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
            self._shutdown()

    def _shutdown(self) -> None:
        sock = self._stream.get_extra_info("socket") if self._stream is not None else None
        if sock is not None:
            # the plain socket call, also on a TLS socket: unblocks a read in another thread
            with contextlib.suppress(OSError):
                socket.socket.shutdown(sock, socket.SHUT_RDWR)

    def timeout(self, request: httpx.Request, exc: Exception) -> httpx.ReadTimeout:
        return httpx.ReadTimeout(f"no complete answer within {self.seconds:g}s ({exc.__class__.__name__} after "
                                 "the deadline)", request=request)


class _WatchedStream(httpx.SyncByteStream):
    def __init__(self, inner: Any, watch: _Watchdog, request: httpx.Request) -> None:
        self._inner, self._watch, self._request = inner, watch, request

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield from self._inner
        except httpx.TransportError as exc:
            if self._watch.fired:
                raise self._watch.timeout(self._request, exc) from exc
            raise

    def close(self) -> None:
        self._watch.cancel()
        self._inner.close()


class DeadlineTransport(httpx.BaseTransport):
    """An httpx transport that bounds each attempt, body included, by the request's timeout.

    The timeout is the one the client put on the request (its ``read`` value: the
    OpenAI client's ``timeout``). Connections are not kept alive, so every attempt has
    its own socket to shut down; an LLM call is long next to a TCP handshake.
    """

    def __init__(self) -> None:
        self._inner = httpx.HTTPTransport(limits=httpx.Limits(max_keepalive_connections=0))

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        seconds = (request.extensions.get("timeout") or {}).get("read")
        if not seconds:
            return self._inner.handle_request(request)
        watch = _Watchdog(float(seconds))
        outer_trace = request.extensions.get("trace")

        def trace(name: str, info: dict[str, Any]) -> None:
            if name in _CONNECTED:
                watch.attach(info.get("return_value"))
            if outer_trace is not None:
                outer_trace(name, info)

        request.extensions = {**request.extensions, "trace": trace}
        watch.start()
        try:
            response = self._inner.handle_request(request)
        except httpx.TransportError as exc:
            watch.cancel()
            if watch.fired and not isinstance(exc, httpx.TimeoutException):
                raise watch.timeout(request, exc) from exc
            raise
        except BaseException:
            watch.cancel()
            raise
        return httpx.Response(response.status_code, headers=response.headers,
                              stream=_WatchedStream(response.stream, watch, request), extensions=response.extensions)

    def close(self) -> None:
        self._inner.close()


def make_openai_model(model: str, *, base_url: str | None = None, api_key: str | None = None,
                      timeout: float | None = None, max_retries: int | None = None,
                      **kwargs: Any) -> BaseChatModel:
    """``ChatOpenAI`` against any OpenAI-compatible endpoint, ``timeout`` bounding each whole attempt.

    ``timeout`` and ``max_retries`` default to the ``llm_timeout`` and ``llm_max_retries`` settings.
    """
    from langchain_openai import ChatOpenAI

    if timeout is None or max_retries is None:
        defaults = Settings.from_env()
        timeout = defaults.llm_timeout if timeout is None else timeout
        max_retries = defaults.llm_max_retries if max_retries is None else max_retries
    if not timeout > 0:
        raise ConfigurationError(f"timeout={timeout!r} is not allowed: it must be a number of seconds > 0")
    kwargs.setdefault("http_client", httpx.Client(transport=DeadlineTransport()))
    return ChatOpenAI(model=model, base_url=base_url, api_key=api_key or "not-needed",  # type: ignore[arg-type]
                      timeout=timeout, max_retries=max_retries, **kwargs)


def chat_model_from_env(settings: Settings | None = None) -> Any | None:
    """The configured chat model (with its fallback, if any), or None when none is configured."""
    s = settings or Settings.from_env()
    if not s.llm_model:
        if s.llm_base_url:
            raise ConfigurationError("AGENTMEM_LLM_BASE_URL is set but AGENTMEM_LLM_MODEL is not: name the model")
        return None
    extra: dict[str, Any] = {}
    if s.llm_max_tokens is not None:
        extra["extra_body"] = {"max_tokens": s.llm_max_tokens}
    primary = make_openai_model(s.llm_model, base_url=s.llm_base_url, api_key=s.llm_api_key, timeout=s.llm_timeout,
                                max_retries=s.llm_max_retries, **extra)
    if not s.llm_fallback_model:
        return primary
    fallback = make_openai_model(s.llm_fallback_model, base_url=s.llm_fallback_base_url or s.llm_base_url,
                                 api_key=s.llm_fallback_api_key or s.llm_api_key, timeout=s.llm_timeout,
                                 max_retries=s.llm_max_retries, **extra)
    return with_fallback(primary, fallback)


def fallback_exceptions() -> tuple[type[BaseException], ...]:
    """Errors that switch to the fallback model: rate limits, 5xx, timeouts, connection errors."""
    import openai

    return (openai.RateLimitError, openai.InternalServerError, openai.APITimeoutError,
            openai.APIConnectionError, TimeoutError, LLMError)


def with_fallback(primary: Any, fallback: Any) -> Any:
    return primary.with_fallbacks([fallback], exceptions_to_handle=fallback_exceptions())


def invoke(model: Any, messages: Sequence[BaseMessage]) -> Any:
    """``model.invoke(messages)``; every failure becomes LLMError (the model's client bounds the time)."""
    try:
        return model.invoke(list(messages))
    except Exception as exc:
        raise LLMError(f"the model call failed: {_describe(exc)}") from exc


def _describe(exc: BaseException) -> str:
    import openai

    if isinstance(exc, (openai.APITimeoutError, TimeoutError)):
        return f"timed out ({exc!r})"
    return repr(exc)


def message_text(message: Any) -> str:
    """The text of a chat message (joining content blocks); LLMError if there is none."""
    content = getattr(message, "content", message)
    if isinstance(content, list):  # content blocks
        content = "".join(part.get("text", "") if isinstance(part, dict) else str(part) for part in content)
    if not isinstance(content, str):
        raise LLMError(f"the model answered with {type(content).__name__}, not text")
    return content


def complete(model: Any, prompt: str | Sequence[BaseMessage], *, system: str | None = None) -> str:
    """Ask ``model`` for text; raise LLMError on failure, timeout or a non-text answer."""
    from langchain_core.messages import HumanMessage, SystemMessage

    messages: list[BaseMessage]
    if isinstance(prompt, str):
        messages = ([SystemMessage(system)] if system else []) + [HumanMessage(prompt)]
    else:
        messages = list(prompt)
    return message_text(invoke(model, messages))
