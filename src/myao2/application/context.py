"""The prompt context: everything the model should know about a conversation, gathered once.

This module is also the one place that formats a message (and a time) for a prompt.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, tzinfo
from typing import Literal

from myao2.domain.conversation import MENTION, Channel, Message
from myao2.domain.memo import IMPORTANT_PRIORITY, Memo
from myao2.domain.ports import Clock, MemoStore

IMPORTANT_MEMO_LIMIT = 20
RECENT_MEMO_LIMIT = 5
TIME_FORMAT = "%Y-%m-%d %H:%M"



@dataclass(frozen=True)
class Persona:
    """Who the bot is: its name, extra persona text, language and time zone."""

    name: str
    system_prompt: str
    language: Literal["ja", "en"]
    timezone: tzinfo


@dataclass(frozen=True)
class PromptContext:
    """What a prompt template receives, ready to show; templates never query anything."""

    persona: Persona
    now: datetime
    """The current time in the persona's time zone."""
    channel: Channel
    conversation: tuple[str, ...]
    """The conversation's messages, oldest first, each formatted by `format_message`."""
    important_memos: tuple[Memo, ...]
    """Memos of priority >= 4 that this conversation may see: priority, then last update, descending."""
    recent_memos: tuple[Memo, ...]
    """The memos updated most recently, other than the important ones."""

    def local_time(self, moment: datetime) -> str:
        """`moment` as prompts show it, in the persona's time zone."""
        return format_time(moment, self.persona.timezone)


class ContextBuilder:
    """Builds the `PromptContext` for a conversation from the memo store."""

    def __init__(self, memo_store: MemoStore, clock: Clock, persona: Persona) -> None:
        self._memos = memo_store
        self._clock = clock
        self._persona = persona

    async def build(
        self,
        channel: Channel,
        messages: Sequence[Message],
        user_names: Mapping[str, str] | None = None,
    ) -> PromptContext:
        """The context for `messages` (chosen by the caller) in `channel`.

        `user_names` maps user ids to display names for mentions in message text.
        The store is read in a worker thread, so this may be awaited on the event loop.
        """
        important, recent = await asyncio.to_thread(self._read_memos, channel.id)
        tz = self._persona.timezone
        names = user_names or {}
        return PromptContext(
            persona=self._persona,
            now=self._clock.now().astimezone(tz),
            channel=channel,
            conversation=tuple(format_message(m, tz, names) for m in messages),
            important_memos=important,
            recent_memos=recent,
        )

    def _read_memos(self, channel_id: str) -> tuple[tuple[Memo, ...], tuple[Memo, ...]]:
        important = self._memos.list(
            channel_id, min_priority=IMPORTANT_PRIORITY, limit=IMPORTANT_MEMO_LIMIT
        ).memos
        recent = self._memos.recent(
            channel_id, RECENT_MEMO_LIMIT, exclude={m.name for m in important}
        )
        return tuple(important), tuple(recent)


def format_time(moment: datetime, timezone: tzinfo) -> str:
    """`moment` as "YYYY-MM-DD HH:MM" in `timezone`."""
    return moment.astimezone(timezone).strftime(TIME_FORMAT)


def format_message(message: Message, timezone: tzinfo, user_names: Mapping[str, str]) -> str:
    """One message for a prompt: "[YYYY-MM-DD HH:MM] display name: text".

    Mentions of known users (`<@U123>`) become "@display name"; unknown ones stay as they are.
    """

    def mention(match: re.Match[str]) -> str:
        name = user_names.get(match.group(1))
        return f"@{name}" if name else match.group(0)

    text = MENTION.sub(mention, message.text)
    return f"[{format_time(message.posted_at, timezone)}] {message.user_name}: {text}"
