"""Summarise a transcript into the four-heading structure, with a model or without one.

:class:`Summarizer` takes an optional LangChain chat model. With one:

1. one call with the full prompt (four headings, label, keep details, invent nothing);
2. if the answer is empty, one retry with a shorter, simpler prompt;
3. if the model raises, times out, or is empty twice, the extractive summariser
   (:mod:`memory.consolidation.extractive`) takes over, so a failing model never loses or blocks
   anything. The result records which path produced it and the errors seen.

Without a model, the extractive summariser is used directly.

**Map-reduce.** The summariser has a window (tokens). A transcript that does not fit
with the prompt and room for the answer is packed, whole messages at a time, into
pieces that do fit (a single message larger than a piece is split at line, then word
boundaries, never dropped). Each piece is summarised (map), then the partial summaries
are merged by the model (reduce), in groups that fit the window, level by level until
one remains. A failed merge falls back to concatenating the partial summaries section
by section, which loses nothing. Every piece is seen by a model call or the extractive
fallback: nothing is silently cut.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any
from collections.abc import Sequence

from memory.errors import LLMError
from memory.consolidation.extractive import extractive_summary, label_for
from memory.llm.chat import complete
from memory.consolidation.summary_shape import HEADINGS, fit_label, parse_sections, render, sections_of
from memory.consolidation.summary_fit import fit_content
from memory.consolidation.summary_fit import fit_label as cap_label
from memory.context.tokens import count_tokens

SYSTEM = ("You write structured summaries of conversations for an AI agent's long-term memory. "
          "You never invent anything that is not in the text.")

_RULES = (
    "Use exactly these four sections, in this order, each a short list of '- ' bullets:\n"
    + "\n".join(HEADINGS) + "\n"
    "Keep concrete details exactly as written: names, dates, ids, numbers, error messages, decisions. "
    "Keep confirmed facts apart from open questions (mark those 'Open question:'). "
    "Invent nothing; if a section has nothing, write '- None noted.'\n"
    "Start with one line 'Label: ' followed by a label of 8 to 12 words."
)

FULL_PROMPT = "Summarise {what} below.\n\n" + _RULES + "{focus}\n\n{kind}:\n{text}"
SIMPLE_PROMPT = ("Summarise this conversation. First line: 'Label: ' and 8 to 12 words. Then the headings "
                 + ", ".join(HEADINGS)
                 + ", each with bullet points. Keep names, numbers, dates and ids exact.\n\n{text}")
MERGE_WHAT = "these partial summaries of consecutive parts of one conversation into one summary"
SHORTEN_PROMPT = ("This summary is {size:,} characters long; the limit is {limit:,}. Rewrite it shorter, "
                  "at most {target:,} characters, with the same four sections. Keep the most specific details "
                  "(ids, names, numbers, dates, errors, decisions) and say in a bullet what kinds of detail you "
                  "left out. Invent nothing.\n\n" + _RULES + "\n\nSummary:\n{text}")


@dataclass(frozen=True)
class StructuredSummary:
    """A summary with exactly the four headings, its label, and how it was made."""

    label: str
    content: str
    method: str                 # "llm", "llm-retry", "extractive", "map-reduce"
    llm_calls: int = 0
    pieces: int = 1
    errors: tuple[str, ...] = field(default=())


def split_text(text: str, budget: int, model: str | None = None) -> list[str]:
    """Split ``text`` into parts of at most ``budget`` tokens, at line then word boundaries."""
    if count_tokens(text, model).tokens <= budget:
        return [text]
    for sep in ("\n", " "):
        parts = text.split(sep)
        if len(parts) > 1:
            out: list[str] = []
            current: list[str] = []
            used = 0
            for part in parts:
                n = count_tokens(sep + part, model).tokens  # counted once: linear in the text
                if current and used + n > budget:
                    out.append(sep.join(current))
                    current, used = [], 0
                current.append(part)
                used += n
            if current:
                out.append(sep.join(current))
            if len(out) > 1:
                return [p for chunk in out for p in split_text(chunk, budget, model)]
    # One unbreakable run: cut by characters (about 2 characters per token, safely small).
    step = max(1, budget * 2)
    return [text[i:i + step] for i in range(0, len(text), step)]


def pack(units: Sequence[str], budget: int, model: str | None = None) -> list[list[str]]:
    """Greedily pack whole units into pieces of at most ``budget`` tokens (big units split)."""
    pieces: list[list[str]] = []
    current: list[str] = []
    used = 0
    for unit in units:
        n = count_tokens(unit, model).tokens + 1
        if n > budget:
            if current:
                pieces.append(current)
                current, used = [], 0
            parts = split_text(unit, budget - 1, model)
            pieces.extend([p] for p in parts)
            continue
        if current and used + n > budget:
            pieces.append(current)
            current, used = [], 0
        current.append(unit)
        used += n
    if current:
        pieces.append(current)
    return pieces


class Summarizer:
    """Structured summaries with an optional chat model, a retry, a fallback and map-reduce."""

    def __init__(self, model: Any | None = None, *, window_tokens: int = 8192, output_tokens: int = 1024,
                 fallback: bool = True, token_model: str | None = None,
                 max_chars: int | None = None, limit_chars: int | None = 200_000) -> None:
        self.model = model
        self.window_tokens = window_tokens
        self.output_tokens = output_tokens
        self.fallback = fallback
        self.token_model = token_model or getattr(model, "model_name", None)
        self.max_chars = max_chars
        self.limit_chars = limit_chars  # what the summary must fit (the store's max_content_chars)
        self.calls = 0  # model calls made by this summariser, over its lifetime
        self._failed = False
        overhead = count_tokens(SYSTEM + FULL_PROMPT.format(what=MERGE_WHAT, focus="", kind="Partial summaries",
                                                            text=""), self.token_model).tokens
        self.piece_budget = max(64, window_tokens - output_tokens - overhead - 64)

    # -- public ------------------------------------------------------------------------
    def summarize(self, units: Sequence[str] | str, *, focus: str | None = None) -> StructuredSummary:
        """Summarise a transcript given as formatted messages (or one string)."""
        if isinstance(units, str):
            units = [units]
        units = [u for u in units if u.strip()]
        self._failed = False
        if self.model is None:
            label, content = extractive_summary(units, max_chars=self.max_chars)
            return self._fit(StructuredSummary(label, content, "extractive"))
        pieces = pack(units, self.piece_budget, self.token_model)
        if len(pieces) <= 1:
            return self._fit(self._summarize_piece(pieces[0] if pieces else [], focus, "the conversation transcript",
                                                   "Transcript"))
        return self._fit(self._map_reduce(pieces, focus))

    # -- always fit ------------------------------------------------------------------------
    def _fit(self, s: StructuredSummary) -> StructuredSummary:
        """The summary within ``limit_chars``: the model shortens it once if it can, then a cap.

        The model is asked only when the long summary fits its window and it has not
        failed during this summary; whatever it answers, :func:`~memory.consolidation.summary_fit.fit_content`
        makes sure of the limit, keeping the most specific lines and saying in the
        summary what it left out (the source messages stay one expand_summary away).
        """
        s = replace(s, label=cap_label(s.label))
        limit = self.limit_chars
        if limit is None or len(s.content) <= limit:
            return s
        errors = list(s.errors)
        calls = s.llm_calls
        content = s.content
        if self.model is not None and not self._failed and len(content) <= 8 * self.piece_budget and \
                count_tokens(content, self.token_model).tokens <= self.piece_budget:
            before = self.calls
            try:
                answer = self._call(SHORTEN_PROMPT.format(size=len(content), limit=limit, target=int(limit * 0.8),
                                                          text=content))
            except LLMError as exc:
                errors.append(str(exc))
                answer = ""
            calls += self.calls - before
            if answer:
                _, sections, _ = parse_sections(answer)
                content = render(sections)
        fitted = fit_content(content, limit)
        if len(s.content) > limit:
            errors.append(f"the summary was {len(s.content):,} characters; reduced to fit the {limit:,} limit")
        return replace(s, content=fitted, llm_calls=calls, errors=tuple(errors))

    # -- one call, retry, fallback ------------------------------------------------------
    def _call(self, prompt: str) -> str:
        if self._failed:  # one failure per summary is enough: do not wait on a broken model again
            raise LLMError("skipped: the model already failed during this summary")
        self.calls += 1
        try:
            return complete(self.model, prompt, system=SYSTEM).strip()
        except LLMError:
            self._failed = True
            raise

    def _summarize_piece(self, units: Sequence[str], focus: str | None, what: str, kind: str,
                         fallback_units: Sequence[str] | None = None) -> StructuredSummary:
        text = "\n".join(units)
        focus_line = f"\nPay particular attention to: {focus}" if focus else ""
        errors: list[str] = []
        before = self.calls
        for method, prompt in (("llm", FULL_PROMPT.format(what=what, focus=focus_line, kind=kind, text=text)),
                               ("llm-retry", SIMPLE_PROMPT.format(text=text))):
            try:
                answer = self._call(prompt)
            except LLMError as exc:
                errors.append(str(exc))
                break  # a failing or slow model is not asked again
            if answer:
                label, content = self._normalise(answer, units)
                return StructuredSummary(label, content, method, self.calls - before, 1, tuple(errors))
            errors.append("the model returned an empty answer")
        if not self.fallback:
            raise LLMError("summarisation failed: " + "; ".join(errors))
        label, content = extractive_summary(fallback_units if fallback_units is not None else units,
                                            max_chars=self.max_chars)
        return StructuredSummary(label, content, "extractive", self.calls - before, 1, tuple(errors))

    def _normalise(self, answer: str, units: Sequence[str]) -> tuple[str, str]:
        label, sections, _ = parse_sections(answer)
        filler = "" if label and 8 <= len(label.split()) <= 12 else label_for(units)
        return fit_label(label, filler.split()), render(sections)

    # -- map-reduce ---------------------------------------------------------------------
    def _map_reduce(self, pieces: list[list[str]], focus: str | None) -> StructuredSummary:
        errors: list[str] = []
        calls = 0
        partials: list[StructuredSummary] = []
        for i, piece in enumerate(pieces, 1):
            s = self._summarize_piece(piece, focus, f"part {i} of {len(pieces)} of a long conversation transcript",
                                      "Transcript part")
            partials.append(s)
            calls += s.llm_calls
            errors.extend(s.errors)
        all_units = [u for p in pieces for u in p]
        while len(partials) > 1:
            texts = [f"{p.label}\n{p.content}" for p in partials]
            groups = pack(texts, self.piece_budget, self.token_model)
            if len(groups) == len(partials) and len(groups) > 1:
                # Each partial alone fills the window: pair them up so every level halves the count.
                groups = [texts[i:i + 2] for i in range(0, len(texts), 2)]
            merged: list[StructuredSummary] = []
            start = 0
            for group in groups:
                members = partials[start:start + len(group)]
                start += len(group)
                if len(group) == 1:
                    merged.append(members[0])
                    continue
                s = self._merge(group, members, focus)
                calls += s.llm_calls
                errors.extend(s.errors)
                merged.append(s)
            partials = merged
        final = partials[0]
        label = final.label if 8 <= len(final.label.split()) <= 12 else fit_label(
            final.label, label_for(all_units).split())
        return StructuredSummary(label, final.content, "map-reduce", calls, len(pieces), tuple(errors))

    def _merge(self, texts: list[str], members: list[StructuredSummary], focus: str | None) -> StructuredSummary:
        text = "\n\n".join(texts)
        focus_line = f"\nPay particular attention to: {focus}" if focus else ""
        before = self.calls
        try:
            answer = self._call(FULL_PROMPT.format(what=MERGE_WHAT, focus=focus_line, kind="Partial summaries",
                                                   text=text))
        except LLMError as exc:
            return self._concat(members, self.calls - before, (str(exc),))
        if not answer:
            return self._concat(members, self.calls - before, ("the model returned an empty merge",))
        label, content = self._normalise(answer, [m.label for m in members])
        return StructuredSummary(label, content, "llm", self.calls - before)

    @staticmethod
    def _concat(members: list[StructuredSummary], calls: int, errors: tuple[str, ...]) -> StructuredSummary:
        """Merge partial summaries section by section without a model (loses nothing)."""
        merged: list[list[str]] = [[], [], [], []]
        for m in members:
            for i, lines in enumerate(sections_of(m.content)):
                merged[i].extend(ln for ln in lines if ln not in merged[i])
        return StructuredSummary(members[0].label, render(merged), "concatenated", calls, len(members), errors)


