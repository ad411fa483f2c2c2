"""The slack-bolt app: thin listeners that translate events and hand them to the inbox."""

from __future__ import annotations

import logging
import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult
from slack_sdk.web.async_client import AsyncWebClient

from myao2.application import tracing
from myao2.application.channels import ChannelLifecycle
from myao2.application.inbox import Inbox
from myao2.domain.conversation import BotIdentity
from myao2.domain.ports import ChatPlatform
from myao2.infrastructure.slack.translate import (
    SPOKEN_SUBTYPES,
    author_of,
    kind_from_event,
    posted_name,
    text_of,
    to_message,
)

logger = logging.getLogger(__name__)

RECENT_EVENT_IDS = 2048

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


def build_app(
    *,
    client: AsyncWebClient,
    bot: BotIdentity,
    bot_token: str,
    chat: ChatPlatform,
    inbox: Inbox,
    channels: ChannelLifecycle,
    signing_secret: str | None = None,
) -> AsyncApp:
    """A bolt app whose listeners feed `inbox`; every subscribed event is acknowledged.

    `client` carries no token: authorization comes from the identity checked at
    start-up, so bolt makes no `auth.test` call of its own.
    """

    authorized = AuthorizeResult(
        enterprise_id=None,
        team_id=bot.team_id,
        bot_user_id=bot.user_id,
        bot_id=bot.bot_id,
        bot_token=bot_token,
    )

    async def authorize(**_: Any) -> AuthorizeResult:
        return authorized

    http = bool(signing_secret)  # only over HTTP does Slack sign requests and check the request URL
    app = AsyncApp(
        name="myao2",  # without a name, bolt reads the whole call stack (inspect.stack) to make one up
        client=client,
        authorize=authorize,
        signing_secret=signing_secret or "",
        request_verification_enabled=http,
        ssl_check_enabled=http,
        url_verification_enabled=http,
        # Per-event work for features the listeners never use: workflow functions' tokens, and the
        # assistant-thread helpers (say, set_status) bolt builds for each event.
        attaching_function_token_enabled=False,
        attaching_conversation_kwargs_enabled=False,
        # Over Socket Mode an event is acknowledged as it arrives (`SocketMode`) and handled in a task of its own,
        # so bolt runs the listener in that task rather than in one more it would start for each event. Over HTTP
        # bolt's response is the acknowledgement: it goes before the listener runs.
        process_before_response=not http,
    )
    recent = RecentEvents()

    def listen(event_type: str | re.Pattern[str]) -> Callable[[Listener], Listener]:
        """Register a listener for `event_type`, run in a span of its own; a redelivered event is skipped.

        Every event reaches exactly one listener (the last one takes any event), so redeliveries
        are recognised here rather than in a middleware, which would cost bolt a second pass over
        its arguments for every event.
        """

        def register(listener: Listener) -> Listener:
            async def traced(event: dict[str, Any], body: dict[str, Any]) -> None:
                event_id = body.get("event_id")
                if event_id and recent.seen(event_id):
                    logger.debug("event %s redelivered (retry %s): skipped", event_id, body.get("retry_attempt"))
                    return
                with tracing.span("slack.event", event_attributes(event)):
                    await listener(event)

            app.event(event_type)(traced)
            return listener

        return register

    async def spoken(event: dict[str, Any]) -> None:
        author = author_of(event) or ""
        if event.get("subtype") == "bot_message" or not author.startswith(("U", "W")):
            name = posted_name(event) or author
        else:
            name = (await chat.person(author)).display_name
        message = to_message(event, event["channel"], name)
        await inbox.message_posted(message, kind_from_event(event.get("channel_type")))

    @listen("message")
    async def on_message(event: dict[str, Any]) -> None:
        subtype = event.get("subtype")
        channel = event.get("channel", "")
        if subtype == "message_changed":
            changed = event.get("message") or {}
            if changed.get("subtype") == "tombstone" and "ts" in changed:  # deleted, its thread kept under a tombstone
                await inbox.message_deleted(channel, changed["ts"])
            elif "ts" in changed:
                await inbox.message_edited(channel, changed["ts"], text_of(changed))
        elif subtype == "message_deleted":
            if event.get("deleted_ts"):
                await inbox.message_deleted(channel, event["deleted_ts"])
        elif subtype in SPOKEN_SUBTYPES and "ts" in event:
            await spoken(event)

    @listen("app_mention")
    async def on_mention(event: dict[str, Any]) -> None:
        await spoken(event)

    @listen("member_joined_channel")
    async def on_joined(event: dict[str, Any]) -> None:
        if event.get("user") == bot.user_id:
            await inbox.channel_changed(event["channel"])
            await channels.refreshed(event["channel"])

    @listen("channel_rename")
    async def on_rename(event: dict[str, Any]) -> None:
        await inbox.channel_changed(event["channel"]["id"])
        await channels.refreshed(event["channel"]["id"])

    @listen("channel_unshared")
    async def on_unshared(event: dict[str, Any]) -> None:
        await inbox.channel_changed(event["channel"])

    @listen("channel_converted_to_private")
    async def on_converted_to_private(event: dict[str, Any]) -> None:
        await channels.became_private(event["channel"])

    @listen("channel_shared")
    async def on_shared(event: dict[str, Any]) -> None:
        await channels.shared_outside(event["channel"])

    @listen("member_left_channel")
    async def on_member_left(event: dict[str, Any]) -> None:
        if event.get("user") == bot.user_id:
            await channels.left(event["channel"])

    @listen("channel_left")
    async def on_channel_left(event: dict[str, Any]) -> None:
        await channels.left(event["channel"])

    @listen("channel_deleted")
    async def on_channel_deleted(event: dict[str, Any]) -> None:
        await channels.deleted(event["channel"])

    @listen("group_left")
    async def on_group_left(event: dict[str, Any]) -> None:
        await channels.left(event["channel"])

    @listen(re.compile(".*"))
    async def acknowledge_others(event: dict[str, Any]) -> None:
        """Any other subscribed event: acknowledged, nothing to keep."""

    return app


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
