"""agentmem next to its peers, side by side in one process: ingest and search.

    pip install -e '.[bench]'        # langgraph-checkpoint-postgres (mem0 is not used)
    python bench/peers.py [--backend onnx|torch] [--peer-embedder same|default] [--threads 1]
                          [--rounds 3] [--queries 60] [--warmup 0] [--pause 0] [--scale 100000]
                          [--layouts 200users,oneuser]
                          [--ingest-only | --scale-only] [--shared-buffers 2GB] [--json out.json]

Every system gets the same texts (LoCoMo turns), the same queries (LoCoMo questions),
the same embedded PostgreSQL server (one database per phase and per ingest round, so no
system's tables hold another phase's rows and no round writes a vector into an index that
already holds it), the same embedder object and thread count, and runs in
interleaved rounds so all see the same machine load. Peers:

* langchain-postgres ``PGVectorStore`` (``add_texts``, ``similarity_search`` filtered on
  a ``user_id`` metadata column, HNSW index, iterative scan as agentmem's adapter sets);
* LangGraph ``PostgresStore`` with a vector index (``batch`` of ``PutOp``, ``search`` in
  the user's namespace);
* mem0 is not run: it needs an LLM per write, so its ingest is not comparable.

Phases:

1. LoCoMo size (1,451 turns, 3 users = the 3 conversations): ingest turns/s, each
   conversation in one call (agentmem ``write_messages``), each round into empty tables of a
   database of its own (round 0's are searched afterwards), plus the raw-encoder limit
   (all turns in one ``embed`` call, measured right next to agentmem's ingest); then search
   p50/p95 with the query embedding included (agentmem ``search_memory`` and
   ``read_knowledge``), k=10: a first pass of every query once per system, printed on its
   own, then the interleaved rounds, whose figures are the comparison (with ``--warmup N``,
   each system's timed searches of a round follow N other questions, untimed: the system
   before it in the round leaves the CPU caches holding its own data; with ``--pause S``,
   each timed search of the rounds follows S seconds of sleep, as an agent loop's searches
   follow its model calls: on a 2-vCPU virtual machine, work after an idle moment runs
   slower, and the scheduler may run the server's backend on the client's CPU instead of
   beside it, see docs/benchmarks.md, Session 28). The first pass
   reads each system's pages into shared buffers: after the loads and the index builds
   they hold whatever was written last, so the first search of a system's rows copies
   pages in from the OS cache (or from disk: each search table gives, per system, what the
   machine read from disk while its searches ran, and the first log line names a kernel
   scheme that pages out memory left idle, under which that happens after a minute
   unused). agentmem's searches read its keyword tables besides the
   vectors, so they pay it most: its own part's p50 in the first pass was 2.0x the later
   rounds' for ``search_memory`` at 200 users x 500 rows and 1.28x with one user of 100k
   rows, the peers' 0.86-1.23x (docs/benchmarks.md, the CPU without AVX-512).
2. ``--scale`` rows (default 100k) as 200 users x 500 rows, then as one user with all of
   them: rows are LoCoMo turns with a row number appended, their vectors the turn's
   vector (by that system's embedder) plus small noise, loaded through each system's own write API with a lookup
   embedder, 2,000 rows a call; search as above, queries embedded by the real encoder.
   ``--layouts`` runs one of the two alone; ``--scale 0`` skips the phase, ``--scale-only``
   phase 1. Every system's
   HNSW indexes are built after its load, as a bulk load would (langchain-postgres
   through its own ``apply_vector_index``; agentmem's and LangGraph's, which their
   schema setup creates, dropped before the load and created again from their own
   definitions, ``pg_get_indexdef``): inserting 100k rows one by one into an HNSW graph
   took ~14 min per system, the same rows and a build 2-8 min (load ~4). The server gets
   ``maintenance_work_mem`` = 1 GB, so each build runs in memory, and ``shared_buffers``
   = 2 GB (``--shared-buffers``): at 100k rows each system's tables and indexes are
   several hundred MB (agentmem's ~1.1 GB: messages and knowledge, each with an HNSW
   index), so under PostgreSQL's 128 MB default every search of every system copies
   pages in from the OS cache; that measured the buffer pool, not the systems (a search
   run twice in a row was ~4.5 ms faster the second time at 100k rows of one user). 2 GB is
   under PostgreSQL's usual guidance for a dedicated server (a quarter of RAM: 6 GB here).
   The load and build
   times are printed per system (they include the lookup embedder, a dict read).

The embedder is wrapped to time its calls, so every ingest and search figure comes with
the part spent in the embedder and the rest (the system's own part: its SQL, its Python,
its round trips), each in the same run; ratios are printed for both. Configurations
(``--peer-embedder``):

* ``same`` (default): one embedder object for every system (``--backend``), so the
  embedder's part is the same work for all;
* ``default``: what each system's users get by default for this model: the peers
  sentence-transformers/torch MiniLM from the packaged weights (as langchain's
  ``HuggingFaceEmbeddings`` would load it), agentmem its default backend (ONNX int8).
  Every table says which configuration it is; both phases run in either.

agentmem's embedding cache is off (``embedding_cache_size=0``) so repeated rounds embed
every text and query again, like the peers. Before the ingest rounds and before the
searches the process's heap is collected and frozen (``settle_heap``), so Python's full
collections, which walked the bench's own rows and vectors for ~280 ms each, do not land
in a timed call.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import (add_shared_buffers, disk_read_kib, embedded_server, environment, log, percentiles,  # noqa: E402
                     print_table, write_json)
from _public_data import locomo_questions, locomo_turns  # noqa: E402

import psycopg  # noqa: E402
from psycopg import sql  # noqa: E402

from memory import MemoryManager, Settings  # noqa: E402
from memory.retrieval.embeddings import MiniLMEmbedder  # noqa: E402
from memory.retrieval.onnx_minilm import OnnxMiniLMEmbedder  # noqa: E402
from memory.settings import default_cache_dir  # noqa: E402

K = 10


class Timed:
    """An embedder that counts the seconds spent in it (shared by every system it is given to)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name, self.dimension, self.backend = inner.name, inner.dimension, inner.backend
        self.in_process = getattr(inner, "in_process", False)  # agentmem calls it as it would the model
        self.seconds = 0.0
        if callable(getattr(inner, "plan", None)):  # the ONNX model's runs, as agentmem's service takes them
            self.tokenize, self.plan = self._timed(inner.tokenize), self._timed(inner.plan)
            self.embed_tokens = self._timed(inner.embed_tokens)

    def _timed(self, fn: Any) -> Any:
        def timed(*args: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args)
            finally:
                self.seconds += time.perf_counter() - t0
        return timed

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self._timed(self.inner.embed)(texts)


