"""Fixtures every test shares."""

from __future__ import annotations

import pytest

from tests.fakes import PROXY_VARIABLES


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Clients talk to the fakes on 127.0.0.1 directly, never through a proxy."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
