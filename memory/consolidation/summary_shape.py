"""The shape every summary has: four fixed headings and an 8-12 word label.

Both summarisers (the model and the extractive one) end in :func:`render`, and a
model's answer goes through :func:`parse_sections` first, so whatever a model
writes (bold headings, "and" for "&", a preamble, extra sub-headings) the stored
summary has exactly the four ``###`` headings, in order, and nothing else at that level.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

TECHNICAL = "### Technical Information"
EMOTIONAL = "### Emotional Context"
ENTITIES = "### Entities & References"
ACTIONS = "### Action Items & Decisions"
HEADINGS = (TECHNICAL, EMOTIONAL, ENTITIES, ACTIONS)

LABEL_MIN_WORDS = 8
LABEL_MAX_WORDS = 12
NONE_NOTED = "- None noted."

_HEADING_LINE = re.compile(r"^\s*(?:#{1,6}\s*(?P<h>.+?)\s*#*|\*\*(?P<b>[^*]+?)\*\*:?)\s*$")
_LABEL_LINE = re.compile(r"^\s*(?:[#*_\s]*)label(?:[*_\s]*)\s*[:\-]\s*(?P<label>.+?)\s*$", re.I)
_FENCE = re.compile(r"^\s*```[\w-]*\s*$")


def _section_index(title: str) -> int | None:
    t = title.lower()
    if "technical" in t:
        return 0
    if "emotion" in t:
        return 1
    if "entit" in t or "reference" in t:
        return 2
    if "action" in t or "decision" in t:
        return 3
    return None


def parse_sections(text: str) -> tuple[str | None, list[list[str]], bool]:
    """Split a model's answer into (label, four line lists, whether any heading was found).

    Text before the first recognised heading goes to Technical Information; an
    unrecognised heading is kept as bold text inside the current section.
    """
    label: str | None = None
    sections: list[list[str]] = [[], [], [], []]
    current = 0
    found = False
    for line in text.splitlines():
        if _FENCE.match(line):
            continue
        m = _LABEL_LINE.match(line)
        if m and label is None:
            label = m.group("label").strip().strip("*_\"'`")
            continue
        h = _HEADING_LINE.match(line)
        if h:
            title = (h.group("h") or h.group("b") or "").strip()
            idx = _section_index(title)
            if idx is not None:
                current, found = idx, True
                continue
            line = f"**{title.strip('*# ')}**"
        sections[current].append(line.rstrip())
    return label, sections, found


def render(sections: Sequence[Iterable[str]]) -> str:
    """The four headings, each followed by its lines (``- None noted.`` when empty)."""
    parts = []
    for heading, lines in zip(HEADINGS, sections, strict=False):
        body = "\n".join(_trim_blank(list(lines)))
        parts.append(f"{heading}\n{body if body.strip() else NONE_NOTED}")
    return "\n\n".join(parts)


def _trim_blank(lines: list[str]) -> list[str]:
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    return lines


def sections_of(content: str) -> list[list[str]]:
    """The line lists of a rendered summary (inverse of :func:`render`)."""
    _, sections, _ = parse_sections(content)
    return [[ln for ln in s if ln.strip() and ln.strip() != NONE_NOTED] for s in sections]


def fit_label(text: str | None, filler: Sequence[str]) -> str:
    """A label of 8-12 words: ``text``'s words, cut at 12, padded from ``filler`` to 8."""
    words = (text or "").replace("\n", " ").split()[:LABEL_MAX_WORDS]
    for word in filler:
        if len(words) >= LABEL_MIN_WORDS:
            break
        if word not in words:
            words.append(word)
    generic = ["conversation", "summary", "with", "details", "kept", "for", "later", "reference"]
    for word in generic:
        if len(words) >= LABEL_MIN_WORDS:
            break
        words.append(word)
    return " ".join(words)


def label_words(label: str) -> int:
    return len(label.split())
