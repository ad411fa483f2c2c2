"""The memory store on SQLModel: one row per (scope, term), bullets as JSON text."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from typing import Any

from sqlalchemy import Engine
from sqlmodel import Session, col, select

from myao2.domain.memory import Bullet, Memory, Scope, Term
from myao2.domain.ports import Clock
from myao2.domain.visibility import Audience
from myao2.infrastructure.db.tables import MemoryRow


class SqlMemoryStore:
    """`MemoryStore` over a SQLAlchemy engine; safe to share between threads."""

    def __init__(self, engine: Engine, clock: Clock) -> None:
        self._engine = engine
        self._clock = clock

    def get(self, scope: Scope, term: Term) -> Memory | None:
        with Session(self._engine) as session:
            row = session.exec(
                select(MemoryRow).where(MemoryRow.scope == scope.key, MemoryRow.term == term.value)
            ).first()
        return None if row is None else row_to_memory(row)

    def save(self, memories: Sequence[Memory]) -> None:
        now = self._clock.now()
        with Session(self._engine) as session, session.begin():
            for memory in memories:
                row = session.exec(
                    select(MemoryRow).where(
                        MemoryRow.scope == memory.scope.key, MemoryRow.term == memory.term.value
                    )
                ).first()
                if row is None:
                    row = MemoryRow(
                        scope=memory.scope.key, term=memory.term.value, label="", bullets=[], covered="", updated_at=now
                    )
                row.audience = memory.audience.conversation_id
                row.label = memory.label
                row.bullets = [bullet_to_json(b) for b in memory.bullets]
                row.covered = memory.covered
                row.updated_at = now
                session.add(row)

    def channels(self, term: Term) -> list[Memory]:
        with Session(self._engine) as session:
            rows = session.exec(
                select(MemoryRow)
                .where(col(MemoryRow.scope).startswith("channel:"), MemoryRow.term == term.value)
                .order_by(col(MemoryRow.scope))
            ).all()
        return [row_to_memory(r) for r in rows]

    def all(self) -> list[Memory]:
        with Session(self._engine) as session:
            rows = session.exec(select(MemoryRow).order_by(col(MemoryRow.scope), col(MemoryRow.term))).all()
        return [row_to_memory(r) for r in rows]


def bullet_to_json(bullet: Bullet) -> dict[str, Any]:
    """A bullet as stored in the `bullets` JSON column."""
    return {
        "id": bullet.id,
        "text": bullet.text,
        "day": bullet.day.isoformat(),
        "ts": list(bullet.source_ts),
        "superseded_by": bullet.superseded_by,
    }


def row_to_memory(row: MemoryRow) -> Memory:
    """A memory from its row."""
    return Memory(
        scope=Scope.from_key(row.scope),
        term=Term(row.term),
        audience=Audience(row.audience),
        bullets=tuple(
            Bullet(b["id"], b["text"], date.fromisoformat(b["day"]), tuple(b["ts"]), b.get("superseded_by"))
            for b in row.bullets
        ),
        label=row.label,
        covered=row.covered,
        updated_at=row.updated_at,
    )
