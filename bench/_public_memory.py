"""The memory half of ``bench/public_retrieval.py``: ``search_memory`` on LoCoMo next to plain baselines.

Reads ``../shared/data/locomo/locomo_dev3.json`` (three LoCoMo conversations, CC BY-NC
4.0, evaluation only, never copied into the project). Every turn is written through the
public API (``write_messages``: one user per conversation, one thread per session, the
speaker as ``name``, the text with a shared photo's caption as content, each turn 30 s
after the previous one from the session's date). Every category 1-4 question is asked at
the time of the last session.

Computed in the same run, over the same turns written as ``speaker (date): text``:

* **dense**: MiniLM (the same backend as the library) cosine over the turns;
* **bm25**: ``bm25s`` (Lucene BM25, k1 1.5, b 0.75, English stemming and stop words);
* **hybrid**: reciprocal rank fusion of the two, k = 60.

Printed: R@1/5/10 of the evidence turns, NDCG@5, MRR@10, tokens per question of the
top 10 (``search_memory`` as its agent tool renders them, the baselines as their texts
one per line) against the whole history, and per-query latency (embedding included),
per category and per conversation; then ``search_memory`` again after every session was
consolidated (``summarize_conversation``, the offline extractive summariser), counting
evidence found through message hits only.

``search_memory``'s weights were fitted on conv-26 and conv-30; conv-41 is held out.

    .venv/bin/python bench/_public_memory.py                # ~4-8 min on 2 cores
    .venv/bin/python bench/_public_memory.py --json /tmp/memory.json
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
from _common import (base_parser, bench_embedder, embedded_server, log, open_manager, percentiles,  # noqa: E402
                     print_load, print_table, write_json)

from memory.agent.search_tool import DEFAULT_TOOL_MIN_SCORE, format_hits  # noqa: E402
from memory.context.tokens import count_tokens  # noqa: E402

DATA = Path(__file__).resolve().parent.parent / ".." / "shared" / "data" / "locomo" / "locomo_dev3.json"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
RRF_K = 60
K = 10


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--locomo", default=str(DATA), help="the LoCoMo JSON file")
    p.add_argument("--no-consolidation", action="store_true", help="skip the run after consolidating every session")


def session_time(text: str) -> datetime:
    """'1:56 pm on 8 May, 2023' -> an aware datetime."""
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=timezone.utc)


def sessions(conv: dict[str, Any]) -> list[tuple[int, str, datetime, list[dict[str, Any]]]]:
    out = []
    for key, turns in conv.items():
        m = re.fullmatch(r"session_(\d+)", key)
        if m and isinstance(turns, list) and turns:
            when = conv[f"{key}_date_time"]
            out.append((int(m.group(1)), when, session_time(when), turns))
    return sorted(out, key=lambda s: s[0])


def said(turn: dict[str, Any]) -> str:
    return turn["text"] + (f" [shares a photo: {turn['blip_caption']}]" if turn.get("blip_caption") else "")


def evidence_ids(evidence: list[str]) -> set[str]:
    """Dialogue ids of the evidence; a few entries hold several ('D8:6; D9:17')."""
    return {e.strip() for item in evidence for e in re.split(r"[;,]", item) if e.strip()}


def scores(ranked: Sequence[str | None], wanted: set[str]) -> dict[str, float]:
    top = list(ranked[:K])
    out = {f"R@{k}": len(wanted & set(top[:k])) / len(wanted) for k in (1, 5, 10)}
    dcg = sum(1 / math.log2(i + 2) for i, d in enumerate(top[:5]) if d in wanted)
    idcg = sum(1 / math.log2(i + 2) for i in range(min(len(wanted), 5)))
    out["NDCG@5"] = dcg / idcg
    out["MRR"] = next((1 / (i + 1) for i, d in enumerate(top) if d in wanted), 0.0)
    return out


class Tally:
    """Per-question metrics of one method, grouped by category and conversation."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, int, dict[str, float]]] = []
        self.latency: list[float] = []

    def add(self, conv: str, cat: int, metrics: dict[str, float]) -> None:
        self.rows.append((conv, cat, metrics))

    def mean(self, keep: Callable[[str, int], bool]) -> dict[str, float]:
        chosen = [m for c, cat, m in self.rows if keep(c, cat)]
        if not chosen:
            return {}
        out = {key: statistics.fmean(m[key] for m in chosen) for key in chosen[0]}
        out["n"] = len(chosen)
        return out


