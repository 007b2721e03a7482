"""The memory behind an MCP server: one manager, opened on demand, shared by every call.

The server must keep running when the database does not. So the manager is not opened
before the server starts serving: :meth:`Service.manager` opens it on the first call
(or in the background at start), and a call made while it cannot be opened fails
with that error and the next call tries again. A call that finds the database gone
(:class:`DatabaseUnavailableError`) checks with one plain connection attempt whether
the server is down; if it is, the manager is dropped, so that calls during the outage
fail at once ("cannot connect") instead of each waiting for the pool's timeout, and the
first call after the server is back opens a new pool at once instead of waiting out
the old pool's reconnection back-off (which doubles with every failed attempt, so after
a two-minute outage it could be a minute late). The embedding model is loaded once and
kept across all of this. Every call runs in a worker thread (the SDK runs sync
tools off the event loop), so the lock only guards the opening.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar
from collections.abc import Callable

from memory.errors import AgentMemError, DatabaseUnavailableError
from memory.mcp.auth import Identity
from memory.settings import Settings

if TYPE_CHECKING:
    from memory.manager import MemoryManager
    from memory.scoped import UserMemory

T = TypeVar("T")


class Service:
    """Settings, identity and the lazily opened manager of one MCP server."""

    def __init__(self, settings: Settings, identity: Identity, *, namespace: str = "default",
                 embedder: Any | None = None, model: Any | None = None) -> None:
        self.settings = settings
        self.identity = identity
        self.namespace = namespace
        self._embedder = embedder
        self._model = model
        self._model_loaded = model is not None
        self._mm: MemoryManager | None = None
        self._lock = threading.Lock()

    def manager(self) -> MemoryManager:
        """The open manager; opens it (migrations included) on first use, again after a failed open."""
        if self._mm is not None:
            return self._mm
        with self._lock:
            if self._mm is None:
                from memory.manager import MemoryManager, embedder_from_env

                if self._embedder is None:
                    self._embedder = embedder_from_env(self.settings)
                self._mm = MemoryManager.open(self.settings, embedder=self._embedder)
            return self._mm

    def run(self, headers: Mapping[str, str] | None, work: Callable[[UserMemory], T]) -> T:
        """``work(mm.user(u))`` for the user ``u`` of a request with these headers (see the module docstring)."""
        user = self.identity.user_for(headers)
        mm = self.manager()
        try:
            return work(mm.user(user))
        except DatabaseUnavailableError:
            self._drop_if_down(mm)
            raise

    def _drop_if_down(self, mm: MemoryManager) -> None:
        import psycopg

        try:
            psycopg.connect(mm.db.conninfo, connect_timeout=min(self.settings.connect_timeout, 5)).close()
            return  # the server answers: the pool recovers by itself (a busy pool is no outage)
        except psycopg.Error:
            pass
        with self._lock:
            if self._mm is not mm:
                return
            self._mm = None
        with contextlib.suppress(Exception):  # closing a pool whose server is gone must not hide the caller's error
            mm.close()

    def model(self) -> Any | None:
        """The configured chat model for summaries (AGENTMEM_LLM_*), or None: extractive summaries."""
        if not self._model_loaded:
            from memory.llm.chat import chat_model_from_env

            self._model = chat_model_from_env(self.settings)
            self._model_loaded = True
        return self._model

    def warm_up(self) -> None:
        """Open the manager now if the database is there (called in the background at start)."""
        with contextlib.suppress(AgentMemError):  # the first call reports it, and tries again
            self.manager()

    def close(self) -> None:
        with self._lock:
            if self._mm is not None:
                self._mm.close()
                self._mm = None
