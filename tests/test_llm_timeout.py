"""One LLM timeout, honoured everywhere, against a real server that trickles 1 byte/s.

The servers run in this test on 127.0.0.1: one that never finishes its answer (it
trickles either the status line itself or a body it announced), one that answers at
once. httpx's own timeout applies per read, so a trickle never trips it: these tests
check that ``AGENTMEM_LLM_TIMEOUT`` bounds the whole call wherever a model is used.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from memory import LLMError, MemoryAgent, Settings
from memory.llm.chat import chat_model_from_env, complete, make_openai_model, with_fallback
from toolbox import Toolbox

TIMEOUT = 3.0
#: The OpenAI client's back-off before a retry is at most about a second; a test allows 2.
BACKOFF = 2.0
ROOT = Path(__file__).resolve().parents[1]


class Server:
    """A raw HTTP server on 127.0.0.1; ``mode`` is "headers", "body" (trickling) or "answer"."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        self.connections = 0
        self.closed = 0  # trickles ended by the client going away
        self.stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            while len(body) < length:
                body += conn.recv(65536)
            if self.mode == "answer":
                payload = json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                                      "choices": [{"index": 0, "finish_reason": "stop", "message": {
                                          "role": "assistant", "content": "fallback answer"}}]}).encode()
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                             + str(len(payload)).encode() + b"\r\n\r\n" + payload)
                return
            if self.mode == "headers":
                out = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" * 1000
            else:
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
                out = b'{"id": "' + b"x" * 100000
            for i in range(len(out)):  # one byte a second, forever for the test's purposes
                if self.stop.wait(1.0):
                    return
                try:
                    conn.sendall(out[i:i + 1])
                except OSError:
                    self.closed += 1
                    return

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


@pytest.fixture(params=["headers", "body"])
def trickle(request: pytest.FixtureRequest) -> Iterator[Server]:
    server = Server(request.param)
    yield server
    server.close()


@pytest.fixture
def answering() -> Iterator[Server]:
    server = Server("answer")
    yield server
    server.close()


def model_for(server: Server, retries: int = 0) -> object:
    return chat_model_from_env(Settings(database_url="postgresql://unused", llm_model="m", llm_base_url=server.url,
                                        llm_timeout=TIMEOUT, llm_max_retries=retries))


def timed(fn, *args, **kwargs):  # type: ignore[no-untyped-def]
    start = time.monotonic()
    try:
        return fn(*args, **kwargs), time.monotonic() - start
    except Exception as exc:  # noqa: BLE001 - returned for the test to inspect
        return exc, time.monotonic() - start


def test_a_trickling_answer_is_cut_at_the_timeout(trickle: Server) -> None:
    outcome, elapsed = timed(complete, model_for(trickle), "hello")
    assert isinstance(outcome, LLMError) and "timed out" in str(outcome)
    assert TIMEOUT - 0.2 <= elapsed < TIMEOUT + BACKOFF
    assert trickle.connections == 1


def test_the_call_really_stops(trickle: Server) -> None:
    """The server sees the client go away: no thread is left reading the trickle."""
    complete_exc, _ = timed(complete, model_for(trickle), "hello")
    assert isinstance(complete_exc, LLMError)
    deadline = time.monotonic() + 5
    while trickle.closed < 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert trickle.closed == 1


def test_retries_are_the_clients_own_each_attempt_bounded(trickle: Server) -> None:
    outcome, elapsed = timed(complete, model_for(trickle, retries=1), "hello")
    assert isinstance(outcome, LLMError)
    assert trickle.connections == 2
    assert 2 * TIMEOUT - 0.2 <= elapsed < 2 * TIMEOUT + BACKOFF


def test_a_timeout_switches_to_the_fallback_model(trickle: Server, answering: Server) -> None:
    model = with_fallback(make_openai_model("m", base_url=trickle.url, timeout=TIMEOUT, max_retries=0),
                          make_openai_model("m", base_url=answering.url, timeout=TIMEOUT, max_retries=0))
    outcome, elapsed = timed(complete, model, "hello")
    assert outcome == "fallback answer"
    assert elapsed < TIMEOUT + BACKOFF