def _baselines(convs: list[dict[str, Any]], embedder: Any) -> dict[str, Any]:
    import bm25s
    import Stemmer

    stemmer = Stemmer.Stemmer("english")
    out: dict[str, Any] = {}
    for conv in convs:
        turns, texts = [], []
        for _, when, _, ts in sessions(conv["conversation"]):
            for t in ts:
                turns.append(t["dia_id"])
                texts.append(f"{t['speaker']} ({when}): {said(t)}")
        vecs = np.asarray(embedder.embed(texts))
        retriever = bm25s.BM25(k1=1.5, b=0.75)
        retriever.index(bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False),
                        show_progress=False)
        out[conv["sample_id"]] = dict(dia=turns, texts=texts, vecs=vecs, bm25=retriever, stemmer=stemmer)
    return out


def _baseline_rankings(base: dict[str, Any], question: str, embedder: Any,
                       lat: dict[str, list[float]]) -> dict[str, list[int]]:
    import bm25s

    t0 = time.perf_counter()
    q = np.asarray(embedder.embed([question]))[0]
    dense = list(np.argsort(-(base["vecs"] @ q), kind="stable")[:100])
    t1 = time.perf_counter()
    tokens = bm25s.tokenize([question], stopwords="en", stemmer=base["stemmer"], show_progress=False)
    n = len(base["texts"])
    if tokens.vocab:
        docs, _ = base["bm25"].retrieve(tokens, k=min(100, n), show_progress=False)
        bm25 = [int(i) for i in docs[0]]
    else:
        bm25 = []
    t2 = time.perf_counter()
    fused: dict[int, float] = {}
    for ranking in (dense, bm25):
        for r, i in enumerate(ranking):
            fused[int(i)] = fused.get(int(i), 0.0) + 1 / (RRF_K + r + 1)
    hybrid = sorted(fused, key=lambda i: -fused[i])
    t3 = time.perf_counter()
    lat["dense"].append(t1 - t0)
    lat["bm25"].append(t2 - t1)
    lat["hybrid"].append(t3 - t0)
    return dict(dense=[int(i) for i in dense], bm25=bm25, hybrid=hybrid)


def _search_all(mm: Any, plan: list[dict[str, Any]], tally: Tally, tokens: list[int]) -> None:
    for conv in plan:
        for qa in conv["questions"]:
            t0 = time.perf_counter()
            hits = mm.search_memory(query=qa["question"], user_id=conv["user"], k=K, now=conv["now"])
            tally.latency.append(time.perf_counter() - t0)
            found = [conv["dia_of"].get(h.item.message_id) for h in hits if h.item.kind == "message"]
            tally.add(conv["user"], qa["category"], scores(found, qa["wanted"]))
            tokens.append(count_tokens(format_hits(hits)).tokens)


