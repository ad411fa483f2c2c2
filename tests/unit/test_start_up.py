"""Garbage collection while the bot starts (myao2.start_up)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from myao2 import start_up


@pytest.fixture
def usual_collection() -> Iterator[tuple[int, int, int]]:
    before = gc.get_threshold()
    # CPython's defaults, which start_up recorded when imported. Set here because a test that ran
    # `myao2 run` in this process (e.g. with a bad config) leaves start-up collection on.
    usual = (700, 10, 10)
    gc.set_threshold(*usual)
    yield usual
    gc.unfreeze()
    gc.set_threshold(*before)


def test_start_up_collects_rarely_then_freezes_its_objects_and_collects_as_usual(
    usual_collection: tuple[int, int, int],
) -> None:
    start_up.collect_less()
    assert gc.isenabled()
    assert gc.get_threshold()[0] > usual_collection[0]
    start_up.settled()
    assert gc.get_threshold() == usual_collection
    assert gc.get_freeze_count() > 0
