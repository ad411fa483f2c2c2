"""The memory store on SQLModel: one row per (scope, term), bullets as JSON text."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from typing import Any

from sqlalchemy import Engine
from sqlmodel import Session, col, select

from myao2.domain.memory import Bullet, Digest, Memory, Scope, Stage, Term
from myao2.domain.ports import Clock
from myao2.domain.visibility import Audience
from myao2.infrastructure.db.tables import DigestRow, MemoryRow


class SqlMemoryStore:
    """`MemoryStore` over a SQLAlchemy engine; safe to share between threads.

    A save never widens what is stored: a memory or digest once narrowed to its
    conversation stays that conversation's own.
    """

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
                row.audience = _narrower(row.audience, memory.audience)
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

    def digests(self, channel_id: str | None = None) -> list[Digest]:
        query = select(DigestRow).order_by(col(DigestRow.channel_id), col(DigestRow.day))
        if channel_id is not None:
            query = query.where(DigestRow.channel_id == channel_id)
        with Session(self._engine) as session:
            rows = session.exec(query).all()
        return [row_to_digest(r) for r in rows]

    def digests_by_ids(self, ids: list[int]) -> dict[int, Digest]:
        """The stored digests with these row ids, by id."""
        with Session(self._engine) as session:
            rows = session.exec(select(DigestRow).where(col(DigestRow.id).in_(ids))).all()
        return {row.id: row_to_digest(row) for row in rows if row.id is not None}

    def memories_by_ids(self, ids: list[int]) -> dict[int, Memory]:
        """The stored memories with these row ids, by id."""
        with Session(self._engine) as session:
            rows = session.exec(select(MemoryRow).where(col(MemoryRow.id).in_(ids))).all()
        return {row.id: row_to_memory(row) for row in rows if row.id is not None}

    def delete_digest(self, channel_id: str, day: date) -> None:
        with Session(self._engine) as session, session.begin():
            for row in session.exec(
                select(DigestRow).where(DigestRow.channel_id == channel_id, DigestRow.day == day.isoformat())
            ).all():
                session.delete(row)

    def save_digest(self, digest: Digest) -> None:
        with Session(self._engine) as session, session.begin():
            row = session.exec(
                select(DigestRow).where(DigestRow.channel_id == digest.channel_id, DigestRow.day == digest.day.isoformat())
            ).first() or DigestRow(channel_id=digest.channel_id, day=digest.day.isoformat())
            row.stage = digest.stage.value
            row.audience = _narrower(row.audience, digest.audience)
            row.label = digest.label
            row.lines = list(digest.lines)
            row.first_ts = digest.first_ts
            row.last_ts = digest.last_ts
            row.authors = list(digest.authors)
            row.made_at = self._clock.now()
            session.add(row)

    def narrow(self, channel_id: str) -> None:
        """The channel's (and its threads') memories and digests become its own; the workspace memory,
        which may hold what it said, is dropped, to be made again from the public channels alone."""
        keys = [Scope(channel_id).key, f"thread:{channel_id}:%"]
        with Session(self._engine) as session, session.begin():
            rows = session.exec(
                select(MemoryRow).where((MemoryRow.scope == keys[0]) | col(MemoryRow.scope).like(keys[1]))
            ).all()
            for row in rows:
                row.audience = channel_id
                session.add(row)
            for digest in session.exec(select(DigestRow).where(DigestRow.channel_id == channel_id)).all():
                digest.audience = channel_id
                session.add(digest)
            for workspace in session.exec(select(MemoryRow).where(MemoryRow.scope == Scope().key)).all():
                session.delete(workspace)


def _narrower(stored: str | None, audience: Audience) -> str | None:
    """The audience a save keeps: never wider than the stored one, so a save racing `narrow` cannot undo it."""
    return stored if stored is not None else audience.conversation_id


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


def row_to_digest(row: DigestRow) -> Digest:
    """A digest from its row."""
    return Digest(
        channel_id=row.channel_id,
        day=date.fromisoformat(row.day),
        stage=Stage(row.stage),
        audience=Audience(row.audience),
        lines=tuple(row.lines),
        first_ts=row.first_ts,
        last_ts=row.last_ts,
        authors=tuple(row.authors),
        label=row.label,
    )