def _threshold(mm: Any, plan: list[dict[str, Any]]) -> dict[str, Any]:
    """Best scores of answerable (1-4) and adversarial (5, unanswerable) questions, and the
    share of each that the agent tool's default ``min_score`` keeps."""
    best: dict[str, list[float]] = {"answerable": [], "adversarial": []}
    for conv in plan:
        for group, questions in (("answerable", [q["question"] for q in conv["questions"]]),
                                 ("adversarial", conv["adversarial"])):
            for hits in mm.search_memory_many(questions, user_id=conv["user"], k=1, now=conv["now"]):
                best[group].append(hits[0].score if hits else 0.0)
    return {g: dict(n=len(v), median=statistics.median(v),
                    kept=statistics.fmean(x >= DEFAULT_TOOL_MIN_SCORE for x in v)) for g, v in best.items()} | {
        "min_score": DEFAULT_TOOL_MIN_SCORE}


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run the LoCoMo part; the result dict is what ``print_results`` prints."""
    path = Path(args.locomo)
    if not path.exists():
        return {"skipped": f"{path} not found: the LoCoMo dev data is read from ../shared/data (see its README)"}
    convs = json.loads(path.read_text())
    embedder = bench_embedder(args.backend, args.torch_threads)
    methods: tuple[str, ...] = ("search_memory", "dense", "bm25", "hybrid")
    tallies = {m: Tally() for m in methods}
    tokens: dict[str, list[int]] = {m: [] for m in methods}
    lat: dict[str, list[float]] = {"dense": [], "bm25": [], "hybrid": []}
    history_tokens: dict[str, int] = {}
    result: dict[str, Any] = {"data": str(path)}
    with embedded_server() as uri:
        mm = open_manager(uri, embedder=embedder)
        plan = []
        t0 = time.perf_counter()
        for conv in convs:
            user = conv["sample_id"]
            dia_of: dict[int | None, str] = {}
            last = None
            for number, _, start, turns in sessions(conv["conversation"]):
                msgs = [dict(role="user", name=t["speaker"], content=said(t), created_at=start + timedelta(seconds=30 * i))
                        for i, t in enumerate(turns)]
                for t, row in zip(turns, mm.write_messages(user_id=user, thread_id=f"session_{number}", messages=msgs)):
                    dia_of[row.id] = t["dia_id"]
                last = msgs[-1]["created_at"]
            questions = [dict(question=qa["question"], category=qa["category"], wanted=evidence_ids(qa["evidence"]))
                         for qa in conv["qa"] if qa.get("category") in CATEGORIES and evidence_ids(qa.get("evidence", []))]
            adversarial = [qa["question"] for qa in conv["qa"] if qa.get("category") == 5]
            plan.append(dict(user=user, dia_of=dia_of, now=last, questions=questions, adversarial=adversarial))
        result["turns"] = sum(len(p["dia_of"]) for p in plan)
        result["questions"] = sum(len(p["questions"]) for p in plan)
        log(f"{result['turns']} turns written in {time.perf_counter() - t0:.1f}s")

        base = _baselines(convs, embedder)
        for conv in plan:
            b = base[conv["user"]]
            history_tokens[conv["user"]] = count_tokens("\n".join(b["texts"])).tokens
            for qa in conv["questions"]:
                ranked = _baseline_rankings(b, qa["question"], embedder, lat)
                for name, order in ranked.items():
                    top = [b["dia"][i] for i in order]
                    tallies[name].add(conv["user"], qa["category"], scores(top, qa["wanted"]))
                    tokens[name].append(count_tokens("\n".join(b["texts"][i] for i in order[:K])).tokens)
        for name in ("dense", "bm25", "hybrid"):
            tallies[name].latency = lat[name]
        _search_all(mm, plan, tallies["search_memory"], tokens["search_memory"])
        result["threshold"] = _threshold(mm, plan)
        log("searched before consolidation")

        if not args.no_consolidation:
            t0 = time.perf_counter()
            for conv in plan:
                for thread in sorted({f"session_{n}" for n, *_ in sessions(
                        next(c for c in convs if c["sample_id"] == conv["user"])["conversation"])}):
                    mm.summarize_conversation(thread_id=thread, user_id=conv["user"])
            log(f"every session consolidated in {time.perf_counter() - t0:.1f}s")
            methods = (*methods, "search_memory consolidated")
            tallies["search_memory consolidated"] = Tally()
            tokens["search_memory consolidated"] = []
            _search_all(mm, plan, tallies["search_memory consolidated"], tokens["search_memory consolidated"])
        mm.close()

    users = [p["user"] for p in plan]
    full = statistics.fmean(history_tokens[u] for u in users)
    result.update(history_tokens=history_tokens, methods={})
    for m in methods:
        tally = tallies[m]
        entry: dict[str, Any] = {"all": tally.mean(lambda c, cat: True), "latency": percentiles(tally.latency),
                                 "tokens_per_question": statistics.fmean(tokens[m]),
                                 "share_of_history": statistics.fmean(tokens[m]) / full}
        for cat, name in CATEGORIES.items():
            entry[name] = tally.mean(lambda c, k: k == cat)
        for u in users:
            entry[u] = tally.mean(lambda c, k: c == u)
        result["methods"][m] = entry
    return result


def print_results(result: dict[str, Any]) -> None:
    if "skipped" in result:
        print(f"LoCoMo: skipped ({result['skipped']})")
        return
    metrics = ["R@1", "R@5", "R@10", "NDCG@5", "MRR"]
    groups = ["all", *CATEGORIES.values(), *[u for u in result["history_tokens"]]]
    rows = []
    for m, entry in result["methods"].items():
        for g in groups:
            v = entry[g]
            lat = entry["latency"]
            first = g == "all"
            rows.append([m if first else "", g, v["n"], *(v[k] for k in metrics),
                         f"{entry['tokens_per_question']:,.0f} ({entry['share_of_history']:.1%})" if first else "",
                         lat["p50_ms"] if first else "", lat["p95_ms"] if first else ""])
    print_table(f"LoCoMo evidence retrieval, {result['turns']} turns, {result['questions']} questions (categories 1-4), "
                f"k={K}; whole history {statistics.fmean(result['history_tokens'].values()):,.0f} tokens per conversation",
                ["method", "group", "n", *metrics, "tokens/q (of history)", "p50 ms", "p95 ms"], rows)
    t = result.get("threshold")
    if t:
        print(f"\nsearch_memory's best score: answerable median {t['answerable']['median']:.3f} "
              f"(n={t['answerable']['n']}), adversarial median {t['adversarial']['median']:.3f} "
              f"(n={t['adversarial']['n']}); at the tool's min_score {t['min_score']}: answerable kept "
              f"{t['answerable']['kept']:.1%}, adversarial kept {t['adversarial']['kept']:.1%}")


def main() -> None:
    p = base_parser(__doc__.splitlines()[0])
    add_arguments(p)
    args = p.parse_args()
    result = run(args)
    print_results(result)
    print_load()
    write_json(args.json, result)


if __name__ == "__main__":
    main()
