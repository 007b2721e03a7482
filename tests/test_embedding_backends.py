"""Embedding backends: batching by length, the int8 ONNX MiniLM, its cache, the torch
fallback, and which backends' vectors may share a schema.

The ONNX tests use the real packaged weights (exported once per session into a temp
cache directory) and compare with the real torch model.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import threading
import time
import sys
from pathlib import Path
from typing import Sequence

import numpy as np
import psycopg
import pytest
from psycopg import sql

from memory import EmbeddingModelMismatchError, HashEmbedder, MemoryManager, MiniLMEmbedder, Settings
from memory.store import migrations
from memory.retrieval.embeddings import EmbeddingService
from memory.errors import ConfigurationError, EmbeddingError
from memory.manager import embedder_from_env
from memory.retrieval import onnx_minilm as onnx_module
from memory.retrieval.onnx_minilm import OnnxMiniLMEmbedder, cached_model_path, model_dir, plan_runs

ROOT = Path(__file__).resolve().parent.parent


class Recording:
    """The hash embedder, remembering each batch it was handed."""

    name, dimension, backend = "hash-embedder", 64, "hash"

    def __init__(self) -> None:
        self.inner = HashEmbedder(64)
        self.batches: list[list[str]] = []

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.batches.append(list(texts))
        return self.inner.embed(texts)


def test_embed_batches_by_length_across_the_whole_call_and_keeps_input_order() -> None:
    rng = random.Random(3)
    texts = [" ".join(f"w{rng.randrange(10_000)}" for _ in range(rng.randrange(1, 60))) for _ in range(50)]
    rec = Recording()
    service = EmbeddingService(rec, batch_size=8)
    vectors = service.embed(texts)
    # Every batch holds texts no longer than the shortest of the batch before it.
    lengths = [[len(t) for t in batch] for batch in rec.batches]
    assert len(lengths) == 7
    for before, after in zip(lengths, lengths[1:]):
        assert max(after) <= min(before)
    # ... and each vector is still the one of the text at its input position.
    expected = HashEmbedder(64).embed(texts)
    assert np.allclose(np.stack(vectors), expected)


def _padded(lengths: Sequence[int], runs: list[list[int]]) -> int:
    return sum(len(run) * max(lengths[i] for i in run) for run in runs)


def test_model_runs_are_planned_by_tokens_so_a_long_text_pads_no_short_ones() -> None:
    # A stage of write_messages: one long turn among short ones and a few middling ones.
    lengths = [12, 120, 11, 40, 12, 10, 41, 12, 11, 10, 39, 12, 11, 10, 12, 11]
    runs = plan_runs(lengths)
    assert sorted(i for run in runs for i in run) == list(range(len(lengths)))  # each text once
    assert [1] in runs  # the 120-token text runs alone instead of padding 7 others to 120
    for run in runs:
        assert len(run) <= onnx_module.MAX_RUN
        assert len(run) == 1 or len(run) * max(lengths[i] for i in run) <= onnx_module.MAX_RUN_TOKENS
        assert [lengths[i] for i in run] == sorted((lengths[i] for i in run), reverse=True)
    # Fewer padded tokens than 8 texts per run in length order (the plan before), plus the runs.
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    fixed = [order[k:k + 8] for k in range(0, len(order), 8)]
    cost = onnx_module.RUN_COST
    assert _padded(lengths, runs) + cost * len(runs) < _padded(lengths, fixed) + cost * len(fixed)
    # Texts of one length share runs as large as allowed: no run is spent needlessly.
    assert [len(run) for run in plan_runs([20] * 40)] == [16, 16, 8]
    assert plan_runs([]) == []


# -- the ONNX backend ------------------------------------------------------------------------
# Agreement floors, from bench/embed_backends.py's distribution over 4,000+ LoCoMo and
# ToolBench texts (int8 vs fp32: mean cosine ~0.99, 1st percentile ~0.98, worst ~0.95),
# not from these six texts: every text must stay above 0.93, under the worst real text of
# the bench, so a correct export never trips it; the mean of a handful must reach 0.98.
# What they must catch: the padding mask ignored (0.86 on a short text) and per-tensor
# weight scales (mean 0.957, worst 0.80), both seen while building the export.
COSINE_FLOOR, MEAN_COSINE_FLOOR = 0.93, 0.98
TEXTS = [
    "Hey Mel! Good to see you! How have you been?",
    "I went to a LGBTQ support group yesterday and it was so powerful.",
    "Retrieve the current weather forecast for a given city and date.",
    "def add(a, b): return a + b",
    "The quick brown fox jumps over the lazy dog " * 40,  # longer than 256 tokens: truncated alike
    "ok",
]
#: Pairs of texts that mean the same, and no two pairs alike.
PARAPHRASES = [
    ("The weather is sunny and warm today.", "It is a bright, hot day outside."),
    ("I adopted a puppy last week.", "We brought a new dog home a few days ago."),
    ("How do I reset my password?", "I forgot my login password and need to change it."),
    ("Convert 100 US dollars to euros.", "What is 100 USD in EUR at today's exchange rate?"),
]


@pytest.fixture(scope="session")
def onnx_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("onnx-cache")


@pytest.fixture(scope="session")
def onnx_minilm(onnx_cache: Path) -> OnnxMiniLMEmbedder:
    return OnnxMiniLMEmbedder(onnx_cache, threads=1)


@pytest.mark.slow
def test_onnx_vectors_agree_with_torch_on_real_texts(onnx_minilm: OnnxMiniLMEmbedder, minilm: MiniLMEmbedder) -> None:
    a, b = onnx_minilm.embed(TEXTS), minilm.embed(TEXTS)
    assert a.shape == b.shape == (len(TEXTS), 384) and a.dtype == np.float32
    assert np.allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-4)
    cos = np.sum(a * b, axis=1)
    assert cos.min() >= COSINE_FLOOR and cos.mean() >= MEAN_COSINE_FLOOR, cos
    # Alone or batched with longer texts, a text gets nearly the same vector: padding does
    # not leak into the mean. Not exactly the same: dynamic quantisation scales the
    # activations per batch, so a batch's other texts move a vector within int8 error
    # (most for a short text among long ones; the service batches similar lengths).
    alone = np.stack([onnx_minilm.embed([t])[0] for t in TEXTS])
    assert np.sum(alone * a, axis=1).min() >= COSINE_FLOOR
    # Each text's nearest other text is its paraphrase under both backends. (Among unrelated
    # texts the nearest is a near-tie at cosine ~0.1: which one wins flipped between CPUs,
    # int8 on AVX2 against AVX-512 VNNI, and says nothing about the model.)
    flat = [t for pair in PARAPHRASES for t in pair]
    partner = [i ^ 1 for i in range(len(flat))]
    for vectors in (onnx_minilm.embed(flat), minilm.embed(flat)):
        sims = vectors @ vectors.T
        np.fill_diagonal(sims, -1)
        assert list(sims.argmax(1)) == partner


@pytest.mark.slow
def test_planned_runs_keep_each_texts_vector_as_close_to_its_own_as_fixed_runs(
        onnx_minilm: OnnxMiniLMEmbedder, monkeypatch: pytest.MonkeyPatch) -> None:
    # int8 activations are scaled per run, so a text's vector moves a little with its run
    # mates; the planned runs (similar lengths, less padding) must not move it further from
    # the text embedded alone than runs of a fixed 8 did, and must keep every input position.
    rng = random.Random(5)
    words = " ".join(TEXTS[:4]).split()
    texts = list(dict.fromkeys(" ".join(rng.choice(words) for _ in range(rng.choice((3, 6, 12, 40, 90))))
                               for _ in range(48)))
    alone = np.stack([onnx_minilm.embed([t])[0] for t in texts])
    planned = onnx_minilm.embed(texts)
    monkeypatch.setattr(onnx_module, "FIXED_RUN", 8)
    fixed = onnx_minilm.embed(texts)
    near_planned, near_fixed = np.sum(planned * alone, axis=1), np.sum(fixed * alone, axis=1)
    assert near_planned.min() >= COSINE_FLOOR
    assert near_planned.mean() >= near_fixed.mean() - 1e-4, (near_planned.mean(), near_fixed.mean())
    # Each planned vector is nearest to its own text alone: none landed at another position.
    assert list((planned @ alone.T).argmax(1)) == list(range(len(texts)))


@pytest.mark.slow
def test_onnx_export_is_cached_and_reused(onnx_minilm: OnnxMiniLMEmbedder, onnx_cache: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    assert onnx_minilm.exported and onnx_minilm.path.exists()
    assert onnx_minilm.path.parent == onnx_cache and onnx_minilm.path == cached_model_path(onnx_cache)
    assert list(onnx_cache.glob("*.onnx")) == [onnx_minilm.path]  # no temp files left behind
    mtime = onnx_minilm.path.stat().st_mtime_ns
    # A second process-like load reuses the file: no export, so torch is never needed.
    monkeypatch.setattr("memory.retrieval.onnx_minilm.export_int8", lambda *a: pytest.fail("exported again"))
    again = OnnxMiniLMEmbedder(onnx_cache, threads=1)
    assert not again.exported and again.path.stat().st_mtime_ns == mtime
    assert np.array_equal(again.embed(TEXTS[:2]), onnx_minilm.embed(TEXTS[:2]))
    # Another recipe or model package gets another file, never the stale one.
    monkeypatch.setattr("memory.retrieval.onnx_minilm.RECIPE", "another-recipe")
    assert cached_model_path(onnx_cache, model_dir()) != onnx_minilm.path


@pytest.mark.slow
def test_a_corrupt_cached_file_is_a_clear_error(tmp_path: Path) -> None:
    target = cached_model_path(tmp_path)
    target.write_bytes(b"not an onnx model")
    with pytest.raises(EmbeddingError, match="delete it"):
        OnnxMiniLMEmbedder(tmp_path)


def test_backend_setting_is_validated() -> None:
    with pytest.raises(ConfigurationError, match="AGENTMEM_EMBEDDING_BACKEND"):
        Settings(embedding_backend="tensorflow").validate()


@pytest.mark.slow
def test_torch_backend_on_request_and_as_the_fallback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTMEM_EMBEDDER", raising=False)
    chosen = embedder_from_env(Settings(embedding_backend="torch", model_cache_dir=tmp_path))
    assert isinstance(chosen, MiniLMEmbedder) and chosen.backend == "torch-fp32"
    assert not list(tmp_path.iterdir())  # torch asked for: nothing exported
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # ONNX Runtime not installed
    with pytest.warns(RuntimeWarning, match="ONNX embedding backend is unavailable"):
        fallback = embedder_from_env(Settings(embedding_backend="onnx", model_cache_dir=tmp_path))
    assert isinstance(fallback, MiniLMEmbedder)
    assert fallback.embed(["hello"]).shape == (1, 384)


# -- which backends may share a schema -------------------------------------------------------
def _meta(uri: str, schema: str) -> dict[str, str]:
    with psycopg.connect(uri) as conn:
        rows = conn.execute(sql.SQL("SELECT key, value FROM {}.agentmem_meta").format(sql.Identifier(schema)))
        return dict(rows.fetchall())


def test_int8_and_fp32_minilm_share_a_schema_other_backends_are_refused(pg_uri: str, fresh_schema: str) -> None:
    def open_with(backend: str) -> list[str]:
        return migrations.migrate(pg_uri, schema=fresh_schema, dimension=384, model_name="all-MiniLM-L6-v2",
                                  backend=backend)

    assert open_with("torch-fp32")
    assert _meta(pg_uri, fresh_schema)["embedding_backend"] == "torch-fp32"
    assert open_with("onnx-int8") == []  # measured to agree: accepted
    with pytest.raises(EmbeddingModelMismatchError, match="AGENTMEM_EMBEDDING_BACKEND"):
        open_with("onnx-fp16-unmeasured")
    assert _meta(pg_uri, fresh_schema)["embedding_backend"] == "torch-fp32"  # the refusal wrote nothing


def test_schemas_from_before_the_backend_was_recorded_count_as_torch(pg_uri: str, fresh_schema: str) -> None:
    migrations.migrate(pg_uri, schema=fresh_schema, dimension=384, model_name="all-MiniLM-L6-v2",
                       backend="torch-fp32")
    with psycopg.connect(pg_uri) as conn:
        conn.execute(sql.SQL("DELETE FROM {}.agentmem_meta WHERE key = 'embedding_backend'").format(
            sql.Identifier(fresh_schema)))
    migrations.migrate(pg_uri, schema=fresh_schema, dimension=384, model_name="all-MiniLM-L6-v2",
                       backend="onnx-int8")
    with pytest.raises(EmbeddingModelMismatchError):
        migrations.migrate(pg_uri, schema=fresh_schema, dimension=384, model_name="all-MiniLM-L6-v2",
                           backend="onnx-fp16-unmeasured")


def test_a_model_without_a_shared_space_needs_its_exact_backend(pg_uri: str, fresh_schema: str) -> None:
    migrations.migrate(pg_uri, schema=fresh_schema, dimension=384, model_name="hash-embedder", backend="hash")
    with pytest.raises(EmbeddingModelMismatchError):
        migrations.migrate(pg_uri, schema=fresh_schema, dimension=384, model_name="hash-embedder",
                           backend="onnx-int8")


# -- the CLI without torch -------------------------------------------------------------------
@pytest.mark.slow
def test_cli_search_with_the_cached_onnx_file_never_imports_torch(
        pg_uri: str, fresh_schema: str, onnx_minilm: OnnxMiniLMEmbedder, onnx_cache: Path, user: str) -> None:
    settings = Settings.from_env(database_url=pg_uri, schema=fresh_schema)
    with MemoryManager.open(settings, embedder=onnx_minilm) as mm:
        mm.write_messages([{"role": "user", "content": "My cat Miso hates the vacuum cleaner."},
                                       {"role": "user",
                                        "content": "The quarterly report is due on Friday."}], user_id=user, thread_id="t1")
    probe = (
        "import json, sys\n"
        "from memory.cli.main import main\n"
        "code = 0\ntry:\n"
        "    main(['search', 'which pet do I have', '--user', sys.argv[1], '-k', '1', '--json'])\n"
        "except SystemExit as exc:\n"
        "    code = exc.code\n"
        "heavy = sorted(m for m in ('torch', 'sentence_transformers', 'transformers') if m in sys.modules)\n"
        "print(json.dumps({'code': code, 'heavy': heavy}), file=sys.stderr)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTMEM_")}
    env.update(AGENTMEM_DATABASE_URL=pg_uri, AGENTMEM_SCHEMA=fresh_schema, AGENTMEM_MODEL_CACHE_DIR=str(onnx_cache),
               PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", probe, user], capture_output=True, text=True, env=env, timeout=300)
    report = json.loads(out.stderr.strip().splitlines()[-1])
    assert report == {"code": 0, "heavy": []}, out.stderr
    hits = json.loads(out.stdout)
    assert len(hits) == 1 and "Miso" in hits[0]["content"]


class Watched:
    """A hash embedder that records the thread of each call and whether calls overlapped."""

    name, dimension, backend = "hash-embedder", 64, "hash"

    def __init__(self, in_process: bool, hold: float = 0.0) -> None:
        self.in_process, self.hold = in_process, hold
        self.inner = HashEmbedder(64)
        self.threads: list[int] = []
        self.inside, self.overlapped = 0, False
        self._count = threading.Lock()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.threads.append(threading.get_ident())
        with self._count:
            self.inside += 1
            self.overlapped |= self.inside > 1
        time.sleep(self.hold)
        with self._count:
            self.inside -= 1
        return self.inner.embed(texts)


def test_an_in_process_model_runs_in_the_callers_thread_and_one_call_at_a_time() -> None:
    assert MiniLMEmbedder.in_process and OnnxMiniLMEmbedder.in_process and HashEmbedder.in_process
    model = Watched(in_process=True, hold=0.05)
    service = EmbeddingService(model, batch_size=8)
    service.embed(["one text"])
    assert model.threads == [threading.get_ident()]
    # Callers in several threads take turns: the model never runs two calls at once.
    callers = [threading.Thread(target=service.embed, args=([f"text {i}"],)) for i in range(4)]
    for t in callers:
        t.start()
    for t in callers:
        t.join()
    assert len(model.threads) == 5 and not model.overlapped


def test_another_embedder_runs_in_the_worker_thread_bounded_by_the_timeout() -> None:
    model = Watched(in_process=False)
    service = EmbeddingService(model, batch_size=8)
    service.embed(["one text"])
    assert model.threads and model.threads[0] != threading.get_ident()
    stuck = Watched(in_process=False, hold=2.0)
    slow = EmbeddingService(stuck, timeout_s=0.2)
    with pytest.raises(EmbeddingError, match="did not answer within 0.2s"):
        slow.embed(["a text the model never finishes"])


class ByRun(Watched):
    """An in-process model that plans its own runs (as OnnxMiniLMEmbedder does): ten texts a run,
    each run held for ``hold`` seconds; records the texts each plan was made over, and when each
    run started."""

    def __init__(self, hold: float) -> None:
        super().__init__(in_process=True, hold=hold)
        self.planned: list[list[str]] = []
        self.tokenized: list[list[str]] = []
        self.started: list[tuple[float, int]] = []
        self.fail_tokenize = False

    def tokenize(self, texts: Sequence[str]) -> list[str]:  # a text is its own token
        if self.fail_tokenize:
            raise RuntimeError("tokenizer broke")
        self.tokenized.append(list(texts))
        return list(texts)

    def plan(self, tokens: Sequence[str]) -> list[tuple[list[int], list[str]]]:
        self.planned.append(list(tokens))
        return [(list(range(i, min(i + 10, len(tokens)))), list(tokens[i:i + 10])) for i in range(0, len(tokens), 10)]

    def embed_tokens(self, tokens: Sequence[str]) -> np.ndarray:
        self.started.append((time.perf_counter(), len(tokens)))
        return self.embed(tokens)


def test_a_model_that_plans_its_runs_gets_a_whole_call_and_is_held_one_run_at_a_time() -> None:
    """The service hands such a model every text of a call at once (it plans its runs over all
    of them, not over chunks of batch_size), and takes the model one run at a time, in the order
    the callers asked: a query embedded beside a long write waits for the run in progress, not
    for the write. The vectors are each text's, in input order."""
    model = ByRun(hold=0.05)
    service = EmbeddingService(model, batch_size=8)
    texts = [f"turn {i} of a long conversation" for i in range(100)]
    write = service.embed_later(texts)  # ten runs of 50 ms, in another thread
    while not model.started:
        time.sleep(0.001)
    asked = time.perf_counter()
    [query] = service.embed(["the question"])
    answered = time.perf_counter()
    written = write.result()
    assert [len(p) for p in model.planned] == [100, 1]  # one plan over the whole call, not chunks of 8
    assert answered - asked < 0.25, answered - asked  # the run in progress and its own, not the write
    assert [n for _, n in model.started].index(1) < 10  # the query's run came between the write's
    assert not model.overlapped
    assert np.allclose(np.stack(written), HashEmbedder(64).embed(texts))
    assert np.allclose(query, HashEmbedder(64).embed(["the question"])[0])


