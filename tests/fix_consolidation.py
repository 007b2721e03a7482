"""Helpers for the consolidation tests: scripted chat models, a seeded thread, SQL state."""

from __future__ import annotations

import contextlib
import re
import threading
import time
import uuid
from concurrent.futures import Future
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Iterator

import psycopg
from psycopg import sql
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
    timeout: float | None = None  # like a client's own timeout: a longer delay raises TimeoutError
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
        if self.timeout is not None and self.delay > self.timeout:
            time.sleep(self.timeout)
            raise TimeoutError(f"no answer within {self.timeout}s")
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
    return mm.write_messages(msgs, user_id=user, thread_id=thread)


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


# -- faults injected from the database side -----------------------------------------------------
MARKING_CRASH = "crash between summary insert and marking"


@contextlib.contextmanager
def fault_at_marking(mm: Any, user: str, action: str) -> Iterator[Any]:
    """A trigger, created by the test, that fires when a consolidation marks ``user``'s rows.

    It runs inside the consolidation's transaction, after the summary insert and before
    any row is marked; it first checks that the summary row is already there (so it
    really is the window between the two), then either raises (``action="raise"``) or
    waits on an advisory lock that this helper holds on another connection
    (``action="block"``), yielding a :class:`Blocker` to act while the commit waits.
    Trigger and function are dropped on exit; other users' rows never fire it.
    """
    assert action in ("raise", "block")
    tag = uuid.uuid4().hex[:10]
    key = uuid.uuid4().int >> 66  # a bigint no other lock of the suite uses
    func, trig = sql.Identifier(f"test_fault_{tag}"), sql.Identifier(f"test_fault_{tag}")
    then = (sql.SQL("RAISE EXCEPTION {}").format(sql.Literal(MARKING_CRASH)) if action == "raise"
            else sql.SQL("PERFORM pg_advisory_xact_lock({})").format(sql.Literal(key)))
    with raw_conn(mm) as admin, raw_conn(mm) as holder:
        admin.execute(sql.SQL(
            "CREATE FUNCTION {func}() RETURNS trigger LANGUAGE plpgsql AS $fn$ BEGIN"
            " IF NOT EXISTS (SELECT 1 FROM summary_memory WHERE summary_id = NEW.summary_id) THEN"
            "  RAISE EXCEPTION 'marking before the summary row was inserted'; END IF;"
            " {then}; RETURN NEW; END $fn$").format(func=func, then=then))
        admin.execute(sql.SQL(
            "CREATE TRIGGER {trig} BEFORE UPDATE OF summary_id ON conversational_memory FOR EACH ROW"
            " WHEN (NEW.user_id = {user} AND NEW.summary_id IS NOT NULL) EXECUTE FUNCTION {func}()").format(
                trig=trig, user=sql.Literal(user), func=func))
        blocker = Blocker(holder, key) if action == "block" else None
        try:
            yield blocker
        finally:
            if blocker is not None:
                blocker.release()
            admin.execute(sql.SQL("DROP TRIGGER IF EXISTS {} ON conversational_memory").format(trig))
            admin.execute(sql.SQL("DROP FUNCTION IF EXISTS {}()").format(func))


class Blocker:
    """Holds an advisory lock on its own connection; the fault trigger waits on it."""

    def __init__(self, conn: psycopg.Connection, key: int) -> None:
        self.conn, self.key, self.held = conn, key, True
        conn.execute("SELECT pg_advisory_lock(%s)", (key,))

    def wait_for_waiter(self, timeout: float = 30.0) -> int:
        """The pid of the backend waiting on this lock (the consolidation, between insert and marks)."""
        deadline = time.monotonic() + timeout
        me = self.conn.info.backend_pid
        while time.monotonic() < deadline:
            row = self.conn.execute("SELECT pid FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
                                    (me,)).fetchone()
            if row:
                return int(row[0])
            time.sleep(0.02)
        raise AssertionError("no consolidation reached the marking step")

    def release(self) -> None:
        if self.held:
            self.held = False
            self.conn.execute("SELECT pg_advisory_unlock(%s)", (self.key,))


def call_in_thread(fn: Callable[[], Any]) -> "Future[Any]":
    """Start ``fn`` in a daemon thread; its result (or exception) comes back through the future."""
    future: Future[Any] = Future()

    def run() -> None:
        try:
            future.set_result(fn())
        except BaseException as exc:  # handed to the caller through the future
            future.set_exception(exc)

    threading.Thread(target=run, daemon=True).start()
    return future


# -- what a summary's label and sections are made of ------------------------------------------
#: The extractive labeller's own words around the transcript's ("Conversation (date) about ...").
LABEL_FRAME = {"conversation", "about", "to"}


def foreign_label_words(label: str, transcript: str) -> list[str]:
    """Words of ``label`` that are neither the transcript's nor the labeller's frame.

    ``fit_label`` pads a short label with generic words ("summary", "details", ...), so
    a word count says nothing; this says whether the words came from the conversation.
    """
    words = {w.strip(".'-") for w in re.findall(r"[\w'.-]+", transcript.lower())}
    return [w for w in label.split() if w.strip("().,:").lower() not in words | LABEL_FRAME]


def section(content: str, heading: str) -> str:
    """The body of one ``### `` section of a rendered summary."""
    parts = re.split(r"^(### .*)$", content, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))[heading]
