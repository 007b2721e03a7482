"""How long a summary takes against an endpoint that trickles 1 byte/s.

Runs the trickling servers of ``tests/test_llm_timeout.py`` (one trickles the status
line itself, one a body it announced) on 127.0.0.1 and times ``Summarizer.summarize``
with ``chat_model_from_env`` at ``--timeout`` seconds and ``--retries`` retries: the
model call gives up after (1 + retries) attempts and the extractive summary lands.

    python bench/llm_timeout.py                  # ~15 s
    python bench/llm_timeout.py --timeout 3 --retries 0
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from memory import Settings  # noqa: E402
from memory.llm.chat import chat_model_from_env  # noqa: E402
from memory.consolidation.summarizer import Summarizer  # noqa: E402
from test_llm_timeout import Server  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--timeout", type=float, default=3.0)
    parser.add_argument("--retries", type=int, default=1)
    args = parser.parse_args()
    print(f"AGENTMEM_LLM_TIMEOUT={args.timeout:g} AGENTMEM_LLM_MAX_RETRIES={args.retries}")
    for mode in ("headers", "body"):
        server = Server(mode)
        model = chat_model_from_env(Settings(database_url="unused", llm_model="m", llm_base_url=server.url,
                                             llm_timeout=args.timeout, llm_max_retries=args.retries))
        start = time.monotonic()
        result = Summarizer(model).summarize(["[2026-03-02 09:00] user: Deploy DEP-9 to eu-west."])
        print(f"trickled {mode:<7}: summary after {time.monotonic() - start:5.2f} s, method {result.method}, "
              f"{server.connections} attempts")
        server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
