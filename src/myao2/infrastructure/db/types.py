"""Column types that keep the SQLite file readable with plain `sqlite3`."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import String, Text
from sqlalchemy.types import TypeDecorator


class UTCDateTime(TypeDecorator[datetime]):
    """An aware datetime stored as ISO-8601 UTC text, e.g. 2026-11-21T09:20:00.000000+00:00."""

    impl = String(32)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> str | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetimes are not stored")
        return value.astimezone(timezone.utc).isoformat(timespec="microseconds")

    def process_result_value(self, value: str | None, dialect: Any) -> datetime | None:
        return None if value is None else datetime.fromisoformat(value)


class JSONText(TypeDecorator[Any]):
    """JSON stored as text with non-ASCII characters kept as they are."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Any) -> str | None:
        return None if value is None else json.dumps(value, ensure_ascii=False)

    def process_result_value(self, value: str | None, dialect: Any) -> Any:
        if value == "[]":  # most lists read are empty (a message's mentions): parsing one cost more than its row
            return []
        return None if value is None else json.loads(value)
