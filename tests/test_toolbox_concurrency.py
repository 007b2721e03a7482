"""Two real processes registering the same tools at the same moment leave one row per tool."""

from __future__ import annotations

import multiprocessing as mp
import uuid
from typing import Any

from memory import HashEmbedder, MemoryManager, Settings

N_TOOLS = 30


def _make_tool(i: int) -> Any:
    def tool(query: str, limit: int = 10) -> str:
        return query
    tool.__doc__ = f"Tool number {i}: look up records of kind {i}."
    return tool


def _register(settings: Settings, namespace: str, barrier: Any, queue: Any) -> None:
    from toolbox import Toolbox

    try:
        mm = MemoryManager.open(settings, embedder=HashEmbedder())
        tb = Toolbox(mm, namespace=namespace)
        tools = [_make_tool(i) for i in range(N_TOOLS)]
        barrier.wait(timeout=120)  # both processes start registering together
        for i, tool in enumerate(tools):  # one upsert per tool, as a registering app does
            tb.register_tool(tool, name=f"tool_{i}")
        queue.put(("ok", len(tb)))
        mm.close()
    except Exception as exc:  # reported to the parent, which fails the test
        queue.put(("error", repr(exc)))


def test_two_processes_registering_the_same_tools_at_once_leave_one_row_each(settings: Settings,
                                                                              mm: MemoryManager,
                                                                              sql_conn: Any) -> None:
    namespace = f"race-{uuid.uuid4().hex[:8]}"
    ctx = mp.get_context("spawn")
    barrier, queue = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_register, args=(settings.with_(pool_max_size=2), namespace, barrier, queue))
             for _ in range(2)]
    for p in procs:
        p.start()
    outcomes = [queue.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert outcomes == [("ok", N_TOOLS), ("ok", N_TOOLS)]
    rows = sql_conn.execute(
        "SELECT name, count(*) FROM toolbox_memory WHERE namespace = %s GROUP BY name", (namespace,)).fetchall()
    assert len(rows) == N_TOOLS and all(count == 1 for _, count in rows)
    complete = sql_conn.execute(
        "SELECT count(*) FROM toolbox_memory WHERE namespace = %s AND embedding IS NOT NULL"
        " AND search_text LIKE 'tool %%'", (namespace,)).fetchone()[0]
    assert complete == N_TOOLS
