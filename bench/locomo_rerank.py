"""LoCoMo: search_memory's misses, and other rankings of the same candidates.

Writes the three LoCoMo dev conversations of ``../shared/data`` as
``bench/_public_memory.py`` does (one user per conversation, one thread per session, the
speaker as ``name``, each turn 30 s after the previous one), and collects every category
1-4 question's candidates once, through search_memory's own statement
(``MemorySearch._found_many_op`` with the question's ``k``, so the pool the library
ranks). Those same candidates are then ranked again:

* ``shipped``: ``search_memory``'s ranking (``_order`` with ``DEFAULT_WEIGHTS``, keyword
  feedback included: :mod:`memory.retrieval.feedback`), and the first ranking without it;
* ``pool`` and ``R@20``: every candidate (what any re-ranking could reach) and the
  shipped ranking's top 20;
* alternatives built on the first ranking's score, each a technique for evidence spread
  over sessions or said indirectly: diversity across sessions (a hit loses ``p`` per
  earlier hit of its session), maximal marginal relevance over the candidates'
  embeddings, vector pseudo-relevance feedback (cosine to the centroid of the top 5),
  keyword feedback at other weights, a neighbourhood vector (cosine to the mean
  embedding of the turn and the turns around it), a length prior (more distinct words,
  more likely a statement than chit-chat), other neighbour and thread weights, and the
  vector signal taken against the mean direction of the question and its statement form
  (its interrogative opening and question mark dropped: "What activities has Melanie
  done?" -> "activities has Melanie done").

``--misses 1,3`` also prints, per question of those categories that misses evidence,
the evidence turns (rank among the candidates and signals) and the top 5 hits.
The ONNX encoder quantises per run of texts, so ``--onnx-run-size 64`` checks that a
figure does not hang on that (the library runs 8).

    .venv/bin/python bench/locomo_rerank.py                     # ~2-4 min on 2 cores
    .venv/bin/python bench/locomo_rerank.py --onnx-run-size 64 --misses 1,3
    .venv/bin/python bench/locomo_rerank.py --pool-k 25           # 100 candidates instead of 50
"""

from __future__ import annotations

import json
import math
import re
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
from _common import base_parser, bench_embedder, embedded_server, log, open_manager, print_load, print_table  # noqa: E402
from _public_memory import CATEGORIES, DATA, evidence_ids, said, sessions  # noqa: E402

from memory.retrieval.bm25 import analyze  # noqa: E402
from memory.retrieval.speakers import speakers_in  # noqa: E402
from memory.store.ops import run  # noqa: E402
from memory.tables.search import DEFAULT_WEIGHTS, SearchWeights, _Candidate, _order  # noqa: E402

K = 10
Ranker = Callable[[Sequence[_Candidate], dict[str, Any], dict[str, Any]], list[_Candidate]]


def messages(ranked: Sequence[_Candidate]) -> list[_Candidate]:
    return [c for c in ranked if c.item.kind == "message"]


#: The ranking before keyword feedback: the base the alternatives below are built on.
FIRST = replace(DEFAULT_WEIGHTS, feedback_weight=0.0)


def shipped(w: SearchWeights = DEFAULT_WEIGHTS) -> Ranker:
    return lambda cands, conv, q: messages(_order(cands, "hybrid", w, q["question"]))


def rescored(bonus: Callable[[list[_Candidate], dict[str, Any], dict[str, Any]], list[float]]) -> Ranker:
    """The shipped ranking with a bonus added to each message's score."""
    def rank(cands: Sequence[_Candidate], conv: dict[str, Any], q: dict[str, Any]) -> list[_Candidate]:
        ranked = shipped(FIRST)(cands, conv, q)
        for c, b in zip(ranked, bonus(ranked, conv, q), strict=True):
            c.score += b
        return sorted(ranked, key=lambda c: -c.score)
    return rank


def greedy(penalty: Callable[[_Candidate, list[_Candidate], dict[str, Any]], float]) -> Ranker:
    """The shipped ranking re-read greedily: each next hit is the best score minus its penalty."""
    def rank(cands: Sequence[_Candidate], conv: dict[str, Any], q: dict[str, Any]) -> list[_Candidate]:
        pool = shipped(FIRST)(cands, conv, q)
        out: list[_Candidate] = []
        while pool and len(out) < K:
            best = max(pool, key=lambda c: c.score - penalty(c, out, conv))
            pool.remove(best)
            out.append(best)
        return out + pool
    return rank


def session_diversity(p: float) -> Ranker:
    return greedy(lambda c, chosen, conv: p * sum(o.item.thread_id == c.item.thread_id for o in chosen))


def mmr(lam: float) -> Ranker:
    def penalty(c: _Candidate, chosen: list[_Candidate], conv: dict[str, Any]) -> float:
        v = conv["vecs"][c.item.message_id]
        return lam * max((float(v @ conv["vecs"][o.item.message_id]) for o in chosen), default=0.0)
    return greedy(penalty)


