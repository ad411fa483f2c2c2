"""DatabaseCheck: /ready fails, with one error logged, once the SQLite file is deleted or replaced or takes no write."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest
from sqlalchemy import text

from myao2.infrastructure.db.engine import open_database
from myao2.infrastructure.db.health import DatabaseCheck
from tests.postgres import PostgresServer


def test_a_replaced_file_fails_the_check_and_logs_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "m.db"
    check = DatabaseCheck(open_database(f"sqlite:///{path}"))
    assert check() is None
    open_database(f"sqlite:///{tmp_path / 'other.db'}").dispose()
    path.unlink()
    shutil.copy(tmp_path / "other.db", path)
    assert "replaced" in check()
    assert check()
    errors = [r for r in caplog.records if r.name == "myao2.infrastructure.db.health" and r.levelno == logging.ERROR]
    assert len(errors) == 1 and "replaced" in errors[0].getMessage()


def test_a_deleted_file_fails_the_check(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    check = DatabaseCheck(open_database(f"sqlite:///{path}"))
    path.unlink()
    assert "deleted" in check()


def test_an_in_memory_database_passes(tmp_path: Path) -> None:
    assert DatabaseCheck(open_database("sqlite://"))() is None


def test_a_database_that_refuses_writes_fails_the_check(tmp_path: Path) -> None:
    engine = open_database(f"sqlite:///{tmp_path / 'm.db'}")
    check = DatabaseCheck(engine)
    assert check() is None
    with engine.begin() as connection:  # as a full disk or a read-only volume would
        connection.execute(
            text("CREATE TRIGGER refuse BEFORE UPDATE ON health_probe BEGIN SELECT RAISE(ABORT, 'disk full'); END")
        )
    assert check() == "it does not take a write (IntegrityError)"
    engine.dispose()


def test_a_postgresql_database_passes_until_it_is_gone(postgres: PostgresServer) -> None:
    with postgres.database() as url:
        check = DatabaseCheck(open_database(url))
        assert check() is None
    assert check() == "it does not take a write (OperationalError)"
