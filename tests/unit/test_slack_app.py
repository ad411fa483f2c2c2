"""The bot's listeners: a message event is translated and handed to the inbox within its dispatch."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from myao2.domain.conversation import BotIdentity, ChannelKind, Message, Person
from myao2.infrastructure.slack.app import build_listeners

BOT = BotIdentity(user_id="UBOT", bot_id="BBOT", team_id="T1")


class Inbox:
    def __init__(self) -> None:
        self.posted: list[Message] = []

    async def message_posted(self, message: Message, kind: ChannelKind | None) -> None:
        self.posted.append(message)


class Chat:
    async def person(self, user_id: str) -> Person:
        return Person(user_id=user_id, display_name="Alice")


def payload(n: int) -> dict[str, Any]:
    event = {"type": "message", "channel": "C1", "channel_type": "channel", "user": "U1", "text": "hi", "ts": f"1.{n}"}
    return {"type": "event_callback", "team_id": "T1", "api_app_id": "A1", "event_id": f"Ev{n}", "event": event}


async def test_a_message_is_posted_to_the_inbox_by_the_time_its_dispatch_returns() -> None:
    inbox = Inbox()
    listeners = build_listeners(bot=BOT, chat=cast(Any, Chat()), inbox=cast(Any, inbox), channels=cast(Any, None))
    tasks = len(asyncio.all_tasks())
    await listeners.dispatch(payload(1))
    assert [(m.ts, m.user_name, m.text) for m in inbox.posted] == [("1.1", "Alice", "hi")]
    assert len(asyncio.all_tasks()) == tasks
