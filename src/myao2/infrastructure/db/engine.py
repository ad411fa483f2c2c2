"""The database engine: SQLite in WAL mode by default, or PostgreSQL; migrated at start-up."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, Table, create_engine, event, inspect, text
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError, ProgrammingError
from sqlalchemy.engine import make_url
from sqlalchemy.pool import StaticPool
from sqlmodel import Session

from myao2.infrastructure.db.recorded import recording, replay

T = TypeVar("T")

MIGRATIONS = Path(__file__).with_name("migrations")
SQLITE_BUSY_TIMEOUT_MS = 5000


def _dialect_insert(dialect: str) -> Callable[[Table], Any]:
    """`dialect`'s own INSERT, its module imported when called: an engine of that dialect has loaded it already."""

    def insert(table: Table) -> Any:
        return importlib.import_module(f"sqlalchemy.dialects.{dialect}").insert(table)

    return insert


INSERT_IGNORING: dict[str, Callable[[Table], Any]] = {"sqlite": _dialect_insert("sqlite"), "postgresql": _dialect_insert("postgresql")}
"""Dialects whose INSERT can skip a row whose key is taken (ON CONFLICT DO NOTHING), or update it (DO UPDATE).

A bot storing in SQLite never imports SQLAlchemy's PostgreSQL dialect (40-80 ms of start-up) but to migrate
(Alembic loads every dialect)."""


class DatabaseUnavailable(Exception):
    """The database cannot be opened or migrated (a folder or another file where it should be, a server that
    refuses); the message says why, never the URL (it may hold a password)."""


def open_database(url: str) -> Engine:
    """An engine for `url`, with its schema migrated to the newest version, or `DatabaseUnavailable`."""
    try:
        engine = _create(url)
    except OSError as exc:  # its folder cannot be made
        raise DatabaseUnavailable(f"{exc.strerror or type(exc).__name__}: {exc.filename}") from None
    try:
        migrate(engine)
    except DBAPIError as exc:
        engine.dispose()
        reason = " ".join(str(exc.orig).split()) or type(exc.orig).__name__
        raise DatabaseUnavailable(reason) from None
    return engine


def _create(url: str) -> Engine:
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_engine(
            url,
            pool_pre_ping=True,
            hide_parameters=True,
            # The stores read how many rows an INSERT took (a taken key inserts none); psycopg
            # forgets it once SQLAlchemy closes the cursor, which it does right after an INSERT.
            execution_options={"preserve_rowcount": True},
        )
    in_memory = not parsed.database or parsed.database == ":memory:"
    if not in_memory:
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(
        url,
        # SQL errors are logged: their parameters hold message and memo text.
        hide_parameters=True,
        connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_MS / 1000},
        # An in-memory database lives in its one connection: every thread must share it. A file's pool hands out
        # the connection returned last first: SQLite empties a connection's page cache when another one committed
        # since its last transaction, so the one that committed last (most likely the last returned) reads from
        # its cache, where one idle since (first in, first out) reads every page it needs again.
        **({"poolclass": StaticPool} if in_memory else {"pool_use_lifo": True}),
    )
    event.listen(engine, "connect", _sqlite_pragmas)
    return engine


