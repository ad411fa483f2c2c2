"""The Alembic migrations run by `open_database`."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, create_engine, inspect, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError, SAWarning

from myao2.domain.memory import Scope
from myao2.infrastructure.db import engine as engine_module
from myao2.infrastructure.db import recorded
from myao2.infrastructure.db.engine import MIGRATIONS, migrate, newest_revision, open_database, upgrade
from myao2.infrastructure.db.recorded import record, recording
from tests.postgres import PostgresServer, fresh_database, server_binaries

SQLITE_KEYWORDS = ("search_fts", "search_vocab")
"""The search index's keyword tables on SQLite (FTS5 and its shadow tables)."""
POSTGRESQL_KEYWORDS = "search_terms"
"""The search index's keyword table on PostgreSQL (a text array per document)."""


def head_revision() -> str:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    head = ScriptDirectory.from_config(config).get_current_head()
    assert head is not None
    return head


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database of each kind the bot stores in."""
    yield from fresh_database(request, tmp_path, migrated=False)


@pytest.fixture(params=["sqlite", "postgresql"])
def two_empty_urls(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """Two empty databases of one kind the bot stores in."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
        return
    server: PostgresServer = request.getfixturevalue("postgres")
    with server.database(migrated=False) as first, server.database(migrated=False) as second:
        yield first, second


SQLITE_HEADER = ("user_version", "application_id", "page_count", "encoding", "auto_vacuum")


def everything_in(url: str) -> object:
    """All a database holds: on SQLite every row of sqlite_master (each table's, index's, trigger's and FTS
    table's SQL, in order, with its root page), of every table (FTS's shadow tables too) and the file's header
    values; on PostgreSQL pg_dump's whole dump (tables, indexes, functions, triggers, sequences, rows)."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        with closing(sqlite3.connect(str(parsed.database))) as db:
            master = db.execute("SELECT type, name, tbl_name, rootpage, sql FROM sqlite_master ORDER BY rowid").fetchall()
            tables = [name for kind, name, *_ in master if kind == "table"]
            rows = {name: db.execute(f'SELECT * FROM "{name}"').fetchall() for name in tables}
            header = {name: db.execute(f"PRAGMA {name}").fetchall() for name in SQLITE_HEADER}
        return master, rows, header
    binaries = server_binaries()
    assert binaries is not None
    where = ["-h", str(parsed.host), "-p", str(parsed.port), "-U", str(parsed.username), str(parsed.database)]
    dump = subprocess.run([str(binaries / "pg_dump"), *where], check=True, capture_output=True, text=True).stdout
    # pg_dump's \restrict lines carry a key of its own, new at every dump
    return [line for line in dump.splitlines() if not line.startswith(("\\restrict", "\\unrestrict"))]


def schema(engine: Engine) -> dict[str, list[str]]:
    """Each table with its indexes' names."""
    found = inspect(engine)
    with warnings.catch_warnings():  # SQLite's reflection skips expression indexes, with a warning
        warnings.simplefilter("ignore", SAWarning)
        return {table: sorted(str(index["name"]) for index in found.get_indexes(table)) for table in found.get_table_names()}


