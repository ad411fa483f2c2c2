"""SQLModel tables. The schema itself is created by the migrations."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Boolean, Column, ForeignKey, Index, Integer, Text, UniqueConstraint, false
from sqlmodel import Field, SQLModel

from myao2.infrastructure.db.types import JSONText, UTCDateTime


# Compare-and-set: every UPDATE of a memo requires the revision it read and bumps it.
_MEMO_REVISION = Column("revision", Integer, nullable=False, server_default="0")
# Partial indexes are left to the migrations that make them, not declared here: their dialect
# options (sqlite_where, postgresql_where) made SQLAlchemy import the PostgreSQL dialect into
# every bot storing in SQLite (40-80 ms of start-up).


class MemoRow(SQLModel, table=True):
    """A memo. Live memos' names are unique per audience (ux_memos_live_audience_name, migration 0008)."""

    __tablename__ = "memos"
    __mapper_args__ = {"version_id_col": _MEMO_REVISION}

    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(max_length=64, index=True)
    content: str
    priority: int
    tags: list[str] = Field(sa_column=Column(JSONText, nullable=False))
    detail: str | None = None
    user_id: str | None = None
    channel_id: str | None = None
    message_ts: str | None = None
    visibility: str = Field(max_length=16)
    created_at: datetime = Field(sa_column=Column(UTCDateTime, nullable=False))
    updated_at: datetime = Field(sa_column=Column(UTCDateTime, nullable=False))
    removed_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime, nullable=True))
    revision: int = Field(default=0, sa_column=_MEMO_REVISION)


class MemoRevisionRow(SQLModel, table=True):
    __tablename__ = "memo_revisions"

    id: int | None = Field(default=None, primary_key=True)
    memo_id: int = Field(sa_column=Column(Integer, ForeignKey("memos.id"), nullable=False, index=True))
    memo_name: str
    action: str = Field(max_length=16)
    actor: str
    at: datetime = Field(sa_column=Column(UTCDateTime, nullable=False))
    before: dict[str, Any] | None = Field(default=None, sa_column=Column(JSONText, nullable=True))
    after: dict[str, Any] | None = Field(default=None, sa_column=Column(JSONText, nullable=True))


class MemoPinRow(SQLModel, table=True):
    """A memo a person pinned: a rule the bot follows and its tools may not change."""

    __tablename__ = "memo_pins"

    memo_id: int = Field(sa_column=Column(Integer, ForeignKey("memos.id"), primary_key=True))
    pinned_by: str
    pinned_at: datetime = Field(sa_column=Column(UTCDateTime, nullable=False))


class ChannelRow(SQLModel, table=True):
    __tablename__ = "channels"

    id: str = Field(primary_key=True, max_length=32)
    name: str = Field(max_length=255)
    kind: str = Field(max_length=8)
    updated_at: datetime = Field(sa_column=Column(UTCDateTime, nullable=False))
    left_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime, nullable=True))
    deleted_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime, nullable=True))
    ext_shared: bool = Field(default=False, sa_column=Column(Boolean, nullable=False, server_default=false()))
    """A DM or group DM with people of another organisation (`Channel.ext_shared`)."""


class PersonRow(SQLModel, table=True):
    __tablename__ = "people"

    user_id: str = Field(primary_key=True, max_length=32)
    display_name: str = Field(max_length=255)
    is_bot: bool
    updated_at: datetime = Field(sa_column=Column(UTCDateTime, nullable=False))


class MessageRow(SQLModel, table=True):
    __tablename__ = "messages"
    __table_args__ = (
        UniqueConstraint("channel_id", "ts", name="uq_messages_channel_ts"),
        Index("ix_messages_thread", "channel_id", "thread_ts", "ts"),
        Index("ix_messages_channel_posted_at", "channel_id", "posted_at", "ts"),
    )

    id: int | None = Field(default=None, primary_key=True)
    channel_id: str = Field(max_length=32)
    ts: str = Field(max_length=32)
    thread_ts: str | None = Field(default=None, max_length=32)
    user_id: str | None = Field(default=None, max_length=32)
    user_name: str = Field(max_length=255)
    text: str = Field(sa_column=Column(Text, nullable=False))
    is_bot: bool
    mentions: list[str] = Field(sa_column=Column(JSONText, nullable=False))
    posted_at: datetime = Field(sa_column=Column(UTCDateTime, nullable=False, index=True))
    edited_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime, nullable=True))


