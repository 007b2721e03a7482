"""Running a tool under a time limit, whatever it does.

A tool is the deployment's code, and it can hang, raise anything (``SystemExit``
included), or return a value that cannot even be printed. ``run_tool`` turns every
such outcome into an :class:`Outcome` the toolbox can answer the model with.

With a timeout, the call runs in a daemon worker thread (with a copy of the caller's
context variables, so tools that read the turn's user still work) and the caller
waits at most that long. Python cannot kill a thread: a tool that does not finish in
time keeps running in the background until it returns on its own; its result is then
discarded and a warning is logged. Being a daemon, it never keeps the process from
exiting. A coroutine tool under :func:`arun_tool` is cancelled for real.

``KeyboardInterrupt`` is never swallowed: pressed while the caller waits, it
interrupts the wait; raised by the tool, it is raised again in the caller's thread.
Everything else (``SystemExit`` too) becomes ``Outcome.error``.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any
from collections.abc import Callable

from .calls import acall_function, call_function, safe_repr, safe_str

__all__ = ["MAX_ABANDONED", "Outcome", "abandoned_calls", "arun_tool", "run_tool", "safe_repr", "safe_str"]

log = logging.getLogger("toolbox")

@dataclass
class Outcome:
    value: Any = None
    error: BaseException | None = None
    timed_out: bool = False
    busy: bool = False  # not started: too many earlier calls still running past their timeout


#: Calls of one tool that may still be running past their timeout before the next is refused.
MAX_ABANDONED = 4

_abandoned: dict[Any, int] = {}
_abandoned_lock = threading.Lock()


def abandoned_calls(func: Callable[..., Any]) -> int:
    """How many calls of ``func`` timed out and are still running in the background."""
    with _abandoned_lock:
        return _abandoned.get(func, 0)


def _count_abandoned(func: Callable[..., Any], delta: int) -> None:
    with _abandoned_lock:
        left = _abandoned.get(func, 0) + delta
        if left > 0:
            _abandoned[func] = left
        else:
            _abandoned.pop(func, None)


def run_tool(func: Callable[..., Any], kwargs: dict[str, Any], timeout: float | None, *, name: str = "tool") -> Outcome:
    """Call ``func(**kwargs)``; with ``timeout`` (seconds), give up waiting after that long.

    A tool with :data:`MAX_ABANDONED` calls still running past their timeout is not
    started again (``Outcome.busy``) until one of them returns: a tool that always
    hangs cannot pile up threads without bound.
    """
    if timeout is None:
        try:
            return Outcome(value=call_function(func, kwargs))
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 - SystemExit from a tool must not end the loop
            return Outcome(error=exc)
    if abandoned_calls(func) >= MAX_ABANDONED:
        return Outcome(busy=True)
    done = threading.Event()
    lock = threading.Lock()
    state = {"abandoned": False}
    box: dict[str, Any] = {}
    context = contextvars.copy_context()
    started = time.monotonic()

    def work() -> None:
        try:
            box["value"] = context.run(call_function, func, kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            box["error"] = exc
        finally:
            with lock:
                done.set()
                late = state["abandoned"]
            if late:
                _count_abandoned(func, -1)
                log.warning("tool %r finished %.1f s after it was started, past its %g s timeout; its result "
                            "was discarded", name, time.monotonic() - started, timeout)

    threading.Thread(target=work, name=f"toolbox-{name}"[:60], daemon=True).start()
    if not done.wait(timeout):
        with lock:
            if not done.is_set():
                state["abandoned"] = True
                _count_abandoned(func, +1)
                return Outcome(timed_out=True)
    error = box.get("error")
    if isinstance(error, KeyboardInterrupt):
        raise error
    return Outcome(value=box.get("value"), error=error)


async def arun_tool(func: Callable[..., Any], kwargs: dict[str, Any], timeout: float | None) -> Outcome:
    """Async :func:`run_tool`: a coroutine tool is cancelled at the timeout, a sync one abandoned."""

    async def guarded() -> Outcome:  # the tool's own TimeoutError is an error, not our timeout
        try:
            return Outcome(value=await acall_function(func, kwargs))
        except (KeyboardInterrupt, asyncio.CancelledError):
            raise
        except BaseException as exc:  # noqa: BLE001
            return Outcome(error=exc)

    try:
        return await asyncio.wait_for(guarded(), timeout)
    except TimeoutError:
        return Outcome(timed_out=True)
