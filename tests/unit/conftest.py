"""Fixtures of the unit tests of more than one module."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture
def agents_made(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every strands Agent made while the test runs, in order."""
    import strands

    made: list[object] = []
    init = strands.Agent.__init__

    def counted(self: object, *args: Any, **kwargs: Any) -> None:
        made.append(self)
        init(self, *args, **kwargs)

    monkeypatch.setattr(strands.Agent, "__init__", counted)
    return made
