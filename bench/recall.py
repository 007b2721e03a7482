"""Long-memory recall: recall@1/5/10 of the evidence turns, before and after consolidation.

Generates the synthetic evaluation of ``bench/longmem_data.py`` (4 users, 300+ turns
each, facts planted among distractors), writes it through the library with the real
MiniLM model, and asks every question with ``search_memory``:

* vector, keyword and hybrid search, by question type, before consolidation and
  after the threads were consolidated the way an agent does it (whenever a thread's
  working set passes a budget, ``summarize_conversation(keep_recent=...)``);
* the fusion and window choices (linear weights, rank fusion, neighbour weight, time
  boost vs filter), tuned on the ``tune`` pool of fact families and reported on the
  ``heldout`` pool, which shares no template with it;
* the score threshold that separates unanswerable questions;
* context tokens per question (top-10 hits) against sending the whole history;
* the write-path cost of the neighbour-window index and of deferred, batched embeddings.

Each question is searched once per setting that changes the SQL (window weight, time
mode) with a large k; the fusion variants re-rank those candidates in Python with the
library's own ranking function, so what is measured is what ``search_memory`` does.

    .venv/bin/python bench/recall.py            # ~3-6 min on 2 cores
    .venv/bin/python bench/recall.py --quick    # 2 users, fewer settings
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (Timer, apply_torch_threads, base_parser, bench_embedder, embedded_server, log,  # noqa: E402
                     open_manager, print_table, write_json)
from longmem_data import Dataset, Question, generate, message_times  # noqa: E402

from memory import MemoryManager  # noqa: E402
from memory.store.ops import run  # noqa: E402
from memory.tables.search import DEFAULT_WEIGHTS, MemoryHit, SearchWeights, _Candidate, _order, _rank  # noqa: E402
from memory.agent.search_tool import format_hits  # noqa: E402
from memory.context.tokens import count_tokens  # noqa: E402

QTYPES = ("single", "context", "multi", "temporal")
KS = (1, 5, 10)


# -- loading -------------------------------------------------------------------------------
def load(mm: MemoryManager, data: Dataset, *, consolidate_over: int | None = None,
         keep_recent: int = 6) -> dict[str, Any]:
    """Write every session in time order; return the evidence ids per question and timings.

    With ``consolidate_over``, after each session a thread whose working set holds more
    than that many messages is consolidated, keeping the last ``keep_recent`` turns.
    """
    evidence: dict[str, set[int]] = {}
    written = 0
    consolidations = 0
    with Timer() as t_write:
        for u in data.users:
            order = sorted(range(len(u.sessions)), key=lambda i: u.sessions[i].start)
            ids_of: dict[int, list[int]] = {}
            for i in order:
                s = u.sessions[i]
                msgs = [dict(role=r, content=c, created_at=at) for (r, c), at in zip(s.messages, message_times(s))]
                ids_of[i] = [m.id for m in mm.write_messages(msgs, user_id=u.user, thread_id=s.thread)]
                written += len(msgs)
                if consolidate_over is not None:
                    live = len(mm.read_conversational_memory(thread_id=s.thread, user_id=u.user))
                    if live > consolidate_over:
                        res = mm.summarize_conversation(thread_id=s.thread, user_id=u.user,
                                                        keep_recent=keep_recent)  # type: ignore[attr-defined]
                        consolidations += res.status == "summarized"
            for q in u.questions:
                evidence[q.qid] = {ids_of[e.session][e.index] for e in q.evidence}
    return dict(evidence=evidence, seconds=t_write.seconds, messages=written, consolidations=consolidations)


# -- scoring -------------------------------------------------------------------------------
def message_ids(hits: Sequence[MemoryHit], k: int, summary_of: dict[int, Any] | None = None,
                evidence: set[int] | None = None) -> set[int]:
    """Message ids among the top k; with ``summary_of``, a summary hit covers its sources."""
    found = set()
    for h in hits[:k]:
        if h.item.kind == "message":
            found.add(int(h.item.id))
        elif h.item.kind == "summary" and summary_of is not None and evidence:
            found.update(e for e in evidence if summary_of.get(e) == h.item.summary_id)
    return found


def recall(runs: dict[str, list[MemoryHit]], questions: Sequence[Question], evidence: dict[str, set[int]],
           k: int, summary_of: dict[int, Any] | None = None) -> float:
    vals = []
    for q in questions:
        ev = evidence[q.qid]
        if ev:
            vals.append(len(ev & message_ids(runs[q.qid], k, summary_of, ev)) / len(ev))
    return statistics.fmean(vals) if vals else float("nan")


def search_all(mm: MemoryManager, data: Dataset, *, weights: SearchWeights, time_mode: str = "boost",
               k: int = 50) -> tuple[dict[str, list[_Candidate]], list[float]]:
    """Each question's top ``k`` as ``search_memory`` ranks them, kept as the search's candidates
    (their signals and neighbours) so that :func:`rerank` can order them again."""
    runs, latencies = {}, []
    for q in data.questions:
        with Timer() as t:
            found = run(mm.db, mm.memory_search._found_many_op([q.text], user_id=q.user, k=k, now=data.now,
                                                               time_mode=time_mode, weights=weights))[0]
            runs[q.qid] = _order(found, "hybrid", weights, q.text)[:k]
        latencies.append(t.seconds)
    return runs, latencies


def rerank(runs: dict[str, list[_Candidate]], method: str, weights: SearchWeights,
           queries: dict[str, str]) -> dict[str, list[MemoryHit]]:
    return {qid: _rank(hits, method, weights, queries[qid], len(hits)) for qid, hits in runs.items()}


def by_type_rows(label: str, runs: dict[str, list[MemoryHit]], data: Dataset, evidence: dict[str, set[int]],
                 pool: str | None, summary_of: dict[int, Any] | None = None) -> list[list[Any]]:
    rows = []
    for qtype in QTYPES + ("all",):
        qs = [q for q in data.questions if q.qtype != "unanswerable" and (qtype == "all" or q.qtype == qtype)
              and (pool is None or q.pool == pool)]
        rows.append([label, qtype, len(qs)] + [recall(runs, qs, evidence, k, summary_of) for k in KS])
    return rows


def pooled(data: Dataset, pool: str) -> list[Question]:
    return [q for q in data.questions if q.pool == pool and q.qtype != "unanswerable"]


# -- phases --------------------------------------------------------------------------------
def evaluate(mm: MemoryManager, data: Dataset, evidence: dict[str, set[int]], phase: str, quick: bool,
             summary_of: dict[int, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    log(f"[{phase}] searching {len(data.questions)} questions")
    base, lat = search_all(mm, data, weights=DEFAULT_WEIGHTS)
    texts = {q.qid: q.text for q in data.questions}
    out["latency_ms_p50"] = statistics.median(lat) * 1000
    methods = {m: rerank(base, m, DEFAULT_WEIGHTS, texts) for m in ("vector", "keyword", "hybrid")}
    rows = []
    for m, runs in methods.items():
        rows += by_type_rows(m, runs, data, evidence, None)
    print_table(f"[{phase}] recall of evidence turns by method and question type (all pools, default weights)",
                ["method", "type", "n", "R@1", "R@5", "R@10"], rows)
    out["by_type"] = rows
    if summary_of is not None:
        rows = by_type_rows("hybrid+expand", methods["hybrid"], data, evidence, None, summary_of)
        print_table(f"[{phase}] hybrid, counting a summary hit as finding the evidence it consolidated",
                    ["method", "type", "n", "R@1", "R@5", "R@10"], rows)
        out["expand"] = rows

    # Fusion variants: re-rank the same candidates.
    variants: dict[str, tuple[str, SearchWeights]] = {
        "vector only": ("vector", DEFAULT_WEIGHTS),
        "keyword only": ("keyword", DEFAULT_WEIGHTS),
    }
    for w in (0.25, 0.5, 1.0, 2.0):
        variants[f"linear kw={w}"] = ("hybrid", replace(DEFAULT_WEIGHTS, fusion="linear", keyword_weight=w))
    variants["without adjacent turns"] = ("hybrid", replace(DEFAULT_WEIGHTS, adjacent_weight=0.0))
    variants["without thread"] = ("hybrid", replace(DEFAULT_WEIGHTS, thread_weight=0.0))
    variants["message alone (neither)"] = ("hybrid", replace(DEFAULT_WEIGHTS, adjacent_weight=0.0, thread_weight=0.0))
    variants["without keyword feedback"] = ("hybrid", replace(DEFAULT_WEIGHTS, feedback_weight=0.0))
    for fw in (0.05, 0.1, 0.3):
        variants[f"keyword feedback {fw}"] = ("hybrid", replace(DEFAULT_WEIGHTS, feedback_weight=fw))
    for rk in (60, 10, 1):
        variants[f"rrf k={rk}"] = ("hybrid", replace(DEFAULT_WEIGHTS, fusion="rrf", rrf_k=rk, keyword_weight=1.0))
    rows = []
    for name, (method, w) in variants.items():
        runs = rerank(base, method, w, texts)
        rows.append([name] + [recall(runs, pooled(data, p), evidence, k) for p in ("tune", "heldout") for k in (1, 5)])
    print_table(f"[{phase}] fusion of vector and keyword scores (answerable questions)",
                ["fusion", "tune R@1", "tune R@5", "heldout R@1", "heldout R@5"], rows)
    out["fusion"] = rows

    # Window weight and time handling change the SQL: search again.
    rows = []
    nws = (0.0, 0.5) if quick else (0.0, 0.25, 0.5, 1.0)
    for nw in nws:
        runs = base if nw == DEFAULT_WEIGHTS.neighbour_weight else search_all(
            mm, data, weights=replace(DEFAULT_WEIGHTS, neighbour_weight=nw))[0]
        for method in ("keyword", "hybrid"):
            rr = rerank(runs, method, DEFAULT_WEIGHTS, texts)
            ctx = [q for q in data.questions if q.qtype == "context"]
            rows.append([f"{method} neighbour={nw}"] + [recall(rr, pooled(data, p), evidence, 5) for p in ("tune", "heldout")]
                        + [recall(rr, ctx, evidence, 5)])
    print_table(f"[{phase}] keyword window: weight of the neighbouring turns (0 = message alone)",
                ["setting", "tune R@5", "heldout R@5", "context-type R@5"], rows)
    out["window"] = rows

    rows = []
    temporal = [q for q in data.questions if q.qtype == "temporal"]
    others = [q for q in data.questions if q.qtype not in ("temporal", "unanswerable")]
    off = search_all(mm, data, weights=DEFAULT_WEIGHTS, time_mode="off")[0]
    filt = search_all(mm, data, weights=DEFAULT_WEIGHTS, time_mode="filter")[0]
    settings = [("off (time words matched as text)", off, DEFAULT_WEIGHTS),
                ("filter to the range", filt, DEFAULT_WEIGHTS)]
    for boost in (0.05, 0.15, 0.3):
        settings.append((f"boost +{boost}", base, replace(DEFAULT_WEIGHTS, time_boost=boost)))
    for name, runs, w in settings:
        rr = rerank(runs, "hybrid", w, texts)
        rows.append([name] + [recall(rr, temporal, evidence, k) for k in KS] + [recall(rr, others, evidence, 5)])
    print_table(f"[{phase}] time expressions (hybrid): temporal questions, and the others unaffected?",
                ["time handling", "temporal R@1", "R@5", "R@10", "non-temporal R@5"], rows)
    out["time"] = rows

    # Unanswerable: the best score, and a threshold chosen on tune, checked on heldout.
    hybrid = methods["hybrid"]
    top = {q.qid: (hybrid[q.qid][0].score if hybrid[q.qid] else 0.0) for q in data.questions}

    def reject_rate(qs: list[Question], t: float) -> float:
        return statistics.fmean(top[q.qid] < t for q in qs)

    def kept_recall(qs: list[Question], t: float) -> float:
        cut = {q.qid: [h for h in hybrid[q.qid] if h.score >= t] for q in qs}
        return recall(cut, qs, evidence, 5)

    grid = [round(0.25 + 0.025 * i, 3) for i in range(17)]
    un = {p: [q for q in data.questions if q.qtype == "unanswerable" and q.pool == p] for p in ("tune", "heldout")}
    ans = {p: pooled(data, p) for p in ("tune", "heldout")}
    best = max(grid, key=lambda t: reject_rate(un["tune"], t) + kept_recall(ans["tune"], t))
    rows = []
    for t in sorted({0.3, 0.35, 0.4, 0.45, 0.5, best}):
        rows.append([f"min_score={t}" + (" (chosen on tune)" if t == best else "")]
                    + [v for p in ("tune", "heldout")
                       for v in (reject_rate(un[p], t), 1 - reject_rate(ans[p], t), kept_recall(ans[p], t))])
    ua = [top[q.qid] for q in data.questions if q.qtype == "unanswerable"]
    aa = [top[q.qid] for q in data.questions if q.qtype != "unanswerable"]
    def auc(pool: str) -> float:
        pos = [top[q.qid] for q in ans[pool]]
        neg = [top[q.qid] for q in un[pool]]
        return statistics.fmean((p > n) + 0.5 * (p == n) for p in pos for n in neg)

    print(f"\n[{phase}] best hybrid score: answerable median {statistics.median(aa):.3f}, "
          f"unanswerable median {statistics.median(ua):.3f}; ROC AUC of that score for answerable vs "
          f"unanswerable: tune {auc('tune'):.3f}, heldout {auc('heldout'):.3f}")
    out["auc"] = dict(tune=auc("tune"), heldout=auc("heldout"))
    print_table(f"[{phase}] threshold: unanswerable questions left empty vs answerable ones kept (hybrid)",
                ["threshold", "tune unans. empty", "ans. non-empty", "R@5", "heldout unans. empty",
                 "ans. non-empty", "R@5"], rows)
    out["threshold"] = dict(best=best, rows=rows)

    # Context cost: the top-10 hits against the whole history.
    hist_tokens = {}
    for u in data.users:
        lines = [f"[{at:%Y-%m-%d}] {r}: {c}" for s in u.sessions for (r, c), at in zip(s.messages, message_times(s))]
        hist_tokens[u.user] = count_tokens("\n".join(lines)).tokens
    ctx = [count_tokens(format_hits(hybrid[q.qid][:10])).tokens for q in data.questions]
    full = [hist_tokens[q.user] for q in data.questions]
    print(f"\n[{phase}] context tokens per question: top-10 hits as the search_memory tool renders them {statistics.fmean(ctx):,.0f} "
          f"vs full history {statistics.fmean(full):,.0f} ({statistics.fmean(full) / statistics.fmean(ctx):.0f}x less); "
          f"search latency p50 {out['latency_ms_p50']:.1f} ms")
    out["tokens"] = dict(top10=statistics.fmean(ctx), full=statistics.fmean(full))
    return out


def write_path(uri: str, embedder: Any, n: int, rounds: int = 3) -> list[list[Any]]:
    """Messages/s of writes with and without the window trigger, and of the embedding modes.

    Insert rates are the median of ``rounds`` interleaved rounds (trigger on, off, on,
    off, ...) so that load from other processes hits both sides alike.
    """
    stamp = datetime(2026, 1, 1, tzinfo=timezone.utc)

    def texts(tag: str) -> list[str]:
        return [f"{tag} message {i}: the quick note number {i * 7919 % 10007} about item {i}" for i in range(n)]

    managers = {True: open_manager(uri, schema="wp_window", embedder=embedder),
                False: open_manager(uri, schema="wp_plain", embedder=embedder)}
    with managers[False].db.connection() as conn:
        conn.execute("ALTER TABLE conversational_memory DISABLE TRIGGER conversational_context_insert")
    rates: dict[tuple[int, bool], list[float]] = {}
    for r in range(rounds):
        for batch in (1, 20):
            for trigger, mm in managers.items():
                msgs = texts(f"r{r}-{batch}")
                with Timer() as t:
                    for i in range(0, n, batch):
                        mm.write_messages([
                            dict(role="user", content=c, created_at=stamp + timedelta(seconds=j))
                            for j, c in enumerate(msgs[i:i + batch],
                                                  start=i)], user_id=f"wp-{r}", thread_id=f"t{i % 5}", embed=False)
                rates.setdefault((batch, trigger), []).append(n / t.seconds)
    rows: list[list[Any]] = []
    for batch in (1, 20):
        on, off = statistics.median(rates[(batch, True)]), statistics.median(rates[(batch, False)])
        rows.append([f"insert, no embedding, {batch}/call", off, on, f"{on / off - 1:+.0%}"])
    mm = managers[True]
    msgs = texts("embed-now")
    with Timer() as t_now:
        for c in msgs:
            mm.write_messages([dict(role="user", content=c)], user_id="wp-embed-now", thread_id="t")
    msgs = texts("embed-later")
    with Timer() as t_ins:
        for c in msgs:
            mm.write_messages([dict(role="user", content=c)], user_id="wp-embed-later", thread_id="t", embed=False)
    with Timer() as t_emb:
        done = mm.embed_pending_messages(user_id="wp-embed-later")
    assert done == n
    rows.append(["insert + embed each message (1/call)", "", n / t_now.seconds, ""])
    rows.append(["insert (1/call), embed later in batches", "", n / (t_ins.seconds + t_emb.seconds), ""])
    rows.append(["  of which the write path alone", "", n / t_ins.seconds, ""])
    for m in managers.values():
        m.close()
    return rows


def main() -> None:
    parser = base_parser(__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 users and fewer settings")
    parser.add_argument("--write-n", type=int, default=200, help="messages per write-path measurement")
    # One torch thread by default: on a shared 2-core machine torch's default (one per
    # core) spin-waits and embeds a single sentence several times slower.
    parser.set_defaults(torch_threads=1)
    args = parser.parse_args()
    import signal

    apply_torch_threads(args.torch_threads)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the embedded server on kill
    data = generate(seed=args.seed, n_users=2 if args.quick else 4)
    n_turns = [sum(len(s.messages) for s in u.sessions) // 2 for u in data.users]
    print(f"dataset: {len(data.users)} users, {data.n_messages} messages ({min(n_turns)}-{max(n_turns)} turns per user), "
          f"{len(data.questions)} questions: " + ", ".join(
              f"{t} {sum(q.qtype == t for q in data.questions)}" for t in QTYPES + ("unanswerable",)))
    print(f"pools: tune {sum(q.pool == 'tune' for q in data.questions)}, "
          f"heldout {sum(q.pool == 'heldout' for q in data.questions)} questions (disjoint fact templates)")
    embedder = bench_embedder(args.backend, getattr(args, "torch_threads", 0))
    results: dict[str, Any] = {}
    with embedded_server() as uri:
        log("write path")
        rows = write_path(uri, embedder, args.write_n)
        print_table("write path: messages/s (MiniLM, one embedded PostgreSQL, shared 2-core machine; "
                    "insert rates: median of 3 interleaved rounds)",
                    ["operation", "window off", "window on", "cost"], rows)
        results["write_path"] = rows

        mm = open_manager(uri, schema="lm_before", embedder=embedder)
        loaded = load(mm, data)
        print(f"\nloaded {loaded['messages']} messages in {loaded['seconds']:.1f} s "
              f"({loaded['messages'] / loaded['seconds']:.0f} messages/s, one batch per session, MiniLM)")
        results["before"] = evaluate(mm, data, loaded["evidence"], "before consolidation", args.quick)
        mm.close()
        service = mm.embeddings

        mm = open_manager(uri, schema="lm_after", embedder=embedder)
        mm.store.embeddings = service  # same model: reuse its cache (the texts were embedded before)
        if not hasattr(mm, "summarize_conversation"):
            print("\nconsolidation is not available in this tree: 'after consolidation' not measured")
        else:
            loaded = load(mm, data, consolidate_over=60, keep_recent=6)
            with mm.db.connection() as conn:
                summary_of = dict(conn.execute(
                    "SELECT id, summary_id FROM conversational_memory WHERE summary_id IS NOT NULL").fetchall())
                n_sum = conn.execute("SELECT count(*) FROM summary_memory").fetchone()[0]
            print(f"\nafter consolidation: {loaded['consolidations']} consolidations, {n_sum} summaries, "
                  f"{len(summary_of)}/{loaded['messages']} messages summarized "
                  f"({len(summary_of) / loaded['messages']:.0%}); evidence summarized: "
                  f"{sum(e in summary_of for ev in loaded['evidence'].values() for e in ev)}"
                  f"/{sum(len(ev) for ev in loaded['evidence'].values())}")
            results["after"] = evaluate(mm, data, loaded["evidence"], "after consolidation", args.quick, summary_of)
        mm.close()
    write_json(args.json, results)


if __name__ == "__main__":
    main()
