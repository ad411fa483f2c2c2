"""Fixtures every test shares."""

from __future__ import annotations

import gc
import logging
import os
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from myao2.infrastructure import event_loop
from myao2.infrastructure.db.engine import open_database
from tests.fakes import PROXY_VARIABLES
from tests.postgres import PostgresServer, emptied, fresh_database, server_binaries
from tests.sqlite import copy_migrated


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> dict[str, Callable[[], object]]:
    """Async tests run on the event loop the bot runs on (`myao2.infrastructure.event_loop`: uvloop's on Linux
    and macOS)."""
    return {"bot_loop": event_loop.new_event_loop}


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Clients talk to the fakes on 127.0.0.1 directly, never through a proxy."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


class _PendingTasks(logging.Handler):
    """Keeps asyncio's "Task was destroyed but it is pending!" records."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("Task was destroyed but it is pending!"):
            self.messages.append(message)


@pytest.fixture(autouse=True, scope="session")
def tasks_left_pending() -> Iterator[None]:
    """Warns, at the end of a run, of tasks an event loop was closed on (a fake's request left running, say).

    A warning, not a failure: the garbage collector logs them in whichever test runs when it finds them, not
    in the one that left them (`tests.fakes._server` fails the stop that leaves any).
    """
    pending = _PendingTasks()
    logger = logging.getLogger("asyncio")
    logger.addHandler(pending)
    yield
    gc.collect()
    logger.removeHandler(pending)
    for message in pending.messages:
        warnings.warn(message, RuntimeWarning, stacklevel=1)


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A throwaway PostgreSQL cluster for the whole session (skipped where the server is not installed, except in CI)."""
    binaries = server_binaries()
    if binaries is None:
        missing = "PostgreSQL's server is not installed (apt-get install postgresql; .ci/run does)"
        if os.environ.get("CI"):
            pytest.fail(missing)
        pytest.skip(missing)
    server = PostgresServer(binaries)
    server.start()
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh database of each kind the bot stores in: an SQLite file, and a migrated PostgreSQL database."""
    yield from fresh_database(request, tmp_path)


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    """An engine on `database_url` (each kind of database), disposed when the test ends."""
    engine = open_database(database_url)
    yield engine
    engine.dispose()


@pytest.fixture
def new_database(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Callable[[], str]:
    """Makes a fresh database of `database_url`'s kind at each call (for each example of a property test).

    A new migrated SQLite file each time (a copy, see `tests.sqlite`); on PostgreSQL, `database_url` emptied
    (dispose the engines on it first).
    """
    if database_url.startswith("sqlite"):

        def new_sqlite() -> str:
            path = tmp_path_factory.mktemp("db") / "memory.db"
            copy_migrated(path)
            return f"sqlite:///{path}"

        return new_sqlite
    return lambda: emptied(database_url)