class Lookup:
    """Precomputed vectors under the real encoder's name: loads rows without timing a model."""

    def __init__(self, real: Any, table: dict[str, np.ndarray]) -> None:
        self.name, self.dimension, self.backend = real.name, real.dimension, real.backend
        self.in_process = True
        self.table = table

    def vector(self, text: str) -> np.ndarray:
        hit = self.table.get(text)
        return hit if hit is not None else self.table[text.split(": ", 1)[1]]  # agentmem embeds "role: content"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self.vector(t) for t in texts]) if texts else np.zeros((0, self.dimension), np.float32)


def defer_vector_indexes(uri: str, schema: str, tables: Sequence[str] | None = None) -> list[str]:
    """Drop the HNSW indexes of ``schema`` (of ``tables`` only, if given); return their
    definitions, to be run again after a bulk load (:func:`build_indexes`)."""
    with psycopg.connect(uri, autocommit=True) as conn:
        found = conn.execute(
            "SELECT i.indexname, pg_get_indexdef(c.oid) FROM pg_indexes i"
            " JOIN pg_class c ON c.relname = i.indexname JOIN pg_namespace n ON n.oid = c.relnamespace"
            " AND n.nspname = i.schemaname"
            " WHERE i.schemaname = %s AND (%s::text[] IS NULL OR i.tablename = ANY (%s)) AND i.indexdef ILIKE %s",
            (schema, tables, tables, "% USING hnsw %")).fetchall()
        for name, _ in found:
            conn.execute(sql.SQL("DROP INDEX {}.{}").format(sql.Identifier(schema), sql.Identifier(name)))
    return [d for _, d in found]


