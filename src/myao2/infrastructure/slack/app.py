"""The bot's Slack listeners: thin ones that translate events and hand them to the inbox."""

from __future__ import annotations

from typing import Any

from myao2.application.channels import ChannelLifecycle
from myao2.application.inbox import Inbox
from myao2.domain.conversation import BotIdentity
from myao2.domain.ports import ChatPlatform
from myao2.infrastructure.slack.events import Listeners
from myao2.infrastructure.slack.translate import (
    SPOKEN_SUBTYPES,
    author_of,
    kind_from_event,
    posted_name,
    text_of,
    to_message,
)


def build_listeners(
    *, bot: BotIdentity, chat: ChatPlatform, inbox: Inbox, channels: ChannelLifecycle
) -> Listeners:
    """The listeners that feed `inbox` and `channels`; any other event is acknowledged and dropped."""
    listeners = Listeners(bot)

    async def spoken(event: dict[str, Any]) -> None:
        author = author_of(event) or ""
        if event.get("subtype") == "bot_message" or not author.startswith(("U", "W")):
            name = posted_name(event) or author
        else:
            name = (await chat.person(author)).display_name
        message = to_message(event, event["channel"], name)
        await inbox.message_posted(message, kind_from_event(event.get("channel_type")))

    @listeners.on("message")
    async def on_message(event: dict[str, Any]) -> None:
        subtype = event.get("subtype")
        channel = event.get("channel", "")
        if subtype == "message_changed":
            changed = event.get("message") or {}
            if "ts" in changed:
                await inbox.message_edited(channel, changed["ts"], text_of(changed))
        elif subtype == "message_deleted":
            if event.get("deleted_ts"):
                await inbox.message_deleted(channel, event["deleted_ts"])
        elif subtype in SPOKEN_SUBTYPES and "ts" in event:
            await spoken(event)

    @listeners.on("app_mention")
    async def on_mention(event: dict[str, Any]) -> None:
        await spoken(event)

    @listeners.on("member_joined_channel")
    async def on_joined(event: dict[str, Any]) -> None:
        if event.get("user") == bot.user_id:
            await inbox.channel_changed(event["channel"])
            await channels.refreshed(event["channel"])

    @listeners.on("channel_rename")
    async def on_rename(event: dict[str, Any]) -> None:
        await inbox.channel_changed(event["channel"]["id"])
        await channels.refreshed(event["channel"]["id"])

    @listeners.on("channel_unshared")
    async def on_unshared(event: dict[str, Any]) -> None:
        await inbox.channel_changed(event["channel"])

    @listeners.on("channel_converted_to_private")
    async def on_converted_to_private(event: dict[str, Any]) -> None:
        await channels.became_private(event["channel"])

    @listeners.on("channel_shared")
    async def on_shared(event: dict[str, Any]) -> None:
        await channels.shared_outside(event["channel"])

    @listeners.on("member_left_channel")
    async def on_member_left(event: dict[str, Any]) -> None:
        if event.get("user") == bot.user_id:
            await channels.left(event["channel"])

    @listeners.on("channel_left")
    async def on_channel_left(event: dict[str, Any]) -> None:
        await channels.left(event["channel"])

    @listeners.on("channel_deleted")
    async def on_channel_deleted(event: dict[str, Any]) -> None:
        await channels.deleted(event["channel"])

    @listeners.on("group_left")
    async def on_group_left(event: dict[str, Any]) -> None:
        await channels.left(event["channel"])

    return listeners
