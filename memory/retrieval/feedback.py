"""Keyword feedback: the words the best hits share lift the other hits that contain them.

A question often names a category and its answer an instance of it: "What activities
has Melanie done with her family?" is answered by "I'm off to go swimming with the
kids", which shares no word with the question and is not close to it as a vector. The
best hits of the first ranking usually talk about the same things as the answer
("kids", "camping", "beach"), so those words are taken as the question's unspoken
terms (pseudo-relevance feedback, as in RM3):

* the first ranking's top ``top`` hits are taken as relevant;
* each word at least two of them contain and the question does not is valued by its
  share among them times its rarity among all candidates, ``ln(1 + n / df)``;
* the ``words`` most valuable make the feedback set;
* a candidate's ``feedback`` signal is the share of that set's value it contains, 0 to 1.

A text said more than once counts once (repeated turns must not vote for their own
words); with fewer than ``top`` distinct texts there is nothing to learn from and every
signal is 0.
Words are :func:`memory.retrieval.bm25.prose_terms` (stemmed, stopwords out, cached per text),
or, in ``search_memory``, each row's stored lexemes (:func:`feedback_sets`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Collection, Sequence
from itertools import chain

from memory.retrieval.bm25 import prose_terms as terms


def feedback(texts: Sequence[str], question: str, *, top: int = 10, words: int = 5) -> list[float]:
    """Each candidate's feedback signal (0..1); ``texts`` are the candidates, best first.

    A text said again (the same words) counts once, so repeated turns cannot vote for
    their own words; with fewer than ``top`` distinct texts every signal is 0.
    """
    return feedback_sets([terms(t) for t in texts], terms(question), top=top, words=words)


def feedback_sets(sets: Sequence[Collection[str]], asked: Collection[str], *, top: int = 10,
                  words: int = 5) -> list[float]:
    """:func:`feedback` over each candidate's words already taken apart (``search_memory``
    reads them from the database: each row's stored ``search_tsv``, PostgreSQL's english
    lexemes, which a row it has not seen would otherwise cost ~9 µs of stemming in Python)
    and the question's (``asked``). A candidate's words are distinct and either a frozenset
    or a tuple in one fixed order (the database's lexemes come sorted), so that the same
    words are the same text."""
    distinct = list(dict.fromkeys(s for s in sets if s))
    if len(distinct) < top or words <= 0:
        return [0.0] * len(sets)
    df = Counter(chain.from_iterable(distinct))
    near = Counter(chain.from_iterable(distinct[:top]))
    value = {w: n / top * math.log(1 + len(distinct) / df[w]) for w, n in near.items() if n >= 2 and w not in asked}
    chosen = dict(sorted(value.items(), key=lambda kv: (-kv[1], kv[0]))[:words])
    total = sum(chosen.values())
    if not total:
        return [0.0] * len(sets)
    pairs, keys = list(chosen.items()), chosen.keys()
    # most candidates have none of the words: one set operation in C tells them apart
    return [0.0 if keys.isdisjoint(s) else sum([v for w, v in pairs if w in s]) / total for s in sets]
