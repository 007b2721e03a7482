"""Is a new fact new, a restatement of an active one, or a contradiction of it?

``remember`` compares the new fact with the closest active fact of the same user and
category (cosine similarity of their embeddings) and with simple lexical signals that
hold across topics, in this order:

1. The same words after normalisation (case, punctuation, spacing): **unchanged**
   if identical, else **updated** to the new wording (and category).
2. Similarity below ``fact_related_similarity``: a different subject, **create**.
3. One says it negatively and the other does not ("not", "never", "no longer",
   "-n't"...): **supersede**.
4. Each side has a *value* the other lacks (a number or number word, or a
   capitalised name that does not start the sentence: Berlin vs Paris, 34 vs 35,
   Python vs Rust): the same subject with a different value, **supersede**.
5. Similarity at or above ``fact_duplicate_similarity``: a near-duplicate, **update**
   the existing fact in place.
6. One side's content words contain the other's (a refinement, "prefers dark mode"
   -> "prefers dark mode in every editor"): **update**.
7. They share most content words but each has its own ("prefers tea in the morning"
   -> "prefers coffee in the morning"): **supersede**.
8. Otherwise: **create**.

Superseding keeps the old fact (``valid_to``, ``superseded_by``), so a wrong call
between "update" and "supersede" loses no history; only "create" vs the others
matters much. Limits: a contradiction that shares no words and sits below the
related threshold ("is vegetarian" vs "eats steak daily") is stored as a new fact;
two compatible preferences with a shared frame and a capitalised value ("likes
Python", "likes Rust") are read as a change of value. For those the caller (the
model) says what it means: ``remember(..., replaces=fact_id)`` or ``forget``. The
thresholds are settings because they depend on the embedding model (defaults suit
all-MiniLM-L6-v2).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

_WORD = re.compile(r"[^\W_]+(?:['\u2019][^\W_]+)*")
_NEGATIONS = frozenset({"not", "no", "never", "none", "nobody", "nothing", "neither", "nor", "cannot",
                        "without", "stopped", "quit", "longer", "nope"})
_NUMBER_WORDS = frozenset("zero one two three four five six seven eight nine ten eleven twelve thirteen "
                          "fourteen fifteen sixteen seventeen eighteen nineteen twenty thirty forty fifty "
                          "sixty seventy eighty ninety hundred thousand million first second third once "
                          "twice half dozen".split())
_STOPWORDS = frozenset("a an the is are was were be been being am do does did has have had of in on at to for "
                       "from by with and or as that this these those it its their they them he she his her "
                       "user user's users i me my we our you your".split())

ACTIONS = ("created", "updated", "superseded", "unchanged")


@dataclass(frozen=True)
class Candidate:
    """An active fact compared with the new one."""

    key: object
    category: str
    content: str
    similarity: float


@dataclass(frozen=True)
class Decision:
    action: str  # one of ACTIONS
    target: Candidate | None = None
    reason: str = ""


def normalise(text: str) -> str:
    return " ".join(w.lower() for w in _WORD.findall(text))


def _stem(word: str) -> str:
    word = word.lower().replace("\u2019", "'")
    if word.endswith("'s"):
        word = word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        word = word[:-1]
    return word


def content_words(text: str) -> set[str]:
    return {_stem(w) for w in _WORD.findall(text)} - _STOPWORDS - _NEGATIONS


def negated(text: str) -> bool:
    words = [w.lower().replace("\u2019", "'") for w in _WORD.findall(text)]
    return any(w in _NEGATIONS or w.endswith("n't") for w in words)


def values(text: str) -> set[str]:
    """Numbers, number words, and capitalised words not at the start of a sentence."""
    found: set[str] = set()
    sentence_start = True
    for match in _WORD.finditer(text):
        word = match.group()
        if any(c.isdigit() for c in word) or word.lower() in _NUMBER_WORDS:
            found.add(word.lower())
        elif word[0].isupper() and not sentence_start and _stem(word) not in _STOPWORDS:
            found.add(_stem(word))
        sentence_start = text[match.end():match.end() + 2].lstrip(" ")[:1] in (".", "!", "?")
    return found


def decide(content: str, category: str, candidates: Sequence[Candidate], *, related: float,
           duplicate: float) -> Decision:
    """Apply the rules above against the closest candidate."""
    norm = normalise(content)
    for cand in candidates:
        if normalise(cand.content) == norm:
            if cand.content == content and cand.category == category:
                return Decision("unchanged", cand, "same fact")
            return Decision("updated", cand, "same words, new wording or category")
    same = [c for c in candidates if c.category == category]
    if not same:
        return Decision("created", None, "no active fact in this category")
    best = max(same, key=lambda c: c.similarity)
    if best.similarity < related:
        return Decision("created", None, f"closest fact is unrelated (similarity {best.similarity:.2f})")
    if negated(content) != negated(best.content):
        return Decision("superseded", best, "one of the two is negated")
    new_values, old_values = values(content) - values(best.content), values(best.content) - values(content)
    if new_values and old_values:
        return Decision("superseded", best, "same subject, different value")
    if best.similarity >= duplicate:
        return Decision("updated", best, f"near-duplicate (similarity {best.similarity:.2f})")
    new_words, old_words = content_words(content), content_words(best.content)
    if new_words <= old_words or old_words <= new_words:
        return Decision("updated", best, "one restates the other with more or less detail")
    shared = new_words & old_words
    if len(shared) * 2 >= min(len(new_words), len(old_words)):
        return Decision("superseded", best, "same frame, different words in it")
    return Decision("created", None, "related but distinct")
