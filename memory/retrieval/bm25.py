"""Keyword relevance: stemmed, field-weighted BM25 (BM25F) over documents held in memory.

A keyword signal any reader can reuse (the toolbox ranks its tools with it). Documents
are mappings of field name to text (a plain string is one field, ``"text"``); each
field has a weight and its own length normalisation, which is what lets a tool's name
count for more than a parameter description without either drowning the other.

Interface::

    index = BM25Index(docs, weights={"name": 3.0, "description": 1.0})
    index.scores("weather in paris")          # one float per document (numpy array)
    index.top("weather in paris", 10)         # [(doc position, score), ...] best first
    index.top_many(["a", "b"], 10)            # the batch form
    index.coverage("weather in paris")        # scores scaled to [0, 1): share of the query matched
    analyze("getWeatherJSON for 2 cities")    # ['get', 'weather', 'json', '2', 'citi']

Text analysis (:func:`analyze`, :class:`Analyzer`): words are runs of letters and
digits; identifiers are split (``getWeather``, ``get_weather`` -> ``get weather``);
lower-cased; a short list of English function words is dropped; numbers are kept;
the rest is stemmed with the Snowball English stemmer (PyStemmer). Queries and
documents go through the same analyzer.

Scoring (Robertson & Zaragoza's simple BM25F): for term ``t`` and document ``d``,
``tf~ = sum_f w_f * tf_f / (1 - b_f + b_f * len_f / avglen_f)``, and
``score = sum_{t in query} idf(t) * tf~ * (k1 + 1) / (k1 + tf~)`` with
``idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5))`` (never negative), each distinct query
term counted once. With one field of weight 1 this is plain BM25 (Lucene's form);
``k1`` = 1.2 and ``b`` = 0.75 are the usual defaults. :meth:`BM25Index.coverage`
divides by ``(k1 + 1) * sum idf`` over the query's terms (a term no document holds
counts at the highest idf), so it says how much of the query a document matches,
comparable across queries; the raw score is not. ``coverage(query, prior=p)`` adds
``p`` to that idf sum: a short query's matches then count for less than a long one's.

The index is immutable and built in one pass (postings as numpy arrays); a reader
whose documents change builds a new one (2,500 short documents take well under a
second). Nothing here touches the database.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from functools import lru_cache
from collections.abc import Mapping, Sequence

import numpy as np

__all__ = ["Analyzer", "BM25Index", "STOPWORDS", "analyze", "prose_terms", "split_identifier"]

_WORD = re.compile(r"[^\W_]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")

#: Function words that carry no topic (deliberately short: "not", "new", "top" stay).
STOPWORDS = frozenset("""
a an the and or of to in on at by for from with into onto about as is are was were be been being am
do does did done have has had having i me my mine we us our you your he him his she her it its they them
their this that these those there here what which who whom whose when where why how can could would should
will shall may might must please let lets s t d ll re ve m just also so than then too very some any
""".split())  # noqa: SIM905 - a word list reads best as text


def split_identifier(token: str) -> list[str]:
    """``getWeatherJSON_v2`` -> ``["get", "weather", "json", "v2"]`` (lower-cased)."""
    out: list[str] = []
    for chunk in _WORD.findall(token):
        out.extend(w.lower() for w in _CAMEL.split(chunk) if w)
    return out


class Analyzer:
    """Text to index terms: words, split identifiers, lower case, stopwords out, stemmed."""

    def __init__(self, *, stem: bool = True, stopwords: frozenset[str] = STOPWORDS) -> None:
        self.stopwords = stopwords
        self._stem = _stemmer() if stem else None

    def __call__(self, text: str) -> list[str]:
        words = [w for w in split_identifier(text) if w not in self.stopwords]
        if self._stem is None:
            return words
        return [_stem_cached(self._stem, w) for w in words]


@lru_cache(maxsize=1)
def _stemmer() -> object:
    import Stemmer  # PyStemmer: Snowball stemmers in C

    return Stemmer.Stemmer("english")


@lru_cache(maxsize=200_000)
def _stem_cached(stemmer: object, word: str) -> str:
    return stemmer.stemWord(word) if not word.isdigit() else word  # type: ignore[attr-defined]


_DEFAULT = Analyzer()


def analyze(text: str) -> list[str]:
    """The default analyzer: what both documents and queries are turned into."""
    return _DEFAULT(text)


@lru_cache(maxsize=50_000)
def prose_terms(text: str) -> frozenset[str]:
    """The distinct terms of prose ``text``: :func:`analyze` without splitting identifiers
    (``getWeather`` stays one word), so a text already seen is one cache lookup and a new
    one a lower-case split and a stem lookup per word (cached per text)."""
    stemmer = _stemmer()
    return frozenset(_stem_cached(stemmer, w) for w in _WORD.findall(text.lower()) if w not in STOPWORDS)


class BM25Index:
    """BM25F over ``docs`` (each a mapping field -> text, or a plain string)."""

    def __init__(self, docs: Sequence[Mapping[str, str] | str], *, weights: Mapping[str, float] | None = None,
                 k1: float = 1.2, b: float | Mapping[str, float] = 0.75, analyzer: Analyzer | None = None) -> None:
        if k1 < 0:
            raise ValueError("k1 must be >= 0")
        self.analyzer = analyzer or _DEFAULT
        self.k1 = k1
        fields = [{"text": d} if isinstance(d, str) else dict(d) for d in docs]
        names = sorted({f for d in fields for f in d} | set(weights or {}))
        self.weights = {f: float((weights or {}).get(f, 1.0)) for f in names}
        self.b = {f: float(b.get(f, 0.75) if isinstance(b, Mapping) else b) for f in names}
        self.n = len(fields)
        counts: list[dict[str, Counter[str]]] = [{f: Counter(self.analyzer(d.get(f) or "")) for f in names}
                                                 for d in fields]
        avg = {f: (sum(sum(c[f].values()) for c in counts) / self.n if self.n else 0.0) or 1.0 for f in names}
        tf: dict[str, dict[int, float]] = {}
        for i, per_field in enumerate(counts):
            for f, counter in per_field.items():
                weight = self.weights[f]
                if not counter or weight == 0:
                    continue
                norm = 1.0 - self.b[f] + self.b[f] * sum(counter.values()) / avg[f]
                for term, c in counter.items():
                    row = tf.setdefault(term, {})
                    row[i] = row.get(i, 0.0) + weight * c / norm
        self.max_idf = _idf(self.n, 0)
        self.idf: dict[str, float] = {}
        self._postings: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for term, row in tf.items():
            idf = _idf(self.n, len(row))
            docs_ = np.fromiter(row.keys(), dtype=np.int64, count=len(row))
            t = np.fromiter(row.values(), dtype=np.float64, count=len(row))
            self.idf[term] = idf
            self._postings[term] = (docs_, idf * t * (k1 + 1.0) / (k1 + t))

    def __len__(self) -> int:
        return self.n

    def terms(self, query: str) -> list[str]:
        """The query's distinct index terms, in order."""
        return list(dict.fromkeys(self.analyzer(query)))

    def scores(self, query: str) -> np.ndarray:
        """The BM25F score of every document for ``query`` (0 for a document sharing no term)."""
        out = np.zeros(self.n, dtype=np.float64)
        for term in self.terms(query):
            posting = self._postings.get(term)
            if posting is not None:
                np.add.at(out, posting[0], posting[1])
        return out

    def coverage(self, query: str, *, prior: float = 0.0) -> np.ndarray:
        """Scores divided by their bound for this query: in [0, 1), comparable across queries.

        ``prior``: idf mass added to the query's own in the bound, so a query that
        carries little information cannot score high (one shared word of a two-word
        query is weak evidence; ten of a forty-word one is not). 0: the plain share.
        """
        if prior < 0:
            raise ValueError("prior must be >= 0")
        terms = self.terms(query)
        bound = (self.k1 + 1.0) * (sum(self.idf.get(t, self.max_idf) for t in terms) + prior)
        return self.scores(query) / bound if bound > 0 else np.zeros(self.n, dtype=np.float64)

    def top(self, query: str, k: int) -> list[tuple[int, float]]:
        """The ``k`` best documents with a non-zero score, as (position, score), best first (ties by position)."""
        return _top(self.scores(query), k)

    def top_many(self, queries: Sequence[str], k: int) -> list[list[tuple[int, float]]]:
        """:meth:`top` for each query."""
        return [self.top(q, k) for q in queries]


def _idf(n: int, df: int) -> float:
    return math.log(1.0 + (n - df + 0.5) / (df + 0.5))


def _top(scores: np.ndarray, k: int) -> list[tuple[int, float]]:
    hit = np.flatnonzero(scores > 0)
    if k <= 0 or hit.size == 0:
        return []
    order = hit[np.lexsort((hit, -scores[hit]))][:k]
    return [(int(i), float(scores[i])) for i in order]
