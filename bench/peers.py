"""agentmem next to its peers, side by side in one process: ingest and search.

    pip install -e '.[bench]'        # langgraph-checkpoint-postgres (mem0 is not used)
    python bench/peers.py [--backend onnx|torch] [--threads 1] [--rounds 3] [--queries 60]
                          [--scale 100000] [--json out.json]

Every system gets the same texts (LoCoMo turns), the same queries (LoCoMo questions),
the same embedded PostgreSQL server (one database per phase, so no system's tables
hold another phase's rows), the same embedder object and thread count, and runs in
interleaved rounds so all see the same machine load. Peers:

* langchain-postgres ``PGVectorStore`` (``add_texts``, ``similarity_search`` filtered on
  a ``user_id`` metadata column, HNSW index, iterative scan as agentmem's adapter sets);
* LangGraph ``PostgresStore`` with a vector index (``batch`` of ``PutOp``, ``search`` in
  the user's namespace);
* mem0 is not run: it needs an LLM per write, so its ingest is not comparable.

Phases:

1. LoCoMo size (1,451 turns, 3 users = the 3 conversations): ingest turns/s, each
   conversation in one call (agentmem ``write_messages``), plus the raw-encoder limit
   (all turns in one ``embed`` call); then search p50/p95 with the query embedding
   included (agentmem ``search_memory`` and ``read_knowledge``), k=10.
2. ``--scale`` rows (default 100k) as 200 users x 500 rows, then as one user with all of
   them: rows are LoCoMo turns with a row number appended, their vectors the turn's
   vector plus small noise, loaded through each system's own write API with a lookup
   embedder (the load is not timed: it would only time the lookup); search as above,
   queries embedded by the real encoder. ``--scale 0`` skips the phase.

agentmem's embedding cache is off (``embedding_cache_size=0``) so repeated rounds embed
every text and query again, like the peers.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import embedded_server, environment, log, percentiles, print_table, write_json  # noqa: E402
from _public_data import locomo_questions, locomo_turns  # noqa: E402

import psycopg  # noqa: E402
from psycopg import sql  # noqa: E402

from memory import MemoryManager, Settings  # noqa: E402
from memory.retrieval.embeddings import MiniLMEmbedder  # noqa: E402
from memory.retrieval.onnx_minilm import OnnxMiniLMEmbedder  # noqa: E402
from memory.settings import default_cache_dir  # noqa: E402

K = 10


class Lookup:
    """Precomputed vectors under the real encoder's name: loads rows without timing a model."""

    def __init__(self, real: Any, table: dict[str, np.ndarray]) -> None:
        self.name, self.dimension, self.backend = real.name, real.dimension, real.backend
        self.table = table

    def vector(self, text: str) -> np.ndarray:
        hit = self.table.get(text)
        return hit if hit is not None else self.table[text.split(": ", 1)[1]]  # agentmem embeds "role: content"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self.vector(t) for t in texts]) if texts else np.zeros((0, self.dimension), np.float32)


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
        self.mm = MemoryManager.open(settings, embedder=encoder)
        self.bulk = MemoryManager.open(settings, embedder=lookup) if lookup is not None else None

    def ingest(self, user: str, turns: Sequence[tuple[str, str]]) -> None:
        self.mm.write_messages([{"role": r, "content": c} for r, c in turns], user_id=user, thread_id="t")

    def load(self, user: str, texts: Sequence[str]) -> None:
        assert self.bulk is not None
        for i in range(0, len(texts), 2000):
            chunk = texts[i:i + 2000]
            self.bulk.write_messages([{"role": "user", "content": c} for c in chunk], user_id=user, thread_id="t")
            self.bulk.write_knowledge_batch([{"content": c} for c in chunk], user_id=user)

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

        self.engine = PGEngine.from_connection_string(
            sqlalchemy_url(uri), connect_args={"options": "-c hnsw.iterative_scan=strict_order -c hnsw.ef_search=100"})
        self.engine.init_vectorstore_table("lc_docs", encoder.dimension, metadata_columns=[Column("user_id", "TEXT")])

        def store(emb: Any) -> Any:
            return PGVectorStore.create_sync(engine=self.engine, embedding_service=lc_embeddings(emb),
                                             table_name="lc_docs", metadata_columns=["user_id"])

        self.store = store(encoder)
        self.store.apply_vector_index(HNSWIndex())
        self.bulk = store(lookup) if lookup is not None else None

    def ingest(self, user: str, turns: Sequence[tuple[str, str]]) -> None:
        self.store.add_texts([c for _, c in turns], metadatas=[{"user_id": user}] * len(turns))

    def load(self, user: str, texts: Sequence[str]) -> None:
        for i in range(0, len(texts), 2000):
            chunk = list(texts[i:i + 2000])
            self.bulk.add_texts(chunk, metadatas=[{"user_id": user}] * len(chunk))

    def searches(self) -> dict[str, Callable[[str, str], Any]]:
        return {"langchain-postgres similarity_search":
                lambda u, q: self.store.similarity_search(q, k=K, filter={"user_id": u})}

    def close(self) -> None:
        self.engine.close()


