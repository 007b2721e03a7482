"""A bounded multi-agent workload over one MemoryManager pool (tests/test_load.py, bench/agents_load.py).

Each simulated agent owns one user and one thread and, per turn: writes the user's
message and the answer (with a tool call and its result every few turns), sometimes
remembers a fact, builds the context for the turn, and every ``consolidate_every``
turns consolidates the thread, keeping the last two turns live. Turn latency is
measured around all of it. ``verify`` then checks the database: every message
written is there exactly once and in order, every summarized row points to an
existing summary of the same user and thread whose ``source_count`` matches, and no
context ever showed another agent's messages.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from memory import MemoryManager


@dataclass
class LoadReport:
    agents: int
    turns: int
    seconds: float
    latencies: list[float]
    messages: int
    consolidations: int
    conflicts: int
    leaks: list[str] = field(default_factory=list)
    expected: dict[tuple[str, str], list[str]] = field(default_factory=dict)

    def percentile(self, p: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]

    @property
    def turns_per_second(self) -> float:
        return len(self.latencies) / self.seconds

    def summary(self) -> str:
        return (f"{self.agents} agents x {self.turns} turns = {len(self.latencies)} turns in {self.seconds:.1f} s: "
                f"{self.turns_per_second:.1f} turns/s, {self.messages / self.seconds:.0f} messages/s; "
                f"turn latency p50 {self.percentile(50) * 1000:.0f} ms, p95 {self.percentile(95) * 1000:.0f} ms, "
                f"p99 {self.percentile(99) * 1000:.0f} ms; {self.consolidations} consolidations "
                f"({self.conflicts} conflicts)")


def _turn_messages(tag: str, t: int) -> list[dict[str, Any]]:
    question = f"{tag}#{t} user: what is the status of order {t} and the delivery window?"
    msgs: list[dict[str, Any]] = [{"role": "user", "content": question}]
    if t % 5 == 2:
        call_id = f"c{t}"
        msgs += [{"role": "assistant", "content": "", "tool_calls": [{"id": call_id, "name": "order_status",
                                                                    "args": {"order": t}}]},
                 {"role": "tool", "content": f"{tag}#{t} tool: order {t} shipped", "tool_call_id": call_id,
                  "tool_name": "order_status"}]
    msgs.append({"role": "assistant", "content": f"{tag}#{t} assistant: order {t} ships within two days."})
    return msgs


def run_load(mm: MemoryManager, *, agents: int = 16, turns: int = 100, consolidate_every: int = 10,
             prefix: str | None = None) -> LoadReport:
    prefix = prefix or f"load{uuid.uuid4().hex[:6]}"
    tag_re = re.compile(r"\[?(" + re.escape(prefix) + r"-\d+)#")
    latencies: list[float] = []
    leaks: list[str] = []
    counters = {"messages": 0, "consolidations": 0, "conflicts": 0}
    expected: dict[tuple[str, str], list[str]] = {}
    lock = threading.Lock()

    def agent(i: int) -> None:
        tag = f"{prefix}-{i}"
        user, thread = f"{tag}-user", f"{tag}-thread"
        written: list[str] = []
        for t in range(turns):
            start = time.perf_counter()
            msgs = _turn_messages(tag, t)
            mm.write_messages(msgs, user_id=user, thread_id=thread)
            written += [m["content"] for m in msgs]
            if t % 25 == 0:
                mm.remember("stable_fact", f"User's open order count is {t}", user_id=user)
            context = mm.build_context(msgs[0]["content"], user_id=user, thread_id=thread)
            foreign = {m for m in tag_re.findall(context) if m != tag}
            consolidated = conflict = 0
            if (t + 1) % consolidate_every == 0:
                result = mm.summarize_conversation(thread_id=thread, user_id=user, keep_recent=2)
                consolidated, conflict = result.summary is not None, result.status == "conflict"
            elapsed = time.perf_counter() - start
            with lock:
                latencies.append(elapsed)
                counters["messages"] += len(msgs)
                counters["consolidations"] += consolidated
                counters["conflicts"] += conflict
                leaks.extend(f"{tag} saw {m}" for m in foreign)
        with lock:
            expected[(user, thread)] = written

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=agents) as pool:
        for future in [pool.submit(agent, i) for i in range(agents)]:
            future.result()
    seconds = time.perf_counter() - started
    return LoadReport(agents, turns, seconds, latencies, counters["messages"], counters["consolidations"],
                      counters["conflicts"], leaks, expected)


def verify(conn: Any, report: LoadReport) -> dict[str, int]:
    """Database-side checks of a finished run; returns the problem counts (all zero when sound)."""
    problems = {"lost": 0, "duplicated": 0, "out_of_order": 0, "orphaned": 0, "miscounted_summaries": 0,
                "cross_thread_summaries": 0}
    for (user, thread), written in report.expected.items():
        stored = [r[0] for r in conn.execute(
            "SELECT content FROM conversational_memory WHERE user_id = %s AND thread_id = %s ORDER BY id",
            (user, thread))]
        problems["lost"] += sum((Counter(written) - Counter(stored)).values())
        problems["duplicated"] += sum((Counter(stored) - Counter(written)).values())
        problems["out_of_order"] += int(stored != written and Counter(stored) == Counter(written))
    users = [u for u, _ in report.expected]
    problems["orphaned"] = conn.execute(
        "SELECT count(*) FROM conversational_memory c LEFT JOIN summary_memory s ON s.summary_id = c.summary_id"
        " WHERE c.user_id = ANY(%s) AND c.summary_id IS NOT NULL AND s.summary_id IS NULL", (users,)).fetchone()[0]
    problems["miscounted_summaries"] = conn.execute(
        "SELECT count(*) FROM summary_memory s WHERE s.user_id = ANY(%s) AND s.source_count <>"
        " (SELECT count(*) FROM conversational_memory c WHERE c.summary_id = s.summary_id)", (users,)).fetchone()[0]
    problems["cross_thread_summaries"] = conn.execute(
        "SELECT count(*) FROM conversational_memory c JOIN summary_memory s ON s.summary_id = c.summary_id"
        " WHERE c.user_id = ANY(%s) AND (s.user_id <> c.user_id OR s.thread_id IS DISTINCT FROM c.thread_id)",
        (users,)).fetchone()[0]
    return problems
