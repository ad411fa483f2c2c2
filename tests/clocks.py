"""A clock tests set and move by hand."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

DEFAULT_START = datetime(2025, 1, 2, 3, 0, tzinfo=timezone.utc)


class ManualClock:
    """Stands still until a test moves it (`advance`, or by setting `current`)."""

    def __init__(self, start: datetime = DEFAULT_START) -> None:
        self.current = start

    def now(self) -> datetime:
        return self.current

    def advance(self, seconds: float = 60) -> None:
        self.current += timedelta(seconds=seconds)
