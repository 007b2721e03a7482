"""The DBA's undo from the command line: ``agentmem unconsolidate SUMMARY_ID``."""

from __future__ import annotations

import json

from click.testing import CliRunner

from memory.cli.main import main

from fix_consolidation import raw_conn, seed_thread, thread_state


def _run(mm, *args):
    env = {"AGENTMEM_DATABASE_URL": mm.db.conninfo, "AGENTMEM_SCHEMA": mm.db.schema, "AGENTMEM_EMBEDDER": "hash",
           "AGENTMEM_USER": None, "AGENTMEM_LLM_MODEL": None, "AGENTMEM_LLM_BASE_URL": None, "COLUMNS": "200"}
    return CliRunner().invoke(main, list(args), env=env)


def test_unconsolidate_restores_the_messages_and_drops_the_summary(mm, user, thread):
    written = seed_thread(mm, user, thread, turns=3)
    sid = str(mm.summarize_conversation(thread_id=thread, user_id=user).summary.summary_id)
    other = _run(mm, "unconsolidate", sid, "--user", user + "-other")
    assert other.exit_code != 0 and "not found" in other.output
    result = _run(mm, "unconsolidate", sid, "--user", user, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"summary_id": sid, "messages_restored": len(written)}
    with raw_conn(mm) as conn:
        state = thread_state(conn, user, thread)
    assert state["summaries"] == {} and state["unsummarized"] == [m.id for m in written]
    again = _run(mm, "unconsolidate", sid, "--user", user)
    assert again.exit_code != 0 and "not found" in again.output
