"""The errors the toolbox raises. Each class's docstring is its message's gist.

They derive from :class:`memory.errors.AgentMemError`, so one ``except`` catches
every agentmem error. These are raised to the *program* (a tool that cannot be
described, a pin on an unknown tool). Mistakes of the *model* (unknown tool, bad
arguments, a tool that raised) are never raised: :meth:`Toolbox.execute` returns
them as a structured :class:`~toolbox.models.ToolResult` the model can act on.
"""

from __future__ import annotations

from memory import AgentMemError, InvalidInputError, NotFoundError


class ToolboxError(AgentMemError):
    """Base class of the toolbox's errors."""


class ToolSchemaError(ToolboxError, InvalidInputError):
    """A function cannot be described as a tool (unsupported type hint, bad name, *args only...)."""


class ToolNotRegisteredError(ToolboxError, NotFoundError):
    """No tool of that name is registered in this process."""


class ToolNotRunnableError(ToolboxError):
    """The tool was registered from a schema without a handler: retrieve it and run it yourself."""
