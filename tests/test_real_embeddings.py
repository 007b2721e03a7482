"""Retrieval with the real packaged MiniLM model: paraphrases, not shared words."""

from __future__ import annotations

from pathlib import Path

import pytest

PASSAGES = [line for line in (Path(__file__).parent / "data" / "passages.txt").read_text().splitlines() if line]

# Paraphrased questions with little word overlap, and the passage each should find.
QUERIES = [
    ("How long until I get my money back after returning something?", "Customer refunds are issued"),
    ("How many days off can I move to next year?", "carry over at most five unused vacation days"),
    ("Can we release to production over Christmas and New Year?", "Production deployments are frozen"),
    ("How quickly do I have to respond when I'm on call and get alerted?", "acknowledge a page within fifteen minutes"),
    ("I left my umbrella somewhere in the building, where would it be kept?", "Lost and found items"),
    ("Do we pay for gym memberships?", "reimburses up to 300 dollars a year for sports"),
    ("How is customer information protected?", "encrypted at rest with AES-256"),
]


@pytest.mark.slow
def test_paraphrased_query_finds_the_right_passage_among_many(real_mm, user):
    assert len(PASSAGES) >= 50
    real_mm.write_knowledge_batch([{"content": p} for p in PASSAGES], user_id=user)
    for question, expected in QUERIES:
        for hybrid in (False, True):
            top = real_mm.read_knowledge(question, user_id=user, k=1, hybrid=hybrid)[0].item
            assert expected in top.content, (question, hybrid, top.content)


@pytest.mark.slow
def test_real_model_vectors_are_unit_length_and_cached(real_mm):
    service = real_mm.embeddings
    before = service.texts_embedded
    a = service.embed(["a sentence about databases", "a sentence about databases"])
    assert service.texts_embedded - before == 1  # duplicate text embedded once
    service.embed(["a sentence about databases"])
    assert service.texts_embedded - before == 1  # cached
    assert abs(float((a[0] ** 2).sum()) - 1.0) < 1e-4 and a[0].shape == (384,)
