"""Context window monitor: how full is the prompt, and is summarising worth it now?

The monitor is deterministic and cheap, so it runs every turn. Its budget leaves room
for the answer and a margin for counting error::

    usable = (context window - reserved output tokens) x (1 - safety margin)

and ``percent`` is measured against that usable budget. The status is ``ok`` below
the warning threshold (50 %), ``warning`` below the critical threshold (80 %) and
``critical`` from there; all three numbers, and the models' windows, are settings.

Consolidation stays the agent's decision: the status is shown to the agent, which
calls ``summarize_and_store``. Only past the hard limit (95 %) does
``hard_limit_reached`` tell a loop to consolidate on its own so it never overflows.
:func:`should_consolidate` gives the economics behind that decision.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from memory.errors import InvalidInputError
from memory.settings import Settings
from memory.context.tokens import Method, count_tokens

Status = Literal["ok", "warning", "critical"]


@dataclass(frozen=True)
class ContextUsage:
    """Tokens of a context against the model's usable budget."""

    tokens: int
    max_tokens: int          # the usable budget
    percent: float           # tokens / max_tokens x 100
    method: Method           # "tokenizer" or "estimate"
    encoding: str | None
    model: str | None
    context_window: int      # the model's whole window
    reserved_output_tokens: int

    @property
    def remaining(self) -> int:
        return max(0, self.max_tokens - self.tokens)


@dataclass(frozen=True)
class ContextStatus(ContextUsage):
    """:class:`ContextUsage` plus the monitor's verdict."""

    status: Status = "ok"
    hard_limit_reached: bool = False

    @property
    def message(self) -> str:
        """One line the agent sees in its context."""
        head = (f"Context usage: {self.tokens:,} / {self.max_tokens:,} tokens "
                f"({self.percent:.1f} %, {self.status}).")
        if self.status == "ok":
            return head
        return head + " Consider calling summarize_and_store to consolidate older conversation."


def usable_budget(model: str | None, settings: Settings | None = None) -> int:
    """``(window - reserved output) x (1 - margin)``, at least 1."""
    s = settings or Settings()
    window = s.context_window(model)
    reserved = min(s.reserved_output_tokens, window // 2)
    return max(1, int((window - reserved) * (1 - s.safety_margin)))


def calculate_context_usage(context: str, model: str | None = None,
                            settings: Settings | None = None) -> ContextUsage:
    """Count ``context`` against the model's usable budget."""
    if not isinstance(context, str):
        raise InvalidInputError(f"context must be a string, got {type(context).__name__}")
    if model is not None and not isinstance(model, str):
        raise InvalidInputError(f"model must be a model name (a string), got {type(model).__name__}")
    s = settings or Settings()
    count = count_tokens(context, model)
    n, method, encoding = count.tokens, count.method, count.encoding
    budget = usable_budget(model, s)
    window = s.context_window(model)
    return ContextUsage(tokens=n, max_tokens=budget, percent=100.0 * n / budget, method=method,
                        encoding=encoding, model=model, context_window=window,
                        reserved_output_tokens=min(s.reserved_output_tokens, window // 2))


def status_for(fraction: float, settings: Settings | None = None) -> Status:
    s = settings or Settings()
    if fraction < s.warning_threshold:
        return "ok"
    if fraction < s.critical_threshold:
        return "warning"
    return "critical"


def monitor_context_window(context: str, model: str | None = None,
                           settings: Settings | None = None) -> ContextStatus:
    """:func:`calculate_context_usage` plus ``status`` (ok / warning / critical)."""
    s = settings or Settings()
    u = calculate_context_usage(context, model, s)
    fraction = u.percent / 100.0
    return ContextStatus(**u.__dict__, status=status_for(fraction, s),
                         hard_limit_reached=fraction >= s.hard_limit)


@dataclass(frozen=True)
class ConsolidationAdvice:
    """The break-even of summarising now; truthy when it pays."""

    consolidate: bool
    tokens_without: int      # history sent on every remaining turn
    tokens_with: int         # one summarisation call, then the summary on every turn
    tokens_saved: int
    break_even_turns: float  # remaining turns from which summarising pays (inf: never)

    def __bool__(self) -> bool:
        return self.consolidate


def should_consolidate(history_tokens: int, expected_remaining_turns: int, summary_tokens: int, *,
                       summarise_cost_tokens: int | None = None) -> ConsolidationAdvice:
    """Is summarising ``history_tokens`` into ``summary_tokens`` cheaper over the remaining turns?

    Without it, the history is sent again on each of the R remaining turns:
    ``H x R``. With it, one summarisation call reads the history and writes the
    summary (``H + S`` by default; pass 0 for the extractive summariser), then the
    summary is sent R times: ``cost + S x R``. Summarise when the second is smaller,
    i.e. when ``R > cost / (H - S)``.
    """
    for name, value in (("history_tokens", history_tokens), ("expected_remaining_turns", expected_remaining_turns),
                        ("summary_tokens", summary_tokens)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise InvalidInputError(f"{name} must be a non-negative integer, got {value!r}")
    cost = history_tokens + summary_tokens if summarise_cost_tokens is None else summarise_cost_tokens
    if cost < 0:
        raise InvalidInputError("summarise_cost_tokens must be non-negative")
    without = history_tokens * expected_remaining_turns
    with_ = cost + summary_tokens * expected_remaining_turns
    saving_per_turn = history_tokens - summary_tokens
    break_even = cost / saving_per_turn if saving_per_turn > 0 else math.inf
    return ConsolidationAdvice(consolidate=with_ < without, tokens_without=without, tokens_with=with_,
                               tokens_saved=without - with_, break_even_turns=break_even)
