"""Helpers for the consolidation tests: scripted chat models, a seeded thread, SQL state."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

import psycopg
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import ConfigDict, Field

GOOD_ANSWER = (
    "Label: Deployment incident triage with rollback decision and follow up tasks\n"
    "### Technical Information\n- build 4.2.1 failed with E1234\n"
    "### Emotional Context\n- user frustrated\n"
    "### Entities & References\n- OPS-4411\n"
    "### Action Items & Decisions\n- roll back to 4.1.9"
)


class ScriptedChat(BaseChatModel):
    """A chat model that records prompts and answers by script: text, a callable, a delay or an error."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    answer: Any = GOOD_ANSWER
    delay: float = 0.0
    error: bool = False
    prompts: list[str] = Field(default_factory=list)
    on_call: Any = None  # called with the prompt before answering (e.g. to write a message meanwhile)

    @property
    def _llm_type(self) -> str:
        return "scripted-test-model"

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        prompt = str(messages[-1].content)
        self.prompts.append(prompt)
        if self.on_call is not None:
            self.on_call(prompt)
        if self.delay:
            time.sleep(self.delay)
        if self.error:
            raise RuntimeError("model backend exploded")
        text = self.answer(prompt) if callable(self.answer) else self.answer
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=text))])


T0 = datetime(2026, 3, 2, 9, 0, tzinfo=timezone.utc)


def turn_messages(i: int, *, with_tool: bool, start: datetime = T0) -> list[dict[str, Any]]:
    """One whole turn: user, (assistant tool call + tool result), assistant answer."""
    at = start + timedelta(minutes=10 * i)
    msgs: list[dict[str, Any]] = [dict(role="user", content=f"Turn {i}: please check ticket OPS-{1000 + i} on db-{i}.",
                                       created_at=at)]
    if with_tool:
        cid = f"call_{i}"
        msgs.append(dict(role="assistant", content="", tool_calls=[{"id": cid, "name": "get_ticket",
                                                                     "args": {"ticket": f"OPS-{1000 + i}"}}],
                         created_at=at + timedelta(seconds=5)))
        msgs.append(dict(role="tool", content=f"OPS-{1000 + i}: status open, 3{i} errors", tool_call_id=cid,
                         tool_name="get_ticket", created_at=at + timedelta(seconds=6)))
    msgs.append(dict(role="assistant", content=f"Ticket OPS-{1000 + i} has 3{i} errors; we decided to restart db-{i}.",
                     created_at=at + timedelta(seconds=9)))
    return msgs


def seed_thread(mm: Any, user: str, thread: str, turns: int, *, start: datetime = T0) -> list[Any]:
    msgs = [m for i in range(turns) for m in turn_messages(i, with_tool=i % 2 == 0, start=start)]
    return mm.write_messages(user, thread, msgs)


def raw_conn(mm: Any) -> psycopg.Connection:
    conn = psycopg.connect(mm.db.conninfo, autocommit=True)
    conn.execute(psycopg.sql.SQL("SET search_path TO {}, public").format(psycopg.sql.Identifier(mm.db.schema)))
    return conn


def thread_state(conn: psycopg.Connection, user: str, thread: str) -> dict[str, Any]:
    """Unsummarized ids, marked ids per summary, and each summary's declared source count."""
    rows = conn.execute("SELECT id, summary_id FROM conversational_memory WHERE user_id = %s AND thread_id = %s"
                        " ORDER BY id", (user, thread)).fetchall()
    summaries = dict(conn.execute("SELECT summary_id, source_count FROM summary_memory"
                                  " WHERE user_id = %s AND thread_id = %s", (user, thread)).fetchall())
    marked: dict[Any, list[int]] = {}
    for rid, sid in rows:
        if sid is not None:
            marked.setdefault(sid, []).append(rid)
    return {"unsummarized": [r for r, s in rows if s is None], "marked": marked, "summaries": summaries,
            "all": [r for r, _ in rows]}


def assert_consistent(state: dict[str, Any]) -> None:
    """Every summary marks exactly its declared number of rows (>= 1); no mark without a summary."""
    assert set(state["marked"]) == set(state["summaries"]), "a summary without source rows, or marks without one"
    for sid, count in state["summaries"].items():
        assert count >= 1
        assert len(state["marked"][sid]) == count, f"summary {sid} declares {count} sources"


class BarrierSummarizer:
    """Wraps a summariser so that N concurrent consolidations all finish summarising together."""

    def __init__(self, inner: Any, barrier: threading.Barrier) -> None:
        self.inner, self.barrier = inner, barrier

    def summarize(self, units: Any, **kwargs: Any) -> Any:
        out = self.inner.summarize(units, **kwargs)
        self.barrier.wait(timeout=30)
        return out


def call_all(fns: list[Callable[[], Any]]) -> list[Any]:
    """Run callables in threads at once; return results (or the exceptions raised)."""
    results: list[Any] = [None] * len(fns)

    def run(i: int) -> None:
        try:
            results[i] = fns[i]()
        except Exception as exc:  # collected and asserted by the caller
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(fns))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results
