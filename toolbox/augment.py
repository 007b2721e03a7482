"""Augmentation: one LLM call that rewrites a tool's description and imagines queries.

Docstrings are written by programmers for programmers ("Fetch OHLC bars for a
ticker"); users ask "how did Apple stock do last week". One model call per tool,
at registration, bridges the gap: a clearer description and a handful of example
user requests, both embedded with the tool. The answer is asked for as JSON and
read defensively: code fences and chatter around the object are tolerated, each
field is checked on its own, and anything unusable falls back to the docstring.
A model that fails, times out or answers nonsense never fails a registration.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from memory import LLMError, complete

MAX_DESCRIPTION_CHARS = 1_000
MAX_QUERY_CHARS = 300

SYSTEM = (
    "You write descriptions of software tools so that a search engine can match user requests to the right tool. "
    "Answer with one JSON object and nothing else."
)

PROMPT = """Tool name: {name}
Signature: {signature}
Documentation:
{docstring}

Return a JSON object with two keys:
- "description": two or three plain sentences saying what the tool does, when to use it, and what it needs.
- "queries": a list of {n} different requests a user might type when this tool is the right one, in everyday
  words, with varied phrasing and realistic values.
Answer with the JSON object only."""


@dataclass
class Augmentation:
    description: str
    queries: list[str] = field(default_factory=list)
    augmented: bool = False
    reason: str = ""  # why it fell back, when it did


def build_prompt(name: str, signature: str, docstring: str, n: int) -> str:
    return PROMPT.format(name=name, signature=signature, docstring=docstring.strip() or "(none)", n=n)


def _clean(text: str, limit: int) -> str:
    """One line of storable text: whitespace collapsed, NULs and lone surrogates dropped."""
    text = text.replace("\x00", " ").encode("utf-8", "ignore").decode("utf-8")
    return " ".join(text.split())[:limit]


def _json_object(text: str) -> Any:
    """The first JSON object in ``text`` (inside code fences or surrounded by chatter)."""
    text = re.sub(r"```(?:json)?", "", text, flags=re.IGNORECASE)
    decoder = json.JSONDecoder()
    for match in re.finditer(r"\{", text):
        try:
            value, _ = decoder.raw_decode(text, match.start())
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


def parse_answer(answer: str, *, fallback: str, n: int) -> Augmentation:
    """Read the model's answer; any part that is not usable falls back to the docstring."""
    data = _json_object(answer or "")
    if not isinstance(data, dict):
        return Augmentation(fallback, [], False, "the model's answer held no JSON object")
    desc = data.get("description")
    description = _clean(desc, MAX_DESCRIPTION_CHARS) if isinstance(desc, str) else ""
    raw = data.get("queries")
    queries: list[str] = []
    if isinstance(raw, list):
        for item in raw:
            if isinstance(item, str):
                q = _clean(item, MAX_QUERY_CHARS)
                if q and q.lower() not in (x.lower() for x in queries):
                    queries.append(q)
    queries = queries[:n]
    if not description and not queries:
        return Augmentation(fallback, [], False, "the model's JSON had neither a description nor queries")
    return Augmentation(description or fallback, queries, True, "" if description else "no description given")


def augment(llm: Any, *, name: str, signature: str, docstring: str, fallback: str, n: int = 5) -> Augmentation:
    """One model call; never raises for a model failure (falls back to ``fallback``)."""
    try:
        answer = complete(llm, build_prompt(name, signature, docstring, n), system=SYSTEM)
    except LLMError as exc:
        return Augmentation(fallback, [], False, str(exc))
    return parse_answer(answer, fallback=fallback, n=n)
