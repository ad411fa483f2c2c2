"""The conversation store on SQLModel: what the bot has seen in Slack, one session per call (writes made within
`writes_together` share one transaction).

Upserts and claims insert first and rely on the table keys to detect an existing row, so
callers racing from several threads never store a message twice nor claim it twice.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    Executable,
    Table,
    Text,
    and_,
    bindparam,
    case,
    cast,
    delete,
    exists,
    false,
    func,
    insert,
    or_,
    type_coerce,
    union_all,
    update,
)
from sqlalchemy import select as core_select
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, SQLModel, col, select

from myao2.domain.answers import PendingAnswer, Unfinished
from myao2.domain.conversation import (
    BotIdentity,
    Channel,
    ChannelChanges,
    ChannelKind,
    History,
    Message,
    Person,
    mentions_in,
    ts_to_datetime,
)
from myao2.domain.ports import Clock
from myao2.infrastructure.clock import SystemClock
from myao2.infrastructure.db.engine import (
    INSERT_IGNORING,
    one_connection,
    one_transaction,
    reading,
    take_write_lock,
    writing,
)
from myao2.infrastructure.db.memory_store import bullet_to_json, row_to_memory
from myao2.infrastructure.db.profile_store import fact_to_json, row_to_profile
from myao2.infrastructure.db.tables import (
    BotIdentityRow,
    ChannelRow,
    ClaimRow,
    DigestRow,
    ExpiredMessageRow,
    LeaseRow,
    MemoryRow,
    MessageRow,
    PersonRow,
    ProfileRow,
    StandingJudgmentRow,
    TombstoneRow,
)

TOMBSTONE_LIFETIME = timedelta(hours=1)
"""How long a deletion is remembered: longer than any history fetch takes."""


class SqlConversationStore:
    """`ConversationStore` over a SQLAlchemy engine (SQLite or PostgreSQL); safe to share between threads."""

    def __init__(self, engine: Engine, clock: Clock | None = None) -> None:
        self._engine = engine
        self._clock = clock or SystemClock()

    # -- messages ------------------------------------------------------------

    def save_message(self, message: Message) -> bool:
        with writing(self._engine) as connection:
            return _save_message(connection, message)

    def save_messages(self, messages: Sequence[Message]) -> None:
        """One statement run for all of `messages` (an executemany): a statement run for each cost more than the
        insert itself (~0.15 ms of SQLAlchemy's)."""
        if not messages:
            return
        with writing(self._engine) as connection:
            dialect = connection.dialect.name
            if dialect in INSERT_IGNORING:
                connection.execute(_insert_message(dialect), [_message_row(message) for message in messages])
                return
            for message in messages:
                _save_message(connection, message)

    def edit_message(self, channel_id: str, ts: str, text: str) -> bool:
        with writing(self._engine) as connection:
            return self._edit(connection, channel_id, ts, text)

    def delete_message(self, channel_id: str, ts: str) -> None:
        with writing(self._engine) as connection:
            self._delete(connection, channel_id, ts)

    def reconcile(self, history: History, fetched_at: datetime) -> list[Message]:
        """Make the stored messages of a channel match a history fetch started at `fetched_at`.

        New messages are stored (unless deleted meanwhile), changed texts updated unless
        an edit arrived after the fetch started, and messages the fetch shows to be
        deleted are deleted. Returns the messages that were new.
        """
        channel_id = history.channel_id
        since = ts_to_datetime(history.complete_after) - timedelta(seconds=1)
        held = core_select(*_MESSAGE, _MESSAGES.c.edited_at).where(
            MessageRow.channel_id == channel_id, col(MessageRow.posted_at) > since
        )
        if not history.top_level:  # a read of threads alone: the rest of the channel is not its to change
            held = held.where(col(MessageRow.thread_ts).in_(sorted(history.threads)))
        with writing(self._engine) as connection:
            take_write_lock(connection)  # an edit arriving meanwhile is not overwritten by the older fetched text
            rows = connection.execute(held.with_for_update()).all()
            stored = {row.ts: row for row in rows}
            new = []
            for message in history.messages:
                row = stored.get(message.ts)
                if row is None:
                    if _save_message(connection, message):
                        new.append(message)
                elif row.text != message.text and (row.edited_at is None or row.edited_at < fetched_at):
                    self._edit(connection, channel_id, message.ts, message.text)
            for gone in history.deleted((_to_message(row) for row in rows), fetched_at):
                self._delete(connection, channel_id, gone.ts)
            connection.execute(
                delete(TombstoneRow).where(
                    TombstoneRow.channel_id == channel_id,
                    col(TombstoneRow.deleted_at) < fetched_at - TOMBSTONE_LIFETIME,
                )
            )
        return new

    def _edit(self, connection: Connection, channel_id: str, ts: str, text: str) -> bool:
        """Change a message's text, if it is stored; the digest of its day, if any, is dropped to be made again
        from the new text, and a judgment made on its old text no longer stands.

        The same text again changes nothing (Slack reports a link preview added as an edit): nothing of it is
        made again, and the memory job does not read it as edited."""
        values = {"text": text, "mentions": list(mentions_in(text)), "edited_at": self._clock.now()}
        here = _message_key(channel_id, ts)
        if not connection.execute(update(MessageRow).where(*here, MessageRow.text != text).values(**values)).rowcount:
            return connection.execute(core_select(MessageRow.ts).where(*here)).first() is not None
        _drop_judgment(connection, channel_id, ts)
        _drop_digest(connection, channel_id, ts)
        _drop_notes(connection, ts)
        return True

    def _delete(self, connection: Connection, channel_id: str, ts: str) -> None:
        """Delete a message and leave a tombstone, so a history fetched earlier cannot bring it back.

        The digest of its day goes too: made again from what is left, if its raw messages are still kept. A claim
        of it whose answer has not begun to show is settled unanswered: the person took the message back.
        """
        connection.execute(delete(MessageRow).where(*_message_key(channel_id, ts)))
        connection.execute(_TAKEN_BACK, {"claim_channel": channel_id, "claim_ts": ts, "at": self._clock.now()})
        _drop_digest(connection, channel_id, ts)
        _drop_notes(connection, ts)
        values = {"channel_id": channel_id, "ts": ts, "deleted_at": self._clock.now()}
        insert_ignoring = INSERT_IGNORING.get(self._engine.dialect.name)
        if insert_ignoring is None:
            connection.execute(delete(TombstoneRow).where(TombstoneRow.channel_id == channel_id, TombstoneRow.ts == ts))
            connection.execute(insert(_table(TombstoneRow)).values(values))
        else:
            connection.execute(insert_ignoring(_table(TombstoneRow)).values(values).on_conflict_do_nothing())

    def thread_messages(self, channel_id: str, thread_ts: str, limit: int) -> list[Message]:
        return self._newest(_THREAD_NEWEST, channel=channel_id, thread=thread_ts, limit=limit)

    def one_connection(self) -> AbstractContextManager[None]:
        return one_connection(self._engine)

    def writes_together(self) -> AbstractContextManager[None]:
        return one_transaction(self._engine)

    def channel_messages(self, channel_id: str, limit: int, since: datetime | None = None) -> list[Message]:
        if since is None:
            return self._newest(_CHANNEL_NEWEST, channel=channel_id, limit=limit)
        return self._newest(_CHANNEL_NEWEST_SINCE, channel=channel_id, since=since, limit=limit)

    def messages_since(self, channel_id: str, since: datetime) -> list[Message]:
        with reading(self._engine) as connection:
            rows = connection.execute(
                core_select(*_MESSAGE)
                .where(MessageRow.channel_id == channel_id, col(MessageRow.posted_at) > since)
                .order_by(col(MessageRow.posted_at), col(MessageRow.ts))
            ).all()
        return [_to_message(r) for r in rows]

    def changes(self) -> dict[str, ChannelChanges]:
        left = select(ChannelRow.id).where(col(ChannelRow.left_at).is_not(None))
        query = (
            core_select(MessageRow.channel_id, func.max(MessageRow.ts), func.max(col(MessageRow.edited_at)))
            .where(col(MessageRow.channel_id).not_in(left))
            .group_by(MessageRow.channel_id)
        )
        with reading(self._engine) as connection:
            rows = connection.execute(query).all()
        return {channel: ChannelChanges(ts, edited) for channel, ts, edited in rows}

    def changed_messages(self, channel_id: str, after_ts: str, edited_after: datetime | None) -> list[Message]:
        edited = col(MessageRow.edited_at)
        changed = [MessageRow.ts > after_ts, edited.is_not(None) if edited_after is None else edited > edited_after]
        with reading(self._engine) as connection:
            rows = connection.execute(
                core_select(*_MESSAGE)
                .where(MessageRow.channel_id == channel_id, or_(*changed))
                .order_by(col(MessageRow.posted_at), col(MessageRow.ts))
            ).all()
        return [_to_message(r) for r in rows]

    def newest_by_author(self) -> dict[tuple[str, str], str]:
        query = (
            core_select(MessageRow.user_id, MessageRow.channel_id, func.max(MessageRow.ts))
            .where(col(MessageRow.user_id).is_not(None), col(MessageRow.is_bot).is_(False))
            .group_by(MessageRow.user_id, MessageRow.channel_id)
        )
        with reading(self._engine) as connection:
            rows = connection.execute(query).all()
        return {(user, channel): ts for user, channel, ts in rows}

    def messages_by(self, user_id: str, channel_ids: Iterable[str], after_ts: str, limit: int) -> list[Message]:
        with reading(self._engine) as connection:
            rows = connection.execute(
                core_select(*_MESSAGE)
                .where(
                    MessageRow.user_id == user_id,
                    col(MessageRow.channel_id).in_(list(channel_ids)),
                    MessageRow.ts > after_ts,
                )
                .order_by(col(MessageRow.ts))
                .limit(limit)
            ).all()
        return [_to_message(r) for r in rows]

    def messages_by_ids(self, ids: list[int]) -> dict[int, Message]:
        """The stored messages with these row ids, by id."""
        with reading(self._engine) as connection:
            rows = connection.execute(_BY_IDS, {"ids": ids}).all()
        return {row.id: _to_message(row) for row in rows}

    def around(self, message: Message, before: int, after: int, until: datetime | None = None) -> list[Message]:
        """`message` with up to `before` messages before it and `after` after it in its conversation
        (its thread, or the channel's top level), none posted after `until`; oldest first."""
        older, later = _AROUND[message.thread_ts is not None]
        values = {
            "channel": message.channel_id,
            "thread": message.thread_ts,
            "at": message.posted_at,
            "until": _NEVER if until is None else until,
        }
        with reading(self._engine) as connection:
            earlier = connection.execute(older, {**values, "n": before}).all() if before > 0 else []
            next_ones = connection.execute(later, {**values, "n": after}).all() if after > 0 else []
        return [*(_to_message(r) for r in reversed(earlier)), message, *(_to_message(r) for r in next_ones)]

    def neighbours(self, ids: list[int], until: datetime | None = None) -> dict[int, tuple[int | None, int | None]]:
        """For each stored message id, the ids of the messages just before and just after it in its flow
        (None where there is none; the later one only if posted at or before `until`).

        A reply's flow is its thread (the parent first); any other message's flow is its
        channel's top level. Migration 0019's triggers queue for the search index the
        messages whose earlier neighbour changed: keep the two in step.
        """
        if not ids:
            return {}
        values = {"ids": ids} if until is None else {"ids": ids, "until": until}
        with reading(self._engine) as connection:
            rows = connection.execute(_NEIGHBOURS[until is not None], values).all()
        return {row[0]: (row[1], row[2]) for row in rows}

    def message_keys_before(self, before: datetime) -> list[tuple[str, str, str | None]]:
        with reading(self._engine) as connection:
            rows = connection.execute(
                core_select(MessageRow.channel_id, MessageRow.ts, MessageRow.thread_ts)
                .where(col(MessageRow.posted_at) < before)
                .order_by(col(MessageRow.channel_id), col(MessageRow.posted_at), col(MessageRow.ts))
            ).all()
        return [(channel_id, ts, thread_ts) for channel_id, ts, thread_ts in rows]

    def messages_between(self, channel_id: str, start: datetime, end: datetime) -> list[Message]:
        with reading(self._engine) as connection:
            rows = connection.execute(
                core_select(*_MESSAGE)
                .where(
                    MessageRow.channel_id == channel_id,
                    col(MessageRow.posted_at) >= start,
                    col(MessageRow.posted_at) < end,
                )
                .order_by(col(MessageRow.posted_at), col(MessageRow.ts))
            ).all()
        return [_to_message(r) for r in rows]

    def active_threads(self, channel_id: str, since: datetime, user_id: str) -> set[str]:
        took_part = func.sum(case((MessageRow.user_id == user_id, 1), else_=0))
        with reading(self._engine) as connection:
            rows = connection.execute(
                core_select(MessageRow.thread_ts)
                .where(MessageRow.channel_id == channel_id, col(MessageRow.thread_ts).is_not(None))
                .group_by(MessageRow.thread_ts)
                .having(func.max(col(MessageRow.posted_at)) > since, took_part > 0)
            ).all()
        return {row[0] for row in rows}

    def replied_threads(self, since: datetime) -> list[tuple[str, str]]:
        latest = func.max(col(MessageRow.posted_at))
        with reading(self._engine) as connection:
            rows = connection.execute(
                core_select(MessageRow.channel_id, MessageRow.thread_ts)
                .where(col(MessageRow.posted_at) > since, MessageRow.ts != MessageRow.thread_ts)
                .group_by(MessageRow.channel_id, MessageRow.thread_ts)
                .order_by(latest.desc(), MessageRow.channel_id, MessageRow.thread_ts)
            ).all()
        return [(row.channel_id, row.thread_ts) for row in rows]

    def expire_messages(self, channel_id: str, ts: Sequence[str]) -> None:
        if not ts:
            return
        messages = _table(MessageRow)
        gone = messages.c.channel_id == channel_id, messages.c.ts.in_(list(ts))
        with writing(self._engine) as connection:
            connection.execute(
                insert(_table(ExpiredMessageRow)).from_select(
                    ["channel_id", "ts", "user_id"],
                    core_select(messages.c.channel_id, messages.c.ts, messages.c.user_id).where(*gone),
                )
            )
            connection.execute(delete(messages).where(*gone))
            connection.execute(  # what an answer to one of them keeps of its words (`keep_ending`, `keep_tasks`) goes
                update(_CLAIMS)
                .where(
                    _CLAIMS.c.channel_id == channel_id,
                    _CLAIMS.c.ts.in_(list(ts)),
                    or_(_CLAIMS.c.ending.is_not(None), _CLAIMS.c.tasks.is_not(None)),
                )
                .values(ending=None, tasks=None)
            )

    def channels(self) -> list[Channel]:
        """Every stored channel, those the bot has left included."""
        with reading(self._engine) as connection:
            rows = connection.execute(_ALL_CHANNELS).all()
        return [_to_channel(r) for r in rows]

    # -- channels and people -------------------------------------------------

    def save_channel(self, channel: Channel, as_of: datetime | None = None) -> None:
        now = self._clock.now()
        # Stamped as of when Slack said it: what was stored since (a kind an event set, a newer lookup) stands.
        values = {"name": channel.name, "kind": channel.kind.value, "updated_at": now if as_of is None else as_of}
        row = {"id": channel.id, **values, "ext_shared": channel.ext_shared, "left_at": None if channel.is_member else now}
        if not self._insert(ChannelRow, row):
            older = [] if as_of is None else [col(ChannelRow.updated_at) < as_of]
            # A DM's people never change: once with people of another organisation, it stays so (Slack's listing
            # of a DM may not say it).
            if channel.ext_shared:
                values["ext_shared"] = True
            self._update(ChannelRow, [ChannelRow.id == channel.id, *older], values)
            if channel.is_member:
                newer = [] if as_of is None else [col(ChannelRow.left_at) < as_of]
                self._update(ChannelRow, [ChannelRow.id == channel.id, *newer], {"left_at": None})
            else:
                self._leave([ChannelRow.id == channel.id, *older])

    def set_channel_kind(self, channel_id: str, kind: ChannelKind) -> None:
        self._update(ChannelRow, [ChannelRow.id == channel_id], {"kind": kind.value, "updated_at": self._clock.now()})

    def leave_channel(self, channel_id: str) -> None:
        self._leave([ChannelRow.id == channel_id])

    def channel_deleted(self, channel_id: str) -> None:
        self._leave([ChannelRow.id == channel_id])
        self._update(ChannelRow, [ChannelRow.id == channel_id], {"deleted_at": self._clock.now()})

    def leave_channels_except(self, channel_ids: Iterable[str], as_of: datetime) -> None:
        self._leave([col(ChannelRow.id).not_in(list(channel_ids)), col(ChannelRow.updated_at) < as_of])

    def get_channel(self, channel_id: str) -> Channel | None:
        with reading(self._engine) as connection:
            row = connection.execute(_ONE_CHANNEL, {"channel": channel_id}).first()
        return None if row is None else _to_channel(row)

    def active_channels(self, since: datetime) -> list[Channel]:
        """One look-up of the (channel_id, posted_at) index per channel, not a scan of every message's entry."""
        active = exists().where(MessageRow.channel_id == ChannelRow.id, col(MessageRow.posted_at) > since)
        with Session(self._engine) as session:
            rows = session.exec(select(ChannelRow).where(active, col(ChannelRow.left_at).is_(None))).all()
        return [_to_channel(r) for r in rows]

    def _leave(self, where: list[Any]) -> None:
        """Record the bot's leaving of the channels matching `where` (the first leaving counts)."""
        self._update(ChannelRow, [*where, col(ChannelRow.left_at).is_(None)], {"left_at": self._clock.now()})

    def save_person(self, person: Person) -> None:
        values = {
            "display_name": person.display_name,
            "is_bot": person.is_bot,
            "updated_at": self._clock.now(),
        }
        if not self._insert(PersonRow, {"user_id": person.user_id, **values}):
            self._update(PersonRow, [PersonRow.user_id == person.user_id], values)

    def people(self, user_ids: Iterable[str] | None = None) -> dict[str, Person]:
        query = core_select(_table(PersonRow))
        if user_ids is not None:
            query = query.where(col(PersonRow.user_id).in_(list(user_ids)))
        with reading(self._engine) as connection:
            rows = connection.execute(query).all()
        return {
            r.user_id: Person(user_id=r.user_id, display_name=r.display_name, is_bot=r.is_bot)
            for r in rows
        }

    def save_identity(self, identity: BotIdentity) -> None:
        values = {
            "user_id": identity.user_id,
            "bot_id": identity.bot_id,
            "team_id": identity.team_id,
            "updated_at": self._clock.now(),
        }
        if not self._insert(BotIdentityRow, {"id": 1, **values}):
            self._update(BotIdentityRow, [BotIdentityRow.id == 1], values)

    def identity(self) -> BotIdentity | None:
        with Session(self._engine) as session:
            row = session.get(BotIdentityRow, 1)
        return None if row is None else BotIdentity(row.user_id, row.bot_id, row.team_id)

    # -- answers -------------------------------------------------------------

    def claim(
        self, channel_id: str, ts: str, retry_at: datetime | None = None, *, holder: str | None = None
    ) -> bool:
        values = {
            "channel_id": channel_id,
            "ts": ts,
            "claimed_at": self._clock.now(),
            "holder": holder,
            "attempts": 0 if retry_at is None else 1,
            "next_attempt_at": retry_at,
        }
        return self._insert(ClaimRow, values, unless_deleted=True)

    def next_attempt(
        self, channel_id: str, ts: str, attempts: int, retry_at: datetime, *, holder: str | None = None
    ) -> bool:
        claims = _table(ClaimRow)
        with writing(self._engine) as connection:
            return connection.execute(
                update(claims)
                .where(*_claim_key(channel_id, ts), claims.c.settled_at.is_(None), claims.c.attempts == attempts)
                .values(attempts=attempts + 1, next_attempt_at=retry_at, holder=holder)
            ).rowcount == 1

    def release(self, channel_id: str, ts: str, now: datetime) -> None:
        claims = _table(ClaimRow)
        with writing(self._engine) as connection:
            connection.execute(
                update(claims)
                .where(*_claim_key(channel_id, ts), claims.c.settled_at.is_(None), claims.c.attempts > 0)
                .values(attempts=claims.c.attempts - 1, next_attempt_at=now, holder=None)
            )

    def holds(self, channel_id: str, ts: str, holder: str | None) -> bool:
        with reading(self._engine) as connection:
            return connection.execute(_HELD, {"claim_channel": channel_id, "claim_ts": ts, "claim_holder": holder}).first() is not None

    def begin_showing(self, channel_id: str, ts: str, *, holder: str | None = None, inside: bool = False) -> bool:
        values = {"claim_channel": channel_id, "claim_ts": ts, "claim_holder": holder}
        with writing(self._engine) as connection:
            return connection.execute(_BEGIN_SHOWING_INSIDE if inside else _BEGIN_SHOWING, values).rowcount == 1

    def start_answer(self, channel_id: str, ts: str, answer_ts: str, *, holder: str | None = None) -> bool:
        values = {"claim_channel": channel_id, "claim_ts": ts, "answer": answer_ts, "claim_holder": holder}
        with writing(self._engine) as connection:
            return connection.execute(_START_ANSWER, values).rowcount == 1

    def note_unheard_start(self, channel_id: str, ts: str, digest: str, *, holder: str | None = None) -> bool:
        values = {"claim_channel": channel_id, "claim_ts": ts, "digest": digest, "claim_holder": holder}
        with writing(self._engine) as connection:
            return connection.execute(_NOTE_UNHEARD_START, values).rowcount == 1

    def keep_ending(self, channel_id: str, ts: str, answer_ts: str, ending: str, *, holder: str | None = None) -> bool:
        values = {"claim_channel": channel_id, "claim_ts": ts, "answer": answer_ts, "ending": ending, "claim_holder": holder}
        with writing(self._engine) as connection:
            return connection.execute(_KEEP_ENDING, values).rowcount == 1

    def keep_tasks(self, channel_id: str, ts: str, tasks: dict[str, str], *, holder: str | None = None) -> bool:
        values = {"claim_channel": channel_id, "claim_ts": ts, "tasks": tasks or None, "claim_holder": holder}
        with writing(self._engine) as connection:
            return connection.execute(_KEEP_TASKS, values).rowcount == 1

    def unfinished_answer(self, channel_id: str, ts: str) -> Unfinished | None:
        claims = _CLAIMS.c
        with reading(self._engine) as connection:
            row = connection.execute(
                core_select(claims.answer_ts, claims.showing, claims.unheard_start, claims.ending, claims.tasks).where(
                    *_claim_key(channel_id, ts), claims.settled_at.is_(None)
                )
            ).first()
        return None if row is None else Unfinished(row[0], bool(row[1]), row[2], row[3], row[4])

    def showing_unheard_beside(self, channel_id: str, ts: str, thread_ts: str | None) -> set[str | None]:
        in_thread = (
            col(MessageRow.thread_ts).is_(None)
            if thread_ts is None
            else func.coalesce(MessageRow.thread_ts, MessageRow.ts) == thread_ts
        )
        with reading(self._engine) as connection:
            return set(
                connection.execute(
                    core_select(_CLAIMS.c.holder)
                    .join(MessageRow, (MessageRow.channel_id == _CLAIMS.c.channel_id) & (MessageRow.ts == _CLAIMS.c.ts))
                    .where(
                        _CLAIMS.c.channel_id == channel_id,
                        _CLAIMS.c.ts != ts,
                        _CLAIMS.c.showing.is_(True),
                        _CLAIMS.c.answer_ts.is_(None),
                        _CLAIMS.c.settled_at.is_(None),
                        in_thread,
                    )
                    .distinct()
                ).scalars()
            )

    def known_answers(self, channel_id: str, ts: Iterable[str]) -> set[str]:
        wanted = list(ts)
        if not wanted:
            return set()
        with reading(self._engine) as connection:
            rows = connection.execute(
                core_select(_CLAIMS.c.answer_ts).where(_CLAIMS.c.channel_id == channel_id, _CLAIMS.c.answer_ts.in_(wanted))
            ).scalars()
            return {row for row in rows if row is not None}

    def settle(self, channel_id: str, ts: str, answer_ts: str | None, *, holder: str | None = None) -> bool:
        values = {"claim_channel": channel_id, "claim_ts": ts, "answer": answer_ts, "at": self._clock.now(), "claim_holder": holder}
        with writing(self._engine) as connection:
            return connection.execute(_SETTLE, values).rowcount == 1

    def due_answers(self, now: datetime, since: datetime, *, holder: str | None = None) -> list[PendingAnswer]:
        with reading(self._engine) as connection:
            rows = connection.execute(
                core_select(*_MESSAGE, _CLAIMS.c.attempts)
                .join(_CLAIMS, (_CLAIMS.c.channel_id == MessageRow.channel_id) & (_CLAIMS.c.ts == MessageRow.ts))
                .where(
                    col(ClaimRow.settled_at).is_(None),
                    col(ClaimRow.next_attempt_at) <= now,
                    col(MessageRow.posted_at) > since,
                    _free_for(holder, now),
                )
                .order_by(col(MessageRow.posted_at), col(MessageRow.ts))
            ).all()
        return [PendingAnswer(_to_message(row), row.attempts) for row in rows]

    def next_due(self, now: datetime, since: datetime, *, holder: str | None = None) -> datetime | None:
        with reading(self._engine) as connection:
            return connection.execute(
                core_select(func.min(_CLAIMS.c.next_attempt_at))
                .join(MessageRow, (ClaimRow.channel_id == MessageRow.channel_id) & (ClaimRow.ts == MessageRow.ts))
                .where(
                    col(ClaimRow.settled_at).is_(None),
                    col(ClaimRow.next_attempt_at) > now,
                    col(MessageRow.posted_at) > since,
                    _free_for(holder, now),
                )
            ).scalar_one()

    def claimed(self, channel_id: str, ts: Iterable[str]) -> set[str]:
        with Session(self._engine) as session:
            rows = session.exec(
                select(ClaimRow.ts).where(ClaimRow.channel_id == channel_id, col(ClaimRow.ts).in_(list(ts)))
            ).all()
        return set(rows)

    def unclaimed_mentions(self, user_id: str, since: datetime, until: datetime) -> list[Message]:
        mentions_text = type_coerce(col(MessageRow.mentions), Text)
        in_dm = select(ChannelRow.id).where(ChannelRow.kind == ChannelKind.IM.value)
        left = select(ChannelRow.id).where(col(ChannelRow.left_at).is_not(None))
        claimed = exists().where(
            ClaimRow.channel_id == MessageRow.channel_id, ClaimRow.ts == MessageRow.ts
        )
        with reading(self._engine) as connection:
            rows = connection.execute(
                core_select(*_MESSAGE)
                .where(
                    col(MessageRow.posted_at) > since,
                    col(MessageRow.posted_at) <= until,
                    col(MessageRow.is_bot).is_(False),
                    or_(
                        mentions_text.contains(json.dumps(user_id), autoescape=True),
                        col(MessageRow.channel_id).in_(in_dm),
                    ),
                    ~claimed,
                    col(MessageRow.channel_id).not_in(left),
                )
                .order_by(col(MessageRow.posted_at), col(MessageRow.ts))
            ).all()
        return [_to_message(r) for r in rows]

    # -- helpers -------------------------------------------------------------

    def _insert(self, model: type[SQLModel], values: dict[str, Any], *, unless_deleted: bool = False) -> bool:
        """Insert a row in its own transaction (or the one `writes_together` holds, on SQLite and PostgreSQL);
        False when its key is already taken, or (`unless_deleted`) its message was deleted.

        A Core statement built once per table, columns and dialect (`_insert_ignoring`), the values bound
        at each run; on SQLite and PostgreSQL no exception for a taken key.
        """
        dialect = self._engine.dialect.name
        statement = _insert_ignoring(_table(model), tuple(values), dialect, unless_deleted)
        if dialect in INSERT_IGNORING:
            with writing(self._engine) as connection:
                return connection.execute(statement, values).rowcount == 1
        try:
            with self._engine.begin() as connection:
                return connection.execute(statement, values).rowcount == 1
        except IntegrityError:
            return False

    def _update(self, model: type[SQLModel], where: list[Any], values: dict[str, Any]) -> None:
        with writing(self._engine) as connection:
            connection.execute(update(_table(model)).where(*where).values(**values))

    def _newest(self, query: Executable, **params: object) -> list[Message]:
        """The messages of one of the `_newest` statements below, oldest first."""
        with reading(self._engine) as connection:
            rows = connection.execute(query, params).all()
        return [_to_message(r) for r in reversed(rows)]


_MESSAGES: Table = MessageRow.__table__  # type: ignore[attr-defined]
_MESSAGE_COLUMNS = ("channel_id", "ts", "user_id", "text", "user_name", "is_bot", "thread_ts", "mentions", "posted_at")
"""The columns of a message row, each filled from the `Message` attribute of its name: its fields in their order,
then `posted_at` (its ts as a datetime)."""
_MESSAGE = (
    *(_MESSAGES.c[name] for name in _MESSAGE_COLUMNS[:-2]),
    type_coerce(_MESSAGES.c.mentions, Text).label("mentions"),
)
"""The columns a `Message` is made of, the first of every read of messages: `_to_message` reads them by position
(the mentions as their JSON text, see `_mentions`)."""

# Statements of the calls every answer makes, built once (building one cost more than running it).
_CHANNELS, _CLAIMS = ChannelRow.__table__, ClaimRow.__table__  # type: ignore[attr-defined]
_ONE_CHANNEL = core_select(_CHANNELS).where(_CHANNELS.c.id == bindparam("channel"))
_ALL_CHANNELS = core_select(
    _CHANNELS.c.id, _CHANNELS.c.name, _CHANNELS.c.kind, _CHANNELS.c.left_at, _CHANNELS.c.deleted_at, _CHANNELS.c.ext_shared
)
_THIS_CLAIM = (_CLAIMS.c.channel_id == bindparam("claim_channel"), _CLAIMS.c.ts == bindparam("claim_ts"))
_HELD_HERE = (*_THIS_CLAIM, _CLAIMS.c.holder.is_not_distinct_from(bindparam("claim_holder", type_=_CLAIMS.c.holder.type)))
"""The claim, held by `holder` still: one taken over while its holder stalled is no longer changed by it."""
_HELD = core_select(_CLAIMS.c.ts).where(*_HELD_HERE, _CLAIMS.c.settled_at.is_(None))
_BEGIN_SHOWING = update(_CLAIMS).where(*_HELD_HERE, _CLAIMS.c.settled_at.is_(None)).values(showing=True, tasks=None)
_READ_INSIDE = exists(
    core_select(_CHANNELS.c.id).where(
        _CHANNELS.c.id == bindparam("claim_channel"),
        _CHANNELS.c.kind != ChannelKind.SHARED.value,
        _CHANNELS.c.ext_shared == false(),
    )
)
"""The claim's conversation is stored as one of the workspace's (`Reader.of` not outside), in SQL."""
_BEGIN_SHOWING_INSIDE = _BEGIN_SHOWING.where(_READ_INSIDE)
_NOTE_UNHEARD_START = (
    update(_CLAIMS).where(*_HELD_HERE, _CLAIMS.c.settled_at.is_(None)).values(unheard_start=bindparam("digest"))
)
_START_ANSWER = update(_CLAIMS).where(*_HELD_HERE, _CLAIMS.c.settled_at.is_(None)).values(answer_ts=bindparam("answer"))
_KEEP_ENDING = (
    update(_CLAIMS)
    .where(*_HELD_HERE, _CLAIMS.c.settled_at.is_(None), _CLAIMS.c.answer_ts == bindparam("answer"))
    .values(ending=bindparam("ending"))
)
_KEEP_TASKS = update(_CLAIMS).where(*_HELD_HERE, _CLAIMS.c.settled_at.is_(None)).values(tasks=bindparam("tasks"))
_SETTLE = (
    update(_CLAIMS)
    .where(*_HELD_HERE)
    .values(answer_ts=bindparam("answer"), settled_at=bindparam("at"), ending=None, tasks=None)
)
_TAKEN_BACK = (
    update(_CLAIMS)
    .where(*_THIS_CLAIM, _CLAIMS.c.settled_at.is_(None), _CLAIMS.c.showing == false())
    .values(settled_at=bindparam("at"))
)
"""A claim whose message was deleted before its answer began to show, settled unanswered (whoever holds it)."""


def _around(in_thread: bool) -> tuple[Executable, Executable]:
    """The messages before (newest first) and after (oldest first) the one at `at` in its flow: its thread,
    or the channel's top level; `n` of them, the later ones up to `until` (the statements of `around`)."""
    messages = _MESSAGES
    flow = (
        or_(messages.c.thread_ts == bindparam("thread"), messages.c.ts == bindparam("thread"))
        if in_thread
        else or_(messages.c.thread_ts.is_(None), messages.c.thread_ts == messages.c.ts)
    )
    here = (messages.c.channel_id == bindparam("channel"), flow)
    older = (
        core_select(*_MESSAGE)
        .where(*here, messages.c.posted_at < bindparam("at"))
        .order_by(messages.c.posted_at.desc(), messages.c.ts.desc())
        .limit(bindparam("n"))
    )
    later = (
        core_select(*_MESSAGE)
        .where(*here, messages.c.posted_at > bindparam("at"), messages.c.posted_at <= bindparam("until"))
        .order_by(messages.c.posted_at, messages.c.ts)
        .limit(bindparam("n"))
    )
    return older, later


_AROUND = {in_thread: _around(in_thread) for in_thread in (False, True)}
_BY_IDS = core_select(*_MESSAGE, _MESSAGES.c.id).where(_MESSAGES.c.id.in_(bindparam("ids", expanding=True)))


def _neighbours(until: bool) -> Executable:
    """Of each message among `ids`: the ids of the messages just before and just after it in its flow,
    the later one only if posted at or before `until` when `until` is bound (the statement of `neighbours`)."""
    table = _MESSAGES
    other = table.alias("other")
    reply = and_(table.c.thread_ts.is_not(None), table.c.thread_ts != table.c.ts)
    same_flow = or_(
        and_(reply, or_(other.c.thread_ts == table.c.thread_ts, other.c.ts == table.c.thread_ts)),
        and_(~reply, or_(other.c.thread_ts.is_(None), other.c.thread_ts == other.c.ts)),
    )
    flow = [other.c.channel_id == table.c.channel_id, same_flow]
    earlier = (
        core_select(other.c.id)
        .where(*flow, other.c.posted_at < table.c.posted_at)
        .order_by(other.c.posted_at.desc(), other.c.ts.desc())
        .limit(1)
        .scalar_subquery()
    )
    later_conditions = [*flow, other.c.posted_at > table.c.posted_at]
    if until:
        later_conditions.append(other.c.posted_at <= bindparam("until", type_=table.c.posted_at.type))
    later = (
        core_select(other.c.id)
        .where(*later_conditions)
        .order_by(other.c.posted_at, other.c.ts)
        .limit(1)
        .scalar_subquery()
    )
    return core_select(table.c.id, earlier, later).where(table.c.id.in_(bindparam("ids", expanding=True)))


_NEIGHBOURS = {until: _neighbours(until) for until in (False, True)}
_NEVER = datetime.max.replace(tzinfo=timezone.utc)
"""A cutoff later than any message."""


def _save_message(connection: Connection, message: Message) -> bool:
    """Insert a message unless its (channel, ts) is stored or was deleted (in Slack, or by retention); True when inserted.

    One statement, so a deletion committed meanwhile by another thread is respected.
    """
    statement = _insert_message(connection.dialect.name)
    if connection.dialect.name in INSERT_IGNORING:
        return connection.execute(statement, _message_row(message)).rowcount == 1
    try:
        with connection.begin_nested():
            return connection.execute(statement, _message_row(message)).rowcount == 1
    except IntegrityError:
        return False


@lru_cache(maxsize=None)
def _insert_ignoring(table: Table, columns: tuple[str, ...], dialect: str, unless_deleted: bool = False) -> Executable:
    """`_insert`'s statement, built once (building it cost more than running it): a row of `columns`,
    their values bound at each run, skipped where the dialect can skip a taken key; with `unless_deleted`, also
    where the message its `channel_id` and `ts` name was deleted (in Slack, or by retention)."""
    values = {name: bindparam(name, type_=table.c[name].type) for name in columns}
    insert_ignoring = INSERT_IGNORING.get(dialect)
    statement = insert(table) if insert_ignoring is None else insert_ignoring(table)
    if unless_deleted:
        here = (values["channel_id"], values["ts"])
        tombstoned = exists().where(TombstoneRow.channel_id == here[0], TombstoneRow.ts == here[1])
        expired = exists().where(ExpiredMessageRow.channel_id == here[0], ExpiredMessageRow.ts == here[1])
        statement = statement.from_select(list(values), core_select(*values.values()).where(~tombstoned, ~expired))
    else:
        statement = statement.values(values)
    return statement if insert_ignoring is None else statement.on_conflict_do_nothing()


@lru_cache(maxsize=None)
def _insert_message(dialect: str) -> Executable:
    """The statement of `_save_message`, the message's values bound at each run: those of `_message_row`."""
    return _insert_ignoring(_table(MessageRow), _MESSAGE_COLUMNS, dialect, unless_deleted=True)


def _drop_digest(connection: Connection, channel_id: str, ts: str) -> None:
    """Delete the digest made from message `ts`, if any (it still holds what the message said)."""
    digests = _table(DigestRow)
    connection.execute(
        delete(digests).where(digests.c.channel_id == channel_id, digests.c.first_ts <= ts, digests.c.last_ts >= ts)
    )


def _drop_judgment(connection: Connection, channel_id: str, ts: str) -> None:
    """Message `ts` has new text: a judgment on joining its conversation made on it (its newest then) no longer
    stands, to be made again. One made on a newer message stands."""
    standing = _table(StandingJudgmentRow)
    connection.execute(delete(standing).where(standing.c.channel_id == channel_id, standing.c.newest_ts == ts))


def _drop_notes(connection: Connection, ts: str) -> None:
    """Drop the memory bullets and profile facts made from message `ts` (they may hold its old words); the
    memory job reads an edited message again."""
    for model, column in ((MemoryRow, "bullets"), (ProfileRow, "facts")):
        table = _table(model)
        key = table.primary_key.columns.values()[0]
        held = cast(table.c[column], Text).contains(f'"{ts}"')  # a cheap filter; the domain decides
        for row in connection.execute(core_select(table).where(held).order_by(key).with_for_update()).all():
            if model is MemoryRow:
                memory = row_to_memory(row)
                kept: list[dict[str, Any]] = [bullet_to_json(b) for b in memory.without_sources({ts}).bullets]
            else:
                kept = [fact_to_json(f) for f in row_to_profile(row).without_sources({ts}).facts]
            if kept != row._mapping[column]:
                connection.execute(update(table).where(key == row._mapping[key.name]).values({column: kept}))


def _free_for(holder: str | None, now: datetime) -> Any:
    """Claims `holder` may take up: its own, nobody's, and those of replicas whose own lease expired (gone)."""
    alive = exists().where(LeaseRow.name == ClaimRow.holder, LeaseRow.holder == ClaimRow.holder, LeaseRow.expires_at >= now)
    return or_(col(ClaimRow.holder).is_(None), ClaimRow.holder == holder, ~alive)


def _table(model: type[SQLModel]) -> Table:
    return model.__table__  # type: ignore[attr-defined, no-any-return]


def _message_key(channel_id: str, ts: str) -> list[Any]:
    return [MessageRow.channel_id == channel_id, MessageRow.ts == ts]


def _claim_key(channel_id: str, ts: str) -> list[Any]:
    claims = _table(ClaimRow)
    return [claims.c.channel_id == channel_id, claims.c.ts == ts]


def _newest_first() -> tuple[Any, ...]:
    """Posting order, newest first: `posted_at` is the ts as sortable text, `ts` breaks ties."""
    return col(MessageRow.posted_at).desc(), col(MessageRow.ts).desc()


def _newest(*conditions: Any) -> Executable:
    """The newest `limit` messages matching `conditions`, newest first (see `SqlConversationStore._newest`):
    only the columns `_to_message` reads (the datetimes, which cost most of making a row, are left unread)."""
    return core_select(*_MESSAGE).where(*conditions).order_by(*_newest_first()).limit(bindparam("limit"))


def _thread_newest() -> Executable:
    """The newest `limit` messages of thread `thread` in `channel`, newest first, as `_newest` reads them: its
    replies (by the thread's index) and its parent (by its key), each found where it is kept. Read as one
    condition (its ts or its thread's), the thread was looked for by walking the channel in posting order, newest
    first, until `limit` of its messages were found: the whole channel, for a thread shorter than that."""
    thread = bindparam("thread")
    posted_at = type_coerce(MessageRow.posted_at, Text).label("posted_at")  # to order by, never read
    replies = core_select(*_MESSAGE, posted_at).where(_IN_CHANNEL, MessageRow.thread_ts == thread)
    parent = core_select(*_MESSAGE, posted_at).where(
        _IN_CHANNEL, MessageRow.ts == thread, or_(col(MessageRow.thread_ts).is_(None), MessageRow.thread_ts != thread)
    )
    # Gathered first (materialized), then ordered: ordered as they are read, each part walked the channel again.
    thread_rows = union_all(replies, parent).cte("thread_rows").prefix_with("MATERIALIZED")
    columns = thread_rows.c
    return (
        core_select(*(columns[name] for name in (*_MESSAGE_COLUMNS[:-2], "mentions")))
        .order_by(columns.posted_at.desc(), columns.ts.desc())
        .limit(bindparam("limit"))
    )


# The reads of the recent conversation every prompt makes, built once like the statements above.
_IN_CHANNEL = MessageRow.channel_id == bindparam("channel")
_TOP_LEVEL = or_(col(MessageRow.thread_ts).is_(None), MessageRow.thread_ts == MessageRow.ts)
_THREAD_NEWEST = _thread_newest()
_CHANNEL_NEWEST = _newest(_IN_CHANNEL, _TOP_LEVEL)
_CHANNEL_NEWEST_SINCE = _newest(_IN_CHANNEL, _TOP_LEVEL, col(MessageRow.posted_at) > bindparam("since"))


def _message_row(message: Message) -> dict[str, Any]:
    row = {name: getattr(message, name) for name in _MESSAGE_COLUMNS}
    row["mentions"] = list(message.mentions)
    return row


def _to_channel(row: Any) -> Channel:
    """A channel from a `ChannelRow` or a Core row of the channels table."""
    return Channel(
        id=row.id,
        name=row.name,
        kind=ChannelKind(row.kind),
        is_member=row.left_at is None,
        deleted=row.deleted_at is not None,
        ext_shared=row.ext_shared,
    )


def _to_message(row: Any) -> Message:
    """A message from a row whose first columns are `_MESSAGE`, read by position: reading a column by its name
    cost more than making the message (an AttributeError formatted at each, then caught)."""
    return Message(*row[:7], _mentions(row[7]))


@lru_cache(maxsize=1024)
def _mentions(stored: str) -> tuple[str, ...]:
    """A message's mentions from their stored JSON text, parsed once per text: the messages read are mostly those
    of a few people, who mention the same few (json.loads of each row's cost more than the rest of making it)."""
    return tuple(json.loads(stored))
