"""`AutonomyStore` on the bot's database: standing judgments, which conversations have something new since
theirs, and the bot's unasked posts (read from the activity log)."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from sqlalchemy import ColumnElement, Engine, Subquery, Table, and_, bindparam, delete, exists, func, or_
from sqlalchemy import select as core_select

from myao2.domain.activity import ReplyKind
from myao2.domain.conversation import Message
from myao2.infrastructure.db.conversation_store import _MESSAGE, _to_message
from myao2.domain.judgment import ConversationKey
from myao2.infrastructure.db.engine import INSERT_IGNORING, reading, take_write_lock, writing
from myao2.infrastructure.db.tables import MessageRow, ReplyRow, StandingJudgmentRow

_MESSAGES: Table = MessageRow.__table__  # type: ignore[attr-defined]
_STANDING: Table = StandingJudgmentRow.__table__  # type: ignore[attr-defined]
_REPLIES: Table = ReplyRow.__table__  # type: ignore[attr-defined]
_TOP_LEVEL = ""
"""`standing_judgments.thread_ts` of a channel's top-level flow."""


class SqlAutonomyStore:
    """`AutonomyStore` over a SQLAlchemy engine (SQLite or PostgreSQL); safe to share between threads."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        inserting = INSERT_IGNORING[engine.dialect.name](_STANDING)
        # Another replica may stand a judgment on the same conversation at once (one stalled past its lease):
        # the last to commit replaces the other's, instead of failing on its key.
        self._stand = inserting.on_conflict_do_update(
            index_elements=[_STANDING.c.channel_id, _STANDING.c.thread_ts],
            set_={"newest_ts": inserting.excluded.newest_ts, "until": inserting.excluded.until},
        )

    def unjudged(self, channel_ids: Collection[str], since: datetime, now: datetime) -> list[Message]:
        if not channel_ids:
            return []
        with reading(self._engine) as connection:
            rows = connection.execute(_UNJUDGED, {"channels": list(channel_ids), "since": since, "now": now}).all()
        return [_to_message(row) for row in rows]

    def is_newest(self, key: ConversationKey, ts: str) -> bool:
        with reading(self._engine) as connection:
            if key.thread_ts is None:
                found = connection.execute(_IS_NEWEST_OF_FLOW, {"channel": key.channel_id, "ts": ts})
            else:
                found = connection.execute(
                    _IS_NEWEST_OF_THREAD, {"channel": key.channel_id, "thread": key.thread_ts, "ts": ts}
                )
            return found.first() is not None

    def counts_since(self, channel_ids: Collection[str], since: datetime) -> dict[str, int]:
        if not channel_ids:
            return {}
        with reading(self._engine) as connection:
            rows = connection.execute(_COUNTS, {"channels": list(channel_ids), "since": since}).all()
        return {channel: count for channel, count in rows}

    def stand(self, key: ConversationKey, newest: Message, until: datetime, now: datetime) -> bool:
        with writing(self._engine) as connection:
            # An edit of the message waits for this (or this for it, and then reads its new text): it drops what
            # stands on the message's old text in the transaction that writes the new one.
            take_write_lock(connection)
            stored = connection.execute(_TEXT_NOW, {"channel": key.channel_id, "ts": newest.ts}).first()
            still = stored is not None and stored.text == newest.text
            if still and until > now:
                thread = key.thread_ts or _TOP_LEVEL
                row = {"channel_id": key.channel_id, "thread_ts": thread, "newest_ts": newest.ts, "until": until}
                connection.execute(self._stand, row)
            elif still:
                connection.execute(delete(_STANDING).where(*_here(key)))
            connection.execute(delete(_STANDING).where(_STANDING.c.until <= now))
            return still

    def drop(self, key: ConversationKey) -> None:
        with writing(self._engine) as connection:
            connection.execute(delete(_STANDING).where(*_here(key)))

    def unasked_posts(self, since: datetime) -> dict[str, list[datetime]]:
        posts: dict[str, list[datetime]] = {}
        with reading(self._engine) as connection:
            for channel, at in connection.execute(_UNASKED, {"since": since}).all():
                posts.setdefault(channel, []).append(at)
        return posts


def _here(key: ConversationKey) -> tuple[object, ...]:
    return _STANDING.c.channel_id == key.channel_id, _STANDING.c.thread_ts == (key.thread_ts or _TOP_LEVEL)


def _conversations(*where: ColumnElement[bool]) -> tuple[Subquery, ColumnElement[bool]]:
    """The conversations of the messages `where` selects, each with the ts of its newest message (`newest`), and
    the condition that it counts: a thread, or a top-level flow whose newest message started no thread with a
    reply (answered there). The rule of `unjudged` and `is_newest`."""
    messages = _MESSAGES
    conversations = (
        core_select(messages.c.channel_id, messages.c.thread_ts, func.max(messages.c.ts).label("newest"))
        .where(*where)
        .group_by(messages.c.channel_id, messages.c.thread_ts)
        .subquery("conversations")
    )
    reply = messages.alias("reply")
    # A reply is posted after its parent: one to the flow's newest message is in the window too.
    answered_in_thread = exists().where(
        reply.c.channel_id == conversations.c.channel_id, reply.c.thread_ts == conversations.c.newest
    )
    return conversations, or_(conversations.c.thread_ts.is_not(None), ~answered_in_thread)


def _unjudged() -> object:
    """The statement of `unjudged`: the conversations by the messages' (channel_id, posted_at) index, their
    threads by the thread index; of the messages, only each conversation's newest is read whole."""
    messages = _MESSAGES
    conversations, counts = _conversations(
        messages.c.channel_id.in_(bindparam("channels", expanding=True)),
        messages.c.posted_at > bindparam("since", type_=messages.c.posted_at.type),
    )
    standing = exists().where(
        _STANDING.c.channel_id == conversations.c.channel_id,
        _STANDING.c.thread_ts == func.coalesce(conversations.c.thread_ts, _TOP_LEVEL),
        _STANDING.c.newest_ts == conversations.c.newest,
        _STANDING.c.until > bindparam("now", type_=_STANDING.c.until.type),
    )
    newest = and_(messages.c.channel_id == conversations.c.channel_id, messages.c.ts == conversations.c.newest)
    return (
        core_select(*_MESSAGE)
        .select_from(conversations.join(messages, newest))
        .where(~standing, counts)
        .order_by(messages.c.posted_at, messages.c.ts)
    )


