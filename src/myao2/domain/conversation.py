"""Channels, people and messages as the rest of the bot sees them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from enum import Enum


MENTION = re.compile(r"<@([UW][A-Z0-9]+)(?:\|[^>]*)?>")
"""How a message text mentions someone: <@U123> or <@U123|name>."""


def mentions_in(text: str) -> tuple[str, ...]:
    """User ids mentioned in the text, in order, without repeats."""
    return tuple(dict.fromkeys(MENTION.findall(text)))


class ChannelKind(str, Enum):
    PUBLIC = "public"
    PRIVATE = "private"
    IM = "im"
    MPIM = "mpim"


@dataclass(frozen=True)
class Channel:
    """A Slack conversation the bot is in."""

    id: str
    name: str
    kind: ChannelKind = ChannelKind.PUBLIC

    @property
    def is_private(self) -> bool:
        """Private channels, DMs and group DMs keep what is said in them."""
        return self.kind is not ChannelKind.PUBLIC


@dataclass(frozen=True)
class Message:
    """A message in a channel; `thread_ts` is None for top-level messages."""

    channel_id: str
    ts: str
    user_id: str | None
    text: str
    user_name: str
    is_bot: bool = False
    thread_ts: str | None = None
    mentions: tuple[str, ...] = ()

    @property
    def posted_at(self) -> datetime:
        return ts_to_datetime(self.ts)


@dataclass(frozen=True)
class Person:
    """Someone in the workspace, as the bot addresses them."""

    user_id: str
    display_name: str
    is_bot: bool = False


@dataclass(frozen=True)
class BotIdentity:
    """Who the bot is in Slack."""

    user_id: str
    bot_id: str | None
    team_id: str | None


def ts_to_datetime(ts: str) -> datetime:
    """A Slack timestamp ("1700000000.000100") as an aware UTC datetime."""
    return datetime.fromtimestamp(float(ts), tz=timezone.utc)