def test_the_stages_of_a_write_are_tokenized_together_and_embedded_one_after_another() -> None:
    """embed_later_each: one tokenizer call over every stage's texts not cached yet (made at
    the start, while the cores are free), then a plan and a future per stage, each stage's
    vectors its own texts', in order."""
    model = ByRun(hold=0.0)
    service = EmbeddingService(model)
    service.embed(["already cached"])
    model.tokenized.clear(), model.planned.clear()
    stages = [[f"turn {i}" for i in range(25)], ["already cached", "turn 25", "turn 26"], ["turn 0", "turn 27"]]
    futures = service.embed_later_each(stages)
    got = [f.result(timeout=5) for f in futures]
    assert model.tokenized == [[f"turn {i}" for i in range(28)]]  # once, each text once, the cached one left out
    # per stage, its uncached texts (the service hands them longest first)
    assert [sorted(p) for p in model.planned] == [sorted(stages[0]), ["turn 25", "turn 26"], ["turn 27"]]
    for texts, vectors in zip(stages, got, strict=True):
        assert np.allclose(np.stack(vectors), HashEmbedder(64).embed(texts))


def test_a_cancelled_stage_is_not_embedded_and_a_tokenizer_failure_fails_every_stage() -> None:
    model = ByRun(hold=0.05)
    service = EmbeddingService(model)
    first, second = service.embed_later_each([[f"a {i}" for i in range(30)], [f"b {i}" for i in range(30)]])
    assert second.cancel()  # the first stage's three runs take 0.15 s: the second has not begun
    assert len(first.result(timeout=5)) == 30
    time.sleep(0.1)
    assert [sorted(p) for p in model.planned] == [sorted(f"a {i}" for i in range(30))]  # the cancelled one never ran
    model.fail_tokenize = True
    futures = service.embed_later_each([["c"], ["d"]])
    for future in futures:
        with pytest.raises(EmbeddingError, match="tokenizer broke"):
            future.result(timeout=5)


