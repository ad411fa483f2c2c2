"""Reaching Slack against the fake: start-up identification and Socket Mode through faults."""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Any

import aiohttp
import aiohttp.abc
import pytest
from slack_bolt.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult
from slack_sdk.web.async_client import AsyncWebClient

from myao2.domain.conversation import BotIdentity
from myao2.infrastructure.slack.connection import AppTokenRejected, Backoff, SocketMode, Twins, identify
from myao2.infrastructure.slack.gateway import SlackAuthError, SlackGateway, make_web_client
from tests.fakes.slack_server import FakeSlack

FAST = Backoff(first=0.05, cap=0.2)


@pytest.fixture
def fake():
    with FakeSlack() as slack:
        slack.add_user("U1", "alice")
        slack.add_channel("C1", "general", members=["U1"])
        yield slack


def no_tracebacks(caplog: pytest.LogCaptureFixture) -> bool:
    return all(record.exc_info is None for record in caplog.records)


async def test_identify_waits_out_an_unreachable_slack(fake: FakeSlack, caplog: pytest.LogCaptureFixture) -> None:
    fake.set_fault("refuse")
    gateway = SlackGateway(AsyncWebClient(token=fake.bot_token, base_url=fake.base_url, retry_handlers=[]))
    task = asyncio.create_task(identify(gateway, Backoff(first=0.05, cap=0.2)))

    def unreachable(saying: str = "") -> list[str]:
        lines = [r.getMessage() for r in caplog.records if "Slack is unreachable" in r.getMessage()]
        return [line for line in lines if saying in line]

    await fake.async_wait_for(lambda: len(unreachable()) >= 2, what="two refused attempts")
    assert not task.done()
    fake.set_fault("5xx")
    # Waited for, not slept on: a loaded machine may answer no attempt within a fixed half second.
    await fake.async_wait_for(lambda: unreachable("503"), what="an attempt answered 503")
    fake.set_fault(None)

    identity = await asyncio.wait_for(task, 30)

    assert identity.user_id == fake.bot_user_id
    assert len(unreachable()) >= 3
    assert no_tracebacks(caplog)


class NoNames(aiohttp.abc.AbstractResolver):
    """A resolver for a machine whose DNS is down: every name lookup fails, without the network."""

    async def resolve(self, host: str, port: int = 0, family: int = socket.AF_INET) -> list:
        raise OSError(socket.EAI_NONAME, "Name or service not known")

    async def close(self) -> None:
        pass


