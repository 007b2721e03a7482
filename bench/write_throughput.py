"""Conversation write throughput with real MiniLM embeddings vs raw embedding speed.

Writes the same ``--messages`` chat messages several ways, side by side in one run:

* raw MiniLM ``embed()`` of exactly the texts agentmem embeds (``"role: content"``)
  in batches of 1, 2, 8 and 64: the ceiling, no database;
* ``mm.write_messages`` in batches of 2 (one user + assistant turn), 8 and 64
  (bulk import), each batch one transaction with one embedding call;
* ``mm.write_conversational_memory`` one message at a time;
* ``mm.write_messages(..., embed=False)``: the database path alone.

Every MemoryManager mode starts with a fresh embedding cache, so every message is
really embedded, and writes into empty tables of a schema of its own, so every vector is
really inserted into the HNSW index. Each write call is paired with a raw ``embed()`` of the same texts,
so the ratio (messages/s written over raw embedding messages/s) compares two
measurements taken at the same moment (1.0 = the database costs nothing).

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
from memory.tables.conversation import embedding_text  # noqa: E402

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


def batches(messages: list[dict[str, str]], size: int) -> list[tuple[str, list[dict[str, str]]]]:
    """(thread id, messages) units of at most ``size`` messages, threads of PER_THREAD messages."""
    run = uuid.uuid4().hex[:6]
    out = []
    for i in range(0, len(messages), PER_THREAD):
        thread = messages[i:i + PER_THREAD]
        out.extend((f"t-{run}-{i // PER_THREAD}", thread[j:j + size]) for j in range(0, len(thread), size))
    return out


def write_batch(mm: MemoryManager, thread_id: str, msgs: list[dict[str, str]], *, embed: bool) -> int:
    return len(mm.write_messages(msgs, user_id="bench-user", thread_id=thread_id, embed=embed))


def write_one(mm: MemoryManager, thread_id: str, msgs: list[dict[str, str]], *, embed: bool) -> int:
    (m,) = msgs
    mm.write_conversational_memory(m["role"], m["content"], user_id="bench-user", thread_id=thread_id)
    return 1


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

    modes: list[tuple[str, int, Callable[..., int], bool]] = [
        ("write_messages", 2, write_batch, True),
        ("write_messages", 8, write_batch, True),
        ("write_messages", 64, write_batch, True),
        ("write_conversational_memory", 1, write_one, True),
        ("write_messages embed=False", 64, write_batch, False),
        ("write_messages embed=False", 1, write_batch, False),
    ]
    # The machine is shared and its load drifts within seconds: each write call is
    # paired with a raw MiniLM embed() of exactly the texts that call will embed, so
    # both sides of the ratio are measured at (almost) the same moment.
    rows: list[list[Any]] = []
    results: list[dict[str, Any]] = []
    with embedded_server() as uri:
        for n, (name, size, fn, embeds) in enumerate(modes):
            # a fresh embedding cache and empty tables for every mode: the same messages
            # written again into one HNSW index are not inserted, only pointed at (their
            # vectors are exact duplicates of rows already in its graph)
            mm = open_manager(uri, schema=f"mode{n}", embedder=minilm)
            raw_s = write_s = 0.0
            written = 0
            try:
                for i, (thread_id, msgs) in enumerate(batches(messages, size)):
                    # alternate which goes first: the second of two calls on the same
                    # shapes runs warmer, and that must not favour either side
                    for step in ("raw", "write") if i % 2 == 0 else ("write", "raw"):
                        if step == "raw" and embeds:
                            with Timer() as t:
                                minilm.embed([embedding_text(m["role"], m["content"]) for m in msgs])
                            raw_s += t.seconds
                        elif step == "write":
                            with Timer() as t:
                                written += fn(mm, thread_id, msgs, embed=embeds)
                            write_s += t.seconds
                calls = mm.embeddings.calls
            finally:
                mm.close()
            rate = written / write_s
            raw = written / raw_s if embeds else float("nan")
            results.append({"mode": name, "batch": size, "messages": written, "seconds": write_s,
                            "msg_per_s": rate, "ms_per_msg": 1000 / rate, "embedding_calls": calls,
                            "raw_embed_msg_per_s": raw if embeds else None,
                            "ratio_to_raw": rate / raw if embeds else None,
                            "db_ms_per_msg": (write_s - raw_s) / written * 1000 if embeds else None})
            rows.append([name, size, rate, 1000 / rate, raw if embeds else "-", rate / raw if embeds else "-",
                         (write_s - raw_s) / written * 1000 if embeds else 1000 / rate, calls])
            log(f"{name} batch {size}: {rate:,.1f} msg/s (raw embed {raw:,.1f} msg/s)")

    print_table(f"Conversation writes, {args.messages} messages (mean {chars:.0f} chars), real MiniLM",
                ["mode", "batch", "msg/s", "ms/msg", "raw embed msg/s", "ratio", "rest ms/msg", "model calls"], rows)
    print("(raw embed: MiniLM embed() of the same texts in the same batches, timed next to each write call (alternating order);\n"
          " ratio = written msg/s / raw embed msg/s; rest = write time minus raw embed time, per message)")
    print_load()
    write_json(args.json, {"torch_threads": threads, "messages": args.messages, "mean_chars": float(chars),
                           "writes": results})


if __name__ == "__main__":
    main()
