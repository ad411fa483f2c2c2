"""The profile store on SQLModel: one row per person, facts as JSON text."""

from __future__ import annotations

from collections.abc import Container, Iterable, Sequence
from datetime import date, datetime
from functools import lru_cache
from typing import Any

from sqlalchemy import Engine, Executable, bindparam, true
from sqlalchemy import select as core_select
from sqlmodel import Session, col, select

from myao2.domain.ports import Clock
from myao2.domain.profile import Fact, Profile
from myao2.domain.visibility import Audience
from myao2.infrastructure.db.engine import reading, write_locked
from myao2.infrastructure.db.memory_store import (
    NOT_PUBLIC,
    not_public_among,
    not_public_in,
    read_as_stored,
    said_in,
)
from myao2.infrastructure.db.tables import ExpiredMessageRow, MessageRow, ProfileRow

_PROFILES = ProfileRow.__table__  # type: ignore[attr-defined]


@lru_cache(maxsize=64)
def _profiles_of(people: int) -> Executable:
    """The profiles of `people` people (bound as `user_0`, `user_1`, ...) with the conversations not public, read
    without an ORM session (every prompt reads its speakers'). Built once per number of people, the ids bound one
    by one: SQLAlchemy renders a list bound as one parameter (an expanding IN) anew at every read."""
    user_ids = [bindparam(f"user_{i}", type_=_PROFILES.c.user_id.type) for i in range(people)]
    return (
        core_select(_PROFILES, NOT_PUBLIC.c.not_public)
        .select_from(_PROFILES.join(NOT_PUBLIC, true()))
        .where(_PROFILES.c.user_id.in_(user_ids))
    )


class SqlProfileStore:
    """`ProfileStore` over a SQLAlchemy engine; safe to share between threads."""

    def __init__(self, engine: Engine, clock: Clock) -> None:
        self._engine = engine
        self._clock = clock

    def get(self, user_id: str) -> Profile | None:
        return self.many([user_id]).get(user_id)

    def many(self, user_ids: Iterable[str]) -> dict[str, Profile]:
        wanted = {f"user_{i}": user_id for i, user_id in enumerate(user_ids)}
        with reading(self._engine) as connection:
            rows = connection.execute(_profiles_of(len(wanted)), wanted).all()
        # as narrow as the conversations each fact was learnt or heard in are now, as a save keeps it: a channel
        # turned private keeps facts for the workspace until its narrowing reaches them
        hidden = not_public_in(rows)
        profiles = (row_to_profile(row) for row in rows)
        return {p.user_id: p.heard_by_readers(hidden, _heard_in_any(p, hidden)) for p in profiles}

    def save(self, profiles: Sequence[Profile], *, heard: bool = False, read_at: datetime | None = None) -> None:
        now = self._clock.now()

        def write(session: Session) -> None:
            for profile in sorted(profiles, key=lambda p: p.user_id):  # rows held in one order everywhere (no deadlock)
                row = session.get(ProfileRow, profile.user_id, with_for_update=True)
                if heard and not _has_spoken(session, profile.user_id):
                    continue  # forgotten since their messages were read: nothing of them comes back
                if row is None:
                    row = ProfileRow(user_id=profile.user_id, facts=[], read_up_to={}, updated_at=now)
                else:  # never wider than stored: a save of what was read before a narrowing cannot undo it
                    profile = profile.kept_as_narrow_as(row_to_profile(row))
                # nor than the conversations a fact not stored was learnt or heard in are now (a channel that turned
                # private while the model read it): what a narrowing dropped or would have narrowed stays so
                unsure = {f.id for f in profile.facts} - {f["id"] for f in row.facts}
                sources = {c for f in profile.facts if f.id in unsure for c in (f.conversation_id, *f.heard_in)}
                profile = profile.heard_by_readers(not_public_among(session, sources), unsure)
                if heard:  # a message deleted or edited while the model read it: nothing learnt from it comes back
                    profile = profile.without_sources(_gone(session, profile, row, read_at))
                row.facts = [fact_to_json(f) for f in profile.facts]
                row.read_up_to = dict(profile.read_up_to)
                row.last_fact_id = max(row.last_fact_id, profile.last_fact_id, *(f.id for f in profile.facts))
                row.updated_at = now
                session.add(row)

        write_locked(self._engine, write)

    def narrow(self, channel_id: str) -> None:
        """The workspace facts learnt in the channel, or citing one of its messages, become its own."""

        def write(session: Session) -> None:
            rows = session.exec(select(ProfileRow).order_by(col(ProfileRow.user_id)).with_for_update()).all()
            profiles = [row_to_profile(row) for row in rows]
            cited = {ts for p in profiles for f in p.facts if f.audience.is_workspace for ts in f.source_ts}
            said_there = said_in(session, channel_id, cited)
            for row, profile in zip(rows, profiles):
                narrowed = profile.narrowed(channel_id, said_there)
                if narrowed != profile:
                    row.facts = [fact_to_json(f) for f in narrowed.facts]
                    session.add(row)

        write_locked(self._engine, write)

    def all(self) -> list[Profile]:
        with Session(self._engine) as session:
            rows = session.exec(select(ProfileRow).order_by(col(ProfileRow.user_id))).all()
        return [row_to_profile(row) for row in rows]


