"""The memory tools an agent calls: ``summarize_and_store`` and ``expand_summary``.

They are plain typed functions (the docstring is the description the model reads,
the signature its schema) made by :func:`memory_tools` as closures over one
``MemoryManager`` and one user, and registered in a toolbox by
:func:`register_memory_tools`. A toolbox's ``execute`` does not pass the user to a
tool, so the user is bound here: a fixed id, or a zero-argument callable (e.g. one
reading a ``contextvars.ContextVar``) for a loop that serves many users with one toolbox.
Errors (another user's summary id, a malformed id) are raised as agentmem errors,
which the toolbox turns into structured results for the model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from collections.abc import Callable

if TYPE_CHECKING:  # pragma: no cover
    from memory.manager import MemoryManager

UserRef = str | Callable[[], str]
ThreadRef = str | None | Callable[[], str | None]


def memory_tools(mm: MemoryManager, *, user_id: UserRef, thread_id: ThreadRef = None, keep_recent: int = 1,
                 model: Any | None = None) -> list[Callable[..., str]]:
    """``[summarize_and_store, expand_summary]`` bound to ``mm`` and ``user_id``.

    ``thread_id`` is the thread ``summarize_and_store`` consolidates when the model
    names none (a fixed id, or a callable giving the current one); ``keep_recent``
    turns stay live (the current exchange, by default).
    """
    default_thread = thread_id

    def current_user() -> str:
        return user_id() if callable(user_id) else user_id

    def summarize_and_store(text: str = "", thread_id: str | None = None) -> str:
        """Consolidate older conversation into a stored summary to free context space.

        Call this when the context monitor reports warning or critical usage. With a
        thread_id (the current thread by default), the thread's older turns are
        summarised and replaced in your context by a summary reference; `text` can name
        what the summary should focus on. With no thread, `text` itself is summarised
        and stored. Returns the summary reference, which expand_summary can open.

        Args:
            text: what to focus on, or the text to summarise when there is no thread.
            thread_id: the conversation thread to consolidate (defaults to the current one).
        """
        uid = current_user()
        thread_id = thread_id or (default_thread() if callable(default_thread) else default_thread)
        if thread_id:
            result = mm.summarize_conversation(thread_id=thread_id, user_id=uid, keep_recent=keep_recent, model=model,
                                               focus=text or None)
            if result.summary is None:
                return f"Nothing consolidated ({result.status}): {result.message}."
            return (f"{result.summary.reference}\nConsolidated {len(result.source_ids)} messages "
                    f"({result.source_tokens:,} -> {result.summary_tokens:,} tokens). "
                    f'Call expand_summary("{result.summary.summary_id}") to read the originals.')
        if not text.strip():
            return "Nothing to summarize: give the text to summarize or a thread_id."
        structured = mm.summarizer(model).summarize(text.splitlines())
        summary = mm.write_summary(structured.label, structured.content, user_id=uid, thread_id=None,
                                   metadata={"method": structured.method, "source": "summarize_and_store"})
        return f"{summary.reference}\n{summary.content}"

    def expand_summary(summary_id: str) -> str:
        """Read a stored summary and every original message it replaced, in order.

        Use it when a `[Summary ID: ...]` reference in your context hides a detail you need.

        Args:
            summary_id: the id shown in the `[Summary ID: ...]` reference.
        """
        return mm.expand_summary(summary_id, user_id=current_user()).format()

    return [summarize_and_store, expand_summary]


def register_memory_tools(toolbox: Any, mm: MemoryManager, *, user_id: UserRef, pin: bool = False,
                          **kwargs: Any) -> list[str]:
    """Register the memory tools in ``toolbox`` (optionally pinned); returns their names."""
    return register_functions(toolbox, memory_tools(mm, user_id=user_id, **kwargs), pin=pin)


def register_functions(toolbox: Any, functions: list[Callable[..., Any]], *, pin: bool = False) -> list[str]:
    """Register closures under their own names in one batch (optionally pinned); returns the names."""
    names = [fn.__name__ for fn in functions]
    toolbox.register_tools(functions, names=names)
    for name in names if pin else []:
        toolbox.pin(name)
    return names