def _sqlite_pragmas(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
    """WAL, with synchronous=NORMAL: a commit is not flushed to disk (the WAL is, at each checkpoint).

    The database stays consistent whatever happens; a crash of the bot loses nothing,
    and a power cut at most the last commits before it. A flush per commit took ~5 ms
    here, and a mention commits several times on its way to the answer.
    """
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA secure_delete=ON")  # deleted text (retention, forgetting) is overwritten in the file
    cursor.close()


_SHARED: ContextVar[Connection | None] = ContextVar("myao2_shared_connection", default=None)
"""The connection `reading` and `writing` use while `one_connection` holds it (in that thread's context only)."""


_WRITING: ContextVar[Connection | None] = ContextVar("myao2_shared_transaction", default=None)
"""The connection whose transaction `writing` hands out while `one_transaction` holds it (in that thread's context only)."""


def reading(engine: Engine) -> AbstractContextManager[Connection]:
    """A connection to read from (its transaction is rolled back, never committed): the one `one_transaction` or
    `one_connection` holds for `engine` in this context, else a pooled one of its own."""
    for held in (_WRITING.get(), _SHARED.get()):
        if held is not None and held.engine is engine:
            return nullcontext(held)
    return engine.connect()


def writing(engine: Engine) -> AbstractContextManager[Connection]:
    """A connection in a transaction to write in: the one `one_transaction` holds for `engine` in this context
    (committed when that ends), else one of its own, committed when the block ends, on the connection
    `one_connection` holds (within, `writing` joins it) or a pooled one."""
    held = _WRITING.get()
    if held is not None and held.engine is engine:
        return nullcontext(held)
    shared = _SHARED.get()
    if shared is not None and shared.engine is engine:
        return _holding(_WRITING, engine, lambda: _begun_on(shared))
    return engine.begin()


@contextmanager
def one_transaction(engine: Engine) -> Iterator[None]:
    """Every `writing` (and `reading`) of `engine` made within (in this thread) shares one connection and one
    transaction, committed once when the block ends, or rolled back as a whole if it raises: a crash leaves
    all of those writes or none; on the connection `one_connection` holds, if it does. Within one already
    held, it adds nothing."""
    shared = _SHARED.get()
    begin = (lambda: _begun_on(shared)) if shared is not None and shared.engine is engine else engine.begin
    with _holding(_WRITING, engine, begin):
        yield


@contextmanager
def one_connection(engine: Engine) -> Iterator[None]:
    """Every `reading` and `writing` of `engine` made within (in this thread) shares one connection, taken from
    the pool once: a trip to a worker thread that reads many stores (a prompt's memos, memories and profiles), or
    writes and reads (a claim and its channel), checks out one, not one per read or write (~0.1-0.2 ms each).
    Each read still sees what was committed before it (on SQLite nothing begins a transaction for a read;
    PostgreSQL reads committed), and each write is committed when its block ends, as on a connection of its own.
    Within one already held, it adds nothing."""
    with _holding(_SHARED, engine, engine.connect):
        yield


@contextmanager
def _holding(
    held: ContextVar[Connection | None], engine: Engine, opened: Callable[[], AbstractContextManager[Connection]]
) -> Iterator[Connection]:
    """`held` set, within, to a connection to `engine` `opened` once (unless it already holds one to it)."""
    current = held.get()
    if current is not None and current.engine is engine:
        yield current
        return
    with opened() as connection:
        token = held.set(connection)
        try:
            yield connection
        finally:
            held.reset(token)


@contextmanager
def _begun_on(connection: Connection) -> Iterator[Connection]:
    """A transaction of its own on `connection`, committed when the block ends (rolled back if it raises). The one
    its reads began is ended first: it wrote nothing."""
    if connection.in_transaction():
        connection.rollback()
    with connection.begin():
        yield connection


_WRITE_LOCK = text("UPDATE alembic_version SET version_num = version_num WHERE 0 = 1")


def take_write_lock(executor: Connection | Session) -> None:
    """Begin a transaction that reads rows and then writes them as a writer, so nothing it read changes before it
    writes (another writer's change would be lost, or undone: a fact dropped brought back, a narrowed one widened).

    On SQLite pysqlite begins a transaction only at its first write, so what is read before it may be changed
    by another writer's commit: this statement changes nothing, but takes SQLite's write lock now (other writers
    wait for this transaction, readers do not). On PostgreSQL it does nothing: read the rows `FOR UPDATE`
    (which SQLite ignores), so a writer of any of them waits, and a row read after waiting is read as committed.
    """
    connection = executor if isinstance(executor, Connection) else executor.connection()
    if connection.dialect.name == "sqlite":
        connection.execute(_WRITE_LOCK)


def write_locked(engine: Engine, work: Callable[[Session], T]) -> T:
    """`work` run in a session's transaction that began with `take_write_lock`; its result.

    A `FOR UPDATE` read holds no row that is not there yet: on PostgreSQL two writers may both find a key
    free and both insert it, and the second's INSERT fails on the key once the first commits. `work` then
    runs once more, in a new transaction that finds the first's row and holds it, as if it had come second.
    (On SQLite the write lock makes writers take turns: the INSERT never fails so.)
    """
    try:
        return _in_write_lock(engine, work)
    except IntegrityError:
        return _in_write_lock(engine, work)


def _in_write_lock(engine: Engine, work: Callable[[Session], T]) -> T:
    with Session(engine) as session, session.begin():
        take_write_lock(session)
        return work(session)


MIGRATION_LOCK = 0x6D79616F32
"""PostgreSQL advisory lock key held while migrating ("myao2")."""


def migrate(engine: Engine) -> None:
    """Apply every pending Alembic migration (the version lives in `alembic_version`); `DatabaseUnavailable` for a
    database a newer myao2 migrated.

    A database already at the newest version is left as it is without loading
    Alembic (about 0.15 s of start-up); a new one gets what running every migration
    executes, replayed (`recorded`): the same database, without Alembic's 0.25-0.3 s.
    """
    version, newest = _version(engine), newest_revision()
    if version == newest:
        return
    if version is not None and version > newest:  # a rollback after a newer myao2 migrated it
        raise DatabaseUnavailable(f"its schema {version} is newer than this myao2's {newest}: run the newer version")
    with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            # Replicas starting together: one migrates, the others wait for it and find nothing left to do.
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
        new = recording(connection.dialect.name) if version is None else None
        if new is not None and new.revision == newest and not inspect(connection).has_table("alembic_version"):
            replay(connection, new)
        else:
            upgrade(connection)


def upgrade(connection: Connection) -> None:
    """Run every migration `connection`'s database has not had yet (Alembic), in its transaction."""
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    command.upgrade(config, "head")


def newest_revision() -> str:
    """The newest migration's revision: each is numbered like its file (0001_memos.py is "0001")."""
    return max(path.name.split("_", 1)[0] for path in (MIGRATIONS / "versions").glob("[0-9]*_*.py"))


def _version(engine: Engine) -> str | None:
    """The revision the database is at; None before the first migration."""
    try:
        with engine.connect() as connection:
            return connection.execute(text("SELECT version_num FROM alembic_version")).scalar()
    except (OperationalError, ProgrammingError):  # no such table yet (SQLite, PostgreSQL)
        return None

