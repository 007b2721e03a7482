"""Where the time of one ``search_memory(q, k=10)`` goes at LoCoMo size, outside the embedder.

The three LoCoMo conversations of ``../shared/data`` are written as ``bench/peers.py``
writes them (one user per conversation, turns alternating user/assistant in one thread,
embedded by the default ONNX int8 MiniLM), then ``--queries`` LoCoMo questions (the same
sample as ``peers.py``: seed 7) run ``--rounds`` times. Each query's vector is computed
once beforehand and served from a cache, so every figure is agentmem's own part: the
whole call, and in it

* ``sent before the model``: a query not embedded yet sends BEGIN, the settings and the
  keyword statement before the model runs (``memory.store.ops.execute_ahead``); after idle
  time (``--pause``) they are handed to a helper thread instead, which sends them while the
  model runs, and this line is the hand-over;
* ``after the model``: the rest of the search, which needs the vector, and COMMIT go out
  right behind the model, in the same pipeline (``Ahead.then``), then every row is read
  (the keyword statement's, the wait for it included, and the rest's) into dicts: the
  whole exchange's time after the model;
* ``one statement``: the whole search in one round trip (``execute_last``), where the
  query's vector was cached in the embedding service (not the case here: its cache is off,
  as in ``peers.py``, so this line is empty unless that changes);
* ``rows -> candidates`` and ``ranking`` (fusion, neighbours, thread, keyword feedback,
  hits): the Python after the rows arrive;
* ``embedding service``: the embedding call around the model call (the model's own time
  taken out); the model's result is cached in this script (not in the service) unless
  ``--model-every-time``, which runs it for every search as ``peers.py`` does;
* ``rest``: validation, time phrases, speakers, the operation driver.

Then EXPLAIN (ANALYZE, BUFFERS) of both statements for the first query, as they run (the
prepared statements' generic plans, which the library asks for where the user is well
inside the exact shape), with each CTE's time.

    python bench/search_memory_profile.py                  # ~1 min
    python bench/search_memory_profile.py --rounds 5 --explain-all
    python bench/search_memory_profile.py --model-every-time --torch-threads 1   # as peers.py runs it

With the model run every time, the keyword statement runs on the server while the model
runs here, so what is left of it after the model is in the ``after the model`` line. That
takes a core for the server: with the runtime's default threads (one per core) the model
takes both, and the keyword statement, waiting for one, showed 1.95 ms beyond the model at
p50 against 0.56 with one thread (2 cores; measured when the rest of the search was an
exchange of its own).
"""

from __future__ import annotations

import random
import re
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from psycopg import sql

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import base_parser, bench_embedder, embedded_server, percentiles, print_load, print_table  # noqa: E402
from _public_data import locomo_questions, locomo_turns  # noqa: E402

from memory import MemoryManager, Settings  # noqa: E402
from memory.retrieval import embeddings as embeddings_mod  # noqa: E402
from memory.store import ops  # noqa: E402
from memory.tables import search as search_mod  # noqa: E402


class Cached:
    """The real encoder, each text embedded once; ``seconds`` is the time spent in it."""

    def __init__(self, inner: Any, *, keep: bool = True) -> None:
        self.inner, self.cache, self.seconds, self.keep = inner, {}, 0.0, keep

    def __getattr__(self, name: str) -> Any:
        if name in ("tokenize", "plan", "runs", "embed_tokens"):  # every text through embed(), the cache and the clock
            raise AttributeError(name)
        return getattr(self.inner, name)

    def embed(self, texts: list[str]) -> np.ndarray:
        t0 = time.perf_counter()
        missing = [t for t in texts if t not in self.cache or not self.keep]
        if missing:
            for t, v in zip(missing, self.inner.embed(missing), strict=True):
                self.cache[t] = v
        out = np.stack([self.cache[t] for t in texts])
        self.seconds += time.perf_counter() - t0
        return out


