"""Leases in the shared database: which replica does what, and which replicas are alive."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime

from sqlalchemy import Connection, Engine, bindparam, delete, select, text, update

from myao2.infrastructure.db.engine import INSERT_IGNORING, reading
from myao2.infrastructure.db.tables import ClaimRow, LeaseRow

_LEASES, _CLAIMS = LeaseRow.__table__, ClaimRow.__table__  # type: ignore[attr-defined]

# The statements of a renewal (every few seconds, `Replica.keep`), built once: building them each time cost more
# than running them.
_TAKE = (
    update(_LEASES)
    .where(
        _LEASES.c.name == bindparam("lease"),
        (_LEASES.c.holder == bindparam("renewer")) | (_LEASES.c.expires_at < bindparam("at")),
    )
    .values(holder=bindparam("renewer"), expires_at=bindparam("expiry"))
)
_RENEW = (
    update(_LEASES)
    .where(_LEASES.c.holder == bindparam("renewer"), _LEASES.c.expires_at >= bindparam("at"))
    .values(expires_at=bindparam("expiry"))
)
_EXPIRED = delete(_LEASES).where(_LEASES.c.expires_at < bindparam("at")).returning(_LEASES.c.name, _LEASES.c.holder)
_ALIVE = select(_LEASES.c.holder).where(_LEASES.c.name == _LEASES.c.holder, _LEASES.c.expires_at >= bindparam("at"))


class SqlLeaseStore:
    """`LeaseStore` on the bot's database: each change is one statement, atomic on SQLite and PostgreSQL."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._create = INSERT_IGNORING[engine.dialect.name](_LEASES).on_conflict_do_nothing()

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
        with self._renewal(now, until) as connection:
            # The row is created once; afterwards the lease changes hands only by this UPDATE,
            # whose condition is checked and applied atomically (row lock on PostgreSQL, one writer on SQLite).
            connection.execute(self._create, {"name": name, "holder": holder, "expires_at": until})
            taken = connection.execute(_TAKE, {"lease": name, "renewer": holder, "at": now, "expiry": until})
        return taken.rowcount == 1

    def renew(self, holder: str, now: datetime, until: datetime) -> set[str]:
        with self._renewal(now, until) as connection:
            connection.execute(_RENEW, {"renewer": holder, "at": now, "expiry": until})
            expired = connection.execute(_EXPIRED, {"at": now}).all()
        return {name for name, owner in expired if name == owner}

    def alive(self, now: datetime) -> set[str]:
        with reading(self._engine) as connection:
            return {holder for (holder,) in connection.execute(_ALIVE, {"at": now})}

    def release(self, holder: str) -> None:
        with self._engine.begin() as connection:
            connection.execute(
                update(_CLAIMS).where(_CLAIMS.c.holder == holder, _CLAIMS.c.settled_at.is_(None)).values(holder=None)
            )
            connection.execute(delete(_LEASES).where(_LEASES.c.holder == holder))
