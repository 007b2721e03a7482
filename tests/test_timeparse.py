"""Time phrases: open ranges for before/since/until/after, and seasons only with a time cue.

Property-style: each test states a rule and checks it over many phrasings (every
month, several reference times, many surrounding sentences), not one example.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory.retrieval.time_phrases import EARLIEST, MONTHS, SEASONS, parse_time_range

UTC = timezone.utc
MONTH_NAMES = [m for m in MONTHS if len(m) > 3]  # the full names
NOWS = st.datetimes(min_value=datetime(2001, 1, 1), max_value=datetime(2098, 12, 31)).map(
    lambda d: d.replace(tzinfo=UTC))
FRAMES = ["{}", "what did I say {}?", "notes from {} about the budget", "Show me everything {} please",
          "the deploy we did {}, remember it"]


def _month_bounds(phrase: str, now: datetime) -> tuple[datetime, datetime]:
    """The month a plain "in <month>" resolves to: the reference for the open ranges."""
    plain = parse_time_range(f"in {phrase}", now)
    assert plain is not None
    assert plain.end - plain.start >= timedelta(days=28)
    return plain.start, plain.end


@settings(max_examples=150, deadline=None)
@given(month=st.sampled_from(MONTH_NAMES), now=NOWS, frame=st.sampled_from(FRAMES),
       cue=st.sampled_from(["before", "Before", "prior to"]))
def test_before_a_month_ends_where_the_month_starts(month: str, now: datetime, frame: str, cue: str) -> None:
    start, _ = _month_bounds(month, now)
    r = parse_time_range(frame.format(f"{cue} {month.capitalize()}"), now)
    assert r is not None
    assert (r.start, r.end) == (EARLIEST, start)
    assert r.phrase.lower() == f"{cue} {month}".lower()


@settings(max_examples=150, deadline=None)
@given(month=st.sampled_from(MONTH_NAMES), now=NOWS, frame=st.sampled_from(FRAMES),
       cue=st.sampled_from(["until", "till", "up to"]))
def test_until_a_month_includes_the_month(month: str, now: datetime, frame: str, cue: str) -> None:
    _, end = _month_bounds(month, now)
    r = parse_time_range(frame.format(f"{cue} {month}"), now)
    assert r is not None
    assert (r.start, r.end) == (EARLIEST, end)


@settings(max_examples=150, deadline=None)
@given(month=st.sampled_from(MONTH_NAMES), now=NOWS, frame=st.sampled_from(FRAMES))
def test_since_and_after_run_to_now(month: str, now: datetime, frame: str) -> None:
    start, end = _month_bounds(month, now)
    since = parse_time_range(frame.format(f"since {month}"), now)
    after = parse_time_range(frame.format(f"after {month}"), now)
    assert since is not None and after is not None
    assert (since.start, since.end) == (start, max(end, now))
    assert (after.start, after.end) == (end, max(end, now))


@pytest.mark.parametrize("what", ["2023", "2024-05-03", "last week", "last summer", "the summer of 2021",
                                  "May 3, 2024", "last month", "yesterday"])
@pytest.mark.parametrize("cue", ["before", "until", "since", "after"])
def test_open_cues_apply_to_every_kind_of_expression(what: str, cue: str) -> None:
    now = datetime(2026, 11, 20, 12, tzinfo=UTC)
    base = parse_time_range(f"in {what}" if what[0].isdigit() else what, now)
    r = parse_time_range(f"what happened {cue} {what}", now)
    assert base is not None and r is not None
    expected = {"before": (EARLIEST, base.start), "until": (EARLIEST, base.end),
                "since": (base.start, max(base.end, now)), "after": (base.end, max(base.end, now))}[cue]
    assert (r.start, r.end) == expected
    assert r.strip(f"what happened {cue} {what}") == "what happened"


SEASON_NOUNS = ["boot config", "colors", "cleaning", "tyres", "collection", "roll", "break plans", "onion",
                "water", "wardrobe", "boot migration", "sale", "semester schedule", "rolls recipe", "festival"]


@pytest.mark.parametrize("season", sorted(SEASONS))
@pytest.mark.parametrize("frame", ["the {} {}", "{} {}", "fix the {} {} today", "I love {} {}",
                                   "during the {} {}", "in the {} {} file"])
def test_a_season_word_that_names_a_thing_is_no_time(season: str, frame: str) -> None:
    now = datetime(2026, 11, 20, 12, tzinfo=UTC)
    for noun in SEASON_NOUNS:
        text = frame.format(season, noun)
        r = parse_time_range(text, now)
        assert r is None or season not in r.phrase.lower(), (text, r)


@settings(max_examples=200, deadline=None)
@given(season=st.sampled_from(sorted(SEASONS)), now=NOWS, frame=st.sampled_from(FRAMES),
       cue=st.sampled_from(["last {}", "this {}", "in the {} of {y}", "{} {y}", "the {} of {y}", "in the {}",
                            "during the {} when we moved", "next {}"]))
def test_a_season_with_a_time_cue_is_three_months(season: str, now: datetime, frame: str, cue: str) -> None:
    year = now.year - 2
    r = parse_time_range(frame.format(cue.format(season, y=year)), now)
    assert r is not None
    first = SEASONS[season]
    assert r.start.month == first and r.start.day == 1
    months = (r.end.year * 12 + r.end.month) - (r.start.year * 12 + r.start.month)
    assert months == 3
    if "{y}" in cue:
        assert r.start.year == year
    elif cue.startswith("last"):
        assert r.end <= now  # a whole past season
    elif cue.startswith("next"):
        assert r.start > now
    else:
        assert r.start <= now  # the most recent such season that has started


def test_plain_words_stay_no_time() -> None:
    now = datetime(2026, 11, 20, 12, tzinfo=UTC)
    for text in ["what may I cook with leeks", "march the project forward", "the spring boot config",
                 "fall colors", "autumn leaves in the park", "before we start", "until it works",
                 "after the meeting", "since you asked"]:
        assert parse_time_range(text, now) is None, text