class Spans:
    """Time spent in a few functions, per call (wrapped in place)."""

    def __init__(self) -> None:
        self.samples: dict[str, list[float]] = {}

    def wrap(self, owner: Any, name: str, label: str, minus: Cached | None = None) -> None:
        """Time ``owner.name`` per call; ``minus``: without the time spent in that encoder meanwhile."""
        fn = getattr(owner, name)
        samples = self.samples.setdefault(label, [])

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0, m0 = time.perf_counter(), minus.seconds if minus is not None else 0.0
            try:
                return fn(*args, **kwargs)
            finally:
                samples.append(time.perf_counter() - t0 - ((minus.seconds - m0) if minus is not None else 0.0))

        setattr(owner, name, timed)

    def wrap_ahead(self, before: str, after: str) -> None:
        """Time ``ops.execute_ahead`` per call on either side of its call (the query's embedding): what
        goes out before it, and the rest of the exchange after it."""
        fn = ops.execute_ahead
        sent, rest = self.samples.setdefault(before, []), self.samples.setdefault(after, [])

        def timed(conn: Any, ahead: ops.Ahead, head: Any = ()) -> Any:
            marks: dict[str, float] = {}

            def call(*args: Any, **kwargs: Any) -> Any:
                marks["call"] = time.perf_counter()
                try:
                    return ahead.call.fn(*args, **kwargs)
                finally:
                    marks["back"] = time.perf_counter()

            t0 = time.perf_counter()
            try:
                return fn(conn, ops.Ahead(ahead.steps, ops.Call(call, ahead.call.args, ahead.call.kwargs), ahead.then),
                          head)
            finally:
                sent.append(marks["call"] - t0)
                rest.append(time.perf_counter() - marks["back"])

        ops.execute_ahead = timed


def literal(value: Any, conn: psycopg.Connection) -> str:
    if isinstance(value, np.ndarray):
        return "'[" + ",".join(repr(float(x)) for x in value) + "]'"
    return sql.Literal(value).as_string(conn)


def explain(mm: MemoryManager, user: str, steps: list[ops.Sql]) -> str:
    """EXPLAIN (ANALYZE, BUFFERS) of the last of a search's captured statements, prepared as agentmem
    prepares it, after the ones before it in the same transaction (the statement after the model
    reads what the keyword statement hands it)."""
    *before, step = steps
    values = list(step.params)
    with mm.db.connection(user) as conn:
        conn.execute("SET LOCAL hnsw.iterative_scan = strict_order")
        cur = psycopg.RawCursor(conn)
        for q in before:
            cur.execute(q.stmt, list(q.params), prepare=True)
            cur.fetchall()
        for _ in range(6):  # past PostgreSQL's five custom plans: the generic one, as in the library
            cur.execute(step.stmt, values, prepare=True)
            cur.fetchall()
        row = conn.execute("SELECT name, parameter_types::text[] FROM pg_prepared_statements WHERE statement = %s",
                           (step.stmt,)).fetchone()
        assert row is not None
        name, types = row
        args = ", ".join(f"{literal(v, conn)}::{t}" for v, t in zip(values, types, strict=True))
        plan = [r[0] for r in conn.execute(f"EXPLAIN (ANALYZE, BUFFERS) EXECUTE {name}({args})").fetchall()]
    return "\n".join(plan)


def cte_times(plan: str) -> list[tuple[str, str, str]]:
    """(CTE, its top node's actual total ms, rows) from a text plan."""
    out = []
    lines = plan.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"\s*CTE (\w+)", line)
        if m and i + 1 < len(lines):
            t = re.search(r"actual time=[\d.]+\.\.([\d.]+) rows=([\d.]+)", lines[i + 1])
            if t:
                out.append((m.group(1), t.group(1), t.group(2)))
    return out


