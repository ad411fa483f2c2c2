"""The bolt app over Socket Mode: an event's listener runs in the task that hands the event to the app."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from slack_bolt.adapter.socket_mode.async_internals import run_async_bolt_app
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.web.async_client import AsyncWebClient

from myao2.domain.conversation import BotIdentity, ChannelKind, Message, Person
from myao2.infrastructure.slack.app import build_app

BOT = BotIdentity(user_id="UBOT", bot_id="BBOT", team_id="T1")


class Inbox:
    def __init__(self) -> None:
        self.posted: list[Message] = []

    async def message_posted(self, message: Message, kind: ChannelKind | None) -> None:
        self.posted.append(message)


class Chat:
    async def person(self, user_id: str) -> Person:
        return Person(user_id=user_id, display_name="Alice")


def envelope(n: int) -> SocketModeRequest:
    event = {"type": "message", "channel": "C1", "channel_type": "channel", "user": "U1", "text": "hi", "ts": f"1.{n}"}
    payload = {"type": "event_callback", "team_id": "T1", "api_app_id": "A1", "event_id": f"Ev{n}", "event": event}
    request = SocketModeRequest.from_dict({"envelope_id": f"e{n}", "type": "events_api", "payload": payload})
    assert request is not None
    return request


async def test_an_event_is_handled_by_the_time_the_app_returns_with_no_task_of_bolts_own() -> None:
    inbox = Inbox()
    chat, channels = cast(Any, Chat()), cast(Any, None)
    app = build_app(client=AsyncWebClient(), bot=BOT, bot_token="xoxb-test", chat=chat, inbox=cast(Any, inbox), channels=channels)
    tasks = len(asyncio.all_tasks())
    await run_async_bolt_app(app, envelope(1))
    assert [m.ts for m in inbox.posted] == ["1.1"]  # no turn of the loop was needed: it ran in this task
    assert len(asyncio.all_tasks()) == tasks
