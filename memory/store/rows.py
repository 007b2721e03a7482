"""Typed rows. Each dataclass mirrors its table; reads return these, never tuples.

A row carries no score: a similarity read wraps each row in a ``memory.retrieval.hits.Hit``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from memory.store.shapes import readable_object, readable_tool_calls

ROLES = ("system", "user", "assistant", "tool")
FACT_CATEGORIES = ("preference", "constraint", "stable_fact")


@dataclass
class Message:
    id: int
    user_id: str
    thread_id: str
    role: str
    content: str
    created_at: datetime
    tool_call_id: str | None = None
    tool_name: str | None = None
    tool_args: Any = None
    tool_calls: list[dict[str, Any]] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    summary_id: uuid.UUID | None = None
    name: str | None = None  # the speaker's name (OpenAI ``name``), for chats with several people

    def __post_init__(self) -> None:  # a row written by plain SQL may hold any JSON (memory.store.shapes)
        self.tool_calls = readable_tool_calls(self.tool_calls)
        self.metadata = readable_object(self.metadata)


@dataclass
class Summary:
    summary_id: uuid.UUID
    user_id: str
    thread_id: str | None
    description: str
    content: str
    source_count: int
    first_message_at: datetime | None
    last_message_at: datetime | None
    created_at: datetime
    source_tokens: int | None = None
    summary_tokens: int | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.metadata = readable_object(self.metadata)

    @property
    def reference(self) -> str:
        return f"[Summary ID: {self.summary_id}] {self.description}"


@dataclass
class KnowledgeItem:
    id: uuid.UUID
    user_id: str
    content: str
    source: str
    metadata: dict[str, Any]
    created_at: datetime

    def __post_init__(self) -> None:
        self.metadata = readable_object(self.metadata)


@dataclass
class Workflow:
    id: uuid.UUID
    user_id: str | None
    name: str
    description: str
    query: str
    steps: list[Any]
    outcome: str
    success_count: int
    use_count: int
    created_at: datetime

    def __post_init__(self) -> None:
        if not isinstance(self.steps, list):
            self.steps = [] if self.steps is None else [self.steps]


@dataclass
class Entity:
    id: uuid.UUID
    user_id: str
    name: str
    entity_type: str
    description: str
    mention_count: int
    first_seen: datetime
    last_seen: datetime


@dataclass
class Fact:
    id: uuid.UUID
    user_id: str
    category: str
    content: str
    valid_from: datetime
    valid_to: datetime | None
    superseded_by: uuid.UUID | None
    source_message_id: int | None
    created_at: datetime
    updated_at: datetime

    @property
    def active(self) -> bool:
        return self.valid_to is None


@dataclass
class ToolLogEntry:
    id: int
    user_id: str
    thread_id: str | None
    tool_call_id: str | None
    tool_name: str
    args: Any
    output: str | None
    status: str
    error: str | None
    duration_ms: float | None
    created_at: datetime
