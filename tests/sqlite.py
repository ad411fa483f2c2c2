"""Migrated SQLite files for tests: copies of one the migrations ran on once per process.

As `tests/postgres.py` does with a template database: a bot process started on a new
file spent about 0.2 s of CPU importing Alembic and migrating it, at every start of every test
(now that a new database gets the migrations' recording replayed, about 20 ms).
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import threading
from pathlib import Path

from sqlalchemy import Engine

from myao2.infrastructure.db.engine import open_database

_template: Path | None = None
_lock = threading.Lock()


def copy_migrated(target: Path) -> None:
    """Make `target` (a file not there yet) an SQLite database at the newest migration, with no rows but the
    migrations' own."""
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_migrated_template(), target)


class MigratedCopy:
    """An engine on a migrated SQLite file of its own, in a temporary folder; `close` disposes of both.

    For tests that need a fresh database many times over (each example of a property test).
    """

    def __init__(self) -> None:
        self._folder = tempfile.TemporaryDirectory(prefix="myao2-sqlite-")
        path = Path(self._folder.name) / "memory.db"
        copy_migrated(path)
        self.engine: Engine = open_database(f"sqlite:///{path}")

    def close(self) -> None:
        self.engine.dispose()
        self._folder.cleanup()


def _migrated_template() -> Path:
    global _template
    with _lock:
        if _template is None:
            folder = Path(tempfile.mkdtemp(prefix="myao2-sqlite-"))
            atexit.register(shutil.rmtree, folder, True)
            template = folder / "memory.db"
            open_database(f"sqlite:///{template}").dispose()  # the last connection closed folds the WAL into the file
            assert not template.with_name(template.name + "-wal").exists(), "the template's WAL was left over"
            _template = template
        return _template