def build_indexes(uri: str, definitions: Sequence[str]) -> None:
    with psycopg.connect(uri, autocommit=True) as conn:
        for d in definitions:
            conn.execute(d)  # pg_get_indexdef's own text: the index exactly as the system defined it


def lc_embeddings(encoder: Any) -> Any:
    from langchain_core.embeddings import Embeddings

    class Wrapped(Embeddings):
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return encoder.embed(texts).tolist()

        def embed_query(self, text: str) -> list[float]:
            return encoder.embed([text])[0].tolist()

    return Wrapped()


class Agentmem:
    label = "agentmem"

    def __init__(self, uri: str, encoder: Any, lookup: Any) -> None:
        settings = Settings.from_env(database_url=uri, schema="agentmem", embedding_cache_size=0, pool_max_size=2)
        self.encoder = encoder
        self.mm = MemoryManager.open(settings, embedder=encoder)
        self.bulk = MemoryManager.open(settings, embedder=lookup) if lookup is not None else None
        self.uri = uri
        self.deferred = defer_vector_indexes(uri, "agentmem") if lookup is not None else []

    def ingest(self, user: str, turns: Sequence[tuple[str, str]]) -> None:
        self.mm.write_messages([{"role": r, "content": c} for r, c in turns], user_id=user, thread_id="t")

    def load(self, user: str, texts: Sequence[str]) -> None:
        assert self.bulk is not None
        for i in range(0, len(texts), 2000):
            chunk = texts[i:i + 2000]
            self.bulk.write_messages([{"role": "user", "content": c} for c in chunk], user_id=user, thread_id="t")
            self.bulk.write_knowledge_batch([{"content": c} for c in chunk], user_id=user)

    def after_load(self) -> None:
        build_indexes(self.uri, self.deferred)

    def searches(self) -> dict[str, Callable[[str, str], Any]]:
        return {"agentmem search_memory": lambda u, q: self.mm.search_memory(q, user_id=u, k=K),
                "agentmem read_knowledge": lambda u, q: self.mm.read_knowledge(q, user_id=u, k=K)}

    def close(self) -> None:
        self.mm.close()
        if self.bulk is not None:
            self.bulk.close()


class LangChain:
    label = "langchain-postgres"

    def __init__(self, uri: str, encoder: Any, lookup: Any) -> None:
        from langchain_postgres import Column, PGEngine, PGVectorStore
        from langchain_postgres.v2.indexes import HNSWIndex

        from memory.tables.vectorstore import sqlalchemy_url

        self.encoder = encoder
        self.engine = PGEngine.from_connection_string(
            sqlalchemy_url(uri), connect_args={"options": "-c hnsw.iterative_scan=strict_order -c hnsw.ef_search=100"})
        self.engine.init_vectorstore_table("lc_docs", encoder.dimension, metadata_columns=[Column("user_id", "TEXT")])

        def store(emb: Any) -> Any:
            return PGVectorStore.create_sync(engine=self.engine, embedding_service=lc_embeddings(emb),
                                             table_name="lc_docs", metadata_columns=["user_id"])

        self.store = store(encoder)
        self.index = HNSWIndex()
        if lookup is None:
            self.store.apply_vector_index(self.index)
        self.bulk = store(lookup) if lookup is not None else None  # the scale phase: the index is built after the load

    def ingest(self, user: str, turns: Sequence[tuple[str, str]]) -> None:
        self.store.add_texts([c for _, c in turns], metadatas=[{"user_id": user}] * len(turns))

    def load(self, user: str, texts: Sequence[str]) -> None:
        for i in range(0, len(texts), 2000):
            chunk = list(texts[i:i + 2000])
            self.bulk.add_texts(chunk, metadatas=[{"user_id": user}] * len(chunk))

    def after_load(self) -> None:
        self.store.apply_vector_index(self.index)

    def searches(self) -> dict[str, Callable[[str, str], Any]]:
        return {"langchain-postgres similarity_search":
                lambda u, q: self.store.similarity_search(q, k=K, filter={"user_id": u})}

    def close(self) -> None:
        asyncio.run(self.engine.close())  # PGEngine.close is a coroutine: it disposes of the pool


