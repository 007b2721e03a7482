"""Two real processes registering the same tools at the same moment.

The UNIQUE key already guarantees one row per tool; what a race can break is the
row's content. Process A registers the 30 tools in one batch with a model that is
slow and then fails (so A falls back to the docstrings), process B registers them one
at a time with a model that augments them. Both start together, so A reads "no row"
for tools that B then writes, and A's fallback rows arrive last. Afterwards every row
must hold B's augmentation (a fallback never replaces an augmented row of the same
content), be one registration's consistent whole (description, queries, search text,
hash and embedding together), both processes must retrieve each tool by its queries,
and re-registering costs nothing. Nothing may raise in either process.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import re
import uuid
from typing import Any

import numpy as np
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from memory import HashEmbedder, MemoryManager, Settings

N_TOOLS = 30
NOUNS = ["invoice", "parcel", "badge", "voucher", "permit", "ledger", "ticket", "receipt", "licence", "pension",
         "mortgage", "warranty", "subscription", "passport", "visa", "lease", "payslip", "refund", "claim", "quote",
         "booking", "order", "shipment", "contract", "grant", "loan", "deposit", "transfer", "coupon", "membership"]


def _make_tool(i: int) -> Any:
    def tool(query: str, limit: int = 10) -> str:
        return query
    tool.__doc__ = f"Tool number {i}: look up records of kind {i}."
    return tool


def description(i: int) -> str:
    return f"Finds a customer's {NOUNS[i]} records by a free-text query."


def queries(i: int) -> list[str]:
    return [f"where is my {NOUNS[i]}", f"show the {NOUNS[i]} I had last month"]


class AugmentingChat(BaseChatModel):
    """Answers an augmentation prompt with this test's description and queries for the tool."""

    @property
    def _llm_type(self) -> str:
        return "augmenting-test-model"

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        i = int(re.search(r"Tool name: tool_(\d+)", str(messages[-1].content))[1])
        text = json.dumps({"description": description(i), "queries": queries(i)})
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=text))])


class FailingChat(BaseChatModel):
    """Says it was asked, waits until the other process has registered everything, then fails (A falls back)."""

    model_config = {"arbitrary_types_allowed": True}
    asked: Any = None
    other_done: Any = None

    @property
    def _llm_type(self) -> str:
        return "failing-test-model"

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        self.asked.set()
        self.other_done.wait(timeout=120)
        raise RuntimeError("model backend down")


def _register(role: str, settings: Settings, namespace: str, start: Any, asked: Any, done: Any, finish: Any,
              queue: Any) -> None:
    from toolbox import Toolbox

    try:
        mm = MemoryManager.open(settings, embedder=HashEmbedder())
        llm = AugmentingChat() if role == "B" else FailingChat(asked=asked, other_done=done)
        tb = Toolbox(mm, namespace=namespace, llm=llm)
        tools = [_make_tool(i) for i in range(N_TOOLS)]
        names = [f"tool_{i}" for i in range(N_TOOLS)]
        start.wait(timeout=120)  # both processes start registering together
        if role == "B":
            # A has read every row (none there yet) and is waiting on its model: B's writes land in
            # between A's read and A's fallback write, however the two processes are scheduled.
            asked.wait(timeout=120)
            for tool, name in zip(tools, names):  # one upsert per tool, as a registering app does
                tb.register_tool(tool, name=name, augment=True)
            done.set()
        else:
            tb.register_tools(tools, names=names, augment=True)  # one batch: every row read before any write
        finish.wait(timeout=120)  # both done: retrieve over the final rows
        found = {q: tb.retrieve(q, k=1).names for i in range(N_TOOLS) for q in queries(i)}
        queue.put((role, "ok", len(tb), found, {t.name: t.description for t in tb.tools}, tb.llm_calls))
        mm.close()
    except Exception as exc:  # reported to the parent, which fails the test
        queue.put((role, "error", repr(exc), None, None, None))


def test_two_processes_registering_the_same_tools_at_once_keep_complete_augmented_rows(
        settings: Settings, mm: MemoryManager, sql_conn: Any) -> None:
    from toolbox import Toolbox
    from toolbox.schema import describe_function
    from toolbox.text import content_hash, search_text

    namespace = f"race-{uuid.uuid4().hex[:8]}"
    ctx = mp.get_context("spawn")
    start, finish, done, queue = ctx.Barrier(2), ctx.Barrier(2), ctx.Event(), ctx.Queue()
    asked = ctx.Event()
    procs = [ctx.Process(target=_register, args=(role, settings.with_(pool_max_size=2), namespace, start, asked, done,
                                                  finish, queue)) for role in ("A", "B")]
    for p in procs:
        p.start()
    outcomes = {o[0]: o[1:] for o in (queue.get(timeout=300) for _ in procs)}
    for p in procs:
        p.join(timeout=60)
    assert [outcomes[r][:2] for r in ("A", "B")] == [("ok", N_TOOLS), ("ok", N_TOOLS)], outcomes
    names = [f"tool_{i}" for i in range(N_TOOLS)]
    assert outcomes["A"][4] > 0  # A did ask its model (and fell back): the race happened

    rows = {r[0]: r[1:] for r in sql_conn.execute(
        "SELECT name, augmented, description, queries, search_text, content_hash, embedding::text"
        " FROM toolbox_memory WHERE namespace = %s", (namespace,))}
    assert sorted(rows) == sorted(names)
    embedder = HashEmbedder()
    for i, name in enumerate(names):
        augmented, desc, qs, text, digest, vec = rows[name]
        assert augmented and desc == description(i) and qs == queries(i), (name, rows[name][:3])
        spec = describe_function(_make_tool(i), name)
        assert text == search_text(name, desc, spec.parameters, qs)
        assert digest == content_hash(name=name, docstring=spec.docstring, parameters=spec.parameters, augment=True,
                                      model=mm.embeddings.name)
        assert np.allclose(np.array(json.loads(vec)), embedder.embed([text[:4000]])[0], atol=1e-6), name
    for role in ("A", "B"):  # each process holds the stored description and finds every tool by its queries
        found, held = outcomes[role][2], outcomes[role][3]
        assert held == {name: description(i) for i, name in enumerate(names)}, role
        assert found == {q: [name] for i, name in enumerate(names) for q in queries(i)}, role

    # A third registration of the same tools finds complete rows: no model call, no write.
    before = dict(sql_conn.execute("SELECT name, updated_at FROM toolbox_memory WHERE namespace = %s",
                                   (namespace,)).fetchall())
    again = Toolbox(mm, namespace=namespace, llm=AugmentingChat())
    again.register_tools([_make_tool(i) for i in range(N_TOOLS)], names=names, augment=True)
    assert again.llm_calls == 0
    assert dict(sql_conn.execute("SELECT name, updated_at FROM toolbox_memory WHERE namespace = %s",
                                 (namespace,)).fetchall()) == before
