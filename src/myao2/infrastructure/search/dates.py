"""Calendar dates a search query names with their year ("9 November, 2022", "December 2023", "2023年5月"), as periods.

Recall lifts the messages posted within a period the query names (see index.py): a question
about what was said on a day is most often answered by what was said that day. Dates without
a year, and relative ones ("last week"), name no period: they are left to the text.
"""

from __future__ import annotations

import functools
import re
from datetime import datetime, timedelta, timezone

_MONTH_NAMES = (
    ("january", "jan"),
    ("february", "feb"),
    ("march", "mar"),
    ("april", "apr"),
    ("may",),
    ("june", "jun"),
    ("july", "jul"),
    ("august", "aug"),
    ("september", "sept", "sep"),
    ("october", "oct"),
    ("november", "nov"),
    ("december", "dec"),
)
_MONTHS = {name: number for number, names in enumerate(_MONTH_NAMES, start=1) for name in names}
_MONTH = r"(?P<month>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<day>\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>(?:19|20)\d\d)"


@functools.cache
def _patterns() -> tuple[re.Pattern[str], ...]:
    """The date patterns, the most precise first: a span one of them took is not read again. Compiled at the
    first search, not when the bot imports the search modules to start."""
    return (
        re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH},?\s*{_YEAR}\b", re.IGNORECASE),
        re.compile(rf"\b{_MONTH}\s+{_DAY},?\s*{_YEAR}\b", re.IGNORECASE),
        re.compile(rf"\b{_MONTH},?\s*{_YEAR}\b", re.IGNORECASE),
        re.compile(rf"\b{_YEAR}[-/](?P<number>\d{{1,2}})(?:[-/](?P<day>\d{{1,2}}))?\b"),
        re.compile(rf"{_YEAR}\s*年\s*(?:(?P<number>\d{{1,2}})\s*月\s*(?:(?P<day>\d{{1,2}})\s*日)?)?"),
        re.compile(rf"\b(?:in|of|during|since|from)\s+{_YEAR}\b", re.IGNORECASE),
    )


def periods(query: str) -> list[tuple[float, float]]:
    """The periods [start, end) in UTC seconds of the days, months and years `query` names with their year."""
    found: list[tuple[float, float]] = []
    taken: list[tuple[int, int]] = []
    for pattern in _patterns():
        for match in pattern.finditer(query):
            if any(start < match.end() and match.start() < end for start, end in taken):
                continue
            period = _period(match.groupdict())
            if period is not None:
                taken.append(match.span())
                found.append(period)
    return found


def _period(fields: dict[str, str | None]) -> tuple[float, float] | None:
    year = int(fields["year"] or 0)
    named, number, day = fields.get("month"), fields.get("number"), fields.get("day")
    month = _MONTHS[named.lower()] if named else int(number) if number else None
    try:
        if month is None:
            start, end = _utc(year, 1, 1), _utc(year + 1, 1, 1)
        elif day is None:
            start, end = _utc(year, month, 1), _utc(year + month // 12, month % 12 + 1, 1)
        else:
            start = _utc(year, month, int(day))
            end = start + timedelta(days=1)
    except ValueError:  # no such day or month
        return None
    return start.timestamp(), end.timestamp()


def _utc(year: int, month: int, day: int) -> datetime:
    return datetime(year, month, day, tzinfo=timezone.utc)
