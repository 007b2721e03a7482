"""What tool retrieval does in general (real MiniLM): the behaviours, not the benchmark numbers."""

from __future__ import annotations

import uuid

import pytest

from memory import MemoryManager
from toolbox import GROUP_WEIGHT, KEYWORD_WEIGHT, NO_TOOL_SCORE, Retrieved, Toolbox, request_parts

pytestmark = pytest.mark.slow


def _schema(name: str, description: str, **params: str) -> dict:
    return {"name": name, "description": description,
            "parameters": {"type": "object", "properties": {p: {"type": "string", "description": d}
                                                            for p, d in params.items()},
                           "required": list(params)}}


CATALOGUE = [
    (_schema("get_record", "Fetch a catalogue record.", isbn=""), "library"),
    (_schema("get_record_by_id", "Fetch a catalogue record by its number.", record_id=""), "library"),
    (_schema("track_parcel", "Where a parcel is now.", reference="the tracking reference"), "post"),
    (_schema("getExchangeRate", "Rate between two currencies.", base="", quote=""), "money"),
    (_schema("convert_amount", "Convert an amount of money.", amount="", currency=""), "money"),
    (_schema("current_weather", "Weather right now in a city.", city=""), "weather"),
    (_schema("weather_forecast", "Forecast for the next days.", city="", days=""), "weather"),
    (_schema("search_tracks", "Find songs.", query=""), "Spotify"),
    (_schema("get_playlist", "Read a playlist.", playlist_id=""), "Spotify"),
    (_schema("get_artist", "Read an artist profile.", artist_id=""), "Spotify"),
    (_schema("send_email", "Send an email message.", to="", body=""), "mail"),
    (_schema("create_event", "Put an event in the calendar.", title="", when=""), "calendar"),
]


@pytest.fixture(scope="module")
def tb(real_mm: MemoryManager) -> Toolbox:
    box = Toolbox(real_mm, namespace=f"retr-{uuid.uuid4().hex[:8]}")
    box.register_schemas([s for s, _ in CATALOGUE], categories=[c for _, c in CATALOGUE])
    return box


def names(hits: Retrieved) -> list[str]:
    return [h.item.name for h in hits]


def test_found_by_a_parameter_name(tb: Toolbox) -> None:
    # "isbn" appears only as get_record's parameter name; both descriptions are the same otherwise.
    assert names(tb.retrieve("the catalogue record for ISBN 9780306406157", k=1)) == ["get_record"]


def test_found_by_the_words_of_a_split_identifier(tb: Toolbox) -> None:
    assert names(tb.retrieve("exchange rate", k=1, mode="keyword")) == ["getExchangeRate"]
    assert names(tb.retrieve("what is the exchange rate today", k=1)) == ["getExchangeRate"]


def test_a_request_of_two_parts_finds_both_tools(tb: Toolbox) -> None:
    request = "Please track my parcel CA107308006SI. Also, what will the weather be in Oslo over the next days?"
    assert request_parts(request) == ["Please track my parcel CA107308006SI.",
                                      "Also, what will the weather be in Oslo over the next days?"]
    assert set(names(tb.retrieve(request, k=2))) == {"track_parcel", "weather_forecast"}


def test_a_request_naming_a_service_lifts_all_its_tools(tb: Toolbox) -> None:
    top = tb.retrieve("something on Spotify", k=3)
    assert set(names(top)) == {"search_tracks", "get_playlist", "get_artist"}
    assert all(t.signals["group"] > 0 for t in top)


def test_top_five_does_not_depend_on_k_and_batch_equals_single(tb: Toolbox) -> None:
    requests = ["weather in Paris", "send a message to Ana", "convert 30 euros", "a song by Bowie"]
    for q in requests:
        assert names(tb.retrieve(q, k=5)) == names(tb.retrieve(q, k=12))[:5]
    batch = tb.retrieve_many(requests, k=3)
    assert [names(r) for r in batch] == [names(tb.retrieve(q, k=3)) for q in requests]
    assert [[t.score for t in r] for r in batch] == [[t.score for t in tb.retrieve(q, k=3)] for q in requests]


def test_scores_and_signals_explain_the_order(tb: Toolbox) -> None:
    hits = tb.retrieve("weather forecast for Bergen", k=4)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    top = hits[0]
    assert top.item.name == "weather_forecast" and set(top.signals) == {"vector", "keyword", "group"}
    assert top.score == pytest.approx(top.signals["vector"] + KEYWORD_WEIGHT * top.signals["keyword"]
                                      + GROUP_WEIGHT * top.signals["group"], abs=1e-4)


def test_calibration_separates_answerable_from_unanswerable_requests(tb: Toolbox) -> None:
    # Calibrated on a few requests the catalogue can answer, the threshold keeps other answerable
    # requests and flags near-topic requests no registered tool serves, which the catalogue-blind
    # default threshold lets through.
    box = Toolbox(tb.mm, namespace=tb.namespace)
    box.register_schemas([s for s, _ in CATALOGUE], categories=[c for _, c in CATALOGUE])
    unanswerable = ["book a table at a restaurant in Oslo", "order a pizza to my address", "open a bank account",
                    "set an alarm for 7 am", "write a sonnet about autumn leaves"]
    assert any(r.best_score >= NO_TOOL_SCORE for r in box.retrieve_many(unanswerable, 1))
    box.calibrate_min_score(["weather forecast for Bergen", "send an email to Ana", "track parcel CA107308006SI",
                             "convert 30 euros to dollars", "put a meeting in my calendar", "songs on Spotify",
                             "how many dollars is 50 pounds"])
    answerable = ["where is my parcel CA107308006SI now", "is it raining in Lima right now",
                  "what will the weather be like in Rome on Sunday"]
    assert [r.suitable for r in box.retrieve_many(answerable, 3)] == [True] * len(answerable)
    assert [r.suitable for r in box.retrieve_many(unanswerable, 3)] == [False] * len(unanswerable)


def test_no_suitable_tool_is_said_below_the_calibrated_score(tb: Toolbox) -> None:
    answerable = ["weather forecast for Bergen", "send an email to Ana", "track parcel CA107308006SI",
                  "convert 30 euros to dollars", "put a meeting in my calendar", "songs on Spotify"]
    threshold = Toolbox(tb.mm, namespace=tb.namespace)
    threshold.register_schemas([s for s, _ in CATALOGUE], categories=[c for _, c in CATALOGUE])
    t = threshold.calibrate_min_score(answerable, keep=1.0)
    assert t == min(r.best_score for r in threshold.retrieve_many(answerable, 1))
    assert all(r.suitable for r in threshold.retrieve_many(answerable, 3))
    off_topic = threshold.retrieve("write a sonnet about autumn leaves", k=3)
    assert not off_topic.suitable and off_topic.best_score is not None and off_topic.best_score < t
    assert len(off_topic) == 3  # the tools still come back; the caller decides
    assert tb.retrieve("write a sonnet about autumn leaves", k=3).suitable is (
        tb.retrieve("write a sonnet about autumn leaves", k=3).best_score >= tb.min_score)
