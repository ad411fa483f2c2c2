"""FakeSlack against the real slack_sdk clients (Web API and Socket Mode)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import urllib.request
from typing import Any

import aiohttp
import pytest
from aiohttp import WSMessage
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient

from tests.fakes import PROXY_VARIABLES
from tests.fakes.slack_server import FakeSlack



@pytest.fixture
def fake():
    with FakeSlack() as slack:  # redelivery after the default 3 s: an ack late on a busy machine brings no retry
        slack.add_user("U1", "alice", display_name="Alice", real_name="Alice A.")
        slack.add_user("U2", "bob")
        slack.add_channel("C1", "general", members=["U1", "U2"])
        slack.add_channel("C2", "secret", is_private=True, members=["U1"])
        slack.add_channel("D1", "alice-dm", is_im=True, members=["U1"])
        slack.add_channel("C3", "outside", members=["U1"], bot_member=False)
        yield slack


def web_client(fake: FakeSlack, token: str | None = None) -> AsyncWebClient:
    return AsyncWebClient(token=token or fake.bot_token, base_url=fake.base_url)


class Recorder:
    """A Socket Mode client wired to record frames and (optionally) ack requests."""

    def __init__(self, fake: FakeSlack, ack: bool = True, ping_interval: float = 5) -> None:
        self.frames: list[dict[str, Any]] = []  # every text frame, in arrival order
        self.requests: list[SocketModeRequest] = []
        self.ack = ack
        self.client = SocketModeClient(fake.app_token, web_client=web_client(fake), ping_interval=ping_interval)
        self.client.on_message_listeners.append(self._on_frame)
        self.client.socket_mode_request_listeners.append(self._on_request)

    async def _on_frame(self, message: WSMessage) -> None:
        self.frames.append(json.loads(message.data))

    async def _on_request(self, client: SocketModeClient, request: SocketModeRequest) -> None:
        self.requests.append(request)
        if self.ack:
            await client.send_socket_mode_response(SocketModeResponse(envelope_id=request.envelope_id))

    def events(self, type_: str | None = None) -> list[dict[str, Any]]:
        return [r.payload["event"] for r in self.requests if type_ is None or r.payload["event"]["type"] == type_]


@pytest.fixture
async def recorder(fake: FakeSlack):
    rec = Recorder(fake)
    await rec.client.connect()
    await fake.async_wait_for(lambda: rec.frames, 5)
    yield rec
    await rec.client.close()


# ---------------------------------------------------------------- Web API


async def test_auth_test_and_invalid_auth(fake: FakeSlack) -> None:
    resp = await web_client(fake).auth_test()
    assert resp["ok"] and resp["user_id"] == "UBOT" and resp["bot_id"] == "BBOT" and resp["team_id"] == "T1"
    assert resp["user"] and resp["team"] and resp["url"]

    for token in ("xoxb-wrong", fake.app_token):
        with pytest.raises(SlackApiError) as info:
            await web_client(fake, token).auth_test()
        assert info.value.response.status_code == 200
        assert info.value.response["error"] == "invalid_auth"
    with pytest.raises(SlackApiError) as info:
        await AsyncWebClient(base_url=fake.base_url).auth_test()
    assert info.value.response["error"] == "invalid_auth"
    assert [m for m, _ in fake.web_calls] == ["auth.test"] * 4
    assert all("token" not in p for _, p in fake.web_calls)


@pytest.mark.filterwarnings("ignore:The top-level `text` argument is missing")
async def test_post_message_and_thread_reply(fake: FakeSlack) -> None:
    client = web_client(fake)
    resp = await client.chat_postMessage(channel="C1", text="hello")
    assert resp["channel"] == "C1" and resp["message"]["bot_id"] == "BBOT" and resp["message"]["user"] == "UBOT"
    reply = await client.chat_postMessage(channel="C1", text="in thread", thread_ts=resp["ts"])
    assert reply["message"]["thread_ts"] == resp["ts"]
    assert float(reply["ts"]) > float(resp["ts"])
    assert [(p["method"], p["text"], p["thread_ts"]) for p in fake.posted] == [
        ("chat.postMessage", "hello", None),
        ("chat.postMessage", "in thread", resp["ts"]),
    ]
    assert fake.wait_for_posts(2, 1)
    assert ("chat.postMessage", {"channel": "C1", "text": "hello"}) in fake.web_calls

    updated = await client.chat_update(channel="C1", ts=resp["ts"], text="hello again")
    assert updated["text"] == "hello again" and fake.posted[-1]["method"] == "chat.update"

    for kwargs, error in [
        ({"channel": "C404", "text": "x"}, "channel_not_found"),
        ({"channel": "C3", "text": "x"}, "not_in_channel"),
        ({"channel": "C1", "text": ""}, "no_text"),
    ]:
        with pytest.raises(SlackApiError) as info:
            await client.chat_postMessage(**kwargs)
        assert info.value.response["error"] == error


async def test_markdown_text_posts_and_updates_a_message_as_a_stream_writes_it(fake: FakeSlack) -> None:
    client = web_client(fake)
    markdown = "# Plan\n**bold** and [a link](https://example.com)"
    resp = await client.chat_postMessage(channel="C1", markdown_text=markdown)
    assert resp["message"]["text"] == markdown
    await client.chat_update(channel="C1", ts=resp["ts"], markdown_text="**done**")
    await client.chat_update(channel="C1", ts=resp["ts"], text="*done*")
    assert [(p["method"], p["text"], p["markdown"]) for p in fake.posted] == [
        ("chat.postMessage", markdown, True),
        ("chat.update", "**done**", True),
        ("chat.update", "*done*", False),
    ]

    for call, kwargs, error in [
        (client.chat_postMessage, {"channel": "C1", "markdown_text": "x" * 12_001}, "msg_too_long"),
        (client.chat_postMessage, {"channel": "C1", "markdown_text": "x", "text": "x"}, "invalid_arguments"),
        (client.chat_update, {"channel": "C1", "ts": resp["ts"], "markdown_text": "x" * 12_001}, "msg_too_long"),
    ]:
        with pytest.raises(SlackApiError) as info:
            await call(**kwargs)
        assert info.value.response["error"] == error
    assert len(fake.posted) == 3


async def test_history_pagination(fake: FakeSlack) -> None:
    posted = [fake.post_message("C1", "U1", f"m{i}", emit=False) for i in range(25)]
    fake.post_message("C1", "U2", "hidden reply", thread_ts=posted[0], emit=False)
    assert posted == sorted(posted, key=float) and len(set(posted)) == 25
    assert all(len(ts.split(".")[1]) == 6 for ts in posted)

    pages = []
    async for page in await web_client(fake).conversations_history(channel="C1", limit=10):
        pages.append(page.data)  # the iterator mutates one response object
    assert [len(p["messages"]) for p in pages] == [10, 10, 5]
    assert [p["has_more"] for p in pages] == [True, True, False]
    assert pages[-1]["response_metadata"]["next_cursor"] == ""
    texts = [m["text"] for p in pages for m in p["messages"]]
    assert texts == [f"m{i}" for i in reversed(range(25))]
    assert pages[-1]["messages"][-1]["reply_count"] == 1

    window = await web_client(fake).conversations_history(channel="C1", oldest=posted[5], latest=posted[8])
    assert [m["text"] for m in window["messages"]] == ["m7", "m6"]
    window = await web_client(fake).conversations_history(
        channel="C1", oldest=posted[5], latest=posted[8], inclusive=True
    )
    assert [m["text"] for m in window["messages"]] == ["m8", "m7", "m6", "m5"]


async def test_replies_parent_first_and_paginated(fake: FakeSlack) -> None:
    parent = fake.post_message("C1", "U1", "parent", emit=False)
    replies = [fake.post_message("C1", f"U{1 + i % 2}", f"r{i}", thread_ts=parent, emit=False) for i in range(4)]
    fake.post_message("C1", "U1", "loud", thread_ts=parent, subtype="thread_broadcast", emit=False)
    client = web_client(fake)

    resp = await client.conversations_replies(channel="C1", ts=parent)
    assert [m["text"] for m in resp["messages"]] == ["parent", "r0", "r1", "r2", "r3", "loud"]
    head = resp["messages"][0]
    assert head["reply_count"] == 5 and head["reply_users"] == ["U1", "U2"] and head["thread_ts"] == parent
    assert resp["messages"][1]["thread_ts"] == parent

    texts = []
    async for page in await client.conversations_replies(channel="C1", ts=parent, limit=2):
        texts += [m["text"] for m in page["messages"]]
    assert texts == ["parent", "r0", "r1", "r2", "r3", "loud"]

    resp = await client.conversations_replies(channel="C1", ts=parent, oldest=replies[1])
    assert [m["text"] for m in resp["messages"]] == ["parent", "r2", "r3", "loud"]

    history = await client.conversations_history(channel="C1")
    assert [m["text"] for m in history["messages"]] == ["loud", "parent"]


async def test_rate_limit_and_injected_errors(fake: FakeSlack) -> None:
    fake.inject_rate_limit("chat.postMessage", times=1, retry_after=1)
    with pytest.raises(SlackApiError) as info:
        await web_client(fake).chat_postMessage(channel="C1", text="x")
    assert info.value.response.status_code == 429
    assert info.value.response.headers["Retry-After"] == "1"
    assert info.value.response["error"] == "ratelimited"

    fake.inject_rate_limit("chat.postMessage", times=1, retry_after=1)
    retrying = web_client(fake)
    retrying.retry_handlers.append(AsyncRateLimitErrorRetryHandler(max_retry_count=1))
    resp = await retrying.chat_postMessage(channel="C1", text="after retry")
    assert resp["ok"] and len(fake.posted) == 1
    assert [m for m, _ in fake.web_calls].count("chat.postMessage") == 3

    fake.inject_error("users.info", "fatal_error", times=2)
    for _ in range(2):
        with pytest.raises(SlackApiError) as info:
            await web_client(fake).users_info(user="U1")
        assert info.value.response["error"] == "fatal_error"
    assert (await web_client(fake).users_info(user="U1"))["ok"]


async def test_a_dropped_call_takes_effect_and_its_connection_drops_unanswered(fake: FakeSlack) -> None:
    fake.inject_drop("chat.postMessage")
    client = AsyncWebClient(token=fake.bot_token, base_url=fake.base_url, retry_handlers=[])
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await client.chat_postMessage(channel="C1", text="landed")
    assert [p["text"] for p in fake.posted] == ["landed"]
    assert (await client.chat_postMessage(channel="C1", text="answered"))["ok"]  # once only
    assert [p["text"] for p in fake.posted] == ["landed", "answered"]


async def test_lookups(fake: FakeSlack) -> None:
    client = web_client(fake)
    user = (await client.users_info(user="U1"))["user"]
    assert user["name"] == "alice" and user["profile"]["display_name"] == "Alice" and user["real_name"] == "Alice A."
    assert (await client.users_info(user="UBOT"))["user"]["is_bot"] is True
    with pytest.raises(SlackApiError, match="user_not_found"):
        await client.users_info(user="U404")

    info = (await client.conversations_info(channel="C2"))["channel"]
    assert info["is_private"] and info["is_member"] and info["name"] == "secret"
    assert (await client.conversations_info(channel="D1"))["channel"]["is_im"] is True
    assert (await client.conversations_info(channel="C3"))["channel"]["is_member"] is False
    with pytest.raises(SlackApiError, match="channel_not_found"):
        await client.conversations_info(channel="C404")
    with pytest.raises(SlackApiError, match="channel_not_found"):
        await client.conversations_history(channel="C404")

    convs = await client.users_conversations(types="public_channel,private_channel,im,mpim")
    assert sorted(c["id"] for c in convs["channels"]) == ["C1", "C2", "D1"]
    assert [c["id"] for c in (await client.users_conversations())["channels"]] == ["C1"]
    ids = []
    async for page in await client.users_conversations(types="public_channel,private_channel,im", limit=1):
        ids += [c["id"] for c in page["channels"]]
    assert sorted(ids) == ["C1", "C2", "D1"]

    assert (await client.conversations_members(channel="C1"))["members"] == ["U1", "U2", "UBOT"]

    ts = fake.post_message("C1", "U1", "react to me", emit=False)
    await client.reactions_add(channel="C1", timestamp=ts, name="eyes")
    with pytest.raises(SlackApiError, match="already_reacted"):
        await client.reactions_add(channel="C1", timestamp=ts, name="eyes")
    assert fake.reactions == [("C1", ts, "eyes")]

    with pytest.raises(SlackApiError, match="unknown_method"):
        await client.api_call("no.such.method")


async def test_form_and_query_requests(fake: FakeSlack) -> None:
    async with aiohttp.ClientSession() as session:
        form = {"token": fake.bot_token, "channel": "C2"}
        async with session.post(fake.base_url + "conversations.info", data=form) as resp:
            assert (await resp.json())["channel"]["name"] == "secret"
        query = {"token": fake.bot_token, "user": "U2"}
        async with session.get(fake.base_url + "users.info", params=query) as resp:
            assert (await resp.json())["user"]["name"] == "bob"
        async with session.post(fake.base_url + "auth.test", json={"token": "nope"}) as resp:
            assert resp.status == 200 and await resp.json() == {"ok": False, "error": "invalid_auth"}
    assert fake.web_calls[:2] == [("conversations.info", {"channel": "C2"}), ("users.info", {"user": "U2"})]


# ---------------------------------------------------------------- Socket Mode


async def test_socket_mode_hello_events_and_acks(fake: FakeSlack, recorder: Recorder) -> None:
    assert recorder.frames[0]["type"] == "hello" and recorder.frames[0]["connection_info"]["app_id"] == "A1"
    assert [m for m, _ in fake.web_calls] == ["apps.connections.open"]

    ts = fake.post_message("C1", "U1", "hi <@UBOT>!")
    await fake.async_wait_for(lambda: len(fake.acks) >= 2, 5)
    message, mention = recorder.events("message")[0], recorder.events("app_mention")[0]
    assert message == {
        "type": "message",
        "user": "U1",
        "text": "hi <@UBOT>!",
        "ts": ts,
        "team": "T1",
        "channel": "C1",
        "event_ts": ts,
        "channel_type": "channel",
    }
    assert mention["ts"] == ts and mention["channel"] == "C1" and mention["user"] == "U1"
    payloads = [r.payload for r in recorder.requests]
    assert payloads[0]["event_id"] != payloads[1]["event_id"]
    assert all(p["type"] == "event_callback" and p["event_id"].startswith("Ev") for p in payloads)
    assert payloads[0]["authorizations"][0]["user_id"] == "UBOT"
    envelope = fake.envelopes[0]
    assert envelope["type"] == "events_api" and envelope["retry_attempt"] == 0 and envelope["retry_reason"] == ""
    assert envelope["accepts_response_payload"] is False
    assert sorted(fake.acks) == sorted(r.envelope_id for r in recorder.requests)

    reply = fake.post_message("D1", "U1", "in thread", thread_ts=fake.post_message("D1", "U1", "dm"))
    fake.post_message("C3", "U1", "bot is not here <@UBOT>")
    await fake.async_wait_for(lambda: len(recorder.requests) >= 4, 5)
    event = recorder.events("message")[-1]
    assert event["ts"] == reply and event["channel_type"] == "im" and event["thread_ts"]

    resp = await recorder.client.web_client.chat_postMessage(channel="C2", text="mine <@UBOT>")
    await fake.async_wait_for(lambda: len(recorder.requests) >= 5, 5)
    own = recorder.events("message")[-1]
    assert own["bot_id"] == "BBOT" and own["ts"] == resp["ts"] and own["channel_type"] == "group"
    assert len(recorder.events("app_mention")) == 1  # nothing for C3, nothing for the bot's own post
    assert not any(e["channel"] == "C3" for e in recorder.events())


async def test_edit_delete_and_custom_events(fake: FakeSlack, recorder: Recorder) -> None:
    ts = fake.post_message("C1", "U1", "typo")
    fake.edit_message("C1", ts, "fixed")
    fake.delete_message("C1", ts)
    event_id = fake.emit_event({"type": "member_joined_channel", "user": "U2", "channel": "C1"})
    await fake.async_wait_for(lambda: len(recorder.requests) >= 4, 5)
    changed, deleted, joined = recorder.events()[1:]
    assert changed["subtype"] == "message_changed" and changed["hidden"] is True
    assert changed["message"]["text"] == "fixed" and changed["previous_message"]["text"] == "typo"
    assert changed["message"]["edited"]["ts"] == changed["ts"]
    assert deleted["subtype"] == "message_deleted" and deleted["deleted_ts"] == ts
    assert deleted["previous_message"]["text"] == "fixed"
    assert joined["type"] == "member_joined_channel" and joined["event_ts"]
    assert recorder.requests[-1].payload["event_id"] == event_id
    assert fake.messages("C1") == []


async def test_a_deleted_channel_is_told_to_every_app_and_gone_from_every_method(
    fake: FakeSlack, recorder: Recorder
) -> None:
    # As Slack: channel_deleted goes to every connection of the workspace, members or not (group_deleted, for a
    # private channel, only to its members); the channel is then not found, as a private one the bot is out of.
    fake.delete_channel("C3")  # the bot is not in it
    fake.delete_channel("C2")
    await fake.async_wait_for(lambda: len(recorder.requests) >= 2, 5)
    told = [(e["type"], e["channel"]) for e in recorder.events()]
    assert told == [("channel_deleted", "C3"), ("group_deleted", "C2")]
    client = web_client(fake)
    for method in (client.conversations_info, client.conversations_history):
        with pytest.raises(SlackApiError, match="channel_not_found"):
            await method(channel="C3")
    listed = await client.users_conversations(types="public_channel,private_channel")
    assert [c["id"] for c in listed["channels"]] == ["C1"]


async def test_unacked_envelope_is_redelivered(fake: FakeSlack) -> None:
    fake.ack_timeout = 0.3
    rec = Recorder(fake, ack=False)
    await rec.client.connect()
    try:
        await fake.async_wait_for(lambda: fake.connected, 5)
        fake.post_message("C1", "U1", "anyone?")
        await fake.async_wait_for(lambda: len(rec.requests) >= 4, 5)
        await asyncio.sleep(0.5)
        assert [r.retry_attempt for r in rec.requests] == [0, 1, 2, 3]
        assert [r.retry_reason for r in rec.requests] == ["", "timeout", "timeout", "timeout"]
        assert len({r.payload["event_id"] for r in rec.requests}) == 1
        assert len({r.envelope_id for r in rec.requests}) == 4

        # an ack stops the redelivery (given a second to come, and as long again for a redelivery to show up)
        fake.ack_timeout = 1.0
        rec.ack = True
        rec.requests.clear()
        fake.post_message("C1", "U1", "again?")
        await fake.async_wait_for(lambda: fake.acks, 5)
        await asyncio.sleep(1.5)
        assert [r.retry_attempt for r in rec.requests] == [0]

        # explicit redelivery ignores acks
        event_id = rec.requests[0].payload["event_id"]
        fake.redeliver(event_id, times=2)
        await fake.async_wait_for(lambda: len(rec.requests) >= 3, 5)
        assert [(r.retry_attempt, r.payload["event_id"]) for r in rec.requests] == [
            (0, event_id),
            (1, event_id),
            (2, event_id),
        ]
    finally:
        await rec.client.close()


@pytest.mark.parametrize("kind", ["message", "close", "abort"])
async def test_disconnect_then_reconnect(fake: FakeSlack, kind: str) -> None:
    rec = Recorder(fake, ping_interval=0.2)
    await rec.client.connect()
    try:
        await fake.async_wait_for(lambda: fake.connected, 5)
        fake.disconnect(kind)
        await fake.async_wait_for(lambda: fake.connection_count == 2 and fake.open_connections == 1, 5)
        assert [m for m, _ in fake.web_calls] == ["apps.connections.open"] * 2
        if kind == "message":
            assert rec.frames[1]["type"] == "disconnect" and rec.frames[1]["reason"] == "refresh_requested"
        await fake.async_wait_for(lambda: [f["type"] for f in rec.frames].count("hello") == 2, 5)

        ts = fake.post_message("C1", "U1", "still there?")
        await fake.async_wait_for(lambda: rec.events("message"), 5)
        assert rec.events("message")[0]["ts"] == ts
    finally:
        await rec.client.close()


async def test_messages_while_disconnected_are_only_stored(fake: FakeSlack) -> None:
    ts = fake.post_message("C1", "U1", "nobody listens")
    rec = Recorder(fake)
    await rec.client.connect()
    try:
        await fake.async_wait_for(lambda: fake.connected, 5)
        await asyncio.sleep(0.5)  # past ack_timeout: no retry for a never-delivered event
        assert rec.requests == [] and fake.envelopes == []
        history = await web_client(fake).conversations_history(channel="C1")
        assert history["messages"][0]["ts"] == ts
    finally:
        await rec.client.close()


def test_sync_waits_and_timeout_message() -> None:
    with FakeSlack() as fake:
        with pytest.raises(TimeoutError, match="a Socket Mode connection"):
            fake.wait_connected(timeout=0.05)


def test_runs_as_subprocess() -> None:
    env = {k: v for k, v in os.environ.items() if k not in PROXY_VARIABLES}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.slack_server", "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        base_url = proc.stdout.readline().strip()
        assert base_url.startswith("http://127.0.0.1:") and base_url.endswith("/api/")
        control = base_url.removesuffix("/api/") + "/_fake/"
        steps = [
            ("add_channel", {"channel_id": "C9", "name": "nine"}),
            ("post_message", {"channel": "C9", "user": "U1", "text": "yo"}),
        ]
        for method, kwargs in steps:
            request = urllib.request.Request(control + method, data=json.dumps(kwargs).encode(), method="POST")
            with urllib.request.urlopen(request, timeout=5) as r:
                result = json.load(r)["result"]
        client = AsyncWebClient(token="xoxb-test-token", base_url=base_url)
        history = asyncio.run(client.conversations_history(channel="C9"))
        assert [(m["ts"], m["text"]) for m in history["messages"]] == [(result, "yo")]
        with urllib.request.urlopen(control + "state", timeout=5) as r:
            assert json.load(r)["web_calls"] == [["conversations.history", {"channel": "C9"}]]
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
