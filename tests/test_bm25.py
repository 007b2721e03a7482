"""BM25F keyword scoring (memory.retrieval.bm25): analysis, weighting, agreement with bm25s."""

from __future__ import annotations

import numpy as np
import pytest

from memory.retrieval.bm25 import BM25Index, analyze, split_identifier


def test_analysis_splits_identifiers_stems_and_keeps_numbers() -> None:
    assert split_identifier("getWeatherJSON_v2") == ["get", "weather", "json", "v2"]
    assert analyze("getCurrentWeather for 2 Cities") == ["get", "current", "weather", "2", "citi"]
    assert analyze("the of and") == []


def test_identifier_in_a_document_is_found_by_its_words_in_another_form() -> None:
    index = BM25Index(["listCurrencies", "getWeatherForecast", "sendEmail"])
    assert index.top("weather forecasts", 3) == [(1, pytest.approx(index.scores("weather forecasts")[1]))]
    assert index.top("currency list", 1)[0][0] == 0


def test_single_field_scores_equal_bm25s_lucene() -> None:
    import bm25s  # the reference implementation (a test dependency)
    docs = ["the weather in paris today", "currency exchange rates euro dollar",
            "weather forecast for the week weather", "stock prices of apple",
            "paris hotels and flights booking for the weekend trip"]
    reference = bm25s.BM25(method="lucene", k1=1.2, b=0.75)
    reference.index([analyze(d) for d in docs], show_progress=False)
    query = "weather in paris this week"
    expected = reference.get_scores(analyze(query)) * (1.2 + 1)  # bm25s leaves out the constant (k1 + 1)
    assert np.allclose(BM25Index(docs).scores(query), expected)


def test_rare_terms_weigh_more_than_common_ones() -> None:
    docs = ["get user", "get order", "get invoice", "get umbrella forecast", "delete user"]
    index = BM25Index(docs)
    # "get" is in four documents, "umbrella" in one: the umbrella document wins over the other "get"s.
    assert index.top("get umbrella", 1)[0][0] == 3
    assert index.idf["umbrella"] > index.idf["get"]


def test_field_weights_decide_between_fields() -> None:
    docs = [{"name": "weather", "description": "current conditions"},
            {"name": "conditions", "description": "weather of a place"}]
    assert BM25Index(docs, weights={"name": 3.0, "description": 1.0}).top("weather", 1)[0][0] == 0
    assert BM25Index(docs, weights={"name": 0.2, "description": 1.0}).top("weather", 1)[0][0] == 1
    # A field of weight 0 is not indexed at all.
    assert BM25Index(docs, weights={"name": 0.0, "description": 0.0}).top("weather", 2) == []


def test_longer_documents_are_normalised() -> None:
    index = BM25Index(["invoice", "invoice with many other words about shipping orders and customers"])
    assert index.top("invoice", 2)[0][0] == 0


def test_coverage_is_bounded_and_says_how_much_of_the_query_matched() -> None:
    index = BM25Index(["weather forecast paris", "weather", "stock prices"])
    cov = index.coverage("weather forecast paris")
    assert ((cov >= 0) & (cov < 1)).all()
    assert cov[0] > cov[1] > cov[2] == 0
    # Words no document holds lower every coverage: the query is not fully matched anywhere.
    assert index.coverage("weather forecast paris umbrellas")[0] < cov[0]
    assert not index.coverage("").any()


def test_coverage_prior_weakens_the_matches_of_an_uninformative_query() -> None:
    index = BM25Index(["pay a bill", "weather forecast for a city", "stock prices", "translate text"])
    short, long = "pay hosting", "pay the hosting bill of the weather forecast service for stock traders"
    assert (index.coverage(short, prior=0.0) == index.coverage(short)).all()
    # The same prior takes a larger share off the short query's coverage than off the long one's.
    kept_short = index.coverage(short, prior=10.0)[0] / index.coverage(short)[0]
    kept_long = index.coverage(long, prior=10.0)[0] / index.coverage(long)[0]
    assert 0 < kept_short < kept_long < 1
    with pytest.raises(ValueError):
        index.coverage(short, prior=-1.0)


def test_top_is_stable_and_batch_equals_single() -> None:
    index = BM25Index(["alpha beta", "alpha beta", "alpha", "gamma"])
    assert [i for i, _ in index.top("alpha beta", 10)] == [0, 1, 2]  # ties by position; no zero scores
    assert index.top_many(["alpha", "gamma", "zzz"], 2) == [index.top("alpha", 2), index.top("gamma", 2), []]
    assert BM25Index([]).top("alpha", 3) == []
