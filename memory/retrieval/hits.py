"""What every search returns: the row it found, one score, and the signals behind it.

A row model (``Message``, ``KnowledgeItem``, ``Tool`` ...) mirrors its table and carries
no score. A search wraps each row it returns in a ``Hit``: ``score`` is the value the
result list is ordered by (higher is better). The searches of memory (similarity
reads, ``search_memory``) share one absolute scale, :func:`memory.retrieval.fusion.fuse`
of the signals; the toolbox documents its own. ``signals`` names each signal that
contributed (``"vector"``, ``"keyword"``, ``"time"``, ``"recency"``, ``"neighbour"`` ...)
with its own value, so a caller or an inspector can see why a row came back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Hit(Generic[T]):
    """One search result: ``item`` is the row, ``score`` orders the list, ``signals`` explain it."""

    item: T
    score: float
    signals: dict[str, float] = field(default_factory=dict)

    @property
    def matched_by(self) -> tuple[str, ...]:
        """The signals that found this row (those with a non-zero value), strongest first."""
        return tuple(name for name, value in sorted(self.signals.items(), key=lambda kv: -kv[1]) if value)