def vector_prf(weight: float, top: int = 5) -> Ranker:
    def bonus(ranked: list[_Candidate], conv: dict[str, Any], q: dict[str, Any]) -> list[float]:
        if not ranked:
            return []
        centre = np.mean([conv["vecs"][c.item.message_id] for c in ranked[:top]], axis=0)
        centre /= np.linalg.norm(centre)
        return [weight * float(conv["vecs"][c.item.message_id] @ centre) for c in ranked]
    return rescored(bonus)


def neighbourhood_vector(weight: float) -> Ranker:
    def bonus(ranked: list[_Candidate], conv: dict[str, Any], q: dict[str, Any]) -> list[float]:
        return [weight * float(conv["window"][c.item.message_id] @ q["qvec"]) for c in ranked]
    return rescored(bonus)


_AUX = r"(?:do|does|did|is|are|was|were|has|have|had|would|will|could|can|should|might|may)"
_OPENING = re.compile(r"^\s*(?:(?:what|which|who|whom|whose|where|when|why|how(?:\s+(?:many|much|long|often|old))?)|"
                      + _AUX + r")\b\s*(?:" + _AUX + r"\b\s*)?", re.IGNORECASE)


def statement_form(question: str) -> str:
    """The question without its interrogative opening and question mark."""
    rest = _OPENING.sub("", question.strip(), count=1).rstrip("?").strip()
    return rest or question


def statement_vector() -> Ranker:
    """The vector signal recomputed against the mean direction of the question and its statement form
    (the candidates stay those of the question's own vector)."""
    def rank(cands: Sequence[_Candidate], conv: dict[str, Any], q: dict[str, Any]) -> list[_Candidate]:
        moved = [replace(c, vector=float(conv["vecs"][c.item.message_id] @ q["svec"]), signals=dict(c.signals))
                 if c.item.kind == "message" else c for c in cands]
        for c in moved:
            c.signals["vector"] = c.vector
        return messages(_order(moved, "hybrid", FIRST, q["question"]))
    return rank


def length_prior(weight: float, cap: int = 20) -> Ranker:
    def bonus(ranked: list[_Candidate], conv: dict[str, Any], q: dict[str, Any]) -> list[float]:
        return [weight * math.log1p(min(len(conv["terms"][c.item.message_id]), cap)) / math.log1p(cap)
                for c in ranked]
    return rescored(bonus)


VARIANTS: dict[str, Ranker] = {
    "shipped (with keyword feedback)": shipped(),
    "first ranking (no feedback)": shipped(FIRST),
    "adjacent 0.1": shipped(replace(FIRST, adjacent_weight=0.1)),
    "adjacent 0, thread 0": shipped(replace(FIRST, adjacent_weight=0.0, thread_weight=0.0)),
    "session diversity 0.05": session_diversity(0.05),
    "session diversity 0.1": session_diversity(0.1),
    "mmr 0.1": mmr(0.1),
    "mmr 0.3": mmr(0.3),
    "vector prf 0.2": vector_prf(0.2),
    "keyword feedback 0.05": shipped(replace(DEFAULT_WEIGHTS, feedback_weight=0.05)),
    "keyword feedback 0.1": shipped(replace(DEFAULT_WEIGHTS, feedback_weight=0.1)),
    "keyword feedback 0.3": shipped(replace(DEFAULT_WEIGHTS, feedback_weight=0.3)),
    "neighbourhood vector 0.4": neighbourhood_vector(0.4),
    "length prior 0.2": length_prior(0.2),
    "question + statement form vector": statement_vector(),
}


def load(mm: Any, conv: dict[str, Any], pool_k: int) -> dict[str, Any]:
    """Write one conversation; return its turns, questions with their candidates, and embeddings."""
    user = conv["sample_id"]
    dia_of: dict[int, str] = {}
    text_of: dict[str, str] = {}
    last = None
    for number, _, start, turns in sessions(conv["conversation"]):
        msgs = [dict(role="user", name=t["speaker"], content=said(t), created_at=start + timedelta(seconds=30 * i))
                for i, t in enumerate(turns)]
        for t, row in zip(turns, mm.write_messages(user_id=user, thread_id=f"session_{number}", messages=msgs),
                          strict=True):
            dia_of[row.id] = t["dia_id"]
            text_of[t["dia_id"]] = f"{t['speaker']}: {said(t)}"
        last = msgs[-1]["created_at"]
    questions = [dict(question=qa["question"], category=qa["category"], wanted=evidence_ids(qa["evidence"]))
                 for qa in conv["qa"] if qa.get("category") in CATEGORIES and evidence_ids(qa.get("evidence", []))]
    for q in questions:
        q["cands"] = run(mm.db, mm.memory_search._found_many_op([q["question"]], user_id=user, k=pool_k, now=last))[0]
    with mm.db.connection(user) as conn:
        rows = conn.execute("SELECT id, thread_id, embedding, content FROM conversational_memory WHERE user_id = %s"
                            " ORDER BY thread_id, created_at, id", (user,)).fetchall()
    vecs = {r[0]: np.asarray(r[2], dtype=np.float32) for r in rows}
    window: dict[int, np.ndarray] = {}
    for i, r in enumerate(rows):
        around = [vecs[rows[j][0]] for j in (i - 1, i, i + 1) if 0 <= j < len(rows) and rows[j][1] == r[1]]
        centre = np.mean(around, axis=0)
        window[r[0]] = centre / np.linalg.norm(centre)
    names = sorted({t["speaker"] for _, _, _, ts in sessions(conv["conversation"]) for t in ts})
    # The query as the library embeds it (speaker names replaced; a time phrase is not stripped here).
    for q in questions:  # one query per call, as search_memory embeds it
        text = speakers_in(q["question"], names)[1]
        q["qvec"] = np.asarray(mm.store.embeddings.embed([text])[0], dtype=np.float32)
        both = np.asarray(mm.store.embeddings.embed([text, statement_form(text)]), dtype=np.float32).sum(axis=0)
        q["svec"] = both / np.linalg.norm(both)
    return dict(user=user, dia_of=dia_of, text_of=text_of, questions=questions, vecs=vecs, window=window,
                terms={r[0]: set(analyze(r[3])) for r in rows})


