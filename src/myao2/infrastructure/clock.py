"""The one clock the bot reads."""

from __future__ import annotations

from datetime import datetime, timezone


class SystemClock:
    """`Clock` backed by the system time, in UTC."""

    def now(self) -> datetime:
        return datetime.now(timezone.utc)
