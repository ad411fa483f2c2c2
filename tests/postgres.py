"""A throwaway PostgreSQL cluster on 127.0.0.1 (Debian's server binaries), one per test session.

Each test gets a database of its own, copied from a template the migrations ran on once,
and dropped again when the test ends.
"""

from __future__ import annotations

import itertools
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, text

from myao2.infrastructure.db.engine import open_database
from tests.sqlite import copy_migrated

SERVER_USER = "nobody"
"""initdb refuses to run as root: as root, the cluster belongs to this user."""
TEMPLATE = "myao2_template"


def server_binaries() -> Path | None:
    """The newest installed PostgreSQL server's bin folder (Debian's layout), or None."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parent.parent.name))
    return found[-1].parent if found else None


class PostgresServer:
    """A cluster in a temporary folder, trusting local connections, listening on a free port."""

    def __init__(self, binaries: Path) -> None:
        self._binaries = binaries
        self._folder = Path(tempfile.mkdtemp(prefix="myao2-pg-"))
        self._data = self._folder / "data"
        self.port = 0
        """Set by `start`."""
        self._names = itertools.count(1)
        # Creating a database takes about a second here: a worker makes the next test's
        # migrated database while the current test runs.
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="postgres-admin")
        self._next: Future[str] | None = None
        self._as_user = ["runuser", "-u", SERVER_USER, "--"] if os.geteuid() == 0 else []

    def start(self) -> None:
        if self._as_user:
            shutil.chown(self._folder, SERVER_USER)
        self._run("initdb", "-D", str(self._data), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync")
        # A port picked free may be taken by another process before the server binds it: then another is picked.
        for attempt in range(3):
            self.port = _free_port()
            options = (
                f"-h 127.0.0.1 -p {self.port} -k {self._folder} -F "
                "-c full_page_writes=off -c synchronous_commit=off -c max_connections=200"
            )
            log = self._folder / f"server-{attempt}.log"
            try:
                self._run("pg_ctl", "-D", str(self._data), "-l", str(log), "-o", options, "-w", "start")
                break
            except subprocess.CalledProcessError:
                if attempt == 2 or "Address already in use" not in log.read_text(encoding="utf-8", errors="replace"):
                    raise
        self._create(TEMPLATE)
        open_database(self.url(TEMPLATE)).dispose()  # no connection may stay open on a template
        self._next = self._worker.submit(self._new, TEMPLATE)

    def stop(self) -> None:
        self._worker.shutdown(wait=True)
        self._run("pg_ctl", "-D", str(self._data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self._folder, ignore_errors=True)

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    @contextmanager
    def database(self, *, migrated: bool = True) -> Iterator[str]:
        """The URL of a new database (migrated, or empty), dropped afterwards with its connections."""
        if migrated:
            assert self._next is not None, "start() first"
            name = self._next.result()
            self._next = self._worker.submit(self._new, TEMPLATE)
        else:
            name = self._new("template0")
        try:
            yield self.url(name)
        finally:
            self._admin(f"DROP DATABASE {name} WITH (FORCE)")

    def _new(self, template: str) -> str:
        name = f"test_{next(self._names)}"
        self._create(name, template)
        return name

    def _create(self, name: str, template: str = "template0") -> None:
        self._admin(f"CREATE DATABASE {name} TEMPLATE {template}")

    def _admin(self, statement: str) -> None:
        engine = create_engine(self.url("postgres"), isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as connection:
                connection.execute(text(statement))
        finally:
            engine.dispose()

    def _run(self, program: str, *args: str) -> None:
        subprocess.run(
            [*self._as_user, str(self._binaries / program), *args],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )


def fresh_database(request: pytest.FixtureRequest, tmp_path: Path, *, migrated: bool = True) -> Iterator[str]:
    """For a fixture parametrized over "sqlite" and "postgresql": the URL of a new database of that kind.

    The SQLite file is a copy of one migrated once (`tests.sqlite`), or not there yet when `migrated`
    is false (the first open migrates it); the PostgreSQL database is migrated, or empty when `migrated`
    is false.
    """
    if request.param == "sqlite":
        path = tmp_path / "memory.db"
        if migrated:
            copy_migrated(path)
        yield f"sqlite:///{path}"
        return
    server: PostgresServer = request.getfixturevalue("postgres")
    with server.database(migrated=migrated) as url:
        yield url


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


SEEDED = ("alembic_version", "health_probe", "search_seq")
"""Tables whose rows the migrations write: kept (search_seq reset) when a database is emptied."""


def emptied(url: str) -> str:
    """`url`, a migrated PostgreSQL database, with every row the tests wrote deleted: as new, in milliseconds."""
    engine = create_engine(url)
    try:
        with engine.begin() as connection:
            tables = [name for name in inspect(connection).get_table_names() if name not in SEEDED]
            connection.execute(text(f"TRUNCATE {', '.join(tables)} RESTART IDENTITY CASCADE"))
            connection.execute(text("UPDATE search_seq SET value = 0"))
    finally:
        engine.dispose()
    return url
