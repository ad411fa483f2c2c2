"""Forgetting a person on request: their messages, their profile, the memos taken from them or made of their
profile, and the notes made from their words."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Engine, Text, cast, delete, or_
from sqlmodel import Session, col, select

from myao2.infrastructure.db.engine import write_locked
from myao2.infrastructure.db.memory_store import bullet_to_json, row_to_memory
from myao2.infrastructure.db.tables import (
    DigestRow,
    ExpiredMessageRow,
    MemoPinRow,
    MemoRevisionRow,
    MemoRow,
    MemoryRow,
    MessageRow,
    PersonRow,
    ProfileRow,
)


@dataclass(frozen=True)
class Forgotten:
    """How many rows and notes forgetting a person removed."""

    messages: int
    memos: int
    notes: int
    facts: int
    """Facts of their profile."""


def forget_person(engine: Engine, user_id: str) -> Forgotten:
    """Delete, in one transaction, every message `user_id` wrote, their name, their profile, every memo taken
    from what they said or made of their profile (with its revisions and pin), every memory note whose sources
    include one of their messages and every digest of a day they spoke in (a note each)."""

    def forget(session: Session) -> Forgotten:
        # the rows are held in the order a message's deletion takes them (its message, its day's digest, the memories,
        # the profiles): the two never wait for each other
        their_ts = set(session.exec(select(MessageRow.ts).where(MessageRow.user_id == user_id).with_for_update()).all())
        # and those whose text retention already deleted, so the notes made from them go too
        their_ts |= set(session.exec(select(ExpiredMessageRow.ts).where(ExpiredMessageRow.user_id == user_id)).all())
        notes = 0
        authored = cast(col(DigestRow.authors), Text).contains(f'"{user_id}"')  # a cheap filter; the authors decide
        for digest in session.exec(select(DigestRow).where(authored).order_by(col(DigestRow.id)).with_for_update()).all():
            if user_id in digest.authors:
                notes += 1
                session.delete(digest)
        for row in session.exec(select(MemoryRow).order_by(col(MemoryRow.id)).with_for_update()).all():
            memory = row_to_memory(row)
            kept = memory.without_sources(their_ts)
            if len(kept.bullets) != len(memory.bullets):
                notes += len(memory.bullets) - len(kept.bullets)
                row.bullets = [bullet_to_json(b) for b in kept.bullets]
                session.add(row)
        profile = session.get(ProfileRow, user_id, with_for_update=True)
        facts = profile.facts if profile is not None else []
        promoted = {f["memo_id"] for f in facts if f.get("memo_id") is not None}
        memo_ids = list(
            session.exec(select(MemoRow.id).where(or_(MemoRow.user_id == user_id, col(MemoRow.id).in_(promoted)))).all()
        )
        session.exec(delete(MemoRevisionRow).where(col(MemoRevisionRow.memo_id).in_(memo_ids)))  # type: ignore[call-overload]
        session.exec(delete(MemoPinRow).where(col(MemoPinRow.memo_id).in_(memo_ids)))  # type: ignore[call-overload]
        session.exec(delete(MemoRow).where(col(MemoRow.id).in_(memo_ids)))  # type: ignore[call-overload]
        session.exec(delete(MessageRow).where(MessageRow.user_id == user_id))  # type: ignore[call-overload]
        session.exec(delete(ExpiredMessageRow).where(ExpiredMessageRow.user_id == user_id))  # type: ignore[call-overload]
        session.exec(delete(PersonRow).where(PersonRow.user_id == user_id))  # type: ignore[call-overload]
        session.exec(delete(ProfileRow).where(ProfileRow.user_id == user_id))  # type: ignore[call-overload]
        return Forgotten(messages=len(their_ts), memos=len(memo_ids), notes=notes, facts=len(facts))

    return write_locked(engine, forget)
