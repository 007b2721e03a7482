"""Relative and absolute time expressions in a query, resolved to a time range.

``parse_time_range("what did I buy last May?", now=...)`` returns the range
[May 1, June 1) of the most recent May before ``now`` together with the span of the
query it came from (so search can drop "last May" from the words it matches).

The grammar is small and general, not a list of phrases:

* anchors: ``today``, ``yesterday``, ``tonight``, ``this morning``;
* ``N <unit>s ago`` / ``a <unit> ago`` / ``a couple of <unit>s ago`` / ``a few <unit>s ago``
  with units day, week, month, year (the range is the unit around that point, widened
  for vague counts);
* ``last|this|next <unit>`` and ``past|last N <unit>s`` (a range ending now);
* ``last|this <weekday>``, ``on <weekday>`` (the most recent such day);
* a month name with a year (``May 2024``, ``in March of 2025``), a day (``May 3``,
  ``3 May``, ``May 3rd, 2024``), or after ``in|last|this|since|during|early|late``
  (``last May``: the most recent May that has started; ``this May``: the current
  year's);
* a year on its own after ``in|since|during`` (``in 2023``) and ISO dates (``2024-05-03``);
* seasons (northern hemisphere) with a time cue: ``last|this|next|past`` (``last
  summer``), a year (``the fall of 2023``, ``winter 2024``), or a preposition whose
  season word ends the phrase (``in the spring``, ``during the winter when...``). A
  season word that names something ("the spring boot config", "fall colors", "winter
  tyres") is not a time.

Open ranges: ``since X`` is [start of X, now), ``after X`` [end of X, now), ``before X``
[:data:`EARLIEST`, start of X) and ``until|till|up to X`` [:data:`EARLIEST`, end of X),
whatever X is (a month, a season, a year, a date, "last week"). The words "may" and
"march" alone are not read as months: a month needs one of the cues above.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, tzinfo, UTC
from collections.abc import Callable

MONTHS = {name: i + 1 for i, name in enumerate(
    ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october", "november",
     "december"])}
MONTHS.update({name[:3]: num for name, num in list(MONTHS.items())})
MONTHS["sept"] = 9
WEEKDAYS = {name: i for i, name in enumerate(["monday", "tuesday", "wednesday", "thursday", "friday", "saturday",
                                              "sunday"])}
UNITS = {"day": 1, "week": 7, "month": 30, "year": 365, "weekend": 7}
NUMBER_WORDS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
                "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "couple of": 2, "a couple of": 2,
                "few": 3, "a few": 3, "several": 4}
SEASONS = {"spring": 3, "summer": 6, "autumn": 9, "fall": 9, "winter": 12}
#: The start of an open range ("before May"): far enough back for any stored row.
EARLIEST = datetime(1900, 1, 1, tzinfo=UTC)
#: Words that may follow a season after a preposition and still leave it a time
#: ("in the summer when we moved"), unlike a noun ("in the spring boot config").
_AFTER_SEASON = frozenset(
    ["i", "we", "you", "he", "she", "they", "it", "my", "our", "your", "his", "her", "their", "the", "a", "an", "and",
     "or", "but", "so", "when", "while", "as", "if", "because", "before", "after", "until", "since", "then", "of",
     "at", "in", "on", "to", "for", "with", "by", "last", "this", "next", "is", "was", "were", "are", "did", "do",
     "does", "had", "have", "has", "will", "would", "could", "should", "about", "from", "around", "near", "over",
     "into", "there", "here", "that", "which", "where", "who", "too", "again", "only", "just", "please", "also", "now",
     "yet", "ever"])

_MONTH = r"(?P<month>" + "|".join(sorted(MONTHS, key=len, reverse=True)) + r")\.?"
_WEEKDAY = r"(?P<weekday>" + "|".join(WEEKDAYS) + r")"
_NUM = r"(?P<num>\d+|" + "|".join(sorted(NUMBER_WORDS, key=len, reverse=True)) + r")"
_UNIT = r"(?P<unit>day|week|weekend|month|year)s?"
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>(?:19|20)\d\d)"


@dataclass(frozen=True)
class TimeRange:
    """A half-open range [start, end) and the query text it was read from."""

    start: datetime
    end: datetime
    phrase: str
    span: tuple[int, int]

    def contains(self, when: datetime) -> bool:
        return self.start <= when < self.end

    def strip(self, text: str) -> str:
        """``text`` without the time expression (for keyword matching)."""
        return (text[:self.span[0]] + " " + text[self.span[1]:]).strip()


def _day_start(d: date, tz: tzinfo | None) -> datetime:
    return datetime.combine(d, time(), tzinfo=tz)


def _add_months(year: int, month: int, delta: int) -> tuple[int, int]:
    index = year * 12 + (month - 1) + delta
    return index // 12, index % 12 + 1


def _month_range(year: int, month: int, tz: tzinfo | None) -> tuple[datetime, datetime]:
    ny, nm = _add_months(year, month, 1)
    return _day_start(date(year, month, 1), tz), _day_start(date(ny, nm, 1), tz)


def _number(word: str) -> int:
    return int(word) if word.isdigit() else NUMBER_WORDS[word]


def _match_ago(m: re.Match[str], now: datetime) -> tuple[datetime, datetime]:
    # People are loose with "two weeks ago": the range is centred on the point that far
    # back and half a unit wide each side (a whole unit more for "a few", "a couple of").
    tz = now.tzinfo
    words = m.group("num")
    vague = words in ("couple of", "a couple of", "few", "a few", "several")
    days = UNITS[m.group("unit")]
    centre = now.date() - timedelta(days=_number(words) * days)
    half = max(1, days // 2) + (days if vague else 0)
    return _day_start(centre - timedelta(days=half), tz), _day_start(centre + timedelta(days=half + 1), tz)


def _match_relative_unit(m: re.Match[str], now: datetime) -> tuple[datetime, datetime]:
    tz = now.tzinfo
    which, unit = m.group("which"), m.group("unit")
    today = now.date()
    shift = {"last": -1, "previous": -1, "past": -1, "this": 0, "current": 0, "next": 1}[which]
    if unit == "day":
        d = today + timedelta(days=shift)
        return _day_start(d, tz), _day_start(d + timedelta(days=1), tz)
    if unit == "week":
        monday = today - timedelta(days=today.weekday()) + timedelta(weeks=shift)
        return _day_start(monday, tz), _day_start(monday + timedelta(days=7), tz)
    if unit == "weekend":
        saturday = today - timedelta(days=today.weekday()) + timedelta(days=5)
        if shift < 0 or saturday > today and shift == 0 and which != "this":
            saturday -= timedelta(weeks=1)
        elif shift > 0:
            saturday += timedelta(weeks=1)
        return _day_start(saturday, tz), _day_start(saturday + timedelta(days=2), tz)
    if unit == "month":
        return _month_range(*_add_months(today.year, today.month, shift), tz)
    return _day_start(date(today.year + shift, 1, 1), tz), _day_start(date(today.year + shift + 1, 1, 1), tz)


def _match_past_n(m: re.Match[str], now: datetime) -> tuple[datetime, datetime]:
    n, unit = _number(m.group("num")), m.group("unit")
    return now - timedelta(days=n * UNITS[unit]), now


def _match_weekday(m: re.Match[str], now: datetime) -> tuple[datetime, datetime]:
    tz = now.tzinfo
    today = now.date()
    back = (today.weekday() - WEEKDAYS[m.group("weekday")]) % 7
    if m.group("which") == "last" and back == 0:
        back = 7
    d = today - timedelta(days=back)
    return _day_start(d, tz), _day_start(d + timedelta(days=1), tz)


def _match_month(m: re.Match[str], now: datetime) -> tuple[datetime, datetime]:
    tz = now.tzinfo
    month = MONTHS[m.group("month").rstrip(".")]
    groups = m.groupdict()
    year = int(groups["year"]) if groups.get("year") else None
    if year is None:
        cue = (groups.get("cue") or "").lower()
        year = now.year
        if cue == "next":
            year += 1 if month <= now.month else 0
        elif cue != "this" and (month > now.month or (cue == "last" and month == now.month)):
            year -= 1  # the most recent such month that has started
    if groups.get("day"):
        day = int(groups["day"])
        try:
            d = date(year, month, day)
        except ValueError:
            return _month_range(year, month, tz)
        return _day_start(d, tz), _day_start(d + timedelta(days=1), tz)
    start, end = _month_range(year, month, tz)
    part = (groups.get("part") or "").lower()
    if not part and (groups.get("cue") or "") in ("early", "late", "mid"):
        part = str(groups["cue"])
    if part in ("early", "beginning of"):
        end = start + timedelta(days=11)
    elif part in ("late", "end of"):
        start = end - timedelta(days=11)
    elif part in ("mid", "middle of"):
        start, end = start + timedelta(days=9), end - timedelta(days=9)
    return start, end


class _NotATime(ValueError):
    """The words matched a pattern but are not a time expression here."""


def _match_season(m: re.Match[str], now: datetime) -> tuple[datetime, datetime]:
    tz = now.tzinfo
    first = SEASONS[m.group("season")]
    which = m.group("which") or ""
    if not m.group("year") and which not in ("last", "this", "next", "past"):
        # A bare season word, or one after a preposition that a noun follows, names a thing.
        follower = m.group("next")
        if not which or (follower and follower not in _AFTER_SEASON and not follower.isdigit()):
            raise _NotATime(m.group(0))

    def bounds(y: int) -> tuple[datetime, datetime]:
        return _month_range(y, first, tz)[0], _month_range(*_add_months(y, first, 3), tz)[0]

    if m.group("year"):
        return bounds(int(m.group("year")))
    year = now.year if bounds(now.year)[0] <= now else now.year - 1  # the most recent that has started
    if which == "last" and bounds(year)[1] > now:
        year -= 1  # "last summer" said during a summer: the one before
    elif which == "next":
        year = year + 1 if bounds(year)[0] <= now else year
    return bounds(year)


def _match_year(m: re.Match[str], now: datetime) -> tuple[datetime, datetime]:
    y = int(m.group("year"))
    return _day_start(date(y, 1, 1), now.tzinfo), _day_start(date(y + 1, 1, 1), now.tzinfo)


def _match_iso(m: re.Match[str], now: datetime) -> tuple[datetime, datetime]:
    d = date(int(m.group("y")), int(m.group("m")), int(m.group("d")))
    return _day_start(d, now.tzinfo), _day_start(d + timedelta(days=1), now.tzinfo)


def _match_anchor(m: re.Match[str], now: datetime) -> tuple[datetime, datetime]:
    word = m.group("anchor").lower()
    d = now.date() - timedelta(days=1 if word == "yesterday" else 0)
    return _day_start(d, now.tzinfo), _day_start(d + timedelta(days=1), now.tzinfo)


Handler = Callable[[re.Match[str], datetime], tuple[datetime, datetime]]
_PART = r"(?:(?P<part>early|late|mid|beginning of|end of|middle of)[\s-]+)?"
_PATTERNS: list[tuple[re.Pattern[str], Handler]] = [
    (re.compile(r"\b(?P<y>(?:19|20)\d\d)-(?P<m>[01]\d)-(?P<d>[0-3]\d)\b"), _match_iso),
    (re.compile(rf"\b{_MONTH}\s+{_DAY}(?:,?\s+{_YEAR})?\b"), _match_month),
    (re.compile(rf"\b(?:the\s+)?{_DAY}\s+(?:of\s+)?{_MONTH}(?:,?\s+{_YEAR})?\b"), _match_month),
    (re.compile(rf"\b{_PART}{_MONTH}(?:\s+of)?,?\s+{_YEAR}\b"), _match_month),
    (re.compile(r"\b(?P<cue>in|last|this|next|since|during|early|late|mid|until|till|before|after|of|from"
                r"|prior to|up to|up until)\s+"
                rf"{_PART}{_MONTH}(?!\w)(?!\s+[0-3]?\d(?:st|nd|rd|th)?\b)(?:,?\s+{_YEAR})?"), _match_month),
    (re.compile(rf"\b{_NUM}\s+{_UNIT}\s+(?:ago|back|before now)\b"), _match_ago),
    (re.compile(rf"\b(?:in\s+|over\s+|during\s+)?(?:the\s+)?(?:past|last)\s+{_NUM}\s+{_UNIT}\b"), _match_past_n),
    (re.compile(r"\b(?P<which>last|this|next|previous|past|current)\s+(?P<unit>day|week|weekend|month|year)\b"),
     _match_relative_unit),
    (re.compile(rf"\b(?:(?P<which>last|this|on|past)\s+){_WEEKDAY}\b"), _match_weekday),
    (re.compile(r"\b(?:(?P<which>last|this|next|past|in|during|since|until|till|before|after|over|through)"
                r"\s+)?(?:the\s+)?(?P<season>spring|summer|autumn|fall|winter)"
                rf"(?:\s+(?:of\s+)?{_YEAR})?(?P<rest>(?:(?:\s+|-)(?P<next>\w+))?)\b"), _match_season),
    (re.compile(rf"\b(?:in|since|during|of|from|back in|before|after|until|till)\s+{_YEAR}\b(?!-\d)"), _match_year),
    (re.compile(r"\b(?P<anchor>yesterday|today|tonight|this morning|this afternoon|this evening)\b"), _match_anchor),
]
#: An open-range cue right before (or opening) the expression: "before May", "until last week".
_OPEN_CUE = re.compile(r"\b(?P<cue>since|after|before|until|till|up to|up until|prior to)\s+(?:the\s+)?$")
_OPEN_FIRST = re.compile(r"(?P<cue>since|after|before|until|till|prior to|up to|up until)\b")


def parse_time_range(text: str, now: datetime | None = None) -> TimeRange | None:
    """The first time expression in ``text`` as a range, or None when there is none.

    ``now`` defaults to the current UTC time; a naive ``now`` is taken as UTC.
    """
    now = now or datetime.now(UTC)
    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    lowered = text.lower()
    best: tuple[int, int, re.Match[str], Handler, tuple[datetime, datetime]] | None = None
    for pattern, handler in _PATTERNS:
        for m in pattern.finditer(lowered):
            if best is not None and m.start() > best[0]:
                break
            try:
                found = handler(m, now)
            except (ValueError, KeyError, OverflowError):
                continue  # not a time here (or an impossible date): try the next match
            end_i = m.end() - len(m.groupdict().get("rest") or "")
            if best is None or m.start() < best[0] or (m.start() == best[0] and end_i > best[1]):
                best = (m.start(), end_i, m, handler, found)
            break
    if best is None:
        return None
    start_i, end_i, m, _, (start, end) = best
    cue_m = _OPEN_FIRST.match(m.group(0))
    if cue_m is None:
        cue_m = _OPEN_CUE.search(lowered[:start_i])
        if cue_m is not None:
            start_i = cue_m.start()  # the cue belongs to the phrase
    cue = cue_m.group("cue") if cue_m else ""
    if cue == "since":
        end = max(end, now)
    elif cue == "after":
        start, end = end, max(end, now)
    elif cue in ("before", "prior to"):
        start, end = min(EARLIEST, start), start
    elif cue in ("until", "till", "up to", "up until"):
        start = min(EARLIEST, start)
    return TimeRange(start=start, end=end, phrase=text[start_i:end_i], span=(start_i, end_i))
