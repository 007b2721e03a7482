"""The ``agentmem`` CLI, invoked as a user would: exit codes, output, ``--json`` parsed.

Every invocation runs the real command against the test server, on a schema of
this module's own (``AGENTMEM_SCHEMA``) with the hash embedder
(``AGENTMEM_EMBEDDER=hash``, test only). Data is written through a MemoryManager on
the same schema; each test uses its own user ids.
"""

from __future__ import annotations

import json
import math
import textwrap
import uuid
from pathlib import Path
from typing import Any, Iterator

import click
import psycopg
import pytest
from click.testing import CliRunner, Result
from psycopg import sql

from memory import HashEmbedder, MemoryManager, Settings
from memory.cli.main import main
from memory.consolidation.monitor import status_for, usable_budget

EXPECTED_COMMANDS = {"init", "demo", "status", "threads", "show", "consolidate", "expand", "search", "facts",
                     "tools", "forget-user", "purge", "bench"}

NO_LLM = {name: None for name in ("AGENTMEM_LLM_MODEL", "AGENTMEM_LLM_BASE_URL", "AGENTMEM_LLM_API_KEY",
                                  "OPENAI_BASE_URL", "OPENAI_API_KEY", "AGENTMEM_LLM_FALLBACK_MODEL")}


@pytest.fixture(scope="module")
def cli_schema(pg_uri: str) -> Iterator[str]:
    name = f"cli_{uuid.uuid4().hex[:8]}"
    yield name
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@pytest.fixture(scope="module")
def env(pg_uri: str, cli_schema: str) -> dict[str, str | None]:
    return {"AGENTMEM_DATABASE_URL": pg_uri, "AGENTMEM_SCHEMA": cli_schema, "AGENTMEM_EMBEDDER": "hash",
            "AGENTMEM_USER": None, "COLUMNS": "200", **NO_LLM}


@pytest.fixture(scope="module")
def cmm(pg_uri: str, cli_schema: str) -> Iterator[MemoryManager]:
    mm = MemoryManager.open(Settings.from_env(database_url=pg_uri, schema=cli_schema), embedder=HashEmbedder())
    yield mm
    mm.close()


@pytest.fixture
def run(env: dict[str, str | None], cmm: MemoryManager):
    def invoke(*args: str, input: str | None = None, extra_env: dict[str, str | None] | None = None) -> Result:
        result = CliRunner().invoke(main, list(args), input=input, env={**env, **(extra_env or {})})
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception
        return result

    return invoke


def ok_json(result: Result) -> Any:
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def assert_one_line_error(result: Result, code: int, *fragments: str) -> None:
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
    err = result.stderr.strip()
    assert err.startswith("agentmem: error: ") and "\n" not in err, err
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in err


CONVERSATION = [
    ("user", "My export job EXP-2291 failed with disk quota exceeded on rpt-03."),
    ("assistant", "How large is the volume on rpt-03?"),
    ("user", "500 GB and exports are kept for 30 days."),
    ("assistant", "Lower the retention to 7 days or add space."),
    ("user", "Thanks, I will lower it to 7 days."),
    ("assistant", "Good. Re-run EXP-2291 afterwards."),
]


def write_thread(mm: MemoryManager, user: str, thread: str) -> None:
    mm.write_messages([{"role": r, "content": c} for r, c in CONVERSATION], user_id=user, thread_id=thread)


