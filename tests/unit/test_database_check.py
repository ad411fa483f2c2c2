"""DatabaseCheck: /ready fails, with one error logged, once the SQLite file is deleted or replaced."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from myao2.infrastructure.db.engine import open_database
from myao2.infrastructure.db.health import DatabaseCheck


def test_a_replaced_file_fails_the_check_and_logs_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "m.db"
    check = DatabaseCheck(open_database(f"sqlite:///{path}"))
    assert check()
    open_database(f"sqlite:///{tmp_path / 'other.db'}").dispose()
    path.unlink()
    shutil.copy(tmp_path / "other.db", path)
    assert not check()
    assert not check()
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "replaced" in errors[0].getMessage()


def test_a_deleted_file_fails_the_check(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    check = DatabaseCheck(open_database(f"sqlite:///{path}"))
    path.unlink()
    assert not check()


def test_an_in_memory_database_passes(tmp_path: Path) -> None:
    assert DatabaseCheck(open_database("sqlite://"))()
