"""The inspector's pages at 100,000 messages: server and browser timings, and screenshots.

A throwaway embedded server gets one user with a ``--messages`` thread (default
100,000; user/assistant turns, a tool call with its result every fifth turn), written
in time order over the last 35 days and consolidated every ``--chunk`` messages
(extractive summariser, through ``summarize_conversation``; each summary is then
back-dated to just after its last source, as if it had been made then, so the usage
chart replays a real history), the last 200 messages left live (then ``VACUUM (ANALYZE)``, as autovacuum leaves a table
at rest); plus ``--users`` small
users (three threads each, one consolidated) for the overview, and a few facts. Then
``agentmem ui`` runs as a subprocess on it and every page is fetched:

* **server**: the whole response over HTTP (``httpx``), ``--rounds`` times, p50 / max;
* **browser**: headless Chromium (Selenium, ``/usr/bin/chromium``) loading the page,
  from navigation start to the load event (Navigation Timing), p50 of ``--rounds``.

The pages: the overview, the big thread (newest page; the oldest; every row at the
deepest page), its context usage chart, a summary of ``--chunk`` messages, that summary
expanded in place (its first 100 originals), the facts and a search. Screenshots of
the main pages go to ``--screenshots`` (default ``docs/inspector``; small palette PNGs).

    python bench/inspector_pages.py                       # 100k messages, ~10 min on 2 busy cores
    python bench/inspector_pages.py --messages 5000 --chunk 1000 --screenshots /tmp/shots   # quick
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (Timer, base_parser, embedded_server, log, open_manager, percentiles, print_load,  # noqa: E402
                     print_table, write_json)

import httpx  # noqa: E402
import psycopg  # noqa: E402
import psycopg.sql  # noqa: E402

from memory import HashEmbedder  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
USER, THREAD = "dana", "support-100k"
LIVE = 200


def big_thread(n: int, start: datetime, step: timedelta) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    turn = 0
    while len(rows) < n:
        at = start + step * len(rows)
        rows.append({"role": "user", "content": f"Turn {turn}: the nightly export EXP-{2000 + turn % 900} failed "
                                                 f"again on volume v{turn % 17}; what now?", "created_at": at})
        if turn % 5 == 4:
            cid = f"call-{turn}"
            rows.append({"role": "assistant", "content": "", "created_at": at + step / 3,
                         "tool_calls": [{"id": cid, "name": "check_quota", "args": {"volume": f"v{turn % 17}"}}]})
            rows.append({"role": "tool", "content": f"volume v{turn % 17}: {80 + turn % 20}% used",
                         "tool_call_id": cid, "tool_name": "check_quota", "created_at": at + step / 2})
        rows.append({"role": "assistant", "content": f"Lower the retention of v{turn % 17} to {7 + turn % 3} days "
                                                      "and re-run the export.", "created_at": at + step * 2 / 3})
        turn += 1
    return rows  # whole turns: n messages, or up to two more


def seed(mm: Any, messages: int, chunk: int, users: int) -> dict[str, Any]:
    now = datetime.now(timezone.utc)
    step = timedelta(days=35) / messages
    rows = big_thread(messages, now - timedelta(days=35), step)
    head, tail = rows[:-LIVE], rows[-LIVE:]
    done = 0
    summaries = []
    started = time.monotonic()
    with Timer() as t:
        while done < len(head):
            part = head[done:done + chunk]
            # keep whole turns together: never end a chunk between a call and its result
            while len(part) < len(head) - done and head[done + len(part)]["role"] != "user":
                part.append(head[done + len(part)])
            for i in range(0, len(part), 5000):
                mm.write_messages(user_id=USER, thread_id=THREAD, messages=part[i:i + 5000], embed=False)
            result = mm.summarize_conversation(thread_id=THREAD, user_id=USER)
            summaries.append(result.summary)
            done += len(part)
            log(f"  {done:,} / {len(head):,} messages written and consolidated ({time.monotonic() - started:.0f} s)")
        mm.write_messages(user_id=USER, thread_id=THREAD, messages=tail, embed=False)
    # As if each consolidation had run just after its last source (DBA fix-up of a bench).
    with mm.db.connection() as conn:
        for s in summaries:
            conn.execute("UPDATE summary_memory SET created_at = last_message_at + interval '1 minute'"
                         " WHERE summary_id = %s", (s.summary_id,))
    for u in range(users):
        uid = f"user-{u:03d}"
        for k in range(3):
            small = [{"role": "user" if j % 2 == 0 else "assistant", "content": f"{uid} thread {k} message {j}",
                      "created_at": now - timedelta(days=30 - (u + k) % 30, minutes=60 - j)} for j in range(10 + u % 7)]
            mm.write_messages(user_id=uid, thread_id=f"t{k}", messages=small, embed=False)
        mm.summarize_conversation(thread_id="t0", user_id=uid, keep_recent=1)
    first = mm.remember("stable_fact", "Works at Northwind in Berlin", user_id=USER).fact
    mm.remember("stable_fact", "Works at Northwind in Munich", user_id=USER, replaces=first.id)
    mm.remember("preference", "Prefers answers with the exact commands", user_id=USER)
    mm.remember("constraint", "Cannot restart the export server during office hours", user_id=USER)
    return {"seconds": t.seconds, "summaries": summaries}


class Server:
    def __init__(self, uri: str, schema: str, port: int) -> None:
        env = {**os.environ, "AGENTMEM_DATABASE_URL": uri, "AGENTMEM_SCHEMA": schema, "AGENTMEM_EMBEDDER": "hash",
               "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        env.pop("AGENTMEM_UI_TOKEN", None)
        self.base = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen([sys.executable, "-m", "memory.cli", "ui", "--port", str(port)], env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for _ in range(600):
            try:
                httpx.get(self.base + "/favicon-none", timeout=5)
                return
            except httpx.TransportError:
                if self.proc.poll() is not None:
                    raise SystemExit(f"agentmem ui exited: {self.proc.stderr.read() if self.proc.stderr else ''}")
                time.sleep(0.2)
        raise SystemExit("agentmem ui did not start")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=20)


def browser() -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1200,860",
                "--hide-scrollbars"):
        options.add_argument(arg)
    return webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))


def load_ms(driver: Any, url: str) -> float:
    driver.get(url)
    return float(driver.execute_script(
        "const t = performance.getEntriesByType('navigation')[0]; return t.loadEventEnd - t.startTime;"))


def screenshot(driver: Any, path: Path) -> int:
    """A viewport screenshot as a small palette PNG; returns its size in bytes."""
    from io import BytesIO

    from PIL import Image

    image = Image.open(BytesIO(driver.get_screenshot_as_png())).convert("RGB")
    image.quantize(colors=64, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)
    return path.stat().st_size


def main() -> None:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000, help="messages of the big thread")
    parser.add_argument("--chunk", type=int, default=10_000, help="messages per consolidation")
    parser.add_argument("--users", type=int, default=40, help="small users for the overview")
    parser.add_argument("--rounds", type=int, default=5, help="fetches of each page")
    parser.add_argument("--port", type=int, default=8799)
    parser.add_argument("--screenshots", default=str(ROOT / "docs" / "inspector"), help="directory ('' : none)")
    args = parser.parse_args()

    with embedded_server() as uri:
        mm = open_manager(uri, embedder=HashEmbedder())
        log(f"seeding {args.messages:,} messages (consolidated every {args.chunk:,}) and {args.users} users")
        with mm.db.connection() as conn:  # the HNSW index is built once after the load, from its own definition
            indexdef = conn.execute("SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema()"
                                    " AND indexname = 'conversational_memory_embedding'").fetchone()[0]
            conn.execute("DROP INDEX conversational_memory_embedding")
        seeded = seed(mm, args.messages, args.chunk, args.users)
        summary = seeded["summaries"][len(seeded["summaries"]) // 2]
        with Timer() as t:  # written with embed=False for speed: embed them now, not in the first search
            embedded = mm.embed_pending_messages()
            with mm.db.connection() as conn:
                conn.execute(indexdef)
        log(f"embedded {embedded:,} messages and built their HNSW index in {t.seconds:.0f} s")
        with psycopg.connect(uri, autocommit=True) as conn:  # what autovacuum does to a table at rest
            conn.execute(psycopg.sql.SQL("VACUUM (ANALYZE) {}.conversational_memory").format(
                psycopg.sql.Identifier(mm.db.schema)))
            conn.execute(psycopg.sql.SQL("ANALYZE {}.summary_memory").format(psycopg.sql.Identifier(mm.db.schema)))
        server = Server(uri, mm.db.schema, args.port)
        q = lambda **p: "?" + urlencode(p)  # noqa: E731
        pages = [
            ("overview", "/"),
            ("thread, newest page", "/thread" + q(user=USER, thread=THREAD)),
            ("thread, oldest page", "/thread" + q(user=USER, thread=THREAD, page=1)),
            ("thread, every row, deepest page", "/thread" + q(user=USER, thread=THREAD, raw=1)),
            ("context usage per turn", "/thread/usage" + q(user=USER, thread=THREAD)),
            (f"summary of {summary.source_count:,} messages", "/summary" + q(user=USER, id=summary.summary_id)),
            ("summary expanded (first 100)", "/summary/sources" + q(user=USER, id=summary.summary_id)),
            ("facts", "/facts" + q(user=USER)),
            ("search", "/search" + q(user=USER, q="export failed volume v3 retention")),
        ]
        driver = browser()
        rows, results = [], []
        try:
            for name, path in pages:
                httpx.get(server.base + path, timeout=120)  # warm
                server_s, sizes = [], 0
                for _ in range(args.rounds):
                    with Timer() as t:
                        r = httpx.get(server.base + path, timeout=120)
                    r.raise_for_status()
                    server_s.append(t.seconds)
                    sizes = len(r.content)
                browser_ms = [load_ms(driver, server.base + path) for _ in range(args.rounds)]
                sp, bp = percentiles(server_s), percentiles([b / 1000 for b in browser_ms])
                rows.append((name, sp["p50_ms"], max(server_s) * 1000, bp["p50_ms"], sizes // 1024))
                results.append({"page": name, "path": path, "server": sp, "browser": bp, "bytes": sizes})
            shots: dict[str, int] = {}
            if args.screenshots:
                out = Path(args.screenshots)
                out.mkdir(parents=True, exist_ok=True)
                small = "user-000"
                for file, path in (("overview", "/"),
                                   ("thread", "/thread" + q(user=USER, thread=THREAD)),
                                   ("thread_raw", "/thread" + q(user=USER, thread=small, raw=1)),
                                   ("usage", "/thread/usage" + q(user=USER, thread=THREAD)),
                                   ("summary", "/summary" + q(user=USER, id=summary.summary_id)),
                                   ("facts", "/facts" + q(user=USER)),
                                   ("search", "/search" + q(user=USER, q="export failed volume v3 retention"))):
                    driver.get(server.base + path)
                    shots[file] = screenshot(driver, out / f"{file}.png")
                # a summary card expanded in place
                driver.get(server.base + "/thread" + q(user=USER, thread=THREAD, page=1))
                driver.execute_script("document.querySelector('details.expand').open = true;")
                time.sleep(1.5)
                driver.execute_script("document.querySelector('details.expand').parentNode.scrollIntoView();")
                shots["expanded"] = screenshot(driver, out / "expanded.png")
        finally:
            driver.quit()
            server.stop()
            mm.close()
    print_table(f"inspector pages at {args.messages:,} messages in one thread ({len(seeded['summaries'])} summaries, "
                f"{LIVE} live) + {args.users} users x 3 threads; {args.rounds} fetches each",
                ["page", "server p50 ms", "server max ms", "browser load p50 ms", "KiB"], rows)
    print(f"\nseeding took {seeded['seconds']:.0f} s")
    if shots:
        print(f"screenshots in {args.screenshots}: " + ", ".join(f"{k}.png {v // 1024} KiB" for k, v in shots.items()))
    print_load()
    write_json(args.json, {"messages": args.messages, "chunk": args.chunk, "users": args.users, "pages": results})


if __name__ == "__main__":
    main()
