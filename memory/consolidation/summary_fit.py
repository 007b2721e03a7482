"""Make a structured summary fit a character limit without inventing or hiding anything.

A summary is stored like any content, so it must fit ``max_content_chars``. The
summariser first reduces again with the model where that is cheap (see
:class:`memory.consolidation.summarizer.Summarizer`); :func:`fit_content` is the last step that always
succeeds, and the only one the extractive path needs:

* the four sections share the budget fairly: a section that needs less than an equal
  share keeps everything and leaves the rest to the others (water-filling);
* inside a section that is too long, the most specific lines are kept (ids, numbers,
  dates, names: the score the extractive summariser uses), in their original order;
* a reference list (``- Ids: a; b; c``) keeps its first items and a single bullet
  longer than its section is cut at a word boundary, marked ``[...]``;
* each section that lost something ends with one note saying what was left out (how
  many lines or references, the first and last of them for a list) and that
  ``expand_summary`` returns the original messages, which stay marked and intact.

Nothing is reworded: every line is an original line, a visibly cut one, or a note.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from memory.errors import ConfigurationError
from memory.consolidation.summary_shape import render, sections_of

NOTE_PREFIX = "- (Left out to fit"
CUT = " [...]"
_DETAIL = re.compile(r"\S*\d\S*")  # a word holding a digit: ids, numbers, dates, versions
_NAME = re.compile(r" [A-Z]")
_CODE = re.compile(r"://|`")
_LIST_LINE = re.compile(r"^(?P<head>-\s+[\w &/-]{1,40}:\s)(?P<items>.+)$", re.S)


@dataclass
class _Dropped:
    lines: int = 0
    items: int = 0
    first: str | None = None
    last: str | None = None
    cut: int = 0

    def any(self) -> bool:
        return bool(self.lines or self.items or self.cut)

    def note(self, limit: int) -> str:
        parts = []
        if self.lines:
            parts.append(f"{self.lines:,} less specific line{'s' if self.lines != 1 else ''}")
        if self.items:
            span = f" ({_short(self.first)} ... {_short(self.last)})" if self.first and self.last else ""
            parts.append(f"{self.items:,} more reference{'s' if self.items != 1 else ''}{span}")
        if self.cut:
            parts.append(f"the end of {self.cut:,} long line{'s' if self.cut != 1 else ''}")
        return (f"{NOTE_PREFIX} the {limit:,}-character limit: " + ", ".join(parts)
                + "; expand_summary returns every original message.)")


def specificity(line: str) -> float:
    """How many concrete details a line holds (words with digits, urls, code, names): cheap, linear."""
    return len(_DETAIL.findall(line)) + len(_CODE.findall(line)) + 0.5 * len(_NAME.findall(line))


def _short(text: str | None, n: int = 60) -> str:
    text = (text or "").replace("\n", " ")
    return text if len(text) <= n else text[:n].rsplit(" ", 1)[0] + "..."


def _cut_line(line: str, budget: int, dropped: _Dropped) -> str | None:
    """``line`` shortened to ``budget`` characters (a list keeps its first items), or None."""
    m = _LIST_LINE.match(line)
    if m and "; " in m.group("items"):
        items = m.group("items").split("; ")
        kept: list[str] = []
        used = len(m.group("head"))
        for item in items:
            if used + len(item) + 2 > budget:
                break
            kept.append(item)
            used += len(item) + 2
        if kept:
            rest = items[len(kept):]
            dropped.items += len(rest)
            dropped.first = dropped.first or rest[0]
            dropped.last = rest[-1]
            return m.group("head") + "; ".join(kept)
    room = budget - len(CUT)
    if room < 20:
        return None
    head = line[:room]
    if " " in head[10:]:
        head = head.rsplit(" ", 1)[0]
    dropped.cut += 1
    return head + CUT


def _fit_section(lines: list[str], budget: int, limit: int) -> list[str]:
    """The lines of one section within ``budget`` characters (joined by newlines), note included."""
    if sum(len(ln) + 1 for ln in lines) <= budget:
        return lines
    dropped = _Dropped()
    # Leave room for the note (its longest form, with a list's first and last items).
    room = max(0, budget - 360)
    order = sorted(range(len(lines)), key=lambda i: (-specificity(lines[i]), i))
    keep: dict[int, str] = {}
    used = 0
    for i in order:
        line = lines[i]
        cost = len(line) + 1
        if used + cost <= room:
            keep[i] = line
            used += cost
            continue
        if not keep or (used < room // 2 and room - used > 200):
            shortened = _cut_line(line, room - used - 1, dropped)
            if shortened is not None:
                keep[i] = shortened
                used += len(shortened) + 1
                continue
        dropped.lines += 1
    out = [keep[i] for i in sorted(keep)]
    if dropped.any():
        out.append(dropped.note(limit))
    return out


def fit_content(content: str, limit: int) -> str:
    """``content`` (a rendered four-section summary) within ``limit`` characters."""
    if len(content) <= limit:
        return content
    sections = sections_of(content)
    overhead = len(render([[], [], [], []]))  # headings, separators and "None noted." markers
    budget = max(0, limit - overhead)
    needs = [sum(len(ln) + 1 for ln in s) for s in sections]
    shares = [0, 0, 0, 0]
    left, open_ = budget, [i for i in range(4)]
    while open_:  # water-filling: small sections keep all, the rest share what remains
        share = left // len(open_)
        small = [i for i in open_ if needs[i] <= share]
        if not small:
            for i in open_:
                shares[i] = share
            break
        for i in small:
            shares[i] = needs[i]
            left -= needs[i]
            open_.remove(i)
    fitted = [_fit_section(s, shares[i], limit) for i, s in enumerate(sections)]
    out = render(fitted)
    shrink = 0.9
    while len(out) > limit and shrink > 0.01:  # notes are estimated: tighten until it holds
        fitted = [_fit_section(s, int(shares[i] * shrink), limit) for i, s in enumerate(sections)]
        out = render(fitted)
        shrink *= 0.8
    if len(out) > limit:
        raise ConfigurationError(f"AGENTMEM_MAX_CONTENT_CHARS={limit} is too small to hold a summary's four "
                                 f"sections and what they left out ({len(out)} characters); raise it")
    return out


def fit_label(label: str, limit: int = 500) -> str:
    """A label within ``limit`` characters (a word longer than that is cut)."""
    if len(label) <= limit:
        return label
    head = label[:limit - 3]
    return (head.rsplit(" ", 1)[0] if " " in head else head) + "..."

