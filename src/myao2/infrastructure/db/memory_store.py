"""The memory store on SQLModel: one row per (scope, term), bullets as JSON text."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace
from datetime import date, datetime
from functools import lru_cache
from typing import Any

from sqlalchemy import Engine, Executable, Text, and_, bindparam, cast, func, literal_column, or_, true, tuple_
from sqlalchemy import select as core_select
from sqlmodel import Session, col, select

from myao2.domain.conversation import Channel, ChannelKind
from myao2.domain.memory import Bullet, Digest, Memory, PromptMemories, Scope, Stage, Term
from myao2.domain.ports import Clock
from myao2.domain.visibility import Audience
from myao2.infrastructure.db.engine import reading, write_locked
from myao2.infrastructure.db.tables import ChannelRow, DigestRow, ExpiredMessageRow, MemoryRow, MessageRow


class SqlMemoryStore:
    """`MemoryStore` over a SQLAlchemy engine; safe to share between threads.

    A save never widens what is stored: a memory or digest once narrowed to its
    conversation stays that conversation's own.
    """

    def __init__(self, engine: Engine, clock: Clock) -> None:
        self._engine = engine
        self._clock = clock

    def get(self, scope: Scope, term: Term) -> Memory | None:
        return self.for_prompt([(scope, term)], None).stored.get((scope, term))

    def save(self, memories: Sequence[Memory], *, heard: bool = False, read_at: datetime | None = None) -> None:
        now = self._clock.now()
        # in key order: two saves making the same new rows insert them in one order (no deadlock)
        keyed = sorted((((m.scope.key, m.term.value), m) for m in memories), key=lambda pair: pair[0])
        keys = [key for key, _ in keyed]

        # Read and write in one transaction that holds the rows: a note dropped meanwhile (a message deleted
        # in Slack) is seen dropped here, never written back from a read made before the drop.
        def write(session: Session) -> None:
            # held in id order, as a message's deletion and a forgetting take them: the two never wait for each other
            held = {
                (row.scope, row.term): row
                for row in session.exec(
                    select(MemoryRow)
                    .where(tuple_(col(MemoryRow.scope), col(MemoryRow.term)).in_(keys))
                    .order_by(col(MemoryRow.id))
                    .with_for_update()
                ).all()
            } if keys else {}
            for key, memory in keyed:
                row = held.get(key)
                if row is None:
                    row = held[key] = MemoryRow(
                        scope=memory.scope.key, term=memory.term.value, label="", bullets=[], covered="", updated_at=now
                    )
                bullets = _still_heard(session, row, memory.bullets, read_at) if heard else memory.bullets
                row.audience = _narrower(row.audience, memory.audience)
                # a bullet written with a channel in sight that stopped being public meanwhile stays out
                kept = replace(memory, audience=Audience(row.audience), bullets=bullets)
                kept = kept.heard_by_readers(not_public_among(session, {c for b in bullets for c in b.heard_in}))
                row.label = memory.label
                row.bullets = [bullet_to_json(b) for b in kept.bullets]
                row.covered = memory.covered
                row.updated_at = now
                session.add(row)

        write_locked(self._engine, write)

    def channels(self, term: Term) -> list[Memory]:
        with reading(self._engine) as connection:
            rows = connection.execute(_CHANNEL_MEMORIES, {"term": term.value}).all()
        return [row_to_memory(r) for r in rows]

    def for_prompt(self, keys: Collection[tuple[Scope, Term]], news: Term | None) -> PromptMemories:
        wanted = {(scope.key, term.value): (scope, term) for scope, term in keys}
        values: dict[str, str | None] = {"news": None if news is None else news.value}
        for i, (scope_key, term_value) in enumerate(wanted):
            values |= {f"key_scope_{i}": scope_key, f"key_term_{i}": term_value}
        with reading(self._engine) as connection:
            rows = connection.execute(_prompt_memories(len(wanted)), values).all()
        stored: dict[tuple[Scope, Term], Memory] = {}
        news_read: list[tuple[Memory, Channel | None]] = []
        for row in rows:
            memory = row_to_memory(row)
            if (row.scope, row.term) in wanted:
                stored[wanted[(row.scope, row.term)]] = memory
            if row.term == values["news"] and row.scope.startswith(_CHANNEL_SCOPE):
                source = None if row.source_id is None else Channel(
                    row.source_id, row.source_name, ChannelKind(row.source_kind), is_member=row.source_left_at is None
                )
                news_read.append((memory, source))
        return PromptMemories(stored, news_read, not_public_in(rows))

    def all(self) -> list[Memory]:
        with Session(self._engine) as session:
            rows = session.exec(select(MemoryRow).order_by(col(MemoryRow.scope), col(MemoryRow.term))).all()
        return [row_to_memory(r) for r in rows]

    def digests(self, channel_id: str | None = None) -> list[Digest]:
        with reading(self._engine) as connection:
            if channel_id is None:
                rows = connection.execute(_ALL_DIGESTS).all()
            else:
                rows = connection.execute(_CHANNEL_DIGESTS, {"channel_id": channel_id}).all()
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

    def narrow(self, channel_id: str) -> bool:
        """The channel's (and its threads') memories and digests become its own; the workspace memory,
        which may hold what it said, is dropped, to be made again from the public channels alone.
        Nothing changes where nothing of the channel's is kept for the workspace any more; True when
        something was narrowed."""
        workspace = Scope().key
        theirs = or_(MemoryRow.scope == Scope(channel_id).key, col(MemoryRow.scope).like(f"thread:{channel_id}:%"))
        heard_there = cast(col(MemoryRow.bullets), Text).contains(f'"{channel_id}"')  # a cheap filter; the domain decides

        def write(session: Session) -> bool:
            # held in the order a message's deletion takes them (its digests, then the memories), the memories
            # all at once in id order, as saves hold them: none of them waits for another
            digests = session.exec(
                select(DigestRow)
                .where(DigestRow.channel_id == channel_id, col(DigestRow.audience).is_(None))
                .order_by(col(DigestRow.id))
                .with_for_update()
            ).all()
            held = session.exec(
                select(MemoryRow)
                .where(or_(theirs, MemoryRow.scope == workspace, heard_there))
                .order_by(col(MemoryRow.id))
                .with_for_update()
            ).all()
            own = {row.id for row in held if Scope.from_key(row.scope).channel_id == channel_id}
            rows = [row for row in held if row.id in own and row.audience is None]
            others = [row for row in held if row.id not in own]
            for row in [*rows, *digests]:
                row.audience = channel_id
                session.add(row)
            heard = _drop_heard_in(session, others, channel_id) if rows or digests else False
            for row in (row for row in others if row.scope == workspace):
                cited = {ts for b in row.bullets for ts in b["ts"]}
                if rows or digests or heard or said_in(session, channel_id, cited):
                    session.delete(row)
            return bool(rows or digests)

        return write_locked(self._engine, write)


def _drop_heard_in(session: Session, rows: Sequence[MemoryRow], channel_id: str) -> bool:
    """Drop from the memories of other conversations in `rows` the bullets written with the channel's words in
    sight (read in the same model call): the model may have put its words there. True when any was dropped."""
    dropped = False
    for row in rows:
        memory = row_to_memory(row)
        kept = memory.heard_by_readers({channel_id})
        if kept != memory:
            row.bullets = [bullet_to_json(b) for b in kept.bullets]
            session.add(row)
            dropped = True
    return dropped


def not_public_among(session: Session, channel_ids: Collection[str]) -> frozenset[str]:
    """Those of `channel_ids` stored as conversations that keep to themselves."""
    if not channel_ids:
        return frozenset()
    rows = session.exec(select(ChannelRow.id, ChannelRow.kind).where(col(ChannelRow.id).in_(list(channel_ids)))).all()
    return frozenset(i for i, kind in rows if ChannelKind(kind).keeps_to_itself)


def not_public_in(rows: Sequence[Any]) -> frozenset[str]:
    """The ids of the conversations not public, of rows read with `NOT_PUBLIC` (every row tells them)."""
    return frozenset((rows[0].not_public or "").split() if rows else ())


def said_in(session: Session, channel_id: str, ts: Collection[str]) -> set[str]:
    """Those of `ts` that are of messages of the channel (those whose text retention deleted included)."""
    wanted, said = list(ts), set()
    for start in range(0, len(wanted), 500):
        chunk = wanted[start : start + 500]
        for table in (MessageRow, ExpiredMessageRow):
            said.update(
                session.exec(select(table.ts).where(table.channel_id == channel_id, col(table.ts).in_(chunk))).all()
            )
    return said


def _narrower(stored: str | None, audience: Audience) -> str | None:
    """The audience a save keeps: never wider than the stored one, so a save racing `narrow` cannot undo it."""
    return stored if stored is not None else audience.conversation_id


def _still_heard(
    session: Session, row: MemoryRow, bullets: Sequence[Bullet], read_at: datetime | None
) -> tuple[Bullet, ...]:
    """`bullets` without those not stored (new, or dropped meanwhile) citing a message no longer stored, nor
    kept as expired (a person forgotten while the model was reading them), or edited since `read_at` (the edit
    dropped what held its old words): nothing of them comes back. Bullets already stored stay."""
    stored = {_identity_of(b) for b in row.bullets}
    unsure = {ts for b in bullets if _identity(b) not in stored for ts in b.source_ts}
    known = read_as_stored(session, unsure, read_at)
    return tuple(b for b in bullets if _identity(b) in stored or known.issuperset(b.source_ts))


def read_as_stored(session: Session, ts: Collection[str], read_at: datetime | None) -> set[str]:
    """Of the messages `ts`, those stored and not edited since `read_at` (when given), or kept as expired:
    what was learnt from the others (deleted or forgotten, or edited) may hold words that are gone."""
    known: set[str] = set()
    for table in (MessageRow, ExpiredMessageRow):
        if ts:
            query = select(table.ts).where(col(table.ts).in_(list(ts)))
            if table is MessageRow and read_at is not None:
                edited = col(MessageRow.edited_at)
                query = query.where(or_(edited.is_(None), edited <= read_at))
            known.update(session.exec(query).all())
    return known


def _identity(bullet: Bullet) -> tuple[object, ...]:
    """What makes a bullet the same one, superseded or not."""
    return (bullet.id, bullet.text, bullet.day.isoformat(), tuple(bullet.source_ts))


def _identity_of(stored: dict[str, Any]) -> tuple[object, ...]:
    return (stored["id"], stored["text"], stored["day"], tuple(stored["ts"]))


def bullet_to_json(bullet: Bullet) -> dict[str, Any]:
    """A bullet as stored in the `bullets` JSON column."""
    return {
        "id": bullet.id,
        "text": bullet.text,
        "day": bullet.day.isoformat(),
        "ts": list(bullet.source_ts),
        "superseded_by": bullet.superseded_by,
        "heard_in": list(bullet.heard_in),
    }


_MEMORIES = MemoryRow.__table__  # type: ignore[attr-defined]
_CHANNEL_MEMORIES = (
    core_select(_MEMORIES)
    .where(_MEMORIES.c.scope.startswith("channel:"), _MEMORIES.c.term == bindparam("term"))
    .order_by(_MEMORIES.c.scope)
)
"""Every channel's memory of one term (a prompt in a public channel shows the others' short-term memories)."""
_CHANNELS = ChannelRow.__table__  # type: ignore[attr-defined]
_CHANNEL_SCOPE = "channel:"
_ABOUT_A_CHANNEL = _MEMORIES.c.scope.startswith(_CHANNEL_SCOPE)
_HEARD = _CHANNELS.alias("heard")
NOT_PUBLIC_IDS = core_select(_HEARD.c.id).where(_HEARD.c.kind != ChannelKind.PUBLIC.value)
"""The ids of the stored conversations that are not public: the rule of `ChannelKind.keeps_to_itself` in SQL."""
NOT_PUBLIC = NOT_PUBLIC_IDS.with_only_columns(
    func.aggregate_strings(NOT_PUBLIC_IDS.selected_columns.id, literal_column("' '")).label("not_public")
).subquery("not_public")
"""One row: the ids `NOT_PUBLIC_IDS` selects, space-separated (NULL for none), joined to what is read with what they
heard (`Memory.shown_in`, `Profile.heard_by_readers`). The separator is SQL text: given as a string, SQLAlchemy
renders it into the statement anew at every read."""


@lru_cache(maxsize=16)
def _prompt_memories(keys: int) -> Executable:
    """The statement of `for_prompt` for `keys` keys (bound as `key_scope_0`, `key_term_0`, ...): the memories by key, and
    those of every channel of the `news` term (none when it is NULL) with the channel each is about (its row in
    `channels`, if any), and the conversations not public, in one read. Built once per number of keys (building
    it cost more than running it), the keys bound one by one: SQLAlchemy renders a list bound as one parameter
    (an expanding IN) anew at every read."""
    key = (_MEMORIES.c.scope, _MEMORIES.c.term)
    wanted = [tuple_(*(bindparam(f"key_{column.name}_{i}", type_=column.type) for column in key)) for i in range(keys)]
    return (
        core_select(
            _MEMORIES,
            _CHANNELS.c.id.label("source_id"),
            _CHANNELS.c.name.label("source_name"),
            _CHANNELS.c.kind.label("source_kind"),
            _CHANNELS.c.left_at.label("source_left_at"),
            NOT_PUBLIC.c.not_public,
        )
        .select_from(
            _MEMORIES.outerjoin(
                _CHANNELS,
                and_(_ABOUT_A_CHANNEL, _CHANNELS.c.id == func.substr(_MEMORIES.c.scope, len(_CHANNEL_SCOPE) + 1)),
            ).join(NOT_PUBLIC, true())
        )
        .where(
            or_(
                tuple_(*key).in_(wanted),
                and_(_ABOUT_A_CHANNEL, _MEMORIES.c.term == bindparam("news", type_=_MEMORIES.c.term.type)),
            )
        )
        .order_by(*key)
    )


_DIGESTS = DigestRow.__table__  # type: ignore[attr-defined]
_ALL_DIGESTS = core_select(_DIGESTS).order_by(_DIGESTS.c.channel_id, _DIGESTS.c.day)
_CHANNEL_DIGESTS = _ALL_DIGESTS.where(_DIGESTS.c.channel_id == bindparam("channel_id"))
"""The digests of one conversation, by day (every prompt shows its conversation's)."""


def row_to_memory(row: Any) -> Memory:
    """A memory from its `MemoryRow` or a Core row of the memories table."""
    return Memory(
        scope=Scope.from_key(row.scope),
        term=Term(row.term),
        audience=Audience(row.audience),
        bullets=tuple(
            Bullet(
                b["id"],
                b["text"],
                date.fromisoformat(b["day"]),
                tuple(b["ts"]),
                b.get("superseded_by"),
                tuple(b.get("heard_in", ())),
            )
            for b in row.bullets
        ),
        label=row.label,
        covered=row.covered,
        updated_at=row.updated_at,
    )


def row_to_digest(row: Any) -> Digest:
    """A digest from its `DigestRow` or a Core row of the digests table."""
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