def upgrade_to(connection: Connection, revision: str) -> None:
    """Migrate `connection`'s database up to `revision`, in its transaction."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    command.upgrade(config, revision)


def version(engine: Engine) -> list[tuple[str, ...]]:
    with engine.connect() as connection:
        return [tuple(row) for row in connection.execute(text("SELECT version_num FROM alembic_version"))]


def test_an_empty_database_gets_the_tables_and_the_head_version(empty_url: str) -> None:
    engine = open_database(empty_url)
    assert {"memos", "memo_revisions", "claims", "alembic_version"} <= set(schema(engine))
    assert version(engine) == [(head_revision(),)]


def test_a_new_database_is_made_just_as_running_every_migration_makes_it(two_empty_urls: tuple[str, str]) -> None:
    migrated_url, opened_url = two_empty_urls
    migrated = create_engine(migrated_url)
    with migrated.begin() as connection:
        upgrade_to(connection, "head")
    migrated.dispose()
    open_database(opened_url).dispose()
    assert everything_in(opened_url) == everything_in(migrated_url)


def test_the_recording_is_what_running_every_migration_executes(empty_url: str) -> None:
    engine = create_engine(empty_url)
    with engine.begin() as connection:
        executed = record(connection, upgrade)
    engine.dispose()
    stored = recording(engine.dialect.name)
    assert stored is not None
    assert (stored.revision, stored.statements) == (head_revision(), executed), (
        "the migrations changed since they were recorded: run .venv/bin/python tools/record_migrations.py"
    )


def test_a_new_database_and_one_at_the_newest_migration_are_opened_without_loading_alembic(empty_url: str) -> None:
    code = (
        "import sys; from myao2.infrastructure.db.engine import open_database; open_database(sys.argv[1]); "
        "print(sorted(name for name in sys.modules if name.split('.')[0] == 'alembic'))"
    )
    for _start in ("first", "second"):
        done = subprocess.run([sys.executable, "-c", code, empty_url], capture_output=True, text=True, env=os.environ)
        assert (done.returncode, done.stderr, done.stdout) == (0, "", "[]\n")
        assert version(create_engine(empty_url)) == [(head_revision(),)]


def test_an_sqlite_file_gets_its_folder(tmp_path: Path) -> None:
    open_database(f"sqlite:///{tmp_path / 'fresh' / 'm.db'}")
    assert (tmp_path / "fresh" / "m.db").is_file()


def test_each_revision_is_numbered_like_its_file_so_the_newest_is_known_without_alembic() -> None:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    scripts = list(ScriptDirectory.from_config(config).walk_revisions())
    for script in scripts:
        assert Path(script.path).name.startswith(f"{script.revision}_")
    assert newest_revision() == head_revision()


def test_a_database_at_an_older_version_is_migrated_to_the_newest(empty_url: str) -> None:
    engine = create_engine(empty_url)
    with engine.begin() as connection:
        upgrade_to(connection, "0001")
    assert "claims" not in schema(engine)
    engine.dispose()
    engine = open_database(empty_url)
    assert version(engine) == [(head_revision(),)]
    assert "claims" in schema(engine)


def test_memos_indexed_before_their_vectors_blended_both_readings_are_queued_to_be_embedded_again(empty_url: str) -> None:
    engine = create_engine(empty_url)
    with engine.begin() as connection:
        upgrade_to(connection, "0019")
        connection.execute(
            text(
                "INSERT INTO memos (name, content, priority, tags, visibility, created_at, updated_at)"
                " VALUES ('old', 'c', 1, '[]', 'workspace', 'x', 'x')"
            )
        )
        connection.execute(text("DELETE FROM search_queue"))  # indexed then, with the old vector
    engine.dispose()
    engine = open_database(empty_url)
    with engine.connect() as connection:
        queued = connection.execute(text("SELECT kind, m.name FROM search_queue q JOIN memos m ON m.id = q.ref_id")).fetchall()
    assert queued == [("memo", "old")]


def test_what_0019_and_0020_queued_of_indexed_texts_still_there_is_left_to_the_background(empty_url: str) -> None:
    engine = create_engine(empty_url)
    with engine.begin() as connection:
        upgrade_to(connection, "0019")
        for name, removed in (("kept", None), ("removed", "y"), ("new", None)):
            connection.execute(
                text(
                    "INSERT INTO memos (name, content, priority, tags, visibility, created_at, updated_at, removed_at)"
                    " VALUES (:name, 'c', 1, '[]', 'workspace', 'x', 'x', :removed)"
                ),
                {"name": name, "removed": removed},
            )
        connection.execute(text("DELETE FROM search_queue"))
        connection.execute(  # indexed then, with the old vector, as was the memo removed since
            text(
                "INSERT INTO search_docs (kind, ref_id, at, text, seq) "
                "SELECT 'memo', id, 0, name, id FROM memos WHERE name IN ('kept', 'removed')"
            )
        )
        upgrade_to(connection, "0020")
    engine.dispose()
    engine = open_database(empty_url)
    with engine.connect() as connection:
        queued = connection.execute(
            text("SELECT m.name, q.reembed FROM search_queue q JOIN memos m ON m.id = q.ref_id ORDER BY m.name")
        ).fetchall()
    assert queued == [("kept", True), ("new", False), ("removed", False)]
    engine.dispose()


def test_documents_indexed_before_0025_get_the_conversation_they_came_from(empty_url: str) -> None:
    engine = create_engine(empty_url)
    with engine.begin() as connection:
        upgrade_to(connection, "0024")
        sources = {
            "memo": "INSERT INTO memos (name, content, priority, tags, channel_id, visibility, created_at, updated_at)"
            " VALUES ('m', 'c', 1, '[]', 'C1', 'workspace', 'x', 'x')",
            "digest": "INSERT INTO digests (channel_id, day, stage, audience, label, lines, first_ts, last_ts, authors, made_at)"
            " VALUES ('C2', '2026-01-01', 'digest', NULL, '#c2', '[]', '1', '2', '[]', 'x')",
            "message": "INSERT INTO messages (channel_id, ts, user_name, text, is_bot, mentions, posted_at)"
            " VALUES ('C4', '1', 'a', 't', FALSE, '[]', 'x')",
        }
        for kind, insert in sources.items():
            connection.execute(text(insert))
        for key in (Scope("C3").key, Scope().key, Scope("C5", "1.0").key):
            connection.execute(
                text(
                    "INSERT INTO memories (scope, term, label, bullets, covered, updated_at) "
                    "VALUES (:key, 'long', '', '[]', '', 'x')"
                ),
                {"key": key},
            )
        for kind, table in (("memo", "memos"), ("digest", "digests"), ("message", "messages"), ("summary", "memories")):
            connection.execute(
                text(f"INSERT INTO search_docs (kind, ref_id, at, text, seq) SELECT :kind, id, 0, 't', id FROM {table}"),
                {"kind": kind},
            )
    engine.dispose()
    engine = open_database(empty_url)
    with engine.connect() as connection:
        channels = connection.execute(text("SELECT kind, channel FROM search_docs")).all()
    assert sorted(channels, key=str) == sorted(
        [("memo", "C1"), ("digest", "C2"), ("message", None), ("summary", "C3"), ("summary", None), ("summary", "C5")],
        key=str,
    )
    engine.dispose()


def test_profiles_stored_before_0026_never_give_again_the_ids_of_the_facts_they_keep(empty_url: str) -> None:
    engine = create_engine(empty_url)
    with engine.begin() as connection:
        upgrade_to(connection, "0025")
        for user_id, ids in (("U1", [1, 4, 2]), ("U2", [])):
            facts = json.dumps([{"id": fact_id} for fact_id in ids])
            connection.execute(
                text("INSERT INTO profiles (user_id, facts, read_up_to, updated_at) VALUES (:u, :f, '{}', 'x')"),
                {"u": user_id, "f": facts},
            )
    engine.dispose()
    engine = open_database(empty_url)
    with engine.connect() as connection:
        last = connection.execute(text("SELECT user_id, last_fact_id FROM profiles ORDER BY user_id")).all()
    assert [tuple(row) for row in last] == [("U1", 4), ("U2", 0)]
    engine.dispose()


def test_memories_indexed_before_0029_are_indexed_again_with_the_conversations_they_were_heard_in(empty_url: str) -> None:
    engine = create_engine(empty_url)
    with engine.begin() as connection:
        upgrade_to(connection, "0028")
        connection.execute(
            text("INSERT INTO memories (scope, term, label, bullets, covered, updated_at) VALUES ('workspace', 'long', '', '[]', '', 'x')")
        )
        connection.execute(
            text(
                "INSERT INTO memos (name, content, priority, tags, channel_id, visibility, created_at, updated_at)"
                " VALUES ('m', 'c', 1, '[]', 'C1', 'workspace', 'x', 'x')"
            )
        )
        for kind, table in (("summary", "memories"), ("memo", "memos")):
            connection.execute(
                text(f"INSERT INTO search_docs (kind, ref_id, at, text, seq) SELECT :kind, id, 0, 't', id FROM {table}"),
                {"kind": kind},
            )
        connection.execute(text("DELETE FROM search_queue"))  # indexed as they are
    engine.dispose()
    engine = open_database(empty_url)
    with engine.connect() as connection:
        queued = connection.execute(text("SELECT kind, reembed FROM search_queue")).all()
        heard = connection.execute(text("SELECT heard FROM search_docs")).scalars().all()
    assert [(kind, bool(reembed)) for kind, reembed in queued] == [("summary", False)]
    assert heard == [None, None]
    engine.dispose()


def test_migrating_again_changes_nothing(empty_url: str) -> None:
    engine = open_database(empty_url)
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO memos (name, content, priority, tags, visibility, created_at, updated_at)"
                " VALUES ('kept', 'c', 1, '[]', 'workspace', 'x', 'x')"
            )
        )
    before = schema(engine)
    migrate(engine)
    again = open_database(empty_url)
    assert schema(again) == before
    with again.connect() as connection:
        assert connection.execute(text("SELECT name FROM memos")).fetchall() == [("kept",)]
    assert version(again) == [(head_revision(),)]


def test_every_table_has_the_same_columns_on_sqlite_and_postgresql(tmp_path: Path, postgres: PostgresServer) -> None:
    """One schema, whatever the database: the migrations branch on the dialect only for the search's keyword table."""
    sqlite = inspect(open_database(f"sqlite:///{tmp_path / 'm.db'}"))
    with postgres.database() as url:
        postgresql = inspect(open_database(url))
        tables = set(postgresql.get_table_names()) - {POSTGRESQL_KEYWORDS}
        assert POSTGRESQL_KEYWORDS in postgresql.get_table_names()
        assert tables == {t for t in sqlite.get_table_names() if not t.startswith(SQLITE_KEYWORDS)}
        for table in tables:
            assert [c["name"] for c in postgresql.get_columns(table)] == [c["name"] for c in sqlite.get_columns(table)]


