"""remember() supersedes only a real contradiction of the same attribute (real MiniLM).

The general behaviours are pinned through ``remember`` with the real model; the
labelled pairs of ``tests/data/fact_pairs.jsonl`` check the rule's supersede precision
on the half that the thresholds were not fitted on (``bench/facts.py`` prints the
whole confusion matrix).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from memory.tables.fact_rules import Candidate, decide
from memory.settings import Settings

pytestmark = pytest.mark.slow

PAIRS = Path(__file__).parent / "data" / "fact_pairs.jsonl"


@pytest.mark.parametrize("category, old, new", [
    ("stable_fact", "The user has a dog named Rex.", "The user has a cat named Tom."),
    ("stable_fact", "The user speaks French.", "The user speaks Spanish."),
    ("preference", "The user likes tea.", "The user likes coffee."),
    ("preference", "The user plays guitar.", "The user plays piano."),
    ("preference", "The user likes emoji in replies.", "The user likes bullet points in replies."),
])
def test_a_compatible_fact_is_kept_beside_the_old_one(real_mm, user, category, old, new):
    first = real_mm.remember(category, old, user_id=user)
    second = real_mm.remember(category, new, user_id=user)
    assert second.action == "created", second.reason
    assert {f.content for f in real_mm.read_facts(user_id=user)} == {old, new}
    assert first.fact.id in {f.id for f in real_mm.read_facts(user_id=user)}


@pytest.mark.parametrize("category, old, new", [
    ("stable_fact", "The user lives in Berlin.", "The user lives in Paris."),
    ("preference", "The user prefers answers in French.", "The user prefers answers in Spanish."),
    ("stable_fact", "The user's manager is Priya.", "The user's manager is Tom."),
    ("stable_fact", "The user is 34 years old.", "The user is 35 years old."),
    ("constraint", "The user is allergic to peanuts.", "The user is not allergic to peanuts."),
    ("stable_fact", "The user has a dog named Rex.", "The user no longer has a dog."),
    ("stable_fact", "The user deploys on AWS.", "The user migrated from AWS to GCP."),
])
def test_a_contradiction_of_the_same_attribute_supersedes(real_mm, user, category, old, new):
    first = real_mm.remember(category, old, user_id=user)
    second = real_mm.remember(category, new, user_id=user)
    assert second.action == "superseded", second.reason
    assert second.previous.id == first.fact.id and second.previous.valid_to is not None
    assert [f.content for f in real_mm.read_facts(user_id=user)] == [new]
    history = real_mm.fact_history(second.fact.id, user_id=user)
    assert [f.content for f in history] == [old, new]  # nothing lost


@pytest.mark.parametrize("category, old, new", [
    ("preference", "The user prefers dark mode.", "The user likes dark mode."),
    ("preference", "The user prefers dark mode.", "The user prefers dark mode in every editor."),
    ("stable_fact", "The user works at Siemens.", "The user is employed by Siemens."),
])
def test_a_restatement_updates_the_fact_in_place(real_mm, user, category, old, new):
    first = real_mm.remember(category, old, user_id=user)
    second = real_mm.remember(category, new, user_id=user)
    assert second.action == "updated", second.reason
    assert second.fact.id == first.fact.id
    assert [f.content for f in real_mm.read_facts(user_id=user)] == [new]


def test_supersede_precision_on_the_held_out_pairs(minilm):
    """The brief's target, >= 0.95, on the pairs the thresholds were not fitted on (odd ids)."""
    pairs = [json.loads(line) for line in PAIRS.read_text().splitlines() if line.strip()]
    assert len(pairs) >= 150 and {p["label"] for p in pairs} == {"restatement", "compatible", "contradiction"}
    held = [p for p in pairs if p["id"] % 2 == 1]
    texts = sorted({p["old"] for p in held} | {p["new"] for p in held})
    vecs = dict(zip(texts, np.asarray(minilm.embed(texts), dtype=np.float32)))
    s = Settings()
    superseded = right = 0
    for p in held:
        a, b = vecs[p["old"]], vecs[p["new"]]
        sim = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
        d = decide(p["new"], p["category"], [Candidate(0, p["category"], p["old"], sim)],
                   related=s.fact_related_similarity, duplicate=s.fact_duplicate_similarity,
                   swap=s.fact_swap_similarity)
        if d.action == "superseded":
            superseded += 1
            right += p["label"] == "contradiction"
    contradictions = sum(p["label"] == "contradiction" for p in held)
    assert superseded >= contradictions // 2  # the rule still supersedes (not precise by never acting)
    assert right / superseded >= 0.95