def test_the_timeout_setting_comes_from_the_environment(trickle: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTMEM_LLM_MODEL", "m")
    monkeypatch.setenv("AGENTMEM_LLM_BASE_URL", trickle.url)
    monkeypatch.setenv("AGENTMEM_LLM_TIMEOUT", str(TIMEOUT))
    monkeypatch.setenv("AGENTMEM_LLM_MAX_RETRIES", "0")
    outcome, elapsed = timed(complete, chat_model_from_env(), "hello")
    assert isinstance(outcome, LLMError) and elapsed < TIMEOUT + BACKOFF


def test_a_summary_lands_within_the_timeout(mm, user: str, thread: str, trickle: Server) -> None:
    mm.write_messages([{"role": "user", "content": "Ticket OPS-7 fails on db-2."},
                                     {"role": "assistant",
                                      "content": "Restart db-2 and retry OPS-7."}], user_id=user, thread_id=thread)
    result, elapsed = timed(mm.summarize_conversation, user_id=user, thread_id=thread,
                            model=model_for(trickle, retries=1))
    assert result.status == "summarized" and result.method == "extractive"
    assert "OPS-7" in result.summary.content
    assert any("timed out" in e for e in result.errors)
    assert elapsed < 2 * TIMEOUT + BACKOFF  # one model call (two attempts), then the extractive summary


def test_tool_augmentation_falls_back_within_the_timeout(mm, trickle: Server) -> None:
    def restart_service(name: str) -> str:
        """Restart a service by name."""
        return name

    tb = Toolbox(mm, namespace=f"timeout-{uuid.uuid4().hex[:6]}", llm=model_for(trickle))
    _, elapsed = timed(tb.register_tool, restart_service, augment=True)
    assert elapsed < TIMEOUT + BACKOFF
    assert tb.get("restart_service").description == "Restart a service by name."


def test_an_agent_turn_gives_a_clear_error_within_the_timeout(mm, user: str, thread: str, trickle: Server) -> None:
    agent = MemoryAgent(mm, Toolbox(mm, namespace=f"timeout-{uuid.uuid4().hex[:6]}"), model_for(trickle),
                        extract_with_model=False, register_memory_tools=False)
    outcome, elapsed = timed(agent.run, "What is the status of OPS-7?", user_id=user, thread_id=thread)
    assert isinstance(outcome, LLMError) and "timed out" in str(outcome)
    assert elapsed < TIMEOUT + BACKOFF


def test_cli_consolidate_exits_with_the_extractive_summary(pg_uri: str, trickle: Server, fresh_schema: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AGENTMEM_DATABASE_URL": pg_uri, "AGENTMEM_SCHEMA": fresh_schema,
           "AGENTMEM_EMBEDDER": "hash", "AGENTMEM_LLM_MODEL": "m", "AGENTMEM_LLM_BASE_URL": trickle.url,
           "AGENTMEM_LLM_TIMEOUT": str(TIMEOUT), "AGENTMEM_LLM_MAX_RETRIES": "0"}
    seed = ("from memory import MemoryManager, HashEmbedder\n"
            "with MemoryManager.open(embedder=HashEmbedder()) as mm:\n"
            "    mm.write_messages([{'role': 'user', 'content': 'Deploy DEP-9 to eu-west.'},\n"
            "                       {'role': 'assistant', 'content': 'Deploying DEP-9 now.'}], user_id='u1', thread_id='t1')\n")
    subprocess.run([sys.executable, "-c", seed], env=env, check=True, timeout=300)
    # Before the fix the process never exited (a worker thread kept reading the trickle).
    proc = subprocess.run([sys.executable, "-m", "memory.cli.main", "consolidate", "t1", "--user", "u1", "--json"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    [row] = json.loads(proc.stdout)
    assert row["status"] == "summarized" and row["method"] == "extractive"
    assert trickle.connections == 1