def test_an_in_memory_database_is_shared_across_threads() -> None:
    engine = open_database("sqlite://")
    counts: list[int] = []

    def count_memos() -> None:
        with engine.connect() as connection:
            counts.append(connection.execute(text("SELECT COUNT(*) FROM memos")).scalar_one())

    worker = threading.Thread(target=count_memos)
    worker.start()
    worker.join()
    assert counts == [0]


def test_sql_errors_carry_no_parameters(tmp_path: Path) -> None:
    """SQL errors get logged: the text of messages and memos in their parameters must not be."""
    engine = open_database(f"sqlite:///{tmp_path / 'm.db'}")
    insert = text(
        "INSERT INTO memos (id, name, content, priority, tags, visibility, created_at, updated_at)"
        " VALUES (1, 'n', :content, 1, '[]', 'workspace', 'x', 'x')"
    )
    with engine.begin() as connection:
        connection.execute(insert, {"content": "the secret said in a DM"})
    try:
        with engine.begin() as connection:
            connection.execute(insert, {"content": "the secret said in a DM"})
    except IntegrityError as error:
        assert "secret" not in str(error)
        assert "hidden due to hide_parameters" in str(error)
    else:
        raise AssertionError("the duplicate id was accepted")


def test_a_recording_behind_the_newest_migration_is_not_replayed(
    empty_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Someone added a migration and did not record again: every migration runs, the recording's last is not enough."""
    stale = tmp_path / "recorded"
    stale.mkdir()
    for dialect in ("sqlite", "postgresql"):
        failing = {"revision": "0001", "statements": [["SELECT no_such_function()", [], False]]}
        (stale / f"{dialect}.json").write_text(json.dumps(failing), encoding="utf-8")
    monkeypatch.setattr(recorded, "RECORDINGS", stale)
    engine = open_database(empty_url)
    assert version(engine) == [(head_revision(),)]
    assert "claims" in schema(engine)


def test_replicas_opening_a_new_database_together_both_find_it_made(
    postgres: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both read that it has no schema yet; one makes it, the other waits for that and makes nothing again."""
    read_version = engine_module._version
    both_read = threading.Barrier(2, timeout=120)

    def version_then_wait(engine: Engine) -> str | None:
        found = read_version(engine)
        both_read.wait()
        return found

    monkeypatch.setattr(engine_module, "_version", version_then_wait)
    with postgres.database(migrated=False) as url:
        with ThreadPoolExecutor(max_workers=2) as pool:
            engines = list(pool.map(lambda _: open_database(url), range(2)))
        assert version(engines[0]) == [(head_revision(),)]
        assert "claims" in schema(engines[0])
        for engine in engines:
            engine.dispose()