class LangGraph:
    label = "LangGraph PostgresStore"

    def __init__(self, uri: str, encoder: Any, lookup: Any) -> None:
        from langgraph.store.postgres import PostgresStore
        from psycopg.rows import dict_row

        self.encoder = encoder

        def store(emb: Any) -> tuple[Any, Any]:
            conn = psycopg.connect(uri, autocommit=True, prepare_threshold=0, row_factory=dict_row)
            return conn, PostgresStore(conn, index={"dims": emb.dimension, "embed": lambda ts: emb.embed(ts).tolist(),
                                                    "fields": ["text"]})

        self.conn, self.store = store(encoder)
        self.store.setup()
        self.bulk_conn, self.bulk = store(lookup) if lookup is not None else (None, None)
        self.uri = uri
        self.deferred = defer_vector_indexes(uri, "public", ["store_vectors"]) if lookup is not None else []

    def _put(self, store: Any, user: str, texts: Sequence[str]) -> None:
        from langgraph.store.base import PutOp

        store.batch([PutOp(("users", user), uuid.uuid4().hex, {"text": t}) for t in texts])

    def ingest(self, user: str, turns: Sequence[tuple[str, str]]) -> None:
        self._put(self.store, user, [c for _, c in turns])

    def load(self, user: str, texts: Sequence[str]) -> None:
        for i in range(0, len(texts), 2000):
            self._put(self.bulk, user, texts[i:i + 2000])

    def after_load(self) -> None:  # the vector index PostgresStore.setup() created, as it defined it
        build_indexes(self.uri, self.deferred)

    def searches(self) -> dict[str, Callable[[str, str], Any]]:
        return {"LangGraph PostgresStore search": lambda u, q: self.store.search(("users", u), query=q, limit=K)}

    def close(self) -> None:
        self.conn.close()
        if self.bulk_conn is not None:
            self.bulk_conn.close()


SYSTEMS = (Agentmem, LangChain, LangGraph)


