"""``agentmem mcp`` as a real subprocess, driven by the official SDK's own client.

stdio (one user, real MiniLM) and streamable HTTP (bearer token per user), each against
a fresh schema of the session's server; the database-outage test runs against an
embedded server of its own that it stops and starts again.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client as sdk_stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

ROOT = Path(__file__).resolve().parent.parent

TOOLS = {"search_memory", "write_message", "build_context", "context_status", "summarize_and_store",
         "expand_summary", "remember", "forget", "recall", "list_threads", "find_tools"}


def server_env(database_url: str, schema: str, embedder: str = "hash", **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("AGENTMEM_USER", "DATABASE_URL")}
    env.update(PYTHONPATH=str(ROOT), AGENTMEM_DATABASE_URL=database_url, AGENTMEM_SCHEMA=schema,
               AGENTMEM_EMBEDDER=embedder, AGENTMEM_CONNECT_TIMEOUT="3", **extra)
    return env


def stdio_client(env: dict[str, str], user: str, errlog: Any) -> Client:
    params = StdioServerParameters(command=sys.executable, args=["-m", "memory.cli.main", "mcp", "--user", user],
                                   env=env, cwd=str(ROOT))
    return Client(sdk_stdio_client(params, errlog=errlog), read_timeout_seconds=120)


def data(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content[0].text
    return json.loads(result.content[0].text)


def error_text(result: Any) -> str:
    assert result.is_error, result.content[0].text
    return result.content[0].text


async def write_thread(client: Client, thread: str, lines: list[tuple[str, str]]) -> None:
    for role, content in lines:
        data(await client.call_tool("write_message", {"thread_id": thread, "role": role, "content": content}))


SUPPORT = [("user", "My nightly export job EXP-2291 failed with disk quota exceeded on volume vol-7"),
           ("assistant", "The volume vol-7 is full; delete old snapshots and rerun EXP-2291."),
           ("user", "Deleted the snapshots, the export runs again. Thanks!"),
           ("assistant", "Glad it works.")]


# -- stdio -----------------------------------------------------------------------------------
@pytest.mark.slow
def test_stdio_server_lists_its_tools_and_resources_and_does_the_memory_work(pg_uri, fresh_schema, user, tmp_path):
    errlog = (tmp_path / "server.err").open("w")

    async def scenario() -> None:
        async with stdio_client(server_env(pg_uri, fresh_schema, "minilm"), user, errlog) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert set(tools) == TOOLS
            for tool in tools.values():  # what a model reads: a description, and one for every argument
                assert len(tool.description or "") > 60, tool.name
                for name, prop in tool.input_schema.get("properties", {}).items():
                    assert prop.get("description"), f"{tool.name}.{name}"
            assert tools["search_memory"].input_schema["properties"]["k"]["maximum"] == 20
            templates = {t.uri_template for t in (await client.list_resource_templates()).resource_templates}
            assert templates == {"agentmem://threads/{thread_id}", "agentmem://summaries/{summary_id}"}

            await write_thread(client, "support", SUPPORT)
            hits = data(await client.call_tool("search_memory", {"query": "which volume ran out of disk quota?",
                                                                 "k": 2}))["results"]
            assert "EXP-2291" in hits[0]["content"] and hits[0]["thread_id"] == "support", hits

            context = data(await client.call_tool("build_context", {"query": "export job", "thread_id": "support"}))
            assert "disk quota exceeded" in context["context"] and context["status"] == "ok"
            status = data(await client.call_tool("context_status", {"thread_id": "support", "model": "gpt-4o"}))
            assert status["status"] == "ok" and 0 < status["tokens"] < status["max_tokens"]

            done = data(await client.call_tool("summarize_and_store", {"thread_id": "support", "keep_recent": 1}))
            assert done["status"] == "summarized" and done["consolidated_messages"] == 2
            sid = done["summary_id"]
            expanded = data(await client.call_tool("expand_summary", {"summary_id": sid}))
            assert [m["content"] for m in expanded["messages"]] == [c for _, c in SUPPORT[:2]]
            # consolidated messages are still found, carrying their summary id
            hits = data(await client.call_tool("search_memory", {"query": "snapshots on vol-7",
                                                                 "scope": ["messages"]}))["results"]
            assert any(h["summary_id"] == sid for h in hits)

            thread = (await client.read_resource("agentmem://threads/support")).contents[0].text
            assert thread.count(f"[Summary ID: {sid}]") == 2 and "Glad it works." in thread
            summary = (await client.read_resource(f"agentmem://summaries/{sid}")).contents[0].text
            assert summary.startswith(f"[Summary ID: {sid}]") and "Original messages (2)" in summary

            listed = data(await client.call_tool("list_threads", {}))["threads"]
            assert [(t["thread_id"], t["messages"], t["summarized"]) for t in listed] == [("support", 4, 2)]

            fact = data(await client.call_tool("remember", {"category": "preference",
                                                            "content": "Prefers answers in metric units"}))
            assert fact["action"] == "created"
            recalled = data(await client.call_tool("recall", {"query": "units"}))["facts"]
            assert [f["id"] for f in recalled] == [fact["fact"]["id"]]
            data(await client.call_tool("forget", {"fact_id": fact["fact"]["id"]}))
            assert data(await client.call_tool("recall", {}))["facts"] == []

    asyncio.run(scenario())
    errlog.close()
    assert "Traceback" not in (tmp_path / "server.err").read_text()


def test_bad_arguments_are_tool_errors_with_the_fix_and_the_session_goes_on(pg_uri, fresh_schema, user, tmp_path):
    errlog = (tmp_path / "server.err").open("w")

    async def scenario() -> None:
        async with stdio_client(server_env(pg_uri, fresh_schema), user, errlog) as client:
            out = error_text(await client.call_tool("search_memory", {"query": "x", "k": 500}))
            assert "k" in out and "less than or equal to 20" in out
            out = error_text(await client.call_tool("remember", {"category": "mood", "content": "happy"}))
            assert "category" in out and "'preference', 'constraint' or 'stable_fact'" in out
            out = error_text(await client.call_tool("write_message", {"thread_id": "t", "role": "user"}))
            assert "content" in out and "required" in out.lower()
            out = error_text(await client.call_tool("expand_summary", {"summary_id": "not-a-uuid"}))
            assert "not a valid UUID" in out and "Fix: correct the argument" in out
            out = error_text(await client.call_tool("expand_summary", {"summary_id": str(uuid.uuid4())}))
            assert "Fix: check the id" in out
            long_fact = "x" * 500
            out = error_text(await client.call_tool("remember", {"category": "preference", "content": long_fact}))
            assert "fact_too_long" in out and "Fix:" in out
            out = error_text(await client.call_tool("context_status", {}))
            assert "exactly one of thread_id" in out
            out = error_text(await client.call_tool("search_memory", {"query": "x", "since": "last tuesday"}))
            assert "since must be a date like 2025-05-01" in out
            with pytest.raises(Exception, match="no thread 'nowhere' for this user"):
                await client.read_resource("agentmem://threads/nowhere")
            # after all of that, the same session still works
            await write_thread(client, "t", [("user", "still here")])
            assert data(await client.call_tool("list_threads", {}))["threads"][0]["messages"] == 1

    asyncio.run(scenario())
    errlog.close()
    assert "Traceback" not in (tmp_path / "server.err").read_text()


# -- streamable HTTP -------------------------------------------------------------------------
class HttpServer:
    def __init__(self, env: dict[str, str], log: Path, *args: str) -> None:
        self.log = log
        self.proc = subprocess.Popen([sys.executable, "-m", "memory.cli.main", "mcp", "--http", "--port", "0", *args],
                                     env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log.open("w"))
        self.url = self._wait_for_url()

    def _wait_for_url(self) -> str:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            found = re.search(r"at (http://127\.0\.0\.1:\d+/mcp)", self.log.read_text())
            if found:
                return found.group(1)
            if self.proc.poll() is not None:
                raise AssertionError(f"the server exited: {self.log.read_text()}")
            time.sleep(0.2)
        raise AssertionError(f"the server did not announce its address: {self.log.read_text()}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@asynccontextmanager
async def http_client(url: str, token: str | None) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with create_mcp_http_client(headers=headers) as http:
        async with Client(streamable_http_client(url, http_client=http), read_timeout_seconds=60) as client:
            yield client


def post_status(url: str, headers: dict[str, str]) -> tuple[int, str]:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}}).encode()
    req = urllib.request.Request(url, data=body, method="POST", headers={
        "Content-Type": "application/json", "Accept": "application/json, text/event-stream", **headers})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.fixture
def two_users() -> dict[str, str]:
    return {secrets.token_urlsafe(24): f"alice-{uuid.uuid4().hex[:6]}",
            secrets.token_urlsafe(24): f"bob-{uuid.uuid4().hex[:6]}"}


def test_http_acts_for_the_token_s_user_only(pg_uri, fresh_schema, two_users, tmp_path):
    (token_a, alice), (token_b, bob) = two_users.items()
    tokens = ",".join(f"{t}={u}" for t, u in two_users.items())
    server = HttpServer(server_env(pg_uri, fresh_schema, AGENTMEM_MCP_TOKENS=tokens), tmp_path / "server.err")
    try:
        async def scenario() -> None:
            async with http_client(server.url, token_a) as a:
                assert {t.name for t in (await a.list_tools()).tools} == TOOLS
                await write_thread(a, "private", SUPPORT)
                sid = data(await a.call_tool("summarize_and_store", {"thread_id": "private"}))["summary_id"]
                data(await a.call_tool("remember", {"category": "stable_fact", "content": "Works on volume vol-7"}))
                assert data(await a.call_tool("list_threads", {}))["threads"][0]["thread_id"] == "private"
            async with http_client(server.url, token_b) as b:
                assert data(await b.call_tool("list_threads", {}))["threads"] == []
                assert data(await b.call_tool("search_memory", {"query": "EXP-2291 vol-7 export"}))["results"] == []
                assert data(await b.call_tool("recall", {}))["facts"] == []
                assert "Fix: check the id" in error_text(await b.call_tool("expand_summary", {"summary_id": sid}))
                for uri in ("agentmem://threads/private", f"agentmem://summaries/{sid}"):
                    with pytest.raises(Exception, match="for this user|no summary|not found"):
                        await b.read_resource(uri)
                context = data(await b.call_tool("build_context", {"query": "export", "thread_id": "private"}))
                assert "EXP-2291" not in context["context"]
                await write_thread(b, "private", [("user", "bob's own thread of the same name")])
            async with http_client(server.url, token_a) as a:  # bob's write landed in bob's memory only
                thread = (await a.read_resource("agentmem://threads/private")).contents[0].text
                assert "bob's own" not in thread and "EXP-2291" in thread

        asyncio.run(scenario())
        # without a token, or with a wrong one, nothing gets past the door
        for headers in ({}, {"Authorization": "Bearer " + secrets.token_urlsafe(24)}, {"Authorization": "Basic eA=="}):
            status, body = post_status(server.url, headers)
            assert status == 401 and "bearer token" in body, (status, body)
        status, body = post_status(server.url, {"Authorization": f"Bearer {token_a}"})
        assert status == 200 and "agentmem" in body, (status, body)
    finally:
        server.stop()
    log = (tmp_path / "server.err").read_text()
    assert "Traceback" not in log and token_a not in log and token_b not in log


def test_find_tools_ranks_the_stored_toolbox(pg_uri, settings, fresh_schema, two_users, tmp_path):
    from memory import HashEmbedder, MemoryManager
    from toolbox import Toolbox

    with MemoryManager.open(settings.with_(schema=fresh_schema, pool_max_size=2), embedder=HashEmbedder()) as mm:
        tb = Toolbox(mm)

        def get_weather(city: str) -> str:
            """Current weather forecast for a city."""
            return city

        def send_invoice(customer: str, amount: float) -> str:
            """Email an invoice to a customer."""
            return customer

        tb.register_tools([get_weather, send_invoice])
    token = next(iter(two_users))
    server = HttpServer(server_env(pg_uri, fresh_schema, AGENTMEM_MCP_TOKENS=f"{token}=someone"),
                        tmp_path / "server.err")
    try:
        async def scenario() -> dict[str, Any]:
            async with http_client(server.url, token) as c:
                return data(await c.call_tool("find_tools", {"request": "email the invoice to the customer", "k": 2}))

        found = asyncio.run(scenario())
    finally:
        server.stop()
    assert [t["name"] for t in found["tools"]][0] == "send_invoice"
    assert sorted(found["tools"][0]["parameters"]) == ["amount", "customer"]


def test_http_refuses_to_start_without_tokens_and_with_a_user(pg_uri, fresh_schema, two_users):
    def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "memory.cli.main", "mcp", "--http", *args], text=True,
                              capture_output=True, env=server_env(pg_uri, fresh_schema, **env), cwd=ROOT, timeout=120)

    res = run()
    assert res.returncode == 1 and "serves no one without authentication" in res.stderr, res.stderr
    res = run(AGENTMEM_MCP_TOKENS="tiny7=alice")
    assert res.returncode == 1 and "shorter than 16 characters" in res.stderr and "tiny7" not in res.stderr
    token = next(iter(two_users))
    res = run("--user", "alice", AGENTMEM_MCP_TOKENS=f"{token}=alice")
    assert res.returncode == 2 and "--user is for stdio" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


# -- the database goes away and comes back ---------------------------------------------------
def test_a_database_outage_gives_errors_per_call_and_the_server_recovers(user, tmp_path):
    from memory.store.embedded import server_package, start_server, stop_server

    data_dir = Path("/tmp") / f"amcp{uuid.uuid4().hex[:6]}"

    def start_again() -> None:
        server = server_package().get_server(data_dir)
        with server._lock:  # the package's own start path, as after a reboot
            server.ensure_postgres_running()

    errlog = (tmp_path / "server.err").open("w")
    try:
        uri = start_server(data_dir)
        assert stop_server(data_dir)  # the MCP server starts while the database is down

        async def scenario() -> None:
            async with stdio_client(server_env(uri, "agent_memory"), user, errlog) as client:
                assert {t.name for t in (await client.list_tools()).tools} == TOOLS  # serving without a database
                down = error_text(await client.call_tool("list_threads", {}))
                assert "PostgreSQL" in down and "Fix: the memory database is unreachable" in down
                start_again()
                await write_thread(client, "t", [("user", "written once the database was up")])
                assert stop_server(data_dir)  # killed mid-session
                for _ in range(2):  # each call fails on its own; the server keeps running
                    out = error_text(await client.call_tool("write_message", {"thread_id": "t", "role": "user",
                                                                              "content": "lost?"}))
                    assert "Fix: the memory database is unreachable" in out
                    assert "Fix:" in error_text(await client.call_tool("search_memory", {"query": "written"}))
                start_again()
                await write_thread(client, "t", [("assistant", "and after the restart")])
                thread = (await client.read_resource("agentmem://threads/t")).contents[0].text
                assert "written once the database was up" in thread and "and after the restart" in thread
                assert "lost?" not in thread

        asyncio.run(scenario())
    finally:
        stop_server(data_dir)
        import shutil

        shutil.rmtree(data_dir, ignore_errors=True)
    errlog.close()
    assert "Traceback" not in (tmp_path / "server.err").read_text()