# -- help ------------------------------------------------------------------------------------
def walk(group: click.Group, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    for name, cmd in group.commands.items():
        yield path + (name,), cmd
        if isinstance(cmd, click.Group):
            yield from walk(cmd, path + (name,))


def test_every_command_has_help_text(run) -> None:
    commands = dict(walk(main))
    assert EXPECTED_COMMANDS <= {p[0] for p in commands}
    assert {("tools", "list"), ("tools", "search")} <= set(commands)
    for path, cmd in commands.items():
        assert cmd.help and cmd.help.strip(), f"{' '.join(path)} has no help text"
        for param in cmd.params:
            if isinstance(param, click.Option):
                assert param.help, f"{' '.join(path)} {param.opts} has no help text"
        result = run(*path, "--help")
        assert result.exit_code == 0, result.output
        assert "Usage:" in result.stdout and cmd.help.strip().splitlines()[0][:30] in " ".join(result.stdout.split())


def test_listing_commands_offer_json() -> None:
    listings = {("status",), ("threads",), ("show",), ("consolidate",), ("expand",), ("search",), ("facts",),
                ("tools", "list"), ("tools", "search"), ("forget-user",), ("purge",), ("bench",)}
    commands = dict(walk(main))
    for path in listings:
        assert any("--json" in p.opts for p in commands[path].params), path


# -- init / demo ---------------------------------------------------------------------------
def test_init_reports_the_schema(run, cli_schema: str) -> None:
    result = run("init")
    assert result.exit_code == 0, result.stderr
    assert f"schema {cli_schema!r}" in result.stdout and "up to date" in result.stdout


def test_demo_runs(run, cmm: MemoryManager) -> None:
    before = {r["user_id"] for r in cmm.list_threads()}
    result = run("demo")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip()
    new_users = {r["user_id"] for r in cmm.list_threads()} - before
    assert new_users, "demo wrote no conversation"


def test_chat_without_a_model_says_what_to_set(run) -> None:
    result = run("chat", input="hello\n")
    assert_one_line_error(result, 2, "AGENTMEM_LLM_MODEL")


# -- status / threads / show ---------------------------------------------------------------
def test_status_counts_and_estimated_monitor_status(run, cmm: MemoryManager, user: str) -> None:
    write_thread(cmm, user, "t-main")
    big = "x" * 3_000
    cmm.write_messages([{"role": "user", "content": big}], user_id=user, thread_id="t-big")
    result = cmm.summarize_conversation(thread_id="t-main", user_id=user, keep_recent=1)
    assert result.summarized

    rows = ok_json(run("status", "--user", user, "--json"))
    by_thread = {r["thread_id"]: r for r in rows}
    assert set(by_thread) == {"t-main", "t-big"}
    main_row = by_thread["t-main"]
    live = cmm.read_conversational_memory(thread_id="t-main", user_id=user)
    assert main_row["total_messages"] == len(CONVERSATION)
    assert main_row["summarized_messages"] == len(result.source_ids)
    assert main_row["unsummarized_messages"] == len(live) == len(CONVERSATION) - len(result.source_ids)
    assert main_row["summaries"] == 1
    assert main_row["est_unsummarized_tokens"] == math.ceil(sum(len(m.content) for m in live) / 4)
    assert main_row["oldest_unsummarized_at"] == live[0].created_at.isoformat()

    # The status follows the Python monitor's budget and thresholds for the chosen window.
    s = Settings()
    for window in (1_500, 2_048, 8_192, 5_000):
        rows = ok_json(run("status", "--user", user, "--thread", "t-big", "--context-window", str(window), "--json"))
        assert len(rows) == 1
        tokens = math.ceil(len(big) / 4)
        assert rows[0]["est_unsummarized_tokens"] == tokens
        expected = status_for(tokens / usable_budget(None, s.with_(default_context_window=window)), s)
        assert rows[0]["monitor_status"] == expected, window
        assert rows[0]["context_window"] == window
    statuses = {ok_json(run("status", "-u", user, "-t", "t-big", "--context-window", str(w), "--json"))[0]
                ["monitor_status"] for w in (1_500, 2_048, 8_192)}
    assert statuses == {"critical", "warning", "ok"}

    text = run("status", "--user", user)
    assert text.exit_code == 0 and "t-main" in text.stdout and "t-big" in text.stdout


def test_status_of_unknown_user_is_empty(run) -> None:
    assert ok_json(run("status", "--user", f"nobody-{uuid.uuid4().hex[:6]}", "--json")) == []


def test_threads_lists_counts(run, cmm: MemoryManager, user: str) -> None:
    write_thread(cmm, user, "a")
    cmm.write_messages([{"role": "user", "content": "hello"}], user_id=user, thread_id="b")
    rows = ok_json(run("threads", "--user", user, "--json"))
    assert {(r["thread_id"], r["total"], r["unsummarized"]) for r in rows} == {("a", 6, 6), ("b", 1, 1)}
    assert all(r["user_id"] == user for r in rows)
    assert "a" in run("threads", "--user", user).stdout


def test_show_thread_with_summary_marks(run, cmm: MemoryManager, user: str) -> None:
    write_thread(cmm, user, "t")
    result = cmm.summarize_conversation(thread_id="t", user_id=user, keep_recent=1)
    rows = ok_json(run("show", "t", "--user", user, "--json"))
    assert [m["content"] for m in rows] == [c for _, c in CONVERSATION]
    marked = [m["id"] for m in rows if m["summary_id"] == str(result.summary.summary_id)]
    assert marked == result.source_ids
    live = ok_json(run("show", "t", "--user", user, "--live", "--json"))
    assert [m["id"] for m in live] == [m["id"] for m in rows if m["summary_id"] is None]
    # AGENTMEM_USER is the default user.
    via_env = ok_json(run("show", "t", "--json", extra_env={"AGENTMEM_USER": user}))
    assert [m["id"] for m in via_env] == [m["id"] for m in rows]
    text = run("show", "t", "--user", user)
    assert text.exit_code == 0 and "EXP-2291" in text.stdout and "live" in text.stdout


def test_show_unknown_thread_is_not_found(run, user: str) -> None:
    assert_one_line_error(run("show", "nope", "--user", user), 3, "nope")


# -- consolidate / expand ------------------------------------------------------------------
def test_consolidate_then_expand(run, cmm: MemoryManager, user: str) -> None:
    write_thread(cmm, user, "c1")
    write_thread(cmm, user, "c2")
    out = ok_json(run("consolidate", "c1", "c2", "--user", user, "--keep-recent", "1", "--json"))
    assert [r["thread_id"] for r in out] == ["c1", "c2"]
    assert all(r["status"] == "summarized" and r["source_count"] == 4 and r["kept_turns"] == 1 for r in out)
    for r in out:
        assert len(cmm.read_conversational_memory(thread_id=r["thread_id"], user_id=user)) == 2
    again = ok_json(run("consolidate", "c1", "--user", user, "--keep-recent", "1", "--json"))
    assert again[0]["status"] == "nothing_to_summarize"

    sid = out[0]["summary_id"]
    expanded = ok_json(run("expand", sid, "--user", user, "--json"))
    assert expanded["summary"]["summary_id"] == sid
    assert [m["content"] for m in expanded["messages"]] == [c for _, c in CONVERSATION[:4]]
    text = run("expand", sid, "--user", user)
    assert text.exit_code == 0 and f"[Summary ID: {sid}]" in text.stdout and "### Technical Information" in text.stdout


def test_consolidate_all_threads(run, cmm: MemoryManager, user: str) -> None:
    write_thread(cmm, user, "x1")
    write_thread(cmm, user, "x2")
    out = ok_json(run("consolidate", "--all-threads", "--user", user, "--json"))
    assert sorted(r["thread_id"] for r in out) == ["x1", "x2"]
    assert all(r["status"] == "summarized" for r in out)
    status = ok_json(run("status", "--user", user, "--json"))
    assert all(r["unsummarized_messages"] == 0 and r["summaries"] == 1 for r in status)
    text = run("consolidate", "x1", "--user", user)
    assert text.exit_code == 0 and "nothing_to_summarize" in text.stdout


def test_consolidate_needs_a_thread(run) -> None:
    result = run("consolidate")
    assert result.exit_code == 2 and "--all-threads" in result.stderr


def test_expand_errors(run, cmm: MemoryManager, user: str) -> None:
    write_thread(cmm, user, "e")
    sid = str(cmm.summarize_conversation(thread_id="e", user_id=user).summary.summary_id)
    # another user's summary id is not found, exactly like a missing one
    assert_one_line_error(run("expand", sid, "--user", user + "-other"), 3, sid)
    assert_one_line_error(run("expand", "not-a-uuid", "--user", user), 2, "summary_id")


# -- search / facts ------------------------------------------------------------------------
def test_search_by_type(run, cmm: MemoryManager, user: str) -> None:
    write_thread(cmm, user, "s")
    cmm.remember("constraint", "Exports must finish before 06:00 UTC", user_id=user)
    hits = ok_json(run("search", "export retention days", "--user", user, "--json"))
    assert hits and {h["kind"] for h in hits} <= {"message", "summary", "fact"}
    assert any("30 days" in h["content"] for h in hits)
    facts_only = ok_json(run("search", "exports finish", "--user", user, "--type", "facts", "--json"))
    assert [h["kind"] for h in facts_only] == ["fact"]
    msgs = ok_json(run("search", "volume", "--user", user, "--type", "messages", "-k", "2", "--json"))
    assert len(msgs) == 2 and all(h["kind"] == "message" and h["thread_id"] == "s" for h in msgs)
    assert run("search", "x", "--type", "bogus").exit_code == 2
    text = run("search", "volume", "--user", user)
    assert text.exit_code == 0 and "message" in text.stdout


def test_facts_active_and_history(run, cmm: MemoryManager, user: str) -> None:
    first = cmm.remember("preference", "I prefer tea in the morning", user_id=user)
    second = cmm.remember("preference", "I prefer coffee in the morning", user_id=user)
    assert second.action == "superseded"
    active = ok_json(run("facts", user, "--json"))
    assert [f["content"] for f in active] == ["I prefer coffee in the morning"]
    history = ok_json(run("facts", user, "--history", "--json"))
    assert [(h["version"], h["status"], h["content"]) for h in history] == [
        (1, "superseded", "I prefer tea in the morning"), (2, "active", "I prefer coffee in the morning")]
    assert history[0]["chain_id"] == history[1]["chain_id"] == str(first.fact.id)
    assert history[0]["superseded_by"] == str(second.fact.id)
    assert "coffee" in run("facts", user).stdout
    assert run("facts", user + "-none").stdout.startswith("no facts")


# -- tools -----------------------------------------------------------------------------------
def test_tools_list_and_search_read_the_stored_rows(run, cmm: MemoryManager) -> None:
    from toolbox import Toolbox

    ns = f"ns{uuid.uuid4().hex[:6]}"
    box = Toolbox(cmm, namespace=ns)

    def get_weather(city: str) -> str:
        """Current weather forecast for a city."""
        return "sunny"

    def send_invoice(customer_id: str, amount: float) -> str:
        """Email an invoice to a customer."""
        return "sent"

    box.register_tool(get_weather)
    box.register_tool(send_invoice)
    listed = ok_json(run("tools", "list", "--namespace", ns, "--json"))
    assert [(t["name"], t["parameters"]) for t in listed] == [
        ("get_weather", ["city"]), ("send_invoice", ["amount", "customer_id"])]
    found = ok_json(run("tools", "search", "weather forecast for Paris", "--namespace", ns, "-k", "1", "--json"))
    assert [t["name"] for t in found] == ["get_weather"]
    assert found[0]["score"] > 0 and set(found[0]["signals"]) == {"vector", "keyword", "group"}
    everything = ok_json(run("tools", "list", "--json"))
    assert {"get_weather", "send_invoice"} <= {t["name"] for t in everything if t["namespace"] == ns}
    assert "send_invoice" in run("tools", "list", "-n", ns).stdout
    empty = run("tools", "search", "anything", "--namespace", ns + "-empty")
    assert empty.exit_code == 0 and "no tools" in empty.stdout


# -- forget-user / purge --------------------------------------------------------------------
def test_forget_user_asks_first(run, cmm: MemoryManager, user: str) -> None:
    write_thread(cmm, user, "f")
    cmm.remember("stable_fact", "Works at Northwind", user_id=user)
    from memory.tables.retention import rows_of_user

    with cmm.db.connection() as conn:
        held = sum(rows_of_user(conn, cmm.db.schema, user_id=user).values())
    assert held >= 7  # 6 messages, 1 fact, and any side rows (search context)
    declined = run("forget-user", user, input="n\n")
    assert declined.exit_code == 1 and f"Delete {held} rows of user {user!r}" in declined.stderr
    assert len(cmm.read_thread(thread_id="f", user_id=user)) == 6
    done = run("forget-user", user, "--json", input="y\n")
    report = json.loads(done.stdout)
    assert done.exit_code == 0 and report["deleted"]["conversational_memory"] == 6
    assert report["deleted"]["fact_memory"] == 1 and report["total"] == held
    assert cmm.read_thread(thread_id="f", user_id=user) == [] and cmm.read_facts(user_id=user) == []
    assert_one_line_error(run("forget-user", user, "--yes"), 3, user)


def test_forget_user_yes_skips_the_question(run, cmm: MemoryManager, user: str) -> None:
    write_thread(cmm, user, "g")
    result = run("forget-user", user, "--yes")
    assert result.exit_code == 0 and "conversational_memory" in result.stdout
    assert cmm.read_thread(thread_id="g", user_id=user) == []


def test_purge_deletes_expired_rows(run, cmm: MemoryManager, user: str) -> None:
    write_thread(cmm, user, "p")
    with cmm.db.connection() as conn:
        conn.execute("UPDATE conversational_memory SET expires_at = now() - interval '1 hour'"
                     " WHERE user_id = %s AND role = 'assistant'", (user,))
    report = ok_json(run("purge", "--json"))
    assert report["deleted"]["conversational_memory"] >= 3
    assert [m.role for m in cmm.read_thread(thread_id="p", user_id=user)] == ["user"] * 3
    assert "conversational_memory" in run("purge").stdout


# -- bench ------------------------------------------------------------------------------------
def test_bench_lists_and_runs_the_scripts(run) -> None:
    bench = Path(__file__).resolve().parent.parent / "bench"
    runnable = {p.stem for p in bench.glob("*.py") if not p.name.startswith("_") and "__main__" in p.read_text()}
    listed = ok_json(run("bench", "--json"))
    assert {b["name"] for b in listed} == runnable
    assert all(b["description"] for b in listed)
    # a quick real one (it prints the data set it generates, deterministically)
    import subprocess
    import sys

    direct = subprocess.run([sys.executable, str(bench / "longmem_data.py")], capture_output=True, text=True,
                            cwd=bench.parent, timeout=120)
    result = run("bench", "longmem_data")
    assert result.exit_code == direct.returncode == 0
    assert result.stdout == direct.stdout and result.stdout.strip()
    assert_one_line_error(run("bench", "no_such_bench"), 3, "no_such_bench")


def test_bench_passes_arguments_and_exit_status(run, tmp_path: Path) -> None:
    (tmp_path / "echo_args.py").write_text(textwrap.dedent('''
        """Echo the arguments."""
        import sys
        if __name__ == "__main__":
            print("args:", " ".join(sys.argv[1:]))
            print("to stderr", file=sys.stderr)
            sys.exit(int(sys.argv[-1][5:]) if sys.argv[-1].startswith("exit=") else 0)
    '''))
    (tmp_path / "helper.py").write_text('"""Not runnable."""\n')
    extra = {"AGENTMEM_BENCH_DIR": str(tmp_path)}
    assert ok_json(run("bench", "--json", extra_env=extra)) == [{"name": "echo_args", "description": "Echo the arguments."}]
    result = run("bench", "echo_args", "--json", "x.json", "--sizes", "10", extra_env=extra)
    assert result.exit_code == 0 and result.stdout == "args: --json x.json --sizes 10\n"
    assert result.stderr == "to stderr\n"
    failed = run("bench", "echo_args", "exit=4", extra_env=extra)
    assert failed.exit_code == 4 and "exited with status 4" in failed.stderr


# -- errors ---------------------------------------------------------------------------------
def test_unreachable_database_is_one_line(run, tmp_path: Path) -> None:
    url = f"postgresql://nobody@/postgres?host={tmp_path}&connect_timeout=2"
    result = run("status", "--json", extra_env={"AGENTMEM_DATABASE_URL": url})
    assert_one_line_error(result, 1, "cannot connect")
    assert result.stdout == ""


def test_bad_configuration_is_one_line(run) -> None:
    assert_one_line_error(run("threads", extra_env={"AGENTMEM_EMBEDDER": "bogus"}), 1, "AGENTMEM_EMBEDDER")
    assert_one_line_error(run("status", "--context-window", "0"), 2, "context_window")


@pytest.mark.slow
def test_search_with_the_real_model(run, real_mm: MemoryManager, user: str) -> None:
    """Default embedder (MiniLM, loaded lazily by the CLI) on the real model's schema: a paraphrase is found."""
    real_mm.write_messages([
        {"role": "user", "content": "My daughter starts violin lessons next Tuesday."},
        {"role": "user", "content": "The quarterly tax filing is due at the end of the month."},
    ], user_id=user, thread_id="r")
    extra = {"AGENTMEM_SCHEMA": real_mm.db.schema, "AGENTMEM_EMBEDDER": None}
    hits = ok_json(run("search", "When does my kid begin music classes?", "--user", user, "--type", "messages",
                       "-k", "1", "--json", extra_env=extra))
    assert [h["content"] for h in hits] == ["My daughter starts violin lessons next Tuesday."]
    listed = ok_json(run("threads", "--user", user, "--json", extra_env=extra))
    assert [(t["thread_id"], t["total"]) for t in listed] == [("r", 2)]