def new_database(uri: str, name: str) -> str:
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    with psycopg.connect(psycopg.conninfo.make_conninfo(uri, dbname=name), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    return psycopg.conninfo.make_conninfo(uri, dbname=name)


#: Per search name: each call's seconds, the seconds of it spent in the embedder, and the KiB
#: the machine read from disk while that name's searches of the pass ran (one figure per pass).
Timings = tuple[dict[str, list[float]], dict[str, list[float]], dict[str, list[int]]]


def warmup_asks(asks: list[tuple[str, str]], questions: Sequence[Any], n: int) -> list[tuple[str, str]]:
    """``n`` questions that are not among ``asks`` (their own draw: ``asks`` stay those of the
    same seed without warm-up), each for the user of one of the asks."""
    asked = {q for _, q in asks}
    spare = [q.text for q in random.Random(11).sample(questions, len(questions)) if q.text not in asked]
    return [(asks[i % len(asks)][0], spare[i]) for i in range(n)]


def search_rounds(systems: list[Any], asks: list[tuple[str, str]], rounds: int,
                  warm: Sequence[tuple[str, str]] = (), pause: float = 0.0) -> tuple[Timings, Timings]:
    """Per search, the seconds of the whole call and the seconds spent in the embedder, kept
    apart for a first pass (every query once per system: it reads each system's pages into
    shared buffers, which the loads and index builds left holding whatever was built last)
    and for the ``rounds`` interleaved rounds after it. With ``warm`` (other questions), in
    each round each search of each system first runs those untimed: the system before it in
    the round leaves the CPU caches holding its own data, so without them a system's first
    searches of a round measure partly whichever system ran before it (the p95 of 60
    searches is the fourth slowest). ``pause``: seconds of sleep before each timed search of
    the rounds (not the first pass)."""
    settle_heap()
    first: Timings = ({}, {}, {})
    for sys_ in systems:
        _time_searches(sys_, asks, first)
    timed: Timings = ({}, {}, {})
    for r in range(rounds):
        for sys_ in (systems if r % 2 == 0 else systems[::-1]):
            _time_searches(sys_, asks, timed, warm, pause)
    return first, timed


def _time_searches(sys_: Any, asks: list[tuple[str, str]], into: Timings,
                   warm: Sequence[tuple[str, str]] = (), pause: float = 0.0) -> None:
    lat, emb, disk = into
    for name, fn in sys_.searches().items():
        for u, q in warm:
            fn(u, q)
        read0 = disk_read_kib()
        for u, q in asks:
            if pause:
                time.sleep(pause)
            e0 = sys_.encoder.seconds
            t0 = time.perf_counter()
            hits = fn(u, q)
            lat.setdefault(name, []).append(time.perf_counter() - t0)
            emb.setdefault(name, []).append(sys_.encoder.seconds - e0)
            if not hits:
                raise SystemExit(f"{name} found nothing for {q!r} of {u}: the comparison would be void")
        read1 = disk_read_kib()
        if read0 is not None and read1 is not None:
            disk.setdefault(name, []).append(read1 - read0)


def report_searches(title: str, timings: tuple[Timings, Timings]) -> dict[str, Any]:
    """The first pass's table, then the rounds' (the figures the ratios are quoted from)."""
    first, timed = timings
    return {"first_pass": report_search(f"{title}, first pass (each system's pages read in)", first),
            **report_search(f"{title}, after the first pass", timed)}


def report_search(title: str, timings: Timings) -> dict[str, Any]:
    lat, emb, disk = timings
    stats = {name: percentiles(v) for name, v in lat.items()}
    own = {name: percentiles([t - e for t, e in zip(v, emb[name], strict=True)]) for name, v in lat.items()}
    embs = {name: percentiles(v) for name, v in emb.items()}
    peers = [n for n in stats if not n.startswith("agentmem")]
    fastest = min(peers, key=lambda n: stats[n]["p95_ms"])
    fastest_own = min(peers, key=lambda n: own[n]["p95_ms"])
    rows = []
    for name, s in stats.items():
        rows.append([name, f"{s['p50_ms']:.1f}", f"{s['p95_ms']:.1f}", f"{s['p95_ms'] / stats[fastest]['p95_ms']:.2f}x",
                     f"{embs[name]['p50_ms']:.1f}", f"{own[name]['p50_ms']:.1f}", f"{own[name]['p95_ms']:.1f}",
                     f"{own[name]['p95_ms'] / own[fastest_own]['p95_ms']:.2f}x",
                     f"{sum(disk[name]) / 1024:.1f}" if name in disk else "-", s["n"]])
    print_table(f"{title}: search ms (k={K}); total = the whole call, query embedding included; own = total minus "
                f"the time in the embedder; ratios = p95 / fastest peer's p95 (total: {fastest}; own: {fastest_own}); "
                "disk MiB = what the machine read from disk while the system's searches ran (/proc/vmstat)",
                ["system", "p50", "p95", "p95 ratio", "embed p50", "own p50", "own p95", "own p95 ratio", "disk MiB",
                 "n"], rows)
    return {name: dict(total=stats[name], embed=embs[name], own=own[name], disk_read_kib=sum(disk.get(name, [])))
            for name in stats}


def settle_heap() -> None:
    """Collect, then freeze what this process holds (the rows, the lookup vectors, every
    system's objects) out of the collector's reach before timing. Otherwise a full
    collection walks millions of the bench's own objects now and then, 270-290 ms each
    (traced with ``gc.callbacks`` at 200 users x 500 rows), inside whichever call is
    being timed: once a search of agentmem's first pass took 286 ms, once a LangGraph
    search of a round. What the systems allocate afterwards is collected as usual."""
    gc.collect()
    gc.freeze()


def run_ingest(open_round: Callable[[int], list[Any]], encoders: dict[str, Any], texts: list[str],
               agentmem_texts: list[str], convs: list[str], by_conv: dict[str, list[tuple[str, str]]], rounds: int,
               label: str, agentmem_backend: str) -> tuple[dict[str, Any], np.ndarray, list[Any]]:
    """Interleaved ingest rounds; per system its turns/s and the seconds in and out of the
    embedder. Each round's systems come from ``open_round(r)``, with tables of their own
    (:func:`locomo_phase`); round 0's are returned open, the others are closed."""
    kept: list[Any] = []
    rate: dict[str, list[float]] = {}
    own: dict[str, list[float]] = {}
    base = np.zeros((0, 1), np.float32)
    forms = (("", texts), (", agentmem's texts", agentmem_texts))

    def raw(backend: str, what: str, batch: list[str]) -> None:
        nonlocal base
        t0 = time.perf_counter()
        out = encoders[backend].inner.embed(batch)
        rate.setdefault(f"raw encoder {backend}{what} (all in one call)", []).append(
            len(batch) / (time.perf_counter() - t0))
        if backend == agentmem_backend and not what:
            base = out

    for r in range(rounds):
        systems = open_round(r)
        settle_heap()
        for backend in encoders:
            if backend != agentmem_backend:
                for what, batch in forms:
                    raw(backend, what, batch)
        order = systems if r % 2 == 0 else systems[::-1]
        for sys_ in order:
            # agentmem's limit is measured right next to agentmem's ingest, one text form just
            # before it and the other just after (swapped each round), so both see its load.
            first, second = forms if r % 2 == 0 else forms[::-1]
            if sys_.label == "agentmem":
                raw(agentmem_backend, *first)
            e0 = sys_.encoder.seconds
            t0 = time.perf_counter()
            for c in convs:
                sys_.ingest(f"r{r}-{c}", by_conv[c])
            wall = time.perf_counter() - t0
            rate.setdefault(sys_.label, []).append(len(texts) / wall)
            own.setdefault(sys_.label, []).append(1000 * (wall - (sys_.encoder.seconds - e0)) / len(texts))
            if sys_.label == "agentmem":
                raw(agentmem_backend, *second)
        if r == 0:
            kept = systems
        else:
            for s in systems:
                s.close()
        log(f"[{label}] ingest round {r + 1}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in rate.items()))
    med = {k: statistics.median(v) for k, v in rate.items()}
    own_med = {k: statistics.median(v) for k, v in own.items()}
    limit = med[f"raw encoder {agentmem_backend} (all in one call)"]
    peers = [k for k in own_med if k != "agentmem"]
    fastest = max(peers, key=lambda k: med[k])
    fastest_own = min(peers, key=lambda k: own_med[k])
    own_texts = med[f"raw encoder {agentmem_backend}, agentmem's texts (all in one call)"]
    rows = []
    for k, v in med.items():
        mine = own_med.get(k)
        rows.append([k, f"{v:.1f}", f"{v / limit:.2f}", f"{v / own_texts:.2f}", f"{med['agentmem'] / v:.2f}x",
                     "" if mine is None else f"{mine:.2f}",
                     "" if mine is None else f"{mine / own_med['agentmem']:.2f}x"])
    print_table(f"[{label}] ingest (median of {rounds} rounds; one call per conversation); own ms/turn = wall time "
                f"outside the embedder per turn (for agentmem, what its pipeline leaves exposed); limit = raw "
                f"{agentmem_backend} on the plain turns, limit' = on agentmem's own texts (role: content)",
                ["system", "turns/s", "/ limit", "/ limit'", "agentmem / this", "own ms/turn",
                 "this own / agentmem own"], rows)
    per_round = [statistics.median(a / x for a, x in zip(rate["agentmem"], rate[key], strict=True))
                 for key in (f"raw encoder {agentmem_backend}{what} (all in one call)" for what, _ in forms)]
    print(f"[{label}] agentmem / fastest peer ({fastest}): {med['agentmem'] / med[fastest]:.2f}x turns/s; "
          f"agentmem / raw limit: {med['agentmem'] / limit:.2f} "
          f"(on agentmem's own texts: {med['agentmem'] / own_texts:.2f}); median of the rounds' ratios to the "
          f"limit measured beside agentmem's ingest: {per_round[0]:.2f} (own texts: {per_round[1]:.2f}); "
          f"own time per turn, fastest peer ({fastest_own}) / agentmem: "
          f"{own_med[fastest_own] / own_med['agentmem']:.2f}x")
    return {"turns_per_s": rate, "own_ms_per_turn": own}, base, kept


def locomo_phase(uri: str, args: Any, encoders: dict[str, Any], mine: Any, peer: Any, texts: list[str],
                 agentmem_texts: list[str], convs: list[str], by_conv: dict[str, list[tuple[str, str]]], label: str,
                 asks: list[tuple[str, str]], warm: Sequence[tuple[str, str]],
                 result: dict[str, Any]) -> np.ndarray | None:
    """Phase 1: ingest rounds and searches at LoCoMo size; the raw encoder's vectors of the
    turns (None with --ingest-only: nothing follows)."""
    # Every round writes into empty tables of a database of its own. Rounds into the same
    # tables would store again the vectors an earlier round stored, and pgvector's HNSW
    # index keeps an exact duplicate as one more heap pointer on the element already in
    # its graph instead of inserting it: agentmem's database time for a LoCoMo turn was
    # 0.62 ms in such rounds and 1.07 ms with vectors no earlier round had written (scratch
    # run: the same turns with and without 1e-3 noise on their vectors), so every round
    # after the first measured an insert cheaper than distinct messages get.
    db = new_database(uri, "p_locomo")

    def open_round(r: int) -> list[Any]:
        where = db if r == 0 else new_database(uri, f"p_locomo_r{r}")
        return [cls(where, mine if cls is Agentmem else peer, None) for cls in SYSTEMS]

    result["ingest"], base, systems = run_ingest(open_round, encoders, texts, agentmem_texts, convs, by_conv,
                                                 args.rounds, label, mine.backend)
    if args.ingest_only:
        for s in systems:
            s.close()
        print(f"\nload average at end: {environment()['loadavg_at_end']}")
        write_json(args.json, result)
        return None
    # read_knowledge needs knowledge rows: the turns of round 0's users, vectors reused.
    vec_of = {t: base[i] for i, t in enumerate(texts)}
    bulk = MemoryManager.open(Settings.from_env(database_url=db, schema="agentmem"), embedder=Lookup(mine, vec_of))
    for c in convs:
        bulk.write_knowledge_batch([{"content": t} for _, t in by_conv[c]], user_id=f"r0-{c}")
    bulk.close()
    result["locomo_search"] = report_searches(f"[{label}] LoCoMo size (3 users, ~480 rows each)",
                                              search_rounds(systems, asks, args.rounds, warm, args.pause))
    for s in systems:
        s.close()
    return base


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", choices=("onnx", "torch"), default="onnx", help="the embedder of configuration same")
    ap.add_argument("--peer-embedder", choices=("same", "default"), default="same",
                    help="same: one embedder for all; default: peers torch MiniLM, agentmem ONNX int8")
    ap.add_argument("--threads", type=int, default=1, help="embedding threads, the same for every system")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--queries", type=int, default=60, help="queries per system and round")
    ap.add_argument("--scale", type=int, default=100_000, help="rows of the scale phase (0: skip it)")
    ap.add_argument("--layouts", default="200users,oneuser",
                    help="the scale phase's layouts, comma-separated: 200users (200 x scale/200 rows), oneuser")
    ap.add_argument("--pause", type=float, default=0.0, metavar="S",
                    help="seconds of sleep before each timed search of the rounds (an agent loop's idle time)")
    ap.add_argument("--warmup", type=int, default=0,
                    help="in each round, this many other questions untimed before each system's timed searches")
    ap.add_argument("--ingest-only", action="store_true", help="the LoCoMo ingest rounds only, no search phase")
    ap.add_argument("--scale-only", action="store_true", help="the scale phase only (phase 1 skipped)")
    add_shared_buffers(ap)  # the same for every system
    ap.add_argument("--json")
    args = ap.parse_args()
    known = {"200users": ("200 users", 200), "oneuser": ("one user", 1)}
    layouts = [known[x] for x in args.layouts.split(",") if x in known]
    if not layouts or len(layouts) != len(args.layouts.split(",")):
        ap.error(f"--layouts: a comma-separated choice of {', '.join(known)}")

    def onnx() -> Any:
        return Timed(OnnxMiniLMEmbedder(default_cache_dir(), threads=args.threads))

    def torch() -> Any:
        return Timed(MiniLMEmbedder(threads=args.threads))

    if args.peer_embedder == "same":
        mine = peer = onnx() if args.backend == "onnx" else torch()
        label = f"same embedder: {mine.backend} for every system"
    else:
        mine, peer = onnx(), torch()
        label = f"default embedders: agentmem {mine.backend}, peers {peer.backend}"
    encoders = {e.backend: e for e in (mine, peer)}
    rng = random.Random(7)
    turns = locomo_turns()
    questions = locomo_questions()
    convs = sorted({t.conversation for t in turns})
    by_conv = {c: [("user" if i % 2 == 0 else "assistant", t.text) for i, t in
                   enumerate(x for x in turns if x.conversation == c)] for c in convs}
    texts = [t.text for t in turns]
    agentmem_texts = [f"{r}: {c}" for c in convs for r, c in by_conv[c]]  # what agentmem embeds (role: content)
    if args.pause:
        label += f"; {args.pause:g} s idle before each timed search"
    result: dict[str, Any] = {"configuration": label, "threads": args.threads, "shared_buffers": args.shared_buffers,
                              "pause_s": args.pause}
    env = environment()
    log(f"{label}; {args.threads} thread(s), shared_buffers {args.shared_buffers}, {len(texts)} turns, "
        f"{len(questions)} questions; CPU {env['cpu']}" + (f"; {env['page_out']}" if env["page_out"] else ""))

    with embedded_server({"maintenance_work_mem": "1GB", "shared_buffers": args.shared_buffers}) as uri:
        # Phase 1: LoCoMo size.
        locomo_asks = [(f"r0-{q.conversation}", q.text) for q in rng.sample(questions, args.queries)]
        if args.scale_only:
            base = mine.inner.embed(texts)
        else:
            base = locomo_phase(uri, args, encoders, mine, peer, texts, agentmem_texts, convs, by_conv, label,
                                locomo_asks, warmup_asks(locomo_asks, questions, args.warmup), result)
        if base is None:
            return
        # Phase 2: --scale rows, as 200 users and as one user. Each system's rows carry
        # vectors of its own embedder (the turn's vector plus the same noise), so its
        # queries, embedded by that embedder, search the space they were made in.
        if args.scale:
            noise = np.random.default_rng(7).standard_normal((args.scale, mine.dimension)).astype(np.float32)
            rows = [f"{texts[i % len(texts)]} (#{i})" for i in range(args.scale)]
            lookups = {}
            for backend, enc in encoders.items():
                turn_vecs = base if backend == mine.backend else enc.inner.embed(texts)
                gen: dict[str, np.ndarray] = {}
                for i, text in enumerate(rows):
                    v = turn_vecs[i % len(texts)] + 0.1 * noise[i] / np.sqrt(mine.dimension)
                    gen[text] = v / np.linalg.norm(v)
                lookups[backend] = Lookup(enc, gen)
            for layout, users in layouts:
                db = new_database(uri, "p_" + layout.replace(" ", "_"))
                systems = []
                for cls in SYSTEMS:
                    enc = mine if cls is Agentmem else peer
                    systems.append(cls(db, enc, lookups[enc.backend]))
                per = args.scale // users
                loads = []
                for sys_ in systems:
                    t0 = time.perf_counter()
                    for u in range(users):
                        sys_.load(f"u{u:03d}", rows[u * per:(u + 1) * per])
                    t1 = time.perf_counter()
                    sys_.after_load()
                    t2 = time.perf_counter()
                    loads.append([sys_.label, f"{t1 - t0:.0f}", f"{t2 - t1:.0f}", f"{t2 - t0:.0f}"])
                    log(f"{layout}: loaded {args.scale} rows into {sys_.label} in {t1 - t0:.0f} s, "
                        f"indexes built in {t2 - t1:.0f} s")
                print_table(f"[{label}] {args.scale} rows, {layout}: load s (each system's write API, 2,000 rows a "
                            f"call; agentmem writes every row twice: a message and a knowledge row), then the "
                            f"HNSW builds; load average now {environment()['loadavg_at_end']}",
                            ["system", "load s", "index build s", "total s"], loads)
                result[f"load_{layout}"] = loads
                with psycopg.connect(db, autocommit=True) as conn:
                    conn.execute("VACUUM ANALYZE")
                asks = [(f"u{rng.randrange(users):03d}", q.text) for q in rng.sample(questions, args.queries)]
                result[f"search_{layout}"] = report_searches(
                    f"[{label}] {args.scale} rows, {layout} ({per} rows each)",
                    search_rounds(systems, asks, args.rounds, warmup_asks(asks, questions, args.warmup),
                                 args.pause))
                for s in systems:
                    s.close()
    print(f"\nload average at end: {environment()['loadavg_at_end']}")
    write_json(args.json, result)


if __name__ == "__main__":
    main()
