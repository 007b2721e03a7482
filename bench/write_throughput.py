"""Conversation write throughput with real MiniLM embeddings vs raw embedding speed.

Writes the same ``--messages`` chat messages several ways, side by side in one run:

* raw MiniLM ``embed()`` of exactly the texts agentmem embeds (``"role: content"``)
  in batches of 1, 2, 8 and 64: the ceiling, no database;
* ``mm.write_messages`` in batches of 2 (one user + assistant turn), 8 and 64
  (bulk import), each batch one transaction with one embedding call;
* ``mm.write_conversational_memory`` one message at a time;
* ``mm.write_messages(..., embed=False)``: the database path alone.

Every MemoryManager mode starts with a fresh embedding cache, so every message is
really embedded. The ratio column is messages/s written over raw embedding
messages/s at the same batch size (1.0 = the database costs nothing).

Messages are built from real sentences harvested from installed docstrings (see
``_corpus``): user messages of 1-2 sentences, assistant messages of 2-4, 64
messages per thread.

    python bench/write_throughput.py --json /tmp/write.json
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Any, Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _corpus  # noqa: E402
from _common import (  # noqa: E402
    Timer, apply_torch_threads, base_parser, embedded_server, log, open_manager, print_load, print_table,
    write_json)

from memory import MemoryManager, MiniLMEmbedder  # noqa: E402
from memory.conversation import embedding_text  # noqa: E402

PER_THREAD = 64


def make_messages(rng: np.random.Generator, sentences: list[str], n: int) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    seen: set[str] = set()
    while len(out) < n:
        role = "user" if len(out) % 2 == 0 else "assistant"
        count = int(rng.integers(1, 3)) if role == "user" else int(rng.integers(2, 5))
        content = " ".join(sentences[i] for i in rng.choice(len(sentences), count, replace=False))
        if content not in seen:
            seen.add(content)
            out.append({"role": role, "content": content})
    return out


def threads_of(messages: list[dict[str, str]]) -> list[tuple[str, list[dict[str, str]]]]:
    run = uuid.uuid4().hex[:6]
    return [(f"t-{run}-{i // PER_THREAD}", messages[i:i + PER_THREAD]) for i in range(0, len(messages), PER_THREAD)]


def batched_writer(batch: int, *, embed: bool = True) -> Callable[[MemoryManager, list], int]:
    def run(mm: MemoryManager, messages: list[dict[str, str]]) -> int:
        written = 0
        for thread_id, msgs in threads_of(messages):
            for start in range(0, len(msgs), batch):
                written += len(mm.write_messages("bench-user", thread_id, msgs[start:start + batch], embed=embed))
        return written
    return run


def one_at_a_time(mm: MemoryManager, messages: list[dict[str, str]]) -> int:
    written = 0
    for thread_id, msgs in threads_of(messages):
        for m in msgs:
            mm.write_conversational_memory("bench-user", thread_id, m["role"], m["content"])
            written += 1
    return written


def raw_rate(embedder: MiniLMEmbedder, texts: list[str], batch: int) -> float:
    with Timer() as t:
        for start in range(0, len(texts), batch):
            embedder.embed(texts[start:start + batch])
    return len(texts) / t.seconds


def main() -> None:
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=512)
    args = p.parse_args()
    rng = np.random.default_rng(args.seed)

    log("loading MiniLM and the sentence corpus")
    minilm = MiniLMEmbedder()
    threads = apply_torch_threads(args.torch_threads)
    log(f"torch intra-op threads: {threads}")
    messages = make_messages(rng, _corpus.sentences(3000), args.messages)
    texts = [embedding_text(m["role"], m["content"]) for m in messages]
    minilm.embed(texts[:8])  # load and warm the model outside any timing
    chars = np.mean([len(t) for t in texts])

    modes: list[tuple[str, int, Callable[[MemoryManager, list], int], bool]] = [
        ("write_messages", 2, batched_writer(2), True),
        ("write_messages", 8, batched_writer(8), True),
        ("write_messages", 64, batched_writer(64), True),
        ("write_conversational_memory", 1, one_at_a_time, True),
        ("write_messages embed=False", 64, batched_writer(64, embed=False), False),
        ("write_messages embed=False", 1, batched_writer(1, embed=False), False),
    ]
    # The machine is shared: raw embedding speed is measured right before and right
    # after each write run on the same texts and batch size, and the ratio uses their mean.
    rows: list[list[Any]] = []
    results: list[dict[str, Any]] = []
    raw_all: dict[int, list[float]] = {}
    with embedded_server() as uri:
        for name, batch, fn, embeds in modes:
            before = raw_rate(minilm, texts, batch) if embeds else float("nan")
            mm = open_manager(uri, embedder=minilm)  # a fresh embedding cache for every mode
            try:
                with Timer() as t:
                    written = fn(mm, messages)
                calls = mm.embeddings.calls
            finally:
                mm.close()
            after = raw_rate(minilm, texts, batch) if embeds else float("nan")
            raw = (before + after) / 2
            if embeds:
                raw_all.setdefault(batch, []).extend([before, after])
            rate = written / t.seconds
            results.append({"mode": name, "batch": batch, "messages": written, "seconds": t.seconds,
                            "msg_per_s": rate, "ms_per_msg": 1000 / rate, "embedding_calls": calls,
                            "raw_embed_msg_per_s_before_after": [before, after] if embeds else None,
                            "ratio_to_raw_same_batch": rate / raw if embeds else None})
            rows.append([name, batch, rate, 1000 / rate, f"{before:,.1f} / {after:,.1f}" if embeds else "-",
                         rate / raw if embeds else "-", calls])
            log(f"{name} batch {batch}: {rate:,.1f} msg/s (raw embed {before:,.1f} / {after:,.1f} msg/s)")

    print_table(f"Conversation writes, {args.messages} messages (mean {chars:.0f} chars), real MiniLM",
                ["mode", "batch", "msg/s", "ms/msg", "raw embed msg/s before/after", "ratio", "model calls"], rows)
    print("(ratio = written msg/s / mean raw MiniLM msg/s on the same texts at the same batch size)")
    print_load()
    write_json(args.json, {"torch_threads": threads, "messages": args.messages, "mean_chars": float(chars),
                           "raw_embed_msg_per_s": {str(b): v for b, v in raw_all.items()}, "writes": results})


if __name__ == "__main__":
    main()
