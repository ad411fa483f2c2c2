"""Dates a query names lift the messages posted then: parsing in English and Japanese, and the ranking."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest

from myao2.infrastructure.search.dates import periods
from tests.unit.test_search_index import World


def days(query: str) -> list[tuple[str, str]]:
    """The periods `query` names, as (first day, day after the last)."""
    iso = lambda seconds: datetime.fromtimestamp(seconds, timezone.utc).date().isoformat()  # noqa: E731
    return [(iso(start), iso(end)) for start, end in periods(query)]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("What dish did Nate make on 9 November, 2022?", [("2022-11-09", "2022-11-10")]),
        ("what was said on November 7, 2022", [("2022-11-07", "2022-11-08")]),
        ("the book he finished on 8th December, 2023", [("2023-12-08", "2023-12-09")]),
        ("plans for Dec. 2023", [("2023-12-01", "2024-01-01")]),
        ("a charity event in 2024", [("2024-01-01", "2025-01-01")]),
        ("release on 2024-02-29", [("2024-02-29", "2024-03-01")]),
        ("2022年11月9日の会議", [("2022-11-09", "2022-11-10")]),
        ("2023年5月の旅行", [("2023-05-01", "2023-06-01")]),
        ("2023年に始めた趣味", [("2023-01-01", "2024-01-01")]),
        ("from May 2023 to June 2023", [("2023-05-01", "2023-06-01"), ("2023-06-01", "2023-07-01")]),
    ],
)
def test_a_named_day_month_or_year_is_a_period(query: str, expected: list[tuple[str, str]]) -> None:
    assert days(query) == expected


@pytest.mark.parametrize(
    "query",
    ["what did we decide on 9 November", "last week's lunch", "11月9日の会議", "February 30, 2024", "2023-13-01", "room 2023"],
)
def test_a_date_without_its_year_or_that_does_not_exist_names_no_period(query: str) -> None:
    assert periods(query) == []


@pytest.fixture
def world(database_url: str) -> Iterator[World]:
    world = World(database_url)
    yield world
    world.close()


def test_a_message_posted_on_the_day_the_query_names_comes_first(world: World) -> None:
    january = datetime(2026, 1, 5, 12, tzinfo=timezone.utc)
    february = datetime(2026, 2, 10, 12, tzinfo=timezone.utc)
    for moment in (january, february):  # the same exchange twice, so that only the dates differ
        world.message("C1", "good morning", moment - timedelta(minutes=1))
        world.message("C1", "we had ramen for lunch", moment)
        world.message("C1", "the printer is out of paper", moment + timedelta(minutes=1))
    lunch = "what did we have for lunch"
    assert world.search.messages(f"{lunch} on 10 February 2026", "C1", None, None, 1)[0].message.posted_at == february
    assert world.search.messages(f"{lunch} on January 5, 2026", "C1", None, None, 1)[0].message.posted_at == january
    # Told the next day still counts; a week later no longer does.
    assert world.search.messages(f"{lunch} on 9 February 2026", "C1", None, None, 1)[0].message.posted_at == february
    assert world.search.messages(f"{lunch} on 4 January 2026", "C1", None, None, 1)[0].message.posted_at == january
