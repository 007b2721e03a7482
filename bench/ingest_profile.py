"""Where ingest time goes: write_messages next to the raw encoder, CPU of both processes.

    python bench/ingest_profile.py [--rounds 3] [--threads 1] [--fixed-run 8] [--cpu-pairs 0] [--json out.json]

The LoCoMo turns (3 conversations, 1,451 turns) as agentmem embeds them (``role:
content``), int8 ONNX MiniLM, in interleaved rounds so every mode sees the same load:

* ``raw, one call``: every text in one ``embed`` call (the limit peers.py divides by);
* ``raw, write_messages' stages``: the same texts in the calls write_messages makes
  (per conversation, stage by stage), no database: what staging alone costs;
* ``write_messages``: one call per conversation, as peers.py ingests;
* ``write_messages, no vector/keyword indexes``: the same into a schema whose HNSW and
  GIN indexes of ``conversational_memory`` are dropped: what their maintenance on the
  database side takes from the encoder (the windows and their postings, migrations 004
  and 015, are kept: the search needs them);
* ``write_messages embed=False``: the database path alone;
* each write mode's round goes into empty tables of a schema of its own, so no round
  writes a vector an index already holds (pgvector's HNSW keeps an exact duplicate as one
  more heap pointer on the element in its graph, which made later rounds' inserts cheap);
* with ``--fixed-run 8``, ``raw, one call`` and ``write_messages`` again with that many
  texts per model run instead of the planned runs (the plan before it was by tokens).

``--cpu-pairs N`` (with ``--fixed-run``) measures only the encoder: N interleaved pairs
of planned vs fixed runs, each over all texts in one call and over write_messages'
stages, and prints the median thread CPU of each (no database; CPU seconds rather than
wall time, which on a shared machine moves with the load more than with the plan).

Per mode: turns/s, its ratio to the raw one-call rate of the same round, the encoder's
CPU seconds (the thread that runs the model), the Postgres server's CPU seconds (every
process of the embedded server, from /proc) and the model's padded-token ratio.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any
from collections.abc import Callable, Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import base_parser, embedded_server, environment, log, print_table, write_json  # noqa: E402
from _public_data import locomo_turns  # noqa: E402

import psycopg  # noqa: E402

from memory import MemoryManager, Settings  # noqa: E402
from memory.retrieval import onnx_minilm  # noqa: E402
from memory.retrieval.onnx_minilm import OnnxMiniLMEmbedder  # noqa: E402
from memory.settings import default_cache_dir  # noqa: E402
from memory.tables.conversation import stages  # noqa: E402

DROP = ("conversational_memory_embedding", "conversational_memory_tsv")
TICK = os.sysconf("SC_CLK_TCK")


class Probe:
    """The encoder, counting its thread's CPU seconds and its wall seconds."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name, self.dimension, self.backend = inner.name, inner.dimension, inner.backend
        self.in_process = getattr(inner, "in_process", False)
        self.cpu = self.wall = 0.0
        if callable(getattr(inner, "plan", None)):  # the ONNX model's runs, as agentmem's service takes them
            self.tokenize, self.plan = self._probed(inner.tokenize), self._probed(inner.plan)
            self.embed_tokens = self._probed(inner.embed_tokens)

    def _probed(self, fn: Any) -> Any:
        def probed(*args: Any) -> Any:
            c0, t0 = time.thread_time(), time.perf_counter()
            try:
                return fn(*args)
            finally:
                self.cpu += time.thread_time() - c0
                self.wall += time.perf_counter() - t0
        return probed

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self._probed(self.inner.embed)(texts)


def server_cpu(postmaster: int) -> float:
    """CPU seconds (user + system) of the postmaster and every process it started."""
    total = 0.0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(pid) == postmaster or int(fields[1]) == postmaster:  # fields[1]: ppid
            total += (int(fields[11]) + int(fields[12])) / TICK  # utime, stime
    return total


def padded_ratio(embedder: OnnxMiniLMEmbedder, calls: list[list[str]]) -> float:
    """Tokens the model ran (padding included) over the texts' own tokens, for these calls."""
    real = padded = 0
    for texts in calls:
        for ids in embedder.batches(texts):
            real += sum(len(x) for x in ids)
            padded += len(ids) * max(len(x) for x in ids)
    return padded / real