class LangGraph:
    label = "LangGraph PostgresStore"

    def __init__(self, uri: str, encoder: Any, lookup: Any) -> None:
        from langgraph.store.postgres import PostgresStore
        from psycopg.rows import dict_row

        def store(emb: Any) -> tuple[Any, Any]:
            conn = psycopg.connect(uri, autocommit=True, prepare_threshold=0, row_factory=dict_row)
            return conn, PostgresStore(conn, index={"dims": emb.dimension, "embed": lambda ts: emb.embed(ts).tolist(),
                                                    "fields": ["text"]})

        self.conn, self.store = store(encoder)
        self.store.setup()
        self.bulk_conn, self.bulk = store(lookup) if lookup is not None else (None, None)

    def _put(self, store: Any, user: str, texts: Sequence[str]) -> None:
        from langgraph.store.base import PutOp

        store.batch([PutOp(("users", user), uuid.uuid4().hex, {"text": t}) for t in texts])

    def ingest(self, user: str, turns: Sequence[tuple[str, str]]) -> None:
        self._put(self.store, user, [c for _, c in turns])

    def load(self, user: str, texts: Sequence[str]) -> None:
        for i in range(0, len(texts), 2000):
            self._put(self.bulk, user, texts[i:i + 2000])

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


def search_rounds(systems: list[Any], asks: list[tuple[str, str]], rounds: int) -> dict[str, list[float]]:
    lat: dict[str, list[float]] = {}
    for sys_ in systems:  # warm-up: one query each, untimed
        for name, fn in sys_.searches().items():
            fn(*asks[0])
    for r in range(rounds):
        order = systems if r % 2 == 0 else systems[::-1]
        for sys_ in order:
            for name, fn in sys_.searches().items():
                for u, q in asks:
                    t0 = time.perf_counter()
                    hits = fn(u, q)
                    lat.setdefault(name, []).append(time.perf_counter() - t0)
                    if not hits:
                        raise SystemExit(f"{name} found nothing for {q!r} of {u}: the comparison would be void")
    return lat


