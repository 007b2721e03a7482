"""Which embedding model a deployment uses, from its settings (``embedder``, ``embedding_backend``)."""

from __future__ import annotations

import warnings

from memory.errors import EmbeddingError
from memory.retrieval.embeddings import Embedder, HashEmbedder, MiniLMEmbedder
from memory.settings import Settings


def embedder_from_settings(settings: Settings) -> Embedder:
    """The packaged MiniLM model, unless ``settings.embedder == "hash"`` (TEST ONLY).

    MiniLM runs on ``settings.embedding_backend``: "onnx" (default; int8, exported into
    ``settings.model_cache_dir`` on first use) or "torch". When ONNX Runtime cannot be
    used (not installed, export failed) it falls back to torch with a warning: the two
    backends may share a schema (``memory.retrieval.embeddings.SHARED_VECTOR_SPACE``).

    The hash embedder is a deterministic fake with no notion of meaning; it lets the
    CLI and notebook tests run fast in a subprocess. Never use it for real memory:
    vectors of different embedders must not share a schema.
    """
    if settings.embedder == "hash":
        return HashEmbedder()
    if settings.embedding_backend == "onnx":
        from memory.retrieval.onnx_minilm import OnnxMiniLMEmbedder

        try:
            return OnnxMiniLMEmbedder(settings.model_cache_dir, threads=settings.embedding_threads)
        except EmbeddingError as exc:
            warnings.warn(f"agentmem: the ONNX embedding backend is unavailable ({exc}); using torch",
                          RuntimeWarning, stacklevel=3)
    return MiniLMEmbedder(threads=settings.embedding_threads)
