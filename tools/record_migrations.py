"""Record what running every migration executes on an empty database, on SQLite and on PostgreSQL
(src/myao2/infrastructure/db/migrations/recorded/*.json, `myao2.infrastructure.db.recorded`).

Run it after adding or changing a migration (a test fails until then)::

    .venv/bin/python tools/record_migrations.py

PostgreSQL's recording needs its server (apt-get install postgresql): a throwaway
cluster is started, as the tests start one.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from sqlalchemy import create_engine  # noqa: E402

from myao2.infrastructure.db.engine import newest_revision, upgrade  # noqa: E402
from myao2.infrastructure.db.recorded import Recording, record, write  # noqa: E402
from tests.postgres import PostgresServer, server_binaries  # noqa: E402


def record_on(url: str) -> Path:
    """Run every migration on the empty database at `url`; store what they executed as its dialect's recording."""
    engine = create_engine(url)
    try:
        with engine.begin() as connection:
            statements = record(connection, upgrade)
        return write(engine.dialect.name, Recording(newest_revision(), statements))
    finally:
        engine.dispose()


def main() -> int:
    binaries = server_binaries()
    if binaries is None:
        print("needs PostgreSQL's server (apt-get install postgresql)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="myao2-record-") as folder:
        print(record_on(f"sqlite:///{Path(folder) / 'empty.db'}"))
    server = PostgresServer(binaries)
    server.start()
    try:
        with server.database(migrated=False) as url:
            print(record_on(url))
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
