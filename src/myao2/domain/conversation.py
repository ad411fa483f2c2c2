"""Channels, people and messages as the rest of the bot sees them."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from enum import Enum


MENTION = re.compile(r"<@([UW][A-Z0-9]+)(?:\|[^>]*)?>")
"""How a message text mentions someone: <@U123> or <@U123|name>."""


UNSTORABLE = re.compile("[\ud800-\udfff\x00]")
"""Lone UTF-16 surrogates (no UTF-8 form: SQLite refuses them) and NUL (which cuts text short in C tools)."""

BROADCAST = re.compile(
    r"<!(?P<special>channel|here|everyone|group)(?:\|[^>]*)?>"
    r"|<!subteam\^[A-Z0-9]+(?:\|@?(?P<team>[^>]*))?>"
    r"|(?<![^\W_])(?<![@.])@(?P<plain>channel|here|everyone)(?![^\W_])"
)
"""Mentions that notify a whole channel or user group: Slack markup, or the plain words (not within a word or an
address, as bob@here.io; an underscore around them is Markdown's emphasis, not part of a word)."""

BREAK = "\u200b"
"""A zero-width space: after "@", it keeps Slack from reading a broadcast."""


def clean_text(text: str) -> str:
    """`text` with what no store or model accepts (see `UNSTORABLE`) replaced by U+FFFD."""
    return UNSTORABLE.sub("\ufffd", text)


def neutralise_broadcasts(text: str) -> str:
    """`text` with @channel, @here, @everyone and user-group mentions kept readable but notifying nobody."""

    def plain(match: re.Match[str]) -> str:
        name = match.group("special") or match.group("plain") or match.group("team") or "team"
        return f"@{BREAK}{name}"

    return BROADCAST.sub(plain, text)


def mentions_in(text: str) -> tuple[str, ...]:
    """User ids mentioned in the text, in order, without repeats."""
    return tuple(dict.fromkeys(MENTION.findall(text)))


class ChannelKind(str, Enum):
    PUBLIC = "public"
    PRIVATE = "private"
    IM = "im"
    MPIM = "mpim"
    SHARED = "shared"
    """A channel shared with another organisation (Slack Connect), public or private: never the workspace's."""

    @property
    def keeps_to_itself(self) -> bool:
        """Whether what is said in a conversation of this kind keeps to it: all but a public channel do (a private
        channel, a DM, a group DM, a channel shared outside); a public channel shares with the workspace. The one
        statement of this rule (`visibility` builds audiences from it; the stores read it in SQL as
        `NOT_PUBLIC_IDS`)."""
        return self is not ChannelKind.PUBLIC


@dataclass(frozen=True)
class Channel:
    """A Slack conversation; `is_member` is False once the bot has left it or been removed, `deleted` once Slack
    said it deleted it. `ext_shared`: a DM or group DM with people of another organisation (Slack Connect), who
    read it as they read a `ChannelKind.SHARED` channel."""

    id: str
    name: str
    kind: ChannelKind = ChannelKind.PUBLIC
    is_member: bool = True
    deleted: bool = False
    ext_shared: bool = False

    @property
    def is_private(self) -> bool:
        """Whether this conversation keeps to itself (`ChannelKind.keeps_to_itself`)."""
        return self.kind.keeps_to_itself


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
class ChannelChanges:
    """How far a channel's stored messages reach: the newest ts, and the newest edit."""

    newest_ts: str
    newest_edit: datetime | None = None


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


CLOCK_SKEW = timedelta(seconds=2)
"""How far our clock may be ahead of Slack's (message ts): a message Slack stamped up to this long before a fetch
began, by our clock, may have been posted after it began."""


@dataclass(frozen=True)
class History:
    """What one history fetch of a channel returned, and the span it saw in full.

    Every top-level message posted after `complete_after` (a ts) was returned (unless
    `top_level` is False: a fetch of threads alone), and every reply posted then in a
    thread whose parent ts is in `threads`. A stored message inside that span which the
    fetch did not return has been deleted in Slack.
    """

    channel_id: str
    messages: list[Message]
    complete_after: str
    threads: frozenset[str]
    top_level: bool = True

    def deleted(self, stored: Iterable[Message], fetched_at: datetime) -> list[Message]:
        """The stored messages this fetch, started at `fetched_at`, shows to be deleted.

        Only messages posted before the fetch started (less clock skew), or before the
        newest message it returned of the top-level flow or of their own thread, count:
        a newer one may simply have come too late. The top-level flow is read first,
        then each thread, one call after another: a reply a later call returned tells
        nothing of what was posted in the flow or another thread after an earlier one.
        """
        returned = {m.ts for m in self.messages}
        newest: dict[str | None, Decimal] = {}
        for m in self.messages:
            newest[m.thread_ts] = max(newest.get(m.thread_ts, Decimal(0)), Decimal(m.ts))
        listed = max(Decimal(str((fetched_at - CLOCK_SKEW).timestamp())), newest.get(None, Decimal(0)))
        after = Decimal(self.complete_after)
        return [
            m
            for m in stored
            if m.ts not in returned
            and after < Decimal(m.ts) <= max(listed, newest.get(m.thread_ts, Decimal(0)))
            and (self.top_level if m.thread_ts is None else m.thread_ts in self.threads)
        ]


def ts_to_datetime(ts: str) -> datetime:
    """A Slack timestamp ("1700000000.000100") as an aware UTC datetime."""
    return datetime.fromtimestamp(float(ts), tz=timezone.utc)