def test_the_model_lock_is_handed_over_in_the_order_it_was_asked_for() -> None:
    """A thread that releases the lock and asks again at once (a long write, run after run)
    does not get it back before a thread already waiting."""
    from memory.retrieval.embeddings import FairLock

    lock, order = FairLock(), []
    inside = threading.Event()

    def long_write() -> None:
        for i in range(20):
            with lock:
                inside.set()
                order.append(f"write {i}")
                time.sleep(0.02)

    writer = threading.Thread(target=long_write)
    writer.start()
    inside.wait()
    with lock:
        order.append("query")
    writer.join()
    assert order.index("query") <= 2, order  # after the run in progress (and at most one more)


class CountingTokenizer:
    """The ONNX model, recording each call of its tokenizer."""

    def __init__(self, inner: OnnxMiniLMEmbedder) -> None:
        self.inner = inner
        self.name, self.dimension, self.backend, self.in_process = inner.name, inner.dimension, inner.backend, True
        self.plan, self.embed_tokens, self.embed = inner.plan, inner.embed_tokens, inner.embed
        self.tokenized: list[list[str]] = []

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        self.tokenized.append(list(texts))
        return self.inner.tokenize(texts)


def test_write_messages_tokenizes_its_stages_in_one_call_and_stores_each_texts_vector(
        pg_uri: str, fresh_schema: str, onnx_minilm: OnnxMiniLMEmbedder, user: str) -> None:
    model = CountingTokenizer(onnx_minilm)
    topics = ["the garden", "a flight to Lisbon", "my sister's wedding", "tax forms", "the new puppy", "jazz records",
              "a broken laptop", "marathon training", "the school play", "sourdough bread", "a job interview",
              "the leaking roof"]
    turns = [{"role": "user" if i % 2 == 0 else "assistant",  # distinct texts of lengths 5 to 60 tokens
              "content": f"About {topics[i % 12]} and {topics[(i // 12) % 12]}, part {i}: "
                         + " ".join(["it went on and on"] * (i % 11))} for i in range(180)]
    settings = Settings.from_env(database_url=pg_uri, schema=fresh_schema, embedding_cache_size=0)
    with MemoryManager.open(settings, embedder=model) as mm:
        mm.write_messages(turns, user_id=user, thread_id="t")  # five stages: 28, 100, 36, 12, 4
        texts = [f"{t['role']}: {t['content']}" for t in turns]
        assert [sorted(x) for x in model.tokenized] == [sorted(texts)]
        with psycopg.connect(pg_uri) as conn:
            query = sql.SQL("SELECT content, embedding::text FROM {} WHERE user_id = %s ORDER BY id")
            rows = conn.execute(query.format(sql.Identifier(fresh_schema, "conversational_memory")), (user,)).fetchall()
    assert [r[0] for r in rows] == [t["content"] for t in turns]
    stored = np.array([json.loads(r[1]) for r in rows], dtype=np.float32)
    alone = onnx_minilm.embed(texts)
    assert list(np.argmax(stored @ alone.T, axis=1)) == list(range(len(texts)))  # each row its own text's vector