def report_search(title: str, lat: dict[str, list[float]]) -> dict[str, Any]:
    stats = {name: percentiles(v) for name, v in lat.items()}
    peers = {n: s for n, s in stats.items() if not n.startswith("agentmem")}
    fastest = min(peers, key=lambda n: peers[n]["p95_ms"])
    rows = []
    for name, s in stats.items():
        ratio = s["p95_ms"] / peers[fastest]["p95_ms"]
        rows.append([name, f"{s['p50_ms']:.1f}", f"{s['p95_ms']:.1f}", f"{ratio:.2f}x", s["n"]])
    print_table(f"{title}: search p50/p95 ms, query embedding included (k={K}); ratio = p95 / fastest peer's "
                f"p95 ({fastest})", ["system", "p50 ms", "p95 ms", "p95 ratio", "n"], rows)
    return stats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", choices=("onnx", "torch"), default="onnx")
    ap.add_argument("--threads", type=int, default=1, help="embedding threads, the same for every system")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--queries", type=int, default=60, help="queries per system and round")
    ap.add_argument("--scale", type=int, default=100_000, help="rows of the scale phase (0: skip it)")
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.backend == "onnx":
        encoder: Any = OnnxMiniLMEmbedder(default_cache_dir(), threads=args.threads)
    else:
        encoder = MiniLMEmbedder(threads=args.threads)
    rng = random.Random(7)
    turns = locomo_turns()
    questions = locomo_questions()
    convs = sorted({t.conversation for t in turns})
    by_conv = {c: [("user" if i % 2 == 0 else "assistant", t.text) for i, t in
                   enumerate(x for x in turns if x.conversation == c)] for c in convs}
    texts = [t.text for t in turns]
    result: dict[str, Any] = {"backend": encoder.backend, "threads": args.threads}
    log(f"backend {encoder.backend}, {args.threads} thread(s), {len(texts)} turns, {len(questions)} questions")

    with embedded_server() as uri:
        # Phase 1: LoCoMo size.
        db = new_database(uri, "p_locomo")
        systems = [cls(db, encoder, None) for cls in SYSTEMS]
        ingest: dict[str, list[float]] = {"raw encoder (all turns in one call)": []}
        base = np.zeros((0, encoder.dimension), np.float32)
        for r in range(args.rounds):
            t0 = time.perf_counter()
            base = encoder.embed(texts)
            ingest["raw encoder (all turns in one call)"].append(len(texts) / (time.perf_counter() - t0))
            order = systems if r % 2 == 0 else systems[::-1]
            for sys_ in order:
                t0 = time.perf_counter()
                for c in convs:
                    sys_.ingest(f"r{r}-{c}", by_conv[c])
                ingest.setdefault(sys_.label, []).append(len(texts) / (time.perf_counter() - t0))
            log(f"ingest round {r + 1}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in ingest.items()))
        med = {k: statistics.median(v) for k, v in ingest.items()}
        limit = med["raw encoder (all turns in one call)"]
        fastest_peer = max(v for k, v in med.items() if k not in ("agentmem", "raw encoder (all turns in one call)"))
        print_table(f"ingest, turns/s (median of {args.rounds} rounds; one call per conversation)",
                    ["system", "turns/s", "/ raw limit", "agentmem / this"],
                    [[k, f"{v:.1f}", f"{v / limit:.2f}", f"{med['agentmem'] / v:.2f}x"] for k, v in med.items()])
        print(f"agentmem / fastest peer: {med['agentmem'] / fastest_peer:.2f}x; agentmem / raw limit: "
              f"{med['agentmem'] / limit:.2f}")
        result["ingest_turns_per_s"] = ingest
        # read_knowledge needs knowledge rows: the turns of round 0's users, vectors reused.
        vec_of = {t: base[i] for i, t in enumerate(texts)}
        bulk = MemoryManager.open(Settings.from_env(database_url=db, schema="agentmem"), embedder=Lookup(encoder, vec_of))
        for c in convs:
            bulk.write_knowledge_batch([{"content": t} for _, t in by_conv[c]], user_id=f"r0-{c}")
        bulk.close()
        asks = [(f"r0-{q.conversation}", q.text) for q in rng.sample(questions, args.queries)]
        result["locomo_search"] = report_search("LoCoMo size (3 users, ~480 rows each)",
                                                search_rounds(systems, asks, args.rounds))
        for s in systems:
            s.close()

        # Phase 2: --scale rows, as 200 users and as one user.
        if args.scale:
            noise = np.random.default_rng(7)
            gen: dict[str, np.ndarray] = {}
            rows = []
            for i in range(args.scale):
                j = i % len(texts)
                text = f"{texts[j]} (#{i})"
                v = base[j] + 0.1 * noise.standard_normal(encoder.dimension).astype(np.float32) / np.sqrt(
                    encoder.dimension)
                gen[text] = v / np.linalg.norm(v)
                rows.append(text)
            lookup = Lookup(encoder, gen)
            for label, users in (("200 users", 200), ("one user", 1)):
                db = new_database(uri, "p_" + label.replace(" ", "_"))
                systems = [cls(db, encoder, lookup) for cls in SYSTEMS]
                per = args.scale // users
                for sys_ in systems:
                    t0 = time.perf_counter()
                    for u in range(users):
                        sys_.load(f"u{u:03d}", rows[u * per:(u + 1) * per])
                    log(f"{label}: loaded {args.scale} rows into {sys_.label} in {time.perf_counter() - t0:.0f} s")
                with psycopg.connect(db, autocommit=True) as conn:
                    conn.execute("VACUUM ANALYZE")
                asks = [(f"u{rng.randrange(users):03d}", q.text) for q in rng.sample(questions, args.queries)]
                result[f"search_{label}"] = report_search(f"{args.scale} rows, {label} ({per} rows each)",
                                                          search_rounds(systems, asks, args.rounds))
                for s in systems:
                    s.close()
    print(f"\nload average at end: {environment()['loadavg_at_end']}")
    write_json(args.json, result)


if __name__ == "__main__":
    main()
