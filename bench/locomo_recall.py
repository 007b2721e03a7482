"""LoCoMo evidence recall of ``search_memory`` on the public LoCoMo conversations.

Reads ``../shared/data/locomo/locomo_dev3.json`` (three LoCoMo conversations, CC BY-NC
4.0, evaluation only: never copied into the project), writes every turn through the
public API (``write_messages``: one user per conversation, one thread per session, the
speaker as the message's ``name`` and the text with a shared photo's caption appended as
its content, each turn 30 s after the
previous one from the session's date), and asks every category 1-4 question (multi-hop,
temporal, open-domain, single-hop; 5 is adversarial) with ``search_memory(question, user,
k=10, now=<time of the last session>)``. Recall@k of a question is the share of its
evidence turns among the top k message hits; the table gives the mean per category and
overall, for hybrid, vector and keyword search, and the search latency.

    .venv/bin/python bench/locomo_recall.py                 # ~3-5 min on 2 cores
    .venv/bin/python bench/locomo_recall.py --json /tmp/locomo.json
"""

from __future__ import annotations

import json
import re
import statistics
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (Timer, apply_torch_threads, base_parser, bench_embedder, embedded_server, log, open_manager,  # noqa: E402
                     percentiles, print_load, print_table, write_json)


DATA = Path(__file__).resolve().parent.parent / ".." / "shared" / "data" / "locomo" / "locomo_dev3.json"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
KS = (1, 5, 10)


def session_time(text: str) -> datetime:
    """'1:56 pm on 8 May, 2023' -> an aware datetime."""
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=timezone.utc)


def sessions(conv: dict[str, Any]) -> list[tuple[int, datetime, list[dict[str, Any]]]]:
    out = []
    for key, turns in conv.items():
        m = re.fullmatch(r"session_(\d+)", key)
        if m and isinstance(turns, list) and turns:
            out.append((int(m.group(1)), session_time(conv[f"{key}_date_time"]), turns))
    return sorted(out)


def turn_text(turn: dict[str, Any]) -> str:
    """What was said, with a shared photo's caption; the speaker goes into ``name``."""
    text = turn["text"]
    if turn.get("blip_caption"):
        text += f" [shares a photo: {turn['blip_caption']}]"
    return text


def evidence_ids(evidence: list[str]) -> set[str]:
    """Dialogue ids of the evidence; a few entries hold several ('D8:6; D9:17')."""
    return {e.strip() for item in evidence for e in re.split(r"[;,]", item) if e.strip()}


def main() -> None:
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--data", default=str(DATA), help="the LoCoMo JSON file")
    p.add_argument("--methods", default="hybrid,vector,keyword")
    args = p.parse_args()
    convs = json.loads(Path(args.data).read_text())
    methods = args.methods.split(",")
    minilm = bench_embedder(args.backend, args.torch_threads)
    threads = args.torch_threads
    recall: dict[tuple[str, int, int], list[float]] = {}
    latency: dict[str, list[float]] = {m: [] for m in methods}
    n_turns = n_questions = 0
    with embedded_server() as uri:
        mm = open_manager(uri, embedder=minilm)
        with Timer() as ingest:
            plan = []
            for conv in convs:
                user = conv["sample_id"]
                dia_of: dict[int, str] = {}
                last = None
                for number, start, turns in sessions(conv["conversation"]):
                    msgs = [dict(role="user", name=t["speaker"], content=turn_text(t),
                                 created_at=start + timedelta(seconds=30 * i))
                            for i, t in enumerate(turns)]
                    for t, row in zip(turns, mm.write_messages(msgs, user_id=user, thread_id=f"session_{number}")):
                        dia_of[row.id] = t["dia_id"]
                    n_turns += len(turns)
                    last = msgs[-1]["created_at"]
                plan.append((user, dia_of, last, conv["qa"]))
        log(f"{n_turns} turns written in {ingest.seconds:.1f}s")
        for user, dia_of, now, qas in plan:
            for qa in qas:
                if qa.get("category") not in CATEGORIES:
                    continue
                wanted = evidence_ids(qa.get("evidence", []))
                if not wanted:
                    continue
                n_questions += 1
                for method in methods:
                    t0 = time.perf_counter()
                    hits = mm.search_memory(qa["question"], user_id=user, k=max(KS), now=now, method=method)
                    latency[method].append(time.perf_counter() - t0)
                    found = [dia_of.get(h.item.message_id) for h in hits if h.item.kind == "message"]
                    for k in KS:
                        r = len(wanted & set(found[:k])) / len(wanted)
                        recall.setdefault((method, qa["category"], k), []).append(r)
                        recall.setdefault((method, 0, k), []).append(r)
        mm.close()

    rows = []
    result: dict[str, Any] = {"turns": n_turns, "questions": n_questions, "torch_threads": threads, "methods": {}}
    for method in methods:
        pct = percentiles(latency[method])
        entry: dict[str, Any] = {"latency": pct}
        for cat in (0, *CATEGORIES):
            name = CATEGORIES.get(cat, "all 1-4")
            scores = {f"R@{k}": statistics.fmean(recall[(method, cat, k)]) for k in KS}
            entry[name] = dict(scores, n=len(recall[(method, cat, 1)]))
            rows.append([method, name, len(recall[(method, cat, 1)]), *scores.values(),
                         pct["p50_ms"] if cat == 0 else "", pct["p95_ms"] if cat == 0 else ""])
        result["methods"][method] = entry
    print_table(f"LoCoMo evidence recall, {len(convs)} conversations, {n_turns} turns, {n_questions} questions "
                "(categories 1-4), search_memory k=10 at the last session's time",
                ["method", "category", "n", *(f"R@{k}" for k in KS), "p50 ms", "p95 ms"], rows)
    print_load()
    write_json(args.json, result)


if __name__ == "__main__":
    main()
