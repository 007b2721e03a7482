"""Helpers for the inspector tests: `agentmem ui` as a real subprocess, and headless Chromium.

``UiServer`` starts ``python -m memory.cli ui`` on 127.0.0.1 and a free port against a
given database and schema (the deterministic hash embedder: these tests check pages,
not retrieval quality) and waits until it answers. ``chromium()`` is Selenium driving
the Debian ``chromium`` and ``chromedriver`` (``./dev test`` installs them).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class UiServer:
    """``agentmem ui`` in a subprocess; ``base`` is its address."""

    def __init__(self, conninfo: str, schema: str, *args: str, host: str = "127.0.0.1",
                 env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.host = host
        self.base = f"http://{host}:{self.port}"
        self.env = {**os.environ, "AGENTMEM_DATABASE_URL": conninfo, "AGENTMEM_SCHEMA": schema,
                    "AGENTMEM_EMBEDDER": "hash", **(env or {})}
        for key in ("AGENTMEM_LLM_MODEL", "AGENTMEM_LLM_BASE_URL", "AGENTMEM_UI_TOKEN"):
            if not env or key not in env:
                self.env.pop(key, None)
        self.args = ["--host", host, "--port", str(self.port), *args]
        self.proc: subprocess.Popen[str] | None = None

    def run(self, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """Run the command to its end (for a start that must be refused)."""
        return subprocess.run([sys.executable, "-m", "memory.cli", "ui", *self.args], env=self.env,
                              capture_output=True, text=True, timeout=timeout)

    def start(self, timeout: float = 90) -> "UiServer":
        self.proc = subprocess.Popen([sys.executable, "-m", "memory.cli", "ui", *self.args], env=self.env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                out, err = self.proc.communicate()
                raise RuntimeError(f"agentmem ui exited with {self.proc.returncode}: {err or out}")
            try:
                httpx.get(self.base + "/", timeout=5, headers=self.headers)
                return self
            except httpx.TransportError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"agentmem ui did not answer on {self.base} within {timeout:.0f} s")

    @property
    def headers(self) -> dict[str, str]:
        token = self.env.get("AGENTMEM_UI_TOKEN")
        return {"Authorization": f"Bearer {token}"} if token else {}

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> "UiServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def chromium(width: int = 1280, height: int = 1000) -> Any:
    """Headless Chromium from the Debian packages, through Selenium (no driver download)."""
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        raise RuntimeError("the inspector's browser tests need /usr/bin/chromium and /usr/bin/chromedriver: "
                           "`./dev test` installs them (apt-get install -y chromium chromium-driver, as root)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                f"--window-size={width},{height}", "--disable-extensions", "--no-first-run"):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    driver.set_page_load_timeout(60)
    return driver
