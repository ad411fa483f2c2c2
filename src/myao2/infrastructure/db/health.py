"""Whether the database the bot opened is still the one on disk, and takes writes."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from datetime import datetime, timezone

from sqlalchemy import Engine, text

logger = logging.getLogger(__name__)


class DatabaseCheck:
    """A readiness check: the database takes a write, and a SQLite file was neither deleted nor replaced.

    A file swapped under the running bot would go unnoticed by its open connections, which
    keep writing to the old one; the first failed check logs an error. The write is one
    row's timestamp (`health_probe`).
    """

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        database = engine.url.database if engine.url.get_backend_name() == "sqlite" else None
        self._path = Path(database) if database and database != ":memory:" else None
        self._identity = _identity(self._path) if self._path else None
        self._failing = False

    def __call__(self) -> str | None:
        """What is wrong with the database, or None when it is ready."""
        problem = self._problem()
        if problem and not self._failing:
            logger.error("database not usable: %s; restart the bot", problem)
        self._failing = problem is not None
        return problem

    def _problem(self) -> str | None:
        if self._path is not None and _identity(self._path) != self._identity:
            return f"{self._path} was deleted or replaced while the bot was running"
        try:
            with self._engine.begin() as connection:
                connection.execute(
                    text("UPDATE health_probe SET written_at = :now WHERE id = 1"),
                    {"now": datetime.now(timezone.utc).isoformat()},
                )
        except Exception as exc:  # noqa: BLE001 - any failure means not ready
            return f"it does not take a write ({type(exc).__name__})"
        return None


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_dev, stat.st_ino
