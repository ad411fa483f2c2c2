"""Events API events to their listeners: the listener of the event's type, in the dispatching task, each event once,
never the bot's own."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from myao2.domain.conversation import BotIdentity
from myao2.infrastructure.slack.events import Listeners

BOT = BotIdentity(user_id="UBOT", bot_id="BBOT", team_id="T1")


def payload(event: dict[str, Any], event_id: str = "Ev1") -> dict[str, Any]:
    return {"type": "event_callback", "team_id": "T1", "event_id": event_id, "event": event}


def noting(listeners: Listeners, *event_types: str) -> list[tuple[str, Any]]:
    """Listeners of `event_types` that note each event's type and text (or user)."""
    seen: list[tuple[str, Any]] = []
    for event_type in event_types:

        @listeners.on(event_type)
        async def note(event: dict[str, Any]) -> None:
            seen.append((event["type"], event.get("text", event.get("user"))))

    return seen


async def test_an_event_reaches_the_listener_of_its_type_within_the_dispatch_with_no_task_of_its_own() -> None:
    listeners = Listeners(BOT)
    seen = noting(listeners, "message", "app_mention")
    tasks = len(asyncio.all_tasks())
    await listeners.dispatch(payload({"type": "app_mention", "user": "U1", "text": "<@UBOT> hi", "ts": "1.1"}))
    assert seen == [("app_mention", "<@UBOT> hi")]
    assert len(asyncio.all_tasks()) == tasks


async def test_a_redelivered_event_is_skipped() -> None:
    listeners = Listeners(BOT)
    seen = noting(listeners, "message")
    event = {"type": "message", "user": "U1", "text": "hi", "ts": "1.1"}
    await listeners.dispatch(payload(event, "Ev1"))
    await listeners.dispatch({**payload(event, "Ev1"), "retry_attempt": 1})
    await listeners.dispatch(payload({**event, "text": "again"}, "Ev2"))
    assert seen == [("message", "hi"), ("message", "again")]


async def test_the_bots_own_events_are_never_handled_but_its_joins_and_leaves() -> None:
    listeners = Listeners(BOT)
    seen = noting(listeners, "message", "member_joined_channel", "member_left_channel", "reaction_added")
    own = [
        {"type": "message", "bot_id": "BBOT", "text": "posted", "ts": "1.1"},
        {"type": "message", "user": "UBOT", "text": "as the user", "ts": "1.2"},
        {"type": "message", "subtype": "message_changed", "message": {"user": "UBOT", "text": "changed"}, "ts": "1.3"},
        {"type": "message", "subtype": "message_deleted", "previous_message": {"user": "UBOT"}, "ts": "1.4"},
        {"type": "reaction_added", "user": "UBOT", "reaction": "eyes"},
    ]
    kept = [
        {"type": "member_joined_channel", "user": "UBOT", "channel": "C1"},
        {"type": "member_left_channel", "user": "UBOT", "channel": "C1"},
        {"type": "message", "user": "U1", "text": "a person's", "ts": "1.5"},
    ]
    for n, event in enumerate(own + kept):
        await listeners.dispatch(payload(event, f"Ev{n}"))
    assert seen == [("member_joined_channel", "UBOT"), ("member_left_channel", "UBOT"), ("message", "a person's")]
    assert [listeners.ignores(payload(event)) for event in own + kept] == [True] * len(own) + [False] * len(kept)


async def test_an_event_with_no_listener_or_no_event_is_dropped() -> None:
    listeners = Listeners(BOT)
    seen = noting(listeners, "message")
    await listeners.dispatch(payload({"type": "emoji_changed", "subtype": "add"}))
    await listeners.dispatch({"type": "app_rate_limited", "team_id": "T1"})
    assert seen == []
    assert listeners.event_types == {"message"}


async def test_a_listeners_failure_is_raised_to_the_dispatcher() -> None:
    listeners = Listeners(BOT)

    @listeners.on("message")
    async def fail(event: dict[str, Any]) -> None:
        raise RuntimeError("the inbox failed")

    with pytest.raises(RuntimeError, match="the inbox failed"):
        await listeners.dispatch(payload({"type": "message", "user": "U1", "text": "hi", "ts": "1.1"}))
