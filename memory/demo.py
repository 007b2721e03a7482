"""``agentmem demo``: a short session on the embedded defaults, printed stage by stage.

It writes a multi-turn support conversation, a few knowledge passages and a
workflow for a fresh demo user, then prints the context agentmem would send the
model for the next question. Everything runs offline with the packaged MiniLM model.
"""

from __future__ import annotations

import uuid
from typing import Callable

from .manager import MemoryManager

CONVERSATION = [
    ("user", "Hi, I'm Dana from Northwind. Our nightly export job EXP-2291 failed again."),
    ("assistant", "Sorry to hear that, Dana. What error did EXP-2291 report?"),
    ("user", "It says 'disk quota exceeded' on the reporting server rpt-03."),
    ("assistant", "That usually means old export files filled the volume. How big is the volume?"),
    ("user", "500 GB, and the exports are kept for 30 days."),
    ("assistant", "Then the retention of 30 days is the likely cause; we can lower it or add space."),
]

KNOWLEDGE = [
    ("Export files older than the retention period are deleted by the cleanup task at 03:00 UTC.", "exports.md"),
    ("A 'disk quota exceeded' error means the target volume is full; free space or raise the quota.", "errors.md"),
    ("The reporting servers rpt-01 to rpt-04 each have a 500 GB data volume.", "infrastructure.md"),
    ("Invoices are generated on the first day of each month.", "billing.md"),
    ("Single sign-on is configured through the identity provider settings page.", "sso.md"),
]


def run_demo(mm: MemoryManager, echo: Callable[[str], None] = print) -> str:
    user = f"demo-{uuid.uuid4().hex[:8]}"
    thread = "support-1"
    echo(f"== 1. writing a {len(CONVERSATION)}-message conversation for user {user}, thread {thread}")
    mm.write_messages(user, thread, [{"role": r, "content": c} for r, c in CONVERSATION])
    echo(f"== 2. writing {len(KNOWLEDGE)} knowledge passages and a workflow")
    mm.write_knowledge_batch(user, [{"content": c, "source": s} for c, s in KNOWLEDGE])
    mm.write_workflow(user, "fix full export volume", "resolve a failed export caused by a full disk",
                      ["check the error of the export job", "check volume size and usage",
                       "lower export retention or add space", "re-run the export"],
                      query="export job failed with disk quota exceeded", outcome="export re-run succeeded")
    mm.write_entity(user, "EXP-2291", "job", "nightly export job of Northwind")
    mm.write_entity(user, "rpt-03", "server", "reporting server with a 500 GB volume")
    question = "Why does the nightly export keep failing and what should we change?"
    echo(f"== 3. context for the next question: {question!r}\n")
    context = mm.build_context(question, user, thread)
    echo(context)
    return context