def cpu_pairs(inner: OnnxMiniLMEmbedder, every: list[list[str]], staged: list[list[str]], pairs: int,
              fixed: int) -> None:
    got: dict[str, list[float]] = {}
    for r in range(pairs):
        for form, calls in (("one call", every), ("write_messages' stages", staged)):
            for run in ((0, fixed) if r % 2 == 0 else (fixed, 0)):
                onnx_minilm.FIXED_RUN = run
                c0 = time.thread_time()
                for texts in calls:
                    inner.embed(texts)
                got.setdefault(f"{form}, {'planned runs' if run == 0 else f'{fixed} per run'}", []).append(
                    time.thread_time() - c0)
        onnx_minilm.FIXED_RUN = 0
        log(f"pair {r + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in got.items()))
    print_table(f"encoder thread CPU s, median of {pairs} interleaved pairs", ["texts, runs", "CPU s", "min"],
                [[k, f"{statistics.median(v):.2f}", f"{min(v):.2f}"] for k, v in got.items()])
    print(f"\nload average at end: {environment()['loadavg_at_end']}")


def main() -> None:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="ONNX intra-op threads")
    parser.add_argument("--fixed-run", type=int, default=0, help="also run with this many texts per model run")
    parser.add_argument("--cpu-pairs", type=int, default=0, help="only the encoder: planned vs fixed runs, N pairs")
    args = parser.parse_args()
    turns = locomo_turns()
    convs = sorted({t.conversation for t in turns})
    by_conv = {c: [{"role": "user" if i % 2 == 0 else "assistant", "content": t.text}
                   for i, t in enumerate(x for x in turns if x.conversation == c)] for c in convs}
    texts = {c: [f"{m['role']}: {m['content']}" for m in by_conv[c]] for c in convs}
    every = [t for c in convs for t in texts[c]]
    staged = [texts[c][a:b] for c in convs for a, b in stages(len(texts[c]))]
    inner = OnnxMiniLMEmbedder(default_cache_dir(), threads=args.threads)
    probe = Probe(inner)
    print(f"{len(every)} turns; padded/real tokens: one call {padded_ratio(inner, [every]):.3f}, "
          f"write_messages' stages {padded_ratio(inner, staged):.3f}")
    if args.fixed_run:
        onnx_minilm.FIXED_RUN = args.fixed_run
        print(f"  with {args.fixed_run} texts per run: one call {padded_ratio(inner, [every]):.3f}, "
              f"write_messages' stages {padded_ratio(inner, staged):.3f}")
        onnx_minilm.FIXED_RUN = 0
    if args.cpu_pairs and args.fixed_run:
        cpu_pairs(inner, [every], staged, args.cpu_pairs, args.fixed_run)
        return
    rows: dict[str, dict[str, list[float]]] = {}
    with embedded_server() as uri:
        with psycopg.connect(uri, autocommit=True) as conn:
            data_dir = conn.execute("SHOW data_directory").fetchone()[0]  # type: ignore[index]
        postmaster = int((Path(data_dir) / "postmaster.pid").read_text().split()[0])
        managers: list[MemoryManager] = []

        def writes(schema: str, embed: bool, drop: Sequence[str] = ()) -> Callable[[int], Callable[[], None]]:
            """Each round writes into empty tables of a schema of its own: a vector written again
            into an HNSW index that holds it is not inserted, only pointed at (peers.py)."""
            def prepare(r: int) -> Callable[[], None]:
                mm = MemoryManager.open(Settings.from_env(database_url=uri, schema=f"{schema}_{r}",
                                                          embedding_cache_size=0, pool_max_size=2), embedder=probe)
                managers.append(mm)
                with psycopg.connect(uri, autocommit=True) as conn:
                    for name in drop:
                        conn.execute(psycopg.sql.SQL("DROP INDEX {}").format(psycopg.sql.Identifier(f"{schema}_{r}",
                                                                                                    name)))
                return lambda: [mm.write_messages(by_conv[c], user_id=c, thread_id="t", embed=embed)
                                for c in convs] and None
            return prepare

        def raw(calls: list[list[str]]) -> Callable[[int], Callable[[], None]]:
            return lambda r: lambda: [probe.embed(x) for x in calls] and None

        def fixed(prepare: Callable[[int], Callable[[], None]]) -> Callable[[int], Callable[[], None]]:
            def ready(r: int) -> Callable[[], None]:
                go = prepare(r)

                def run() -> None:
                    onnx_minilm.FIXED_RUN = args.fixed_run
                    try:
                        go()
                    finally:
                        onnx_minilm.FIXED_RUN = 0
                return run
            return ready

        modes = {"raw, one call": raw([every]), "raw, write_messages' stages": raw(staged),
                 "write_messages": writes("ingest", True),
                 "write_messages, no vector/keyword indexes": writes("noindex", True, DROP),
                 "write_messages embed=False": writes("noembed", False)}
        if args.fixed_run:
            modes[f"raw, one call, {args.fixed_run} per run"] = fixed(raw([every]))
            modes[f"write_messages, {args.fixed_run} per run"] = fixed(writes("fixed", True))
        for r in range(args.rounds):
            names = list(modes) if r % 2 == 0 else list(modes)[::-1]
            for name in names:
                go = modes[name](r)
                c0, w0, s0 = probe.cpu, probe.wall, server_cpu(postmaster)
                t0 = time.perf_counter()
                go()
                wall = time.perf_counter() - t0
                got = rows.setdefault(name, {})
                for key, value in (("turns_per_s", len(every) / wall), ("encoder_cpu_s", probe.cpu - c0),
                                   ("encoder_wall_s", probe.wall - w0), ("server_cpu_s", server_cpu(postmaster) - s0),
                                   ("wall_s", wall)):
                    got.setdefault(key, []).append(value)
                while managers:  # after reading the server's CPU: a closed connection's process is gone
                    managers.pop().close()
            log(f"round {r + 1}: " + ", ".join(f"{n} {v['turns_per_s'][-1]:.1f}" for n, v in rows.items()))
    limit = [v for v in rows["raw, one call"]["turns_per_s"]]
    table = []
    for name, v in rows.items():
        ratio = statistics.median(x / lim for x, lim in zip(v["turns_per_s"], limit, strict=True))
        table.append([name, f"{statistics.median(v['turns_per_s']):.1f}", f"{ratio:.3f}",
                      f"{statistics.median(v['encoder_cpu_s']):.2f}", f"{statistics.median(v['encoder_wall_s']):.2f}",
                      f"{statistics.median(v['server_cpu_s']):.2f}", f"{statistics.median(v['wall_s']):.2f}"])
    print_table(f"ingest of {len(every)} LoCoMo turns, median of {args.rounds} interleaved rounds, "
                f"{args.threads} ONNX thread(s); / limit = per round, over raw one call",
                ["mode", "turns/s", "/ limit", "encoder CPU s", "encoder wall s", "server CPU s", "wall s"], table)
    print(f"\nload average at end: {environment()['loadavg_at_end']}")
    write_json(args.json, rows)


if __name__ == "__main__":
    main()
