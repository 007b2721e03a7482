"""The error an adapter raises when its framework is not installed."""

from __future__ import annotations

from memory.errors import AgentMemError


class MissingExtraError(AgentMemError, ImportError):
    """An adapter's framework is not installed: install the agentmem extra it names."""


def missing(extra: str, package: str, exc: ImportError) -> MissingExtraError:
    return MissingExtraError(
        f"this adapter needs {package}, which is not installed ({exc}): pip install 'agentmem[{extra}]'")