def recall_table(convs: list[dict[str, Any]]) -> list[list[Any]]:
    groups = ["all", *CATEGORIES.values(), *(c["user"] for c in convs)]
    rows = []

    def add(name: str, ranker: Ranker, k: int) -> None:
        got: dict[str, list[float]] = {g: [] for g in groups}
        for conv in convs:
            for q in conv["questions"]:
                top = [conv["dia_of"].get(c.item.message_id) for c in ranker(q["cands"], conv, q)[:k]]
                r = len(q["wanted"] & set(top)) / len(q["wanted"])
                for g in ("all", CATEGORIES[q["category"]], conv["user"]):
                    got[g].append(r)
        rows.append([name, *(statistics.fmean(got[g]) for g in groups)])

    add("pool (every candidate)", lambda cands, conv, q: messages(list(cands)), 10 ** 6)
    add("shipped, R@20", shipped(), 20)
    for name, ranker in VARIANTS.items():
        add(name, ranker, K)
    return rows


def print_misses(convs: list[dict[str, Any]], categories: set[int]) -> None:
    def sig(c: _Candidate) -> str:
        return f"{c.score:.3f} " + " ".join(f"{k}={v:.2f}" for k, v in c.signals.items())

    for conv in convs:
        for q in conv["questions"]:
            if q["category"] not in categories:
                continue
            ranked = shipped()(q["cands"], conv, q)
            dias = [conv["dia_of"].get(c.item.message_id) for c in ranked]
            if q["wanted"] <= set(dias[:K]):
                continue
            print(f"\n{conv['user']} [{CATEGORIES[q['category']]}] {q['question']}")
            for e in sorted(q["wanted"]):
                at = dias.index(e) if e in dias else None
                where = f"rank {at + 1}: {sig(ranked[at])}" if at is not None else "not a candidate"
                print(f"  evidence {e} ({where})\n      {conv['text_of'].get(e, '?')[:150]}")
            for i, c in enumerate(ranked[:5]):
                print(f"  hit {i + 1} {dias[i]} {sig(c)}\n      {c.item.name}: {c.item.content[:110]}")


def main() -> None:
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--locomo", default=str(DATA), help="the LoCoMo JSON file")
    p.add_argument("--onnx-run-size", type=int, default=0, help="texts per ONNX run (0: the library's)")
    p.add_argument("--pool-k", type=int, default=K,
                   help="the k the candidates are collected with (the pool is max(4k, 50); 10 as searched)")
    p.add_argument("--misses", default="", help="categories (1-4, comma-separated) whose misses are printed")
    args = p.parse_args()
    path = Path(args.locomo)
    if not path.exists():
        raise SystemExit(f"{path} not found: the LoCoMo dev data is read from ../shared/data (see its README)")
    if args.onnx_run_size:
        import memory.retrieval.onnx_minilm as onnx_minilm

        onnx_minilm.FIXED_RUN = args.onnx_run_size
    embedder = bench_embedder(args.backend, args.torch_threads)
    with embedded_server() as uri:
        mm = open_manager(uri, embedder=embedder)
        convs = [load(mm, conv, args.pool_k) for conv in json.loads(path.read_text())]
        mm.close()
    log(f"{sum(len(c['questions']) for c in convs)} questions, candidates collected")
    rows = recall_table(convs)
    run_size = args.onnx_run_size or "library default"
    print_table(f"LoCoMo evidence recall@10 of the same candidates ranked other ways ({args.backend}, "
                f"ONNX run size {run_size}, candidates of k={args.pool_k})",
                ["ranking", "all", *CATEGORIES.values(), *(c["user"] for c in convs)], rows)
    if args.misses:
        print_misses(convs, {int(x) for x in args.misses.split(",")})
    print_load()


if __name__ == "__main__":
    main()
