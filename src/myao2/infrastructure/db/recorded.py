"""What running every migration executes on an empty database, recorded; replayed, it makes a new database.

At a bot's first start, importing Alembic and running the migrations through it took
about 600 M instructions (0.25-0.3 s of CPU: the import 420 M, the run 180 M), while the
statements they send to the database take a few milliseconds. `record` captures those
statements as the driver got them, every one in order with its parameters (Alembic's
reads too), while the migrations run on an empty database; `tools/record_migrations.py`
keeps one recording per kind of database beside the migrations, and `replay` sends them
again to a database with no schema yet. A recording is the migrations' own output, not a
second schema: tests fail when it is not what the migrations execute now, and when a
database made from it differs in anything from one the migrations made.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, event

RECORDINGS = Path(__file__).with_name("migrations") / "recorded"
"""One recording per dialect: `sqlite.json`, `postgresql.json`."""


@dataclass(frozen=True)
class Recording:
    """The statements running every migration on an empty database executed."""

    revision: str
    """The newest migration they ran."""
    statements: list[list[Any]]
    """Each as the driver got it: [its SQL, its parameters, whether for many rows (executemany)], in order."""


def recording(dialect: str) -> Recording | None:
    """The recording for `dialect`, or None if there is none."""
    path = RECORDINGS / f"{dialect}.json"
    if not path.is_file():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    return Recording(data["revision"], data["statements"])


def replay(connection: Connection, recorded: Recording) -> None:
    """Send `recorded`'s statements to `connection`'s database (one with no schema yet), in its transaction."""
    for sql, parameters, many in recorded.statements:
        connection.exec_driver_sql(sql, [_driver(p) for p in parameters] if many else _driver(parameters))


def _driver(parameters: list[Any] | dict[str, Any]) -> tuple[Any, ...] | dict[str, Any]:
    """Parameters as the driver got them: JSON keeps a positional driver's tuple as a list."""
    return tuple(parameters) if isinstance(parameters, list) else parameters


def record(connection: Connection, migrate: Callable[[Connection], None]) -> list[list[Any]]:
    """The statements `migrate` executes on `connection`, as `Recording.statements` holds them."""
    executed: list[list[Any]] = []

    def keep(_conn, _cursor, statement, parameters, _context, executemany) -> None:  # type: ignore[no-untyped-def]
        executed.append([statement, parameters, executemany])

    event.listen(connection, "before_cursor_execute", keep)
    try:
        migrate(connection)
    finally:
        event.remove(connection, "before_cursor_execute", keep)
    return json.loads(json.dumps(executed))  # as stored: a tuple becomes a list; what JSON cannot hold fails here


def write(dialect: str, recorded: Recording) -> Path:
    """Store `recorded` as `dialect`'s recording, a statement a line (a new migration's show as lines added)."""
    lines = ",\n".join(json.dumps(statement, ensure_ascii=False) for statement in recorded.statements)
    path = RECORDINGS / f"{dialect}.json"
    path.write_text(f'{{"revision": {json.dumps(recorded.revision)}, "statements": [\n{lines}\n]}}\n', encoding="utf-8")
    return path
