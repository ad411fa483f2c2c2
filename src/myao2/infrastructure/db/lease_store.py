"""Leases in the shared database: which replica does what, and which replicas are alive."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime

from sqlalchemy import Connection, Engine, delete, select, text, update

from myao2.infrastructure.db.engine import INSERT_IGNORING, reading
from myao2.infrastructure.db.tables import ClaimRow, LeaseRow

_LEASES, _CLAIMS = LeaseRow.__table__, ClaimRow.__table__  # type: ignore[attr-defined]


class SqlLeaseStore:
    """`LeaseStore` on the bot's database: each change is one statement, atomic on SQLite and PostgreSQL."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._insert = INSERT_IGNORING[engine.dialect.name]

    @contextmanager
    def _renewal(self, now: datetime, until: datetime) -> Iterator[Connection]:
        """A transaction taking or renewing leases until `until`.

        On PostgreSQL the lease rows it changes stay locked until it ends, and a replica stalled in it (stopped,
        starved of CPU) would keep every other replica's renewal waiting: none could notice it gone and take over
        its work. Stalled for longer than the lease it would have renewed, its transaction is ended by the server.
        """
        with self._engine.begin() as connection:
            if connection.dialect.name == "postgresql":
                timeout_ms = max(1, round((until - now).total_seconds() * 1000))
                connection.execute(text(f"SET LOCAL idle_in_transaction_session_timeout = {timeout_ms}"))
            yield connection

    def take(self, name: str, holder: str, now: datetime, until: datetime) -> bool:
        row = {"name": name, "holder": holder, "expires_at": until}
        with self._renewal(now, until) as connection:
            # The row is created once; afterwards the lease changes hands only by this UPDATE,
            # whose condition is checked and applied atomically (row lock on PostgreSQL, one writer on SQLite).
            connection.execute(self._insert(_LEASES).values(row).on_conflict_do_nothing())
            taken = connection.execute(
                update(_LEASES)
                .where(
                    _LEASES.c.name == name,
                    (_LEASES.c.holder == holder) | (_LEASES.c.expires_at < now),
                )
                .values(holder=holder, expires_at=until)
            )
        return taken.rowcount == 1

    def renew(self, holder: str, now: datetime, until: datetime) -> set[str]:
        with self._renewal(now, until) as connection:
            connection.execute(
                update(_LEASES)
                .where(_LEASES.c.holder == holder, _LEASES.c.expires_at >= now)
                .values(expires_at=until)
            )
            expired = connection.execute(
                delete(_LEASES).where(_LEASES.c.expires_at < now).returning(_LEASES.c.name, _LEASES.c.holder)
            ).all()
        return {name for name, owner in expired if name == owner}

    def alive(self, now: datetime) -> set[str]:
        with reading(self._engine) as connection:
            rows = connection.execute(
                select(_LEASES.c.holder).where(
                    _LEASES.c.name == _LEASES.c.holder, _LEASES.c.expires_at >= now
                )
            )
            return {holder for (holder,) in rows}

    def release(self, holder: str) -> None:
        with self._engine.begin() as connection:
            connection.execute(
                update(_CLAIMS).where(_CLAIMS.c.holder == holder, _CLAIMS.c.settled_at.is_(None)).values(holder=None)
            )
            connection.execute(delete(_LEASES).where(_LEASES.c.holder == holder))
