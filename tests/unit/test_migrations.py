"""The Alembic migrations run by `open_database`."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, text
from sqlalchemy.exc import IntegrityError

from myao2.infrastructure.db.engine import MIGRATIONS, migrate, newest_revision, open_database


def head_revision() -> str:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    head = ScriptDirectory.from_config(config).get_current_head()
    assert head is not None
    return head


def schema(path: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(path) as plain:
        return plain.execute(
            "SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY name"
        ).fetchall()


def test_an_empty_database_gets_the_tables_and_the_head_version(tmp_path: Path) -> None:
    path = tmp_path / "fresh" / "m.db"
    open_database(f"sqlite:///{path}")
    tables = {name for kind, name in schema(path) if kind == "table"}
    assert {"memos", "memo_revisions", "alembic_version"} <= tables
    with sqlite3.connect(path) as plain:
        assert plain.execute("SELECT version_num FROM alembic_version").fetchall() == [
            (head_revision(),)
        ]


def test_each_revision_is_numbered_like_its_file_so_the_newest_is_known_without_alembic() -> None:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    scripts = list(ScriptDirectory.from_config(config).walk_revisions())
    for script in scripts:
        assert Path(script.path).name.startswith(f"{script.revision}_")
    assert newest_revision() == head_revision()


def test_a_database_at_an_older_version_is_migrated_to_the_newest(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    engine = create_engine(f"sqlite:///{path}")
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "0001")
    engine.dispose()
    open_database(f"sqlite:///{path}")
    with sqlite3.connect(path) as plain:
        assert plain.execute("SELECT version_num FROM alembic_version").fetchall() == [(head_revision(),)]
        assert plain.execute("SELECT count(*) FROM sqlite_master WHERE name = 'claims'").fetchone() == (1,)


def test_migrating_again_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    engine = open_database(f"sqlite:///{path}")
    with sqlite3.connect(path) as plain:
        plain.execute(
            "INSERT INTO memos (name, content, priority, tags, visibility, created_at, updated_at)"
            " VALUES ('kept', 'c', 1, '[]', 'workspace', 'x', 'x')"
        )
    before = schema(path)
    migrate(engine)
    open_database(f"sqlite:///{path}")
    assert schema(path) == before
    with sqlite3.connect(path) as plain:
        assert plain.execute("SELECT name FROM memos").fetchall() == [("kept",)]
        assert plain.execute("SELECT version_num FROM alembic_version").fetchall() == [
            (head_revision(),)
        ]


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