def _heard_in_any(profile: Profile, conversations: Container[str]) -> set[int]:
    """The ids of the facts of `profile` learnt or heard in any of `conversations`."""
    return {f.id for f in profile.facts if any(c in conversations for c in (f.conversation_id, *f.heard_in))}


def _gone(session: Session, profile: Profile, row: ProfileRow, read_at: datetime | None) -> set[str]:
    """The message ts that facts or confirmations of `profile` not in `row` (new, or dropped meanwhile) cite, of
    messages neither stored nor kept as expired (deleted in Slack, or forgotten, since they were read), or
    edited since `read_at` (the edit dropped what was learnt from them)."""
    stored = {(f["id"], tuple(f["ts"])) for f in row.facts}
    cited = {ts for f in profile.facts if (f.id, f.source_ts) not in stored for ts in f.source_ts}
    return cited - read_as_stored(session, cited, read_at)


def _has_spoken(session: Session, user_id: str) -> bool:
    """Whether a message of `user_id` is stored, or was until retention deleted its text."""
    for table in (MessageRow, ExpiredMessageRow):
        if session.exec(select(table.ts).where(table.user_id == user_id).limit(1)).first() is not None:
            return True
    return False


def fact_to_json(fact: Fact) -> dict[str, Any]:
    """A fact as stored in the `facts` JSON column."""
    return {
        "id": fact.id,
        "text": fact.text,
        "confidence": fact.confidence,
        "confirmations": fact.confirmations,
        "conversation": fact.conversation_id,
        "audience": fact.audience.conversation_id,
        "day": fact.learned_on.isoformat(),
        "ts": list(fact.source_ts),
        "superseded_by": fact.superseded_by,
        "memo_id": fact.memo_id,
        "heard_in": list(fact.heard_in),
    }


def row_to_profile(row: ProfileRow) -> Profile:
    """A profile from its `ProfileRow` or a Core row of the profiles table."""
    facts = tuple(
        Fact(
            id=f["id"],
            text=f["text"],
            confidence=f["confidence"],
            confirmations=f["confirmations"],
            conversation_id=f["conversation"],
            audience=Audience(f["audience"]),
            learned_on=date.fromisoformat(f["day"]),
            source_ts=tuple(f["ts"]),
            superseded_by=f.get("superseded_by"),
            memo_id=f.get("memo_id"),
            heard_in=tuple(f.get("heard_in", ())),
        )
        for f in row.facts
    )
    return Profile(row.user_id, facts, dict(row.read_up_to), row.last_fact_id)