def _is_newest(thread: ColumnElement[bool]) -> object:
    """The statement of `is_newest` for the conversation `thread` selects in a channel: its messages from the one
    asked about on, by the thread index."""
    ts = bindparam("ts", type_=_MESSAGES.c.ts.type)
    conversations, counts = _conversations(_MESSAGES.c.channel_id == bindparam("channel"), thread, _MESSAGES.c.ts >= ts)
    return core_select(conversations.c.newest).where(conversations.c.newest == ts, counts)


_UNJUDGED = _unjudged()
_IS_NEWEST_OF_FLOW = _is_newest(_MESSAGES.c.thread_ts.is_(None))
_IS_NEWEST_OF_THREAD = _is_newest(_MESSAGES.c.thread_ts == bindparam("thread"))
_TEXT_NOW = (
    core_select(_MESSAGES.c.text)
    .where(_MESSAGES.c.channel_id == bindparam("channel"), _MESSAGES.c.ts == bindparam("ts"))
    .with_for_update()
)
_COUNTS = (
    core_select(_MESSAGES.c.channel_id, func.count())
    .where(
        _MESSAGES.c.channel_id.in_(bindparam("channels", expanding=True)),
        _MESSAGES.c.posted_at > bindparam("since", type_=_MESSAGES.c.posted_at.type),
    )
    .group_by(_MESSAGES.c.channel_id)
)
_UNASKED = (
    core_select(_REPLIES.c.channel_id, _REPLIES.c.at)
    .where(_REPLIES.c.at > bindparam("since", type_=_REPLIES.c.at.type), _REPLIES.c.kind == ReplyKind.UNASKED.value)
    .order_by(_REPLIES.c.at)
)