class BotIdentityRow(SQLModel, table=True):
    """Who the bot is in Slack, as it last connected (one row)."""

    __tablename__ = "bot_identity"

    id: int = Field(default=1, primary_key=True)
    user_id: str = Field(max_length=32)
    bot_id: str | None = Field(default=None, max_length=32)
    team_id: str | None = Field(default=None, max_length=32)
    updated_at: datetime = Field(sa_column=Column(UTCDateTime, nullable=False))


class TombstoneRow(SQLModel, table=True):
    """A message deleted in Slack; it is never stored again."""

    __tablename__ = "message_tombstones"

    channel_id: str = Field(primary_key=True, max_length=32)
    ts: str = Field(primary_key=True, max_length=32)
    deleted_at: datetime = Field(sa_column=Column(UTCDateTime, nullable=False))


class ClaimRow(SQLModel, table=True):
    """A message taken up for an answer, and how far that answer got. Answers due again are found by
    ix_claims_pending (unsettled claims by next_attempt_at, migration 0009)."""

    __tablename__ = "claims"

    channel_id: str = Field(primary_key=True, max_length=32)
    ts: str = Field(primary_key=True, max_length=32)
    claimed_at: datetime = Field(sa_column=Column(UTCDateTime, nullable=False))
    attempts: int = Field(default=0, sa_column=Column(Integer, nullable=False, server_default="0"))
    next_attempt_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime, nullable=True))
    """When an unsettled answer is taken up again (set when an attempt starts); None: not an answer to retry."""
    answer_ts: str | None = Field(default=None, max_length=32)
    showing: bool = Field(default=False, sa_column=Column(Boolean, nullable=False, server_default=false()))
    """An attempt began to show the answer (set before its first words go to Slack); with no `answer_ts`, Slack
    may hold a message of it whose ts the bot never heard."""
    unheard_start: str | None = Field(default=None, max_length=64)
    """The digest of the words a chat.startStream was sent that went unanswered, its stream not found at once
    (`answers.words_digest`): the next attempt takes the message showing just them for it."""
    ending: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    """The end the stream `answer_ts` lacks, left open by a stop that failed for a passing reason: the next attempt
    ends it with this (migration 0030). None once settled."""
    tasks: dict[str, str] | None = Field(default=None, sa_column=Column(JSONText, nullable=True))
    """The tasks the attempt's stream shows still running, call id to title: the next attempt ending that stream
    marks them failed (migration 0034). None once settled, or as another attempt begins to show the answer."""
    settled_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime, nullable=True))
    holder: str | None = Field(default=None, max_length=64)
    """The replica whose attempt it is (see `LeaseRow`); None: nobody's (never retried, or released)."""


class LeaseRow(SQLModel, table=True):
    """Something one replica does at a time, until `expires_at` unless renewed.

    A replica's own lease is named after it (name == holder): it says the replica is alive.
    """

    __tablename__ = "leases"

    name: str = Field(primary_key=True, max_length=64)
    holder: str = Field(max_length=64)
    expires_at: datetime = Field(sa_column=Column(UTCDateTime, nullable=False))


class MemoryRow(SQLModel, table=True):
    __tablename__ = "memories"
    __table_args__ = (UniqueConstraint("scope", "term", name="uq_memories_scope_term"),)

    id: int | None = Field(default=None, primary_key=True)
    scope: str = Field(max_length=96)
    term: str = Field(max_length=8)
    audience: str | None = Field(default=None, max_length=32)
    """The one conversation that may read it; NULL: the workspace."""
    label: str = Field(max_length=255)
    bullets: list[dict[str, Any]] = Field(sa_column=Column(JSONText, nullable=False))
    covered: str = Field(sa_column=Column(Text, nullable=False))
    updated_at: datetime = Field(sa_column=Column(UTCDateTime, nullable=False))


