"""SQLModel tables. The schema itself is created by the migrations."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Column, ForeignKey, Index, Integer, text
from sqlmodel import Field, SQLModel

from myao2.infrastructure.db.types import JSONText, UTCDateTime


class MemoRow(SQLModel, table=True):
    __tablename__ = "memos"
    __table_args__ = (
        Index(
            "ux_memos_live_name",
            "name",
            unique=True,
            sqlite_where=text("removed_at IS NULL"),
            postgresql_where=text("removed_at IS NULL"),
        ),
    )

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