def main() -> None:
    ap = base_parser(__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--queries", type=int, default=40)
    ap.add_argument("--explain-all", action="store_true", help="print the whole plan, not only the CTE times")
    ap.add_argument("--model-every-time", action="store_true",
                    help="run the model for every search (else each query's vector is computed once and cached)")
    ap.add_argument("--pause", type=float, default=0.0, metavar="S",
                    help="sleep S seconds before each timed search, as an agent loop is idle between its searches")
    args = ap.parse_args()
    turns, questions = locomo_turns(), locomo_questions()
    convs = sorted({t.conversation for t in turns})
    with embedded_server() as uri:
        encoder = Cached(bench_embedder("onnx", args.torch_threads), keep=not args.model_every_time)
        settings = Settings.from_env(database_url=uri, schema="agentmem", embedding_cache_size=0, pool_max_size=2)
        mm = MemoryManager.open(settings, embedder=encoder)
        for c in convs:
            conv = [x for x in turns if x.conversation == c]
            mm.write_messages([{"role": "user" if i % 2 == 0 else "assistant", "content": t.text}
                               for i, t in enumerate(conv)], user_id=f"r0-{c}", thread_id="t")
        asks = [(f"r0-{q.conversation}", q.text) for q in random.Random(7).sample(questions, args.queries)]
        captured: dict[str, list[ops.Sql]] = {}  # the first search's statements, for EXPLAIN
        ahead, last = ops.execute_ahead, ops.execute_last

        def capture_ahead(conn: Any, step: ops.Ahead, head: Any = ()) -> Any:
            then = step.then
            captured.setdefault("keyword", [step.steps[0]])

            def capture_then(result: Any) -> Any:
                later = then(result) if then is not None else []
                captured.setdefault("rest", [step.steps[0], next(q for q in later if not ops.held(q))])
                return later

            return ahead(conn, ops.Ahead(step.steps, step.call, capture_then), head)

        def capture_last(conn: Any, steps: Any) -> Any:
            captured.setdefault("one", [steps[-1]])
            return last(conn, steps)

        ops.execute_ahead, ops.execute_last = capture_ahead, capture_last
        for u, q in asks:  # warm: query vectors cached, statements prepared, speaker names cached
            mm.search_memory(q, user_id=u, k=10)
        spans = Spans()
        captured.clear()  # the statements of the first timed search, with its own parameters
        spans.wrap_ahead("sent before the model", "after the model (one exchange)")
        spans.wrap(ops, "execute_last", "one statement")
        spans.wrap(search_mod, "_candidate", "rows -> candidates")
        spans.wrap(search_mod, "_rank", "ranking")
        spans.wrap(embeddings_mod.EmbeddingService, "embed", "embedding service minus the model", minus=encoder)
        total, encoder.seconds = [], 0.0
        for _ in range(args.rounds):
            for u, q in asks:
                if args.pause:
                    time.sleep(args.pause)
                e0, t0 = encoder.seconds, time.perf_counter()
                mm.search_memory(q, user_id=u, k=10)
                total.append(time.perf_counter() - t0 - (encoder.seconds - e0))
        n = len(total)
        rows = [["own part (whole call minus the model)", *percentiles(total).values()]]
        sums = {label: sum(v) for label, v in spans.samples.items()}
        for label, v in spans.samples.items():
            if not v:  # e.g. the one statement, when every query goes in two
                continue
            if label == "rows -> candidates":  # one call per candidate row: per search, the sum
                rows.append([label + " (per search, mean)", float("nan"), float("nan"), 1000 * sums[label] / n, n])
                continue
            rows.append([label, *percentiles(v).values()])
        accounted = sum(sums.values())
        rows.append(["rest (validation, time phrases, speakers, driver; mean)", float("nan"), float("nan"),
                     1000 * (sum(total) - accounted) / n, n])
        print_table(f"search_memory(q, k=10) at LoCoMo size ({len(convs)} users, {len(turns)} turns), "
                    f"{args.queries} questions x {args.rounds} rounds; ms",
                    ["part", "p50", "p95", "mean", "n"], rows)
        plans = {label: explain(mm, asks[0][0], steps) for label, steps in captured.items()}
        mm.close()
    names = {"keyword": "the keyword statement", "rest": "the statement after the model", "one": "the one statement"}
    for label, plan in plans.items():
        print(f"\nEXPLAIN (ANALYZE, BUFFERS) of {names[label]} for {asks[0][1]!r} (user {asks[0][0]}):")
        if args.explain_all:
            print(plan)
        else:
            print_table("CTEs (a CTE's time includes the CTEs it reads first)", ["CTE", "actual ms", "rows"],
                        cte_times(plan))
            print("\n".join(line for line in plan.splitlines() if line.startswith(("Planning", "Execution"))))
    print_load()


if __name__ == "__main__":
    main()
