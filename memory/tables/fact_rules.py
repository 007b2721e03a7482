"""Is a new fact new, a restatement of an active one, or a contradiction of it?

``remember`` compares the new fact with the user's active facts of the same category,
closest first (cosine similarity of their embeddings), and with lexical signals that
hold across topics. Superseding hides the old fact from every context, so it needs a
real contradiction **of the same attribute**; when unsure, both facts are kept.

1. The same words after normalisation: **unchanged** if identical, else **updated**.
2. Similarity below ``fact_related_similarity``: another subject, **created**.
3. **Superseded** when one of these holds (each is evidence that the old value is no
   longer true, not merely that the two facts look alike):

   * *negation*: one side is negated ("not", "never", "no longer", "-n't", "without")
     and the other is not, about the same words ("is allergic to peanuts" / "is not
     allergic to peanuts"; "studied law, not physics" / "studied physics");
   * *a change is said*: the new fact says the old state ended or changed ("switched
     from", "moved to", "stopped", "gave up", "cancelled", "sold", "now", "any more",
     "instead") and shares a content word with the old one;
   * *one slot, same frame*: the two differ in exactly one place (word alignment),
     and the frame around it names a single-valued attribute: a number in the slot
     with the same words around it ("is 34 / 35 years old", "takes 20 / 40 mg"); an
     attribute noun whose value follows "is" ("the user's manager is Priya / Tom",
     "favourite band is ..."); a single-valued relation ("lives in", "works at",
     "married to", "born in"); a preference verb with a shared qualifier ("prefers
     answers in French / Spanish", "wants short / detailed answers"); or opposite
     words ("likes / dislikes", "light / dark", "rents / owns").

   An addition marker in the new fact ("also", "too", "another", "as well") rules the
   change and one-slot cases out.
4. **Updated** (a restatement, the existing row reworded in place) when similarity is
   at or above ``fact_duplicate_similarity`` and no value differs (at or above
   ``fact_swap_similarity`` when the two differ by one or two words swapped: synonyms,
   not alternatives), or one side's content words contain the other's.
5. Otherwise **created**: the same frame with another value of a many-valued
   attribute ("has a dog named Rex" / "has a cat named Tom", "speaks French" /
   "speaks Spanish", "likes Radiohead" / "likes Muse") is a second fact, not a change.

Superseding keeps the old fact (``valid_to``, ``superseded_by``), so nothing is lost
either way; a missed contradiction leaves two facts the context renders with the rule
that what the user says now wins, and the model can say what it means with
``remember(..., replaces=fact_id)`` or ``forget``. The thresholds are settings because
they depend on the embedding model; the defaults are fitted for all-MiniLM-L6-v2 on
half of a labelled set of fact pairs and checked on the other half (``bench/facts.py``,
``tests/data/fact_pairs.jsonl``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from difflib import SequenceMatcher
from collections.abc import Sequence

from memory.settings import default_of

_WORD = re.compile(r"[^\W_]+(?:['\u2019][^\W_]+)*")
_NEGATIONS = frozenset({"not", "no", "never", "none", "nobody", "nothing", "neither", "nor", "cannot",
                        "without", "longer", "nope"})
#: Words that carry a negative polarity of their own ("is unavailable", "dislikes").
_NEGATIVE = frozenset(["unavailable", "unable", "unwilling", "dislike", "dislikes", "hate", "hates", "refuse",
                       "refuses", "avoid", "avoids"])
_NUMBER_WORDS = {w: str(i) for i, w in enumerate(
    ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
     "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty"])}
_NUMBER_WORDS.update({"thirty": "30", "forty": "40", "fifty": "50", "hundred": "100", "thousand": "1000",
                      "once": "1", "twice": "2", "dozen": "12", "half": "0.5"})
_STOPWORDS = frozenset(["a", "an", "the", "is", "are", "was", "were", "be", "been", "being", "am", "do", "does", "did",
                        "has", "have", "had", "of", "in", "on", "at", "to", "for", "from", "by", "with", "and", "or",
                        "as", "that", "this", "these", "those", "it", "its", "their", "they", "them", "he", "she",
                        "his", "her", "user", "user's", "users", "i", "me", "my", "we", "our", "you", "your"])
#: Words that only add to what is known: a new fact with one of these is never a change.
_ADDITION = frozenset(["also", "too", "another", "additionally", "besides", "second"])
_ADDITION_PHRASES = ("as well", "in addition")
#: Words that say an old state ended or changed.
_CHANGE = frozenset(["now", "switched", "switch", "changed", "moved", "migrated", "upgraded", "downgraded", "stopped",
                     "quit", "cancelled", "canceled", "sold", "replaced", "instead", "anymore", "left", "became",
                     "becomes"])
_CHANGE_PHRASES = ("any more", "gave up", "given up", "no longer", "used to", "from now on", "these days")
#: Attribute nouns whose value follows "is": one value at a time.
_ATTRIBUTES = frozenset(
    ["name", "favourite", "favorite", "favourit", "favorit", "number", "phone", "email", "address", "birthday", "age",
     "timezone", "zone", "manager", "boss", "wife", "husband", "partner", "spouse", "editor", "laptop", "database",
     "deadline", "budget", "bank", "salary", "title", "role", "job", "native", "tongue", "height", "weight", "capital",
     "employer", "landlord", "doctor", "dentist", "owner", "password", "username", "handle", "model", "version",
     "colour", "color", "size", "shoe", "blood", "type"])
#: Relations with one value at a time, as (verb stem, the word after it).
_SINGLE_RELATIONS = frozenset({("live", "in"), ("lives", "in"), ("based", "in"), ("work", "at"), ("works", "at"),
                               ("work", "for"), ("works", "for"), ("work", "as"), ("works", "as"),
                               ("married", "to"), ("born", "in"), ("born", "on"), ("reside", "in"),
                               ("resides", "in"), ("employed", "by")})
#: Verbs that choose one option ("likes" does not: one can like many things).
_PREFERENCE_VERBS = frozenset(["prefer", "prefers", "want", "wants"])
#: Words after which an attribute's value follows.
_COPULAS = frozenset(["is", "are", "was", "were", "called", "named"])
#: Pairs of opposite words (either order).
_OPPOSITES = frozenset(frozenset(p) for p in (
    ("like", "dislike"), ("likes", "dislikes"), ("like", "hate"), ("likes", "hates"), ("love", "hate"),
    ("loves", "hates"), ("light", "dark"), ("early", "late"), ("rent", "own"), ("rents", "owns"),
    ("married", "divorced"), ("married", "single"), ("always", "never"), ("enabled", "disabled"),
    ("on", "off"), ("allow", "forbid"), ("allows", "forbids"), ("yes", "no"), ("short", "long"),
    ("short", "detailed"), ("brief", "detailed"), ("formal", "informal"), ("formal", "casual"),
    ("metric", "imperial"), ("window", "aisle"), ("tabs", "spaces"), ("tab", "space"), ("morning", "evening"),
    ("day", "night"), ("hot", "cold"), ("warm", "cold"), ("more", "less"), ("before", "after"),
    ("available", "unavailable"), ("public", "private"), ("male", "female"), ("left", "right"),
))

#: One or two words swapped for others ("likes tea" / "likes coffee") is a restatement only
#: at or above this similarity (the default of ``Settings.fact_swap_similarity``, fitted by
#: ``bench/facts.py``): all-MiniLM-L6-v2 puts synonyms above it ("prefers" / "likes dark
#: mode": 0.93) and alternatives below ("likes tea" / "likes coffee": 0.71, "drinks tea /
#: coffee in the morning": 0.83).
SWAP_SIMILARITY: float = default_of("fact_swap_similarity")

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


def _words(text: str) -> list[str]:
    return [w.lower().replace("\u2019", "'") for w in _WORD.findall(text)]


def content_words(text: str) -> set[str]:
    return {_stem(_NUMBER_WORDS.get(w, w)) for w in _words(text)} - _STOPWORDS - _NEGATIONS


def negated(text: str) -> bool:
    return any(w in _NEGATIONS or w in _NEGATIVE or w.endswith("n't") for w in _words(text))


def _has(text: str, words: frozenset[str], phrases: tuple[str, ...]) -> bool:
    lowered = " " + normalise(text) + " "
    return any(w in words for w in _words(text)) or any(f" {p} " in lowered for p in phrases)


def values(text: str) -> set[str]:
    """Numbers, number words, and names: capitalised words not at the start of a sentence, or any
    word with a capital inside ("iPhone", "PostgreSQL")."""
    found: set[str] = set()
    sentence_start = True
    for match in _WORD.finditer(text):
        word = match.group()
        if any(c.isdigit() for c in word) or word.lower() in _NUMBER_WORDS:
            found.add(_NUMBER_WORDS.get(word.lower(), word.lower()))
        elif any(c.isupper() for c in word) and not (sentence_start and word[1:].islower()) \
                and _stem(word) not in _STOPWORDS:
            found.add(_stem(word))
        sentence_start = text[match.end():match.end() + 2].lstrip(" ")[:1] in (".", "!", "?")
    return found


def _tokens(text: str) -> list[str]:
    """The words that carry the statement, in order: no articles, the user, negations, change words."""
    out = []
    for w in _words(text):
        w = _NUMBER_WORDS.get(w, w)
        if w in ("a", "an", "the", "user", "user's", "users", "their", "his", "her", "my", "do", "does", "did") \
                or w in _NEGATIONS or w.endswith("n't") or w in _CHANGE or w in _ADDITION:
            continue
        out.append(w)
    return out


def _numeric(words: Sequence[str]) -> bool:
    return bool(words) and any(any(c.isdigit() for c in w) for w in words)


def _possessed(text: str) -> set[str]:
    """Nouns owned by someone in ``text``: "the user's laptop" -> {"laptop"}."""
    words = _words(text)
    return {words[i + 1] for i, w in enumerate(words[:-1]) if w.endswith("'s")}


def _attribute_value(new: str, old: str) -> str | None:
    """The same attribute ("<attribute> is <value>") with another value, or None."""
    a, b = _tokens(old), _tokens(new)
    cut_a = next((i for i, w in enumerate(a) if w in _COPULAS), None)
    cut_b = next((i for i, w in enumerate(b) if w in _COPULAS), None)
    if cut_a is None or cut_b is None or not a[:cut_a] or a[:cut_a] != b[:cut_b]:
        return None
    value_a, value_b = a[cut_a + 1:], b[cut_b + 1:]
    if not value_a or not value_b or value_a == value_b or set(value_a) <= set(value_b) or set(value_b) <= set(value_a):
        return None
    subject = a[:cut_a]
    if any(w in _ATTRIBUTES or _stem(w) in _ATTRIBUTES for w in subject) and max(len(value_a), len(value_b)) <= 4:
        return f"{' '.join(subject)} has another value"
    if set(subject) & _possessed(old) & _possessed(new) and max(len(value_a), len(value_b)) <= 2:
        return f"{' '.join(subject)} has another value"
    return None


def _one_slot(new: str, old: str) -> str | None:
    """Why the two are one attribute with two values (one differing place, single-valued frame), or None."""
    why = _attribute_value(new, old)
    if why:
        return why
    a, b = _tokens(old), _tokens(new)
    ops = [op for op in SequenceMatcher(None, a, b, autojunk=False).get_opcodes() if op[0] != "equal"]
    if len(ops) != 1 or ops[0][0] != "replace":
        return None
    _, i1, i2, j1, j2 = ops[0]
    slot_old, slot_new = a[i1:i2], b[j1:j2]
    frame = a[:i1] + a[i2:]
    frame_content = [w for w in frame if w not in _STOPWORDS]
    if len(slot_old) == 1 and len(slot_new) == 1 and frozenset((slot_old[0], slot_new[0])) in _OPPOSITES:
        return f"opposite words ({slot_old[0]} / {slot_new[0]})"
    if not frame_content:
        return None
    if _numeric(slot_old) and _numeric(slot_new) and len(slot_old) <= 3 and len(slot_new) <= 3:
        return f"another number in the same words ({' '.join(slot_old)} / {' '.join(slot_new)})"
    both_values = bool(values(new) - values(old)) and bool(values(old) - values(new))
    before = a[:i1]
    pairs = set(zip(frame, frame[1:], strict=False)) | ({(before[-2], before[-1])} if len(before) >= 2 else set())
    if both_values and pairs & _SINGLE_RELATIONS:
        return "a single-valued relation with another value"
    possessed = set(frame) & _possessed(old) & _possessed(new)
    if both_values and possessed and len(slot_old) <= 2 and len(slot_new) <= 2:
        return f"the same {sorted(possessed)[0]} with another value"
    verbs = [w for w in frame_content if w in _PREFERENCE_VERBS]
    if verbs and len(slot_old) == len(slot_new) <= 2 and any(w not in _PREFERENCE_VERBS for w in frame_content):
        return "a preference with another value for the same thing"
    return None


def _swapped(new: str, old: str) -> bool:
    """Whether the two differ only by one or two words swapped for others."""
    a, b = _tokens(old), _tokens(new)
    ops = [op for op in SequenceMatcher(None, a, b, autojunk=False).get_opcodes() if op[0] != "equal"]
    return len(ops) == 1 and ops[0][0] == "replace" and ops[0][2] - ops[0][1] <= 2 and ops[0][4] - ops[0][3] <= 2


def relation(new: str, old: str) -> tuple[str, str]:
    """("contradiction" | "restatement" | "other", why) for two related facts (similarity aside)."""
    new_words, old_words = content_words(new), content_words(old)
    shared = new_words & old_words
    if negated(new) != negated(old):
        smaller = min(len(new_words), len(old_words)) or 1
        if len(shared) / smaller >= 0.6:
            return "contradiction", "one of the two is negated"
    adds = _has(new, _ADDITION, _ADDITION_PHRASES)
    if not adds and _has(new, _CHANGE, _CHANGE_PHRASES) and not _has(old, _CHANGE, _CHANGE_PHRASES) \
            and shared - _PREFERENCE_VERBS:
        return "contradiction", "the new fact says the old one changed"
    if not adds:
        why = _one_slot(new, old)
        if why:
            return "contradiction", why
    new_values, old_values = values(new) - values(old), values(old) - values(new)
    if not (new_values and old_values) and (new_words <= old_words or old_words <= new_words):
        return "restatement", "one restates the other with more or less detail"
    return "other", ""


def decide(content: str, category: str, candidates: Sequence[Candidate], *, related: float,
           duplicate: float, swap: float = SWAP_SIMILARITY) -> Decision:
    """Apply the rules above against the candidates, closest first."""
    norm = normalise(content)
    for cand in candidates:
        if normalise(cand.content) == norm:
            if cand.content == content and cand.category == category:
                return Decision("unchanged", cand, "same fact")
            return Decision("updated", cand, "same words, new wording or category")
    same = sorted((c for c in candidates if c.category == category), key=lambda c: -c.similarity)
    if not same:
        return Decision("created", None, "no active fact in this category")
    if same[0].similarity < related:
        return Decision("created", None, f"closest fact is unrelated (similarity {same[0].similarity:.2f})")
    for cand in (c for c in same if c.similarity >= related):
        kind, why = relation(content, cand.content)
        if kind == "contradiction":
            return Decision("superseded", cand, why)
        if kind == "restatement":
            return Decision("updated", cand, why)
        values_differ = bool(values(content) - values(cand.content)) and bool(values(cand.content) - values(content))
        needed = max(duplicate, swap) if _swapped(content, cand.content) else duplicate
        if cand.similarity >= needed and not values_differ:
            return Decision("updated", cand, f"near-duplicate (similarity {cand.similarity:.2f})")
    return Decision("created", None, "related but not the same attribute, or unsure: both kept")
