"""Events API events to their listeners: one per event type, each event once, never the bot's own.

Socket Mode hands an event's payload straight to `Listeners.dispatch`; over HTTP the bolt app does
(`app.build_app`), for its request checks. Bolt's own dispatch of an event (its context, authorization,
middleware and argument injection) cost more than the inbox's handling of a plain message.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

from myao2.application import tracing
from myao2.domain.conversation import BotIdentity

logger = logging.getLogger(__name__)

RECENT_EVENT_IDS = 2048
KEPT_OWN_EVENTS = frozenset({"member_joined_channel", "member_left_channel"})
"""The bot's own events that are handled still (bolt's `IgnoringSelfEvents` keeps the same)."""

Listener = Callable[[dict[str, Any]], Awaitable[None]]


class RecentEvents:
    """Remembers the last event ids seen, so Slack's redeliveries are recognised."""

    def __init__(self, size: int = RECENT_EVENT_IDS) -> None:
        self._ids: OrderedDict[str, None] = OrderedDict()
        self._size = size

    def seen(self, event_id: str) -> bool:
        """True if `event_id` was seen before; remembers it otherwise."""
        if event_id in self._ids:
            return True
        self._ids[event_id] = None
        if len(self._ids) > self._size:
            self._ids.popitem(last=False)
        return False


async def _nothing(event: dict[str, Any]) -> None:
    """Any other event: acknowledged, nothing to keep."""


class Listeners:
    """The listener of each event type the bot handles; `dispatch` runs them."""

    def __init__(self, bot: BotIdentity) -> None:
        self._bot = bot
        self._by_type: dict[str, Listener] = {}
        self._recent = RecentEvents()

    @property
    def event_types(self) -> frozenset[str]:
        """The event types with a listener."""
        return frozenset(self._by_type)

    def on(self, event_type: str) -> Callable[[Listener], Listener]:
        """Register the listener of `event_type`."""

        def register(listener: Listener) -> Listener:
            self._by_type[event_type] = listener
            return listener

        return register

    def ignores(self, payload: dict[str, Any]) -> bool:
        """Whether an Events API payload carries an event of the bot's own, which is never handled."""
        event = payload.get("event")
        return isinstance(event, dict) and own_event(event, self._bot)

    async def dispatch(self, payload: dict[str, Any]) -> None:
        """Run the listener of an Events API payload's event, in this task and a span of its own, unless the event
        is the bot's own or was seen before (a redelivery); a listener's failure is raised."""
        event = payload.get("event")
        if payload.get("type") != "event_callback" or not isinstance(event, dict) or own_event(event, self._bot):
            return
        event_id = payload.get("event_id")
        if event_id and self._recent.seen(event_id):
            logger.debug("event %s redelivered (retry %s): skipped", event_id, payload.get("retry_attempt"))
            return
        with tracing.span("slack.event", event_attributes(event)):
            await self._by_type.get(event.get("type"), _nothing)(event)  # type: ignore[arg-type]


def own_event(event: dict[str, Any], bot: BotIdentity) -> bool:
    """An event of the bot's own (its posts and streams, and their changes and deletions), as bolt's
    `IgnoringSelfEvents` tells them: from its bot id or its user, but for the kinds it keeps."""
    if event.get("type") in KEPT_OWN_EVENTS:
        return False
    return (bot.bot_id is not None and event.get("bot_id") == bot.bot_id) or _author(event) == bot.user_id


def _author(event: dict[str, Any]) -> Any:
    """Who an event is from, as bolt reads it: the event's user, else that of the message it changed
    (``message``) or deleted (``previous_message``)."""
    user = event.get("user")
    if user is not None:
        return user if isinstance(user, str) else user.get("id")
    if "user_id" in event:
        return event["user_id"]
    nested = event["message"] if isinstance(event.get("message"), dict) else event.get("previous_message")
    return _author(nested) if isinstance(nested, dict) else None


def event_attributes(event: dict[str, Any]) -> dict[str, tracing.Attribute]:
    """A span's attributes for a Slack event: its type and where it happened, never its text."""
    channel = event.get("channel")
    return {
        "slack.event_type": event.get("type"),
        "slack.event_subtype": event.get("subtype"),
        "slack.channel_id": channel.get("id") if isinstance(channel, dict) else channel,
        "slack.thread_ts": event.get("thread_ts"),
        "slack.message_ts": event.get("ts"),
    }