class DigestRow(SQLModel, table=True):
    """One conversation's day, digested (the raw messages may be gone)."""

    __tablename__ = "digests"
    __table_args__ = (UniqueConstraint("channel_id", "day", name="uq_digests_channel_day"),)

    id: int | None = Field(default=None, primary_key=True)
    channel_id: str = Field(max_length=32)
    day: str = Field(max_length=10)
    stage: str = Field(max_length=16)
    audience: str | None = Field(default=None, max_length=32)
    """The one conversation that may read it; NULL: the workspace."""
    label: str = Field(max_length=255)
    lines: list[str] = Field(sa_column=Column(JSONText, nullable=False))
    first_ts: str = Field(max_length=32)
    last_ts: str = Field(max_length=32)
    authors: list[str] = Field(sa_column=Column(JSONText, nullable=False))
    made_at: datetime = Field(sa_column=Column(UTCDateTime, nullable=False))


class ExpiredMessageRow(SQLModel, table=True):
    """A message whose text retention deleted: who said it when, kept so that forgetting a person finds
    the notes made from it; it is never stored again."""

    __tablename__ = "expired_messages"

    channel_id: str = Field(primary_key=True, max_length=32)
    ts: str = Field(primary_key=True, max_length=32)
    user_id: str | None = Field(default=None, max_length=32, index=True)


class ModelCallRow(SQLModel, table=True):
    """One call to a model (see `ModelCall`)."""

    __tablename__ = "model_calls"

    id: int | None = Field(default=None, primary_key=True)
    at: datetime = Field(sa_column=Column(UTCDateTime, nullable=False, index=True))
    role: str = Field(max_length=16)
    model: str = Field(max_length=255)
    input_tokens: int
    output_tokens: int
    latency_ms: int
    outcome: str = Field(max_length=8)
    detail: str = Field(max_length=255)


class JudgmentRow(SQLModel, table=True):
    """One judgment on joining a conversation, and its outcome."""

    __tablename__ = "judgments"

    id: int | None = Field(default=None, primary_key=True)
    at: datetime = Field(sa_column=Column(UTCDateTime, nullable=False, index=True))
    channel_id: str = Field(max_length=32)
    outcome: str = Field(max_length=8)
    confidence: float


class ReplyRow(SQLModel, table=True):
    """One post of the bot's: an answer, or unasked."""

    __tablename__ = "replies"

    id: int | None = Field(default=None, primary_key=True)
    at: datetime = Field(sa_column=Column(UTCDateTime, nullable=False, index=True))
    channel_id: str = Field(max_length=32)
    kind: str = Field(max_length=8)


class ProfileRow(SQLModel, table=True):
    """A person's profile: facts learnt from what they said, as JSON, and how far each audience was read."""

    __tablename__ = "profiles"

    user_id: str = Field(primary_key=True, max_length=32)
    facts: list[dict[str, Any]] = Field(sa_column=Column(JSONText, nullable=False))
    read_up_to: dict[str, str] = Field(sa_column=Column(JSONText, nullable=False))
    updated_at: datetime = Field(sa_column=Column(UTCDateTime, nullable=False))
    last_fact_id: int = Field(default=0, sa_column=Column(Integer, nullable=False, server_default="0"))
    """The highest fact id given out (`Profile.last_fact_id`)."""


class StandingJudgmentRow(SQLModel, table=True):
    """The last judgment on joining a conversation: it stands while `newest_ts` is the conversation's newest
    message, until `until`."""

    __tablename__ = "standing_judgments"

    channel_id: str = Field(primary_key=True, max_length=32)
    thread_ts: str = Field(primary_key=True, max_length=32)
    """The thread's ts; "": the channel's top-level flow."""
    newest_ts: str = Field(max_length=32)
    until: datetime = Field(sa_column=Column(UTCDateTime, nullable=False))
