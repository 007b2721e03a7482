"""The extractive summariser: the offline default and the fallback when a model fails.

It never writes a sentence of its own. Every bullet is a sentence of the transcript,
copied verbatim with its timestamp and speaker; sentences are sorted into the four
sections by plain cues (decisions, plans and open questions; feelings; technical
detail), chosen by specificity within a character budget and shown in transcript
order. The Entities & References section lists every distinct identifier, date,
URL, path, number-with-unit, tool and capitalised name found, verbatim; only if
there are more than it can hold does it say how many were left out (the originals
stay one ``expand_summary`` away). The label is built from the transcript's own
words and dates.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from collections.abc import Sequence

from memory.consolidation.summary_shape import fit_label, render

_PREFIX = re.compile(r"^\[(?P<stamp>\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2})\]\s+(?P<who>[^:]{1,80}?):\s?(?P<text>.*)$", re.S)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])|\n+")

_ACTION = re.compile(
    r"\b(will|won't|should|need(?:s|ed)?\b|must|let'?s|decid\w*|agree[ds]?|plan(?:ned|s)?|todo|to-do|"
    r"next step|deadline|due|action item|going to|remind\w*|schedul\w*|follow[- ]up|assign\w*|"
    r"approved?|chose|choose|settled|confirm\w*)\b", re.I)
_EMOTION = re.compile(
    r"\b(thanks?|thank you|appreciat\w*|frustrat\w*|annoy\w*|happy|glad|great|love|hate|worr\w*|"
    r"concern\w*|urgent\w*|sorry|disappoint\w*|excit\w*|upset|angry|stress\w*|confus\w*|relie\w*|"
    r"afraid|anxious|pleased|delight\w*|awesome|terrible|tired|overwhelm\w*|nervous)\b", re.I)
_TECH = re.compile(
    r"\d|`|\w_\w|\w\(\)|\w\.\w{1,5}\b|://|\b(error|exception|traceback|failed|failure|bug|crash\w*|"
    r"version|config\w*|api|sql|query|database|server|endpoint|deploy\w*|install\w*|timeout|latency|"
    r"memory|cpu|index|schema|function|class|module|script|log|port|token|model)\b", re.I)

_REFERENCE_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("ids", re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I)),
    ("ids", re.compile(r"\b[A-Z][A-Z0-9]{1,9}-\d+\b|#\d+\b|\b[A-Za-z]+_?\d{3,}\b")),
    ("urls", re.compile(r"\bhttps?://[^\s)\]>\"']+")),
    ("emails", re.compile(r"\b[\w.+-]+@[\w-]+\.[\w.-]+\b")),
    ("paths", re.compile(r"(?<![\w@/])/?(?:[\w.-]*[A-Za-z_][\w.-]*/)+[\w.-]+"
                         r"|\b[\w-]+\.(?:py|js|ts|sql|md|json|ya?ml|toml|txt|csv|log|sh|cfg|ini)\b")),
    ("dates", re.compile(r"\b\d{4}-\d{2}-\d{2}(?:[ T]\d{2}:\d{2}(?::\d{2})?)?\b|\b\d{1,2}/\d{1,2}/\d{2,4}\b|"
                         r"\b(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]*\.? \d{1,2}(?:, \d{4})?\b")),
    ("numbers", re.compile(r"(?<![\w.])v?\d+(?:\.\d+){2,3}(?![\w.]*\w)")),
    ("numbers", re.compile(r"(?<![\w.-])[$€£]?\d[\d,]*(?:\.\d+)?\s?(?:%|ms|s|sec|min|h|hours?|days?|weeks?|"
                           r"[kKMGT]B|GiB|MiB|k|M|USD|EUR|tokens?|users?|rows?)?(?![\w-])")),
)
_NAME = re.compile(r"(?<![\w.])[A-Z][a-z]+(?:[ -][A-Z][a-z]+)*")
_NAME_STOP = {
    "I", "The", "A", "An", "And", "But", "Or", "So", "If", "It", "Its", "This", "That", "These", "Those", "We",
    "You", "He", "She", "They", "My", "Our", "Your", "Yes", "No", "Ok", "Okay", "Please", "Thanks", "Thank",
    "Hi", "Hello", "Sure", "What", "When", "Where", "Why", "How", "Who", "Which", "Can", "Could", "Would",
    "Should", "Will", "Do", "Does", "Did", "Is", "Are", "Was", "Were", "Let", "Also", "Then", "There", "Here",
    "Great", "Good", "Done", "Now", "Not", "None", "Noted", "Monday", "Tuesday", "Wednesday", "Thursday",
    "Friday", "Saturday", "Sunday", "Today", "Tomorrow", "Yesterday", "Next", "First", "After", "Before",
}
_CALLS = re.compile(r"\[calls (?P<calls>.+)\]\s*$")
_TOOL_WHO = re.compile(r"^tool (?P<name>\S+) result")
_STOPWORDS = {
    "the", "and", "for", "that", "this", "with", "you", "your", "are", "was", "have", "has", "had", "not", "but",
    "can", "could", "would", "should", "will", "what", "when", "where", "which", "who", "how", "why", "about",
    "from", "into", "just", "also", "then", "than", "them", "they", "there", "their", "here", "some", "any",
    "all", "our", "out", "get", "got", "let", "lets", "please", "thanks", "thank", "yes", "okay", "sure", "need",
    "want", "like", "know", "think", "make", "does", "did", "done", "been", "being", "were", "its", "it's", "i'm",
    "i've", "don't", "can't", "we're", "you're", "very", "much", "more", "most", "only", "still", "each", "other",
}

#: Share of the character budget per section (technical, emotional, references, actions).
_SHARES = (0.40, 0.10, 0.20, 0.30)
_MAX_SENTENCE_CHARS = 400
_ALWAYS = ("ids", "dates", "tools")
_PER_SHAPE = 2
_SHAPE_DROP = re.compile(r"\S*\d\S*|\b[A-Z][\w-]*")


def _shape(text: str) -> str:
    """A sentence with its numbers, ids and capitalised words removed (its pattern)."""
    return " ".join(_SHAPE_DROP.sub("", text).lower().split())


@dataclass
class _Sentence:
    order: int
    stamp: str | None
    who: str
    text: str
    score: float

    def bullet(self) -> str:
        text = self.text
        if len(text) > _MAX_SENTENCE_CHARS:  # cut at a word boundary, visibly
            text = text[:_MAX_SENTENCE_CHARS].rsplit(" ", 1)[0] + " [...]"
        where = f"[{self.stamp}] " if self.stamp else ""
        who = f"{self.who}: " if self.who else ""
        return f"- {where}{who}{text}"


def _parse_unit(unit: str) -> tuple[str | None, str, str]:
    m = _PREFIX.match(unit)
    if not m:
        return None, "", unit
    return m.group("stamp"), m.group("who").strip(), m.group("text")


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_END.split(text) if s and s.strip()]


def _specificity(text: str) -> float:
    return (len(re.findall(r"\d+", text)) + 2 * sum(len(p.findall(text)) for _, p in _REFERENCE_PATTERNS[:5])
            + len(_NAME.findall(text)) * 0.5)


def references(units: Sequence[str]) -> dict[str, list[str]]:
    """Every distinct identifier, URL, path, date, number-with-unit, tool and name, verbatim."""
    found: dict[str, dict[str, None]] = {}

    def add(kind: str, value: str) -> None:
        value = value.strip().rstrip(".,;:")
        if value:
            found.setdefault(kind, {})[value] = None

    for unit in units:
        stamp, who, text = _parse_unit(unit)
        tm = _TOOL_WHO.match(who)
        if tm:
            add("tools", tm.group("name"))
        cm = _CALLS.search(text)
        if cm:
            for name in re.findall(r"([A-Za-z_][\w.-]*)\(", cm.group("calls")):
                add("tools", name)
        taken: list[tuple[int, int]] = []
        for kind, pattern in _REFERENCE_PATTERNS:
            for m in pattern.finditer(text):
                if any(a <= m.start() < b for a, b in taken):
                    continue
                if kind == "numbers" and not re.search(r"\d", m.group()):
                    continue
                taken.append((m.start(), m.end()))
                add(kind, m.group())
        for m in _NAME.finditer(text):
            start = m.start()
            before = text[:start].rstrip()
            sentence_start = not before or before[-1] in ".!?:\n\"'([-*"
            words = [w for w in re.split(r"[ -]", m.group()) if w not in _NAME_STOP]
            if not words or (sentence_start and len(m.group().split()) == 1):
                continue
            add("names", m.group() if len(words) == len(re.split(r"[ -]", m.group())) else " ".join(words))
    order = ("ids", "dates", "tools", "names", "urls", "emails", "paths", "numbers")
    return {k: list(found[k]) for k in order if k in found}


def _label(units: Sequence[str], refs: dict[str, list[str]]) -> str:
    user_words: Counter[str] = Counter()
    first_seen: dict[str, int] = {}
    stamps = []
    for unit in units:
        stamp, who, text = _parse_unit(unit)
        if stamp:
            stamps.append(stamp[:10])
        if who in ("user", "") or not user_words:
            for w in re.findall(r"[A-Za-z][A-Za-z0-9_'-]{3,}", text):
                lw = w.lower()
                if lw not in _STOPWORDS:
                    user_words[lw] += 1
                    first_seen.setdefault(lw, len(first_seen))
    top = sorted(user_words, key=lambda w: (-user_words[w], first_seen[w]))[:7]
    when = stamps[0] if stamps else None
    if stamps and stamps[-1] != stamps[0]:
        when = f"{stamps[0]} to {stamps[-1]}"
    head = ["Conversation", f"({when})"] if when else ["Conversation"]
    words = head + (["about"] + top if top else [])
    filler = refs.get("names", []) + refs.get("ids", []) + refs.get("tools", [])
    return fit_label(" ".join(words), [w for f in filler for w in f.split()])


def extractive_budget(units: Sequence[str]) -> int:
    """Characters for the chosen sentences: a quarter of the transcript, within [1200, 4000]."""
    return max(1200, min(4000, sum(len(u) for u in units) // 4))


def extractive_summary(units: Sequence[str], *, max_chars: int | None = None) -> tuple[str, str]:
    """(label, content) of the transcript ``units`` (one formatted message each).

    ``max_chars`` budgets the chosen sentences and the optional references (names,
    numbers, paths); ids, dates and tools are always listed in full.
    """
    if max_chars is None:
        max_chars = extractive_budget(units)
    buckets: list[list[_Sentence]] = [[], [], [], []]
    seen: set[str] = set()
    order = 0
    for unit in units:
        stamp, who, text = _parse_unit(unit)
        is_tool = bool(_TOOL_WHO.match(who)) or bool(_CALLS.search(text))
        for sent in _sentences(text):
            key = sent.lower()
            if key in seen or len(sent) < 3:
                continue
            seen.add(key)
            order += 1
            spec = _specificity(sent)
            user_bonus = 1.0 if who == "user" else 0.0
            if _ACTION.search(sent) or sent.endswith("?"):
                idx = 3
            elif _EMOTION.search(sent) or (sent.endswith("!") and who == "user"):
                idx = 1
            elif is_tool or _TECH.search(sent) or spec > 0:
                idx = 0
            elif who == "user":
                idx = 0  # plain statements by the user are facts about the task
            else:
                continue
            buckets[idx].append(_Sentence(order, stamp, who, sent, spec + user_bonus))
    sections: list[list[str]] = [[], [], [], []]
    for idx in (0, 1, 3):
        budget = int(max_chars * _SHARES[idx])
        chosen: list[_Sentence] = []
        used = 0
        shapes: Counter[str] = Counter()
        # Most specific first; ties go to the latest (decisions are refined over time).
        # At most _PER_SHAPE sentences of one shape (same words, other numbers and
        # names), so a repeated pattern cannot crowd out the rest; its ids and
        # dates are still listed under Entities & References.
        for s in sorted(buckets[idx], key=lambda s: (-s.score, -s.order)):
            cost = len(s.bullet()) + 1
            shape = _shape(s.text)
            if (used + cost > budget and chosen) or shapes[shape] >= _PER_SHAPE:
                continue
            chosen.append(s)
            shapes[shape] += 1
            used += cost
        chosen.sort(key=lambda s: s.order)
        questions = [s for s in chosen if idx == 3 and s.text.endswith("?")]
        decided = [s for s in chosen if s not in questions]
        sections[idx] = [s.bullet() for s in decided]
        if questions:
            sections[idx] += ["Open questions:"] + [s.bullet() for s in questions]
    refs = references(units)
    budget = int(max_chars * _SHARES[2])
    lines: list[str] = []
    used = 0
    left = 0
    for kind, values in refs.items():
        kept: list[str] = []
        for v in values:
            # Ids and dates are always listed in full; the rest fill the budget.
            if kind not in _ALWAYS and used + len(v) + 2 > budget:
                left += 1
                continue
            kept.append(v)
            used += len(v) + 2
        if kept:
            lines.append(f"- {kind.capitalize()}: " + "; ".join(kept))
    if left:
        lines.append(f"- ({left} more references not listed here; expand the summary for the originals)")
    sections[2] = lines
    return _label(units, refs), render(sections)


def label_for(units: Sequence[str]) -> str:
    """The extractive label alone (8-12 words from the transcript's own words and dates)."""
    return _label(units, references(units))
