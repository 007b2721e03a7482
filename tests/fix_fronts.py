"""Both front doors for one suite: ``front`` is ``MemoryManager`` or ``AsyncMemoryManager``.

The async manager runs on an event loop in a thread of its own; :class:`Blocking` calls
its coroutines from the (sync) test body and waits for them, so one test body checks
the behaviour of both managers. Both use the hash embedder on the session's default
schema, so each test isolates itself by a fresh user id as usual.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from typing import Any, Awaitable, Iterator, TypeVar

import pytest

from memory import HashEmbedder, Settings
from memory.aio import AsyncMemoryManager

T = TypeVar("T")


class LoopThread:
    """An event loop running in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="test-event-loop", daemon=True)
        self.thread.start()

    def run(self, coro: Awaitable[T], timeout: float = 120) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)  # type: ignore[arg-type]

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


class Blocking:
    """``AsyncMemoryManager`` seen through a sync interface: every coroutine method awaited on the loop."""

    def __init__(self, amm: AsyncMemoryManager, loop: LoopThread) -> None:
        self.amm, self.loop = amm, loop

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.amm, name)
        if inspect.iscoroutinefunction(attr):
            return lambda *args, **kwargs: self.loop.run(attr(*args, **kwargs))
        return attr


@pytest.fixture(scope="session")
def event_loop_thread() -> Iterator[LoopThread]:
    lt = LoopThread()
    yield lt
    lt.stop()


@pytest.fixture(scope="session")
def async_mm(settings: Settings, event_loop_thread: LoopThread) -> Iterator[Blocking]:
    amm = event_loop_thread.run(AsyncMemoryManager.open(settings, embedder=HashEmbedder()))
    yield Blocking(amm, event_loop_thread)
    event_loop_thread.run(amm.close())


@pytest.fixture(params=["sync", "async"])
def front(request: pytest.FixtureRequest, mm: Any) -> Any:
    """The hot path's front door: ``MemoryManager``, then ``AsyncMemoryManager`` (blocking adapter)."""
    return mm if request.param == "sync" else request.getfixturevalue("async_mm")
