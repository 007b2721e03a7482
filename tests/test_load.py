"""Bounded load: 16 concurrent agents x 100 turns through one pool on the embedded server.

Each turn writes, builds a context and (every 10th) consolidates. Throughput and p95
turn latency are printed, never asserted; what is asserted is correctness under
concurrency: no message lost, duplicated or reordered, every summarized row pointing
to an existing summary of its own thread with the right source count, and no context
showing another agent's messages. Bigger runs: ``python bench/agents_load.py``.
"""

from __future__ import annotations

import pytest

from load_workload import run_load, verify


@pytest.mark.slow
def test_sixteen_agents_hundred_turns(mm, sql_conn, capsys):
    report = run_load(mm, agents=16, turns=100, consolidate_every=10)
    with capsys.disabled():
        print(f"\n[load] {report.summary()}")
    assert len(report.latencies) == 16 * 100
    assert report.leaks == []
    assert verify(sql_conn, report) == dict.fromkeys(
        ["lost", "duplicated", "out_of_order", "orphaned", "miscounted_summaries", "cross_thread_summaries"], 0)
    # Each agent's thread was consolidated at least once and left its last turns live.
    assert report.consolidations >= 16 and report.conflicts == 0
    for user, thread in report.expected:
        live = mm.read_conversational_memory(thread_id=thread, user_id=user)
        assert 2 <= len(live) and live[-1].content == report.expected[(user, thread)][-1]
