"""Readers of the public development data in ``../shared/data`` (never shipped, never copied).

* LoCoMo (``locomo/locomo_dev3.json``): every turn of the three conversations as a
  ``Turn`` (conversation id, speaker, dia id, text, image caption folded in), and the
  questions of categories 1-4 with their evidence dia ids.
* ToolBench (``toolbench/*.json``): the distinct APIs of every ``api_list`` as
  ``"tool: api - description"`` texts, and every query with its relevant APIs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent / "shared" / "data"


@dataclass(frozen=True)
class Turn:
    conversation: str
    speaker: str
    dia_id: str
    text: str


@dataclass(frozen=True)
class Question:
    conversation: str
    text: str
    evidence: tuple[str, ...]
    category: int


def _locomo() -> list[dict]:
    path = ROOT / "locomo" / "locomo_dev3.json"
    if not path.exists():
        raise SystemExit(f"{path} not found: the benchmarks read the public dev data from ../shared/data")
    return json.loads(path.read_text())


def locomo_turns() -> list[Turn]:
    out: list[Turn] = []
    for conv in _locomo():
        c = conv["conversation"]
        n = 1
        while f"session_{n}" in c:
            for t in c[f"session_{n}"]:
                text = t["text"] + (f" [shares a photo: {t['blip_caption']}]" if t.get("blip_caption") else "")
                out.append(Turn(conv["sample_id"], t["speaker"], t["dia_id"], text))
            n += 1
    return out


def locomo_questions() -> list[Question]:
    return [Question(conv["sample_id"], q["question"], tuple(q.get("evidence", [])), int(q["category"]))
            for conv in _locomo() for q in conv["qa"] if int(q["category"]) in (1, 2, 3, 4)]


def toolbench() -> tuple[list[str], list[str]]:
    """(distinct API texts, queries) over the six ToolBench files, in a fixed order."""
    apis: dict[tuple[str, str], str] = {}
    queries: list[str] = []
    for path in sorted((ROOT / "toolbench").glob("*.json")):
        for entry in json.loads(path.read_text()):
            queries.append(entry["query"])
            for api in entry["api_list"]:
                key = (api["tool_name"], api["api_name"])
                desc = (api.get("api_description") or "").strip()
                apis.setdefault(key, f"{key[0]}: {key[1]}" + (f" - {desc}" if desc else ""))
    return list(apis.values()), queries
