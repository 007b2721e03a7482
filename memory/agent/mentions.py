"""Entities mentioned in a message: by the model when one is configured, else a heuristic.

The heuristic finds what is cheap to find reliably: identifiers (``EXP-2291``,
``rpt-03``, ``#4512``), ISO and written dates, e-mail addresses, and capitalised
names that do not start a sentence. It misses lower-case names and invents no
descriptions; the model path asks for a JSON list and falls back to the heuristic
on any failure.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from memory.errors import LLMError
from memory.llm.chat import complete

_ID = re.compile(r"(?<![\w-])(?:[A-Za-z]{1,10}-\d[\w-]*|#\d{2,})(?![\w-])")
_EMAIL = re.compile(r"\b[\w.+-]+@[\w-]+\.[\w.-]+\b")
_ISO_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
_MONTHS = ("January|February|March|April|May|June|July|August|September|October|November|December")
_WORD_DATE = re.compile(rf"\b(?:\d{{1,2}} (?:{_MONTHS})(?: \d{{4}})?|(?:{_MONTHS}) \d{{1,2}}(?:, \d{{4}})?)\b")
_NAME = re.compile(r"\b[A-Z][a-z]+(?: [A-Z][a-z]+)*\b")
_STOP = {"I", "The", "A", "An", "It", "We", "You", "He", "She", "They", "This", "That", "Our", "My", "Hi",
         "Hello", "Thanks", "Please", "Yes", "No", "Ok", "OK", "What", "Why", "How", "When", "Where", "Who",
         "Can", "Could", "Would", "Should", "Is", "Are", "Do", "Does", "If", "Then", "Monday", "Tuesday",
         "Wednesday", "Thursday", "Friday", "Saturday", "Sunday", "Sorry", "And", "But", "So"}


@dataclass(frozen=True)
class Mention:
    name: str
    type: str


def heuristic_entities(text: str) -> list[Mention]:
    found: dict[str, Mention] = {}

    def add(name: str, kind: str) -> None:
        found.setdefault(name.lower(), Mention(name, kind))

    for m in _EMAIL.finditer(text):
        add(m.group(), "email")
    for m in _ISO_DATE.finditer(text):
        add(m.group(), "date")
    for m in _WORD_DATE.finditer(text):
        add(m.group(), "date")
    for m in _ID.finditer(text):
        if not _EMAIL.search(m.group()) and not _ISO_DATE.fullmatch(m.group()):
            add(m.group(), "id")
    for sentence in re.split(r"(?<=[.!?])\s+|\n+", text):
        for m in _NAME.finditer(sentence):
            name = m.group()
            words = name.split()
            if m.start() == 0 or sentence[:m.start()].strip() in ("", "-", "*"):
                words = words[1:]  # a sentence's first word is capitalised anyway
                if not words:
                    continue
                name = " ".join(words)
            if name in _STOP or words[0] in _STOP or re.fullmatch(_MONTHS, name):
                continue
            add(name, "name")
    return list(found.values())


_PROMPT = ("List the named entities (people, organisations, projects, products, ids, dates, places) in the "
           "message below as a JSON array of objects with keys name and type. Only entities literally "
           "present in the message. Answer with the JSON array only.\n\nMessage:\n")


def model_entities(model: Any, text: str) -> list[Mention]:
    """Entities extracted by ``model``; the heuristic's answer when the model fails."""
    try:
        answer = complete(model, _PROMPT + text[:4000])
        start, end = answer.find("["), answer.rfind("]")
        items = json.loads(answer[start:end + 1]) if start >= 0 and end > start else None
    except (LLMError, ValueError):
        items = None
    if not isinstance(items, list):
        return heuristic_entities(text)
    out: dict[str, Mention] = {}
    for item in items:
        if isinstance(item, dict) and isinstance(item.get("name"), str) and item["name"].strip():
            name = item["name"].strip()[:200]
            if name.lower() in text.lower():  # nothing the message does not contain
                out.setdefault(name.lower(), Mention(name, str(item.get("type") or "unknown")[:50]))
    return list(out.values())