async def test_identify_retries_a_dns_failure_and_can_be_cancelled(caplog: pytest.LogCaptureFixture) -> None:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(resolver=NoNames())) as session:
        gateway = SlackGateway(AsyncWebClient(token="xoxb-t", base_url="http://slack.example/api/", session=session, retry_handlers=[]))
        task = asyncio.create_task(identify(gateway, Backoff(first=0.05, cap=0.1)))

        def unreachable() -> list[str]:
            return [r.getMessage() for r in caplog.records if "Slack is unreachable" in r.getMessage()]

        async def retried() -> None:
            while len(unreachable()) < 2:
                await asyncio.sleep(0.01)

        await asyncio.wait_for(retried(), 30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert "Name or service not known" in unreachable()[0]
    assert no_tracebacks(caplog)


async def test_identify_gives_up_at_once_on_a_refused_bot_token(fake: FakeSlack) -> None:
    gateway = SlackGateway(make_web_client("xoxb-wrong", fake.base_url))
    with pytest.raises(SlackAuthError):
        await asyncio.wait_for(identify(gateway, FAST), 5)


def bolt_app(
    fake: FakeSlack, seen: list[str], held: asyncio.Event | None = None, *, ignoring_self_events: bool = True
) -> AsyncApp:
    """An app noting the text of each message event; given `held`, it runs only once that is set."""

    async def authorize(**_: Any) -> AuthorizeResult:
        return AuthorizeResult(enterprise_id=None, team_id="T1", bot_user_id=fake.bot_user_id, bot_token=fake.bot_token)

    app = AsyncApp(
        name="test",
        client=make_web_client(None, fake.base_url),
        authorize=authorize,
        request_verification_enabled=False,
        ignoring_self_events_enabled=ignoring_self_events,
    )

    if held is not None:

        @app.middleware
        async def hold(next: Any) -> Any:
            await held.wait()
            return await next()

    @app.event("message")
    async def on_message(event: dict[str, Any]) -> None:
        seen.append(event.get("text") or event.get("subtype", ""))

    return app


class States:
    def __init__(self) -> None:
        self.changes: list[bool] = []

    def __call__(self, connected: bool) -> None:
        self.changes.append(connected)

    @property
    def connected(self) -> bool:
        return bool(self.changes) and self.changes[-1]


def socket_mode(
    fake: FakeSlack, seen: list[str], states: States, token: str | None = None, held: asyncio.Event | None = None
) -> SocketMode:
    client = make_web_client(None, fake.base_url)
    return SocketMode(bolt_app(fake, seen, held), token or fake.app_token, client, states, backoff=Backoff(0.05, 0.2))


async def test_events_are_handed_to_the_app_and_acknowledged(fake: FakeSlack) -> None:
    seen: list[str] = []
    states = States()
    task = asyncio.create_task(socket_mode(fake, seen, states).run())
    try:
        await fake.async_wait_for(lambda: states.connected, what="hello")
        fake.post_message("C1", "U1", "hi there")
        await fake.async_wait_for(lambda: seen and fake.acks, what="the event handled and acked")
        assert seen == ["hi there"]
    finally:
        task.cancel()


async def test_an_event_is_acknowledged_on_arrival_before_the_app_has_run(fake: FakeSlack) -> None:
    seen: list[str] = []
    states = States()
    held = asyncio.Event()
    task = asyncio.create_task(socket_mode(fake, seen, states, held=held).run())
    try:
        await fake.async_wait_for(lambda: states.connected, what="hello")
        fake.post_message("C1", "U1", "hi there")
        await fake.async_wait_for(lambda: fake.acks, what="the event acked")
        assert seen == []  # the app has not run yet
        held.set()
        await fake.async_wait_for(lambda: seen, what="the event handled")
        assert seen == ["hi there"] and len(fake.acks) == 1
    finally:
        task.cancel()


async def test_a_refused_app_token_ends_the_connection_with_a_message_naming_the_key(fake: FakeSlack) -> None:
    with pytest.raises(AppTokenRejected, match="slack.app_token") as refused:
        await asyncio.wait_for(socket_mode(fake, [], States(), token="xapp-revoked").run(), 5)
    assert "xapp-revoked" not in str(refused.value)


async def test_transient_failures_are_retried_with_one_line_each(
    fake: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    fake.inject_error("apps.connections.open", "internal_error", times=3)
    states = States()
    task = asyncio.create_task(socket_mode(fake, [], states).run())
    try:
        await fake.async_wait_for(lambda: states.connected, what="a connection after three failures")
    finally:
        task.cancel()
    assert sum("Socket Mode connection failed" in r.getMessage() for r in caplog.records) == 3
    assert no_tracebacks(caplog)


async def test_a_silently_dropped_socket_is_replaced_once_a_ping_goes_unanswered(
    fake: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    seen: list[str] = []
    states = States()
    task = asyncio.create_task(socket_mode(fake, seen, states).run())
    try:
        await fake.async_wait_for(lambda: states.connected, what="hello")
        connections, changes = fake.connection_count, len(states.changes)
        fake.disconnect("silent")
        await fake.async_wait_for(lambda: False in states.changes[changes:], timeout=30, what="the loss noticed")
        await fake.async_wait_for(lambda: states.connected, timeout=30, what="a new connection")
        assert fake.connection_count == connections + 1
        # Noticed by the first ping unanswered: a ping a second, its pong awaited half a second (slack_sdk's own
        # client, which this one replaces, noticed only after four of its 5 s ping intervals).
        ended = [r.getMessage() for r in caplog.records if "connection ended" in r.getMessage()]
        assert ended == [
            "Socket Mode connection ended (closed: ServerTimeoutError: No PONG received after 0.5 seconds); reconnecting"
        ]
        fake.post_message("C1", "U1", "after")
        await fake.async_wait_for(lambda: seen == ["after"], what="events on the new connection")
    finally:
        task.cancel()


def mention_events(text: str = "<@UBOT> hi", **extra: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The two payloads Slack sends for one mention: its message event and its app_mention event."""
    said = {"user": "U1", "text": text, "ts": "1.000100", "channel": "C1", **extra}
    message = {"type": "message", "channel_type": "channel", **said}
    return {"event": message}, {"event": {"type": "app_mention", **said}}


class App:
    """Stands for the app's run on an event: notes it, and succeeds unless told to fail."""

    def __init__(self, fails: bool = False) -> None:
        self.runs: list[str] = []
        self.fails = fails

    def on(self, payload: dict[str, Any]) -> Any:
        async def run() -> bool:
            self.runs.append(payload["event"]["type"])
            await asyncio.sleep(0.01)
            return not self.fails

        return run


@pytest.mark.parametrize("first", [0, 1], ids=["message first", "app_mention first"])
async def test_the_app_runs_on_one_event_of_a_mentions_pair(first: int) -> None:
    twins, app = Twins(), App()
    pair = mention_events()
    one, other = pair[first], pair[1 - first]
    await asyncio.gather(twins.run(one, app.on(one)), twins.run(other, app.on(other)))
    assert app.runs == [one["event"]["type"]]


async def test_the_second_of_a_pair_runs_when_the_app_failed_on_the_first() -> None:
    twins, app = Twins(), App(fails=True)
    message, mention = mention_events()
    await asyncio.gather(twins.run(message, app.on(message)), twins.run(mention, app.on(mention)))
    assert app.runs == ["message", "app_mention"]


async def test_the_second_of_a_pair_runs_when_it_says_something_else() -> None:
    twins, app = Twins(), App()
    message, mention = mention_events(files=[{"name": "plan.pdf"}])
    del mention["event"]["files"]
    await twins.run(mention, app.on(mention))
    await twins.run(message, app.on(message))
    assert app.runs == ["app_mention", "message"]


async def test_events_that_are_no_pair_always_run() -> None:
    twins, app = Twins(), App()
    message, _ = mention_events()
    again = {"event": dict(message["event"])}  # the same event redelivered
    changed = {"event": {"type": "message", "subtype": "message_changed", "channel": "C1", "ts": "1.000100"}}
    joined = {"event": {"type": "member_joined_channel", "channel": "C1", "user": "U1"}}
    for payload in (message, again, changed, joined):
        await twins.run(payload, app.on(payload))
    assert app.runs == ["message", "message", "message", "member_joined_channel"]


async def test_the_bots_own_messages_are_acknowledged_and_dropped_without_a_task_or_the_app(fake: FakeSlack) -> None:
    seen: list[str] = []
    states = States()
    bot = BotIdentity(user_id=fake.bot_user_id, bot_id=fake.bot_id, team_id=None)
    client = make_web_client(None, fake.base_url)
    mode = SocketMode(bolt_app(fake, seen, ignoring_self_events=False), fake.app_token, client, states, bot=bot)
    handled: list[str] = []  # the envelopes given a task of their own
    handle = mode._handle

    async def noted(ws: Any, frame: dict[str, Any]) -> None:
        handled.append(frame["payload"]["event"].get("text", ""))
        await handle(ws, frame)

    mode._handle = noted  # type: ignore[method-assign]
    task = asyncio.create_task(mode.run())
    try:
        await fake.async_wait_for(lambda: states.connected, what="hello")
        web = make_web_client(fake.bot_token, fake.base_url)
        posted = await web.chat_postMessage(channel="C1", text="the bot's own")
        await web.chat_update(channel="C1", ts=posted["ts"], text="the bot's own, changed")
        await web.chat_delete(channel="C1", ts=posted["ts"])
        fake.post_message("C1", "U1", "a person's")
        await fake.async_wait_for(lambda: seen, what="the person's message handled")
        await fake.async_wait_for(lambda: len(fake.acks) == 4, what="every event acknowledged")
        assert seen == ["a person's"]
        assert handled == ["a person's"]  # the bot's own are dropped as they are acknowledged, with no task started
    finally:
        task.cancel()
