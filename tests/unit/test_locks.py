"""KeyedLocks: a key's lock, and whether it was released since a moment."""

from __future__ import annotations

import pytest

from myao2.application import locks
from myao2.application.locks import KeyedLocks


async def test_a_key_is_released_since_a_mark_once_a_hold_on_it_made_before_or_after_the_mark_ends() -> None:
    keyed = KeyedLocks()
    async with keyed.hold("a"):
        mark = keyed.mark()
        assert not keyed.released_since("a", mark)  # held, not released yet
    assert keyed.released_since("a", mark)
    after = keyed.mark()
    async with keyed.hold("a"):
        pass
    assert keyed.released_since("a", after)


async def test_a_key_is_not_released_since_a_mark_by_holds_on_other_keys() -> None:
    keyed = KeyedLocks()
    mark = keyed.mark()
    async with keyed.hold("b"):
        pass
    assert not keyed.released_since("a", mark) and keyed.released_since("b", mark)
    assert len(keyed) == 0  # idle keys are dropped all the same


async def test_a_release_no_longer_remembered_by_its_key_counts_as_since_any_mark_made_before_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(locks, "RECENT_RELEASES", 2)
    keyed = KeyedLocks()
    mark = keyed.mark()
    for key in "abc":  # "a" forgotten
        async with keyed.hold(key):
            pass
    assert keyed.released_since("a", mark)
    assert not keyed.released_since("a", keyed.mark())
    assert not keyed.released_since("z", keyed.mark())
