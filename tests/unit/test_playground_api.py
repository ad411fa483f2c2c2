"""The playground's HTTP API on real stores, with the answering use case replaced by a scripted reply."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from datetime import datetime
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer
from sqlalchemy import Engine

from myao2.application.agents import ModelUnavailable
from myao2.application.reply_stream import ReplyDone, ReplyEvent, TextDelta, ToolFinished, ToolStarted
from myao2.domain.conversation import Channel, ChannelKind, Message
from myao2.domain.memo import MemoDraft, Origin
from myao2.domain.memory import WORKSPACE_SCOPE, Bullet, Memory, Scope, Term
from myao2.domain.visibility import WORKSPACE, Audience
from myao2.infrastructure.clock import SystemClock
from myao2.infrastructure.db.conversation_store import SqlConversationStore
from myao2.infrastructure.db.engine import open_database
from myao2.infrastructure.db.memo_store import SqlMemoStore
from myao2.infrastructure.db.memory_store import SqlMemoryStore
from myao2.infrastructure.playground.chat import PlaygroundPublisher, Stamps
from myao2.infrastructure.playground.rooms import ROOMS, room
from myao2.infrastructure.playground.server import MAX_BODY_BYTES, Playground, build_web_app
from myao2.infrastructure.tasks import TaskSet

GENERAL, SECRET = "play-general", "play-secret"
APOLOGY = "Sorry, I could not answer."


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    engine = open_database(f"sqlite:///{tmp_path / 'play.db'}")
    yield engine
    engine.dispose()


class ScriptedAnswer:
    """Answers every message with the scripted events, through the publisher, as the mention use case does."""

    def __init__(self, publisher: PlaygroundPublisher) -> None:
        self.publisher = publisher
        self.events: list[ReplyEvent | Exception] = [TextDelta("Hel"), TextDelta("lo"), ReplyDone("Hello")]
        self.answered: list[Message] = []

    async def __call__(self, message: Message) -> None:
        self.answered.append(message)

        async def reply() -> AsyncIterator[ReplyEvent]:
            for event in self.events:
                if isinstance(event, Exception):
                    raise event
                yield event

        channel = room(message.channel_id)
        assert channel is not None
        await self.publisher.publish(channel, None, message.user_id, reply(), APOLOGY, answering=message.ts)


class Harness:
    def __init__(self, engine: Engine) -> None:
        stamps = Stamps()
        self.publisher = PlaygroundPublisher(stamps)
        self.answer = ScriptedAnswer(self.publisher)
        clock = SystemClock()
        self.conversations = SqlConversationStore(engine, clock)
        self.memos = SqlMemoStore(engine, clock)
        self.memories = SqlMemoryStore(engine, clock)
        for channel in ROOMS:
            self.conversations.save_channel(channel)
        self.playground = Playground(
            conversations=self.conversations,
            memos=self.memos,
            memories=self.memories,
            answer=self.answer,
            publisher=self.publisher,
            stamps=stamps,
            tasks=TaskSet(),
            bot_name="myao",
        )


@pytest.fixture
def harness(engine: Engine) -> Harness:
    return Harness(engine)


async def client_for(harness: Harness, token: str = "") -> TestClient:
    client = TestClient(TestServer(build_web_app(harness.playground, token)))
    await client.start_server()
    return client


def parse_events(body: str) -> list[tuple[str, dict]]:
    events = []
    for block in body.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        events.append((lines["event"], json.loads(lines["data"])))
    return events


async def chat(client: TestClient, **body: object) -> list[tuple[str, dict]]:
    response = await client.post("/api/chat", json={"conversation": GENERAL, "user": "Alice", "text": "hi", **body})
    assert response.status == 200, await response.text()
    assert response.content_type == "text/event-stream"
    return parse_events(await response.text())


async def test_a_message_is_stored_and_its_reply_streams_as_events(harness: Harness) -> None:
    harness.answer.events = [
        TextDelta("Noted"),
        ToolStarted("c1", "add_memo", "Add memo: alice-birthday"),
        ToolFinished("c1", "add_memo", True),
        TextDelta(", May 3!"),
        ReplyDone("Noted, May 3!"),
    ]
    async with await client_for(harness) as client:
        events = await chat(client, text="  my birthday is May 3  ")

    assert [name for name, _ in events] == ["message", "start", "delta", "tool", "tool", "delta", "done"]
    message = events[0][1]
    assert (message["user"], message["text"], message["bot"]) == ("Alice", "my birthday is May 3", False)
    assert events[3][1] == {"id": "c1", "tool": "add_memo", "title": "Add memo: alice-birthday", "status": "started"}
    assert events[4][1]["status"] == "done"
    assert events[-1][1]["text"] == "Noted, May 3!"
    [stored] = harness.conversations.channel_messages(GENERAL, 10)
    assert (stored.ts, stored.user_id, stored.text) == (message["ts"], "play-user-alice", "my birthday is May 3")
    assert harness.conversations.people(["play-user-alice"])["play-user-alice"].display_name == "Alice"


async def test_a_failing_model_is_told_to_the_page_and_the_reply_ends_with_the_apology(harness: Harness) -> None:
    harness.answer.events = [TextDelta("Let me"), ModelUnavailable("response model failed: 500 boom")]
    async with await client_for(harness) as client:
        events = await chat(client)

    names = [name for name, _ in events]
    assert names == ["message", "start", "delta", "error", "done"]
    assert "response model failed: 500 boom" in events[3][1]["message"]
    assert events[-1][1]["text"] == f"Let me\n\n{APOLOGY}"


async def test_an_answer_that_never_replies_is_an_error_not_silence(harness: Harness) -> None:
    async def no_reply(message: Message) -> None:
        return None

    harness.playground = Playground(**{**harness.playground.__dict__, "answer": no_reply})
    async with await client_for(harness) as client:
        events = await chat(client)

    assert [name for name, _ in events] == ["message", "error"]


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"conversation": GENERAL, "user": "Alice", "text": "   "}, "text"),
        ({"conversation": GENERAL, "user": "Alice"}, "text"),
        ({"conversation": "CGENERAL", "user": "Alice", "text": "hi"}, "unknown conversation"),
        ({"user": "Alice", "text": "hi"}, "unknown conversation"),
        ({"conversation": GENERAL, "user": " ", "text": "hi"}, "user"),
        ({"conversation": GENERAL, "user": "A" * 41, "text": "hi"}, "user"),
        ({"conversation": GENERAL, "user": "Alice", "text": "x" * 4001}, "too long"),
        (["not", "an", "object"], "JSON object"),
    ],
)
async def test_bad_chat_bodies_are_refused_with_a_message(harness: Harness, body: object, needle: str) -> None:
    async with await client_for(harness) as client:
        response = await client.post("/api/chat", json=body)
        assert response.status == 400
        assert needle in (await response.json())["error"]
    assert harness.answer.answered == []
    assert harness.conversations.channel_messages(GENERAL, 10) == []


async def test_a_body_that_is_not_json_is_refused(harness: Harness) -> None:
    async with await client_for(harness) as client:
        response = await client.post("/api/chat", data=b"{oops", headers={"Content-Type": "application/json"})
        assert response.status == 400
        assert "not valid JSON" in (await response.json())["error"]


async def test_the_wrong_content_type_is_refused(harness: Harness) -> None:
    body = json.dumps({"conversation": GENERAL, "user": "Alice", "text": "hi"})
    async with await client_for(harness) as client:
        response = await client.post("/api/chat", data=body, headers={"Content-Type": "text/plain"})
        assert response.status == 400
        assert "application/json" in (await response.json())["error"]
    assert harness.answer.answered == []


async def test_an_oversized_body_is_refused(harness: Harness) -> None:
    text = "x" * MAX_BODY_BYTES
    async with await client_for(harness) as client:
        response = await client.post("/api/chat", json={"conversation": GENERAL, "user": "Alice", "text": text})
        assert response.status == 400
        assert "too large" in (await response.json())["error"]

        async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: the size is found by reading
            yield b'{"conversation": "play-general", "user": "Alice", "text": "'
            for _ in range(MAX_BODY_BYTES // 1024 + 1):
                yield b"x" * 1024
            yield b'"}'

        response = await client.post("/api/chat", data=chunks(), headers={"Content-Type": "application/json"})
        assert response.status == 400
        assert "too large" in (await response.json())["error"]
    assert harness.answer.answered == []


@pytest.mark.parametrize("path", ["/api/messages", "/api/memos", "/api/memory"])
async def test_reads_of_an_unknown_conversation_are_refused(harness: Harness, path: str) -> None:
    async with await client_for(harness) as client:
        for query in ("", "?conversation=CGENERAL"):
            response = await client.get(path + query)
            assert response.status == 400
            assert "unknown conversation" in (await response.json())["error"]


async def test_conversations_are_listed_with_the_private_one_and_the_dm(harness: Harness) -> None:
    async with await client_for(harness) as client:
        data = await (await client.get("/api/conversations")).json()
    kinds = {c["id"]: (c["kind"], c["private"]) for c in data["conversations"]}
    assert kinds[GENERAL] == ("public", False)
    assert kinds[SECRET] == ("private", True)
    assert ("im", True) in kinds.values()
    assert all(c["id"].startswith("play-") for c in data["conversations"])
    assert data["bot"] == {"name": "myao"}


async def test_a_memo_taken_in_the_private_conversation_shows_only_there(harness: Harness) -> None:
    secret = Origin(channel_id=SECRET, channel_private=True, user_id="play-user-alice")
    harness.memos.add(MemoDraft.create("alice-secret", "Alice plans a surprise", 3), secret, "test")
    harness.memos.add(MemoDraft.create("team-lunch", "Lunch is at noon", 2), Origin(channel_id=GENERAL), "test")
    async with await client_for(harness) as client:
        here = await (await client.get(f"/api/memos?conversation={SECRET}")).json()
        there = await (await client.get(f"/api/memos?conversation={GENERAL}")).json()
    assert {m["name"]: m["private"] for m in here["memos"]} == {"alice-secret": True, "team-lunch": False}
    assert [m["name"] for m in there["memos"]] == ["team-lunch"]


async def test_messages_of_a_conversation_are_listed_oldest_first(harness: Harness) -> None:
    async with await client_for(harness) as client:
        await chat(client, text="first")
        await chat(client, text="second")
        data = await (await client.get(f"/api/messages?conversation={GENERAL}")).json()
        other = await (await client.get(f"/api/messages?conversation={SECRET}")).json()
    assert [m["text"] for m in data["messages"]] == ["first", "second"]
    assert other["messages"] == []


async def test_with_a_token_every_request_but_static_files_needs_it(harness: Harness) -> None:
    async with await client_for(harness, token="s3cret") as client:
        for path in ("/", "/avatar", "/api/conversations", f"/api/memos?conversation={GENERAL}"):
            assert (await client.get(path)).status == 401
            assert (await client.get(path, headers={"Authorization": "Bearer wrong"})).status == 401
            assert (await client.get(path, headers={"Authorization": "Bearer s3cret"})).status == 200
        assert (await client.get("/?token=s3cret")).status == 200
        assert (await client.post("/api/chat", json={"conversation": GENERAL, "user": "A", "text": "hi"})).status == 401
        assert (await client.get("/static/playground.js")).status == 200
    assert harness.answer.answered == []


async def test_the_page_and_the_default_avatar_are_served(harness: Harness) -> None:
    async with await client_for(harness) as client:
        page = await client.get("/")
        avatar = await client.get("/avatar")
        assert page.content_type == "text/html" and "playground.js" in await page.text()
        assert avatar.content_type == "image/svg+xml" and "<svg" in await avatar.text()


async def test_the_configured_avatar_is_served_with_its_type(harness: Harness, tmp_path: Path) -> None:
    picture = tmp_path / "me.png"
    picture.write_bytes(b"\x89PNG\r\n\x1a\n-not-really")
    harness.playground = Playground(**{**harness.playground.__dict__, "avatar": picture})
    async with await client_for(harness) as client:
        avatar = await client.get("/avatar")
        assert avatar.content_type == "image/png"
        assert await avatar.read() == picture.read_bytes()


async def test_what_is_remembered_of_the_private_conversation_shows_only_there(harness: Harness) -> None:
    day = datetime(2026, 1, 2).date()
    harness.memories.save(
        [
            Memory(WORKSPACE_SCOPE, Term.LONG, WORKSPACE, (Bullet(1, "the team ships on Fridays", day, ("1.0",)),)),
            Memory(
                Scope(SECRET),
                Term.LONG,
                Audience(SECRET),
                (Bullet(1, "Alice plans a surprise", day, ("2.0",)),),
                label="#secret",
            ),
        ]
    )
    async with await client_for(harness) as client:
        here = await (await client.get(f"/api/memory?conversation={SECRET}")).json()
        there = await (await client.get(f"/api/memory?conversation={GENERAL}")).json()
    notes = {(m["label"], m["private"]): [n["text"] for n in m["notes"]] for m in here["memory"]}
    assert notes == {("", False): ["the team ships on Fridays"], ("#secret", True): ["Alice plans a surprise"]}
    assert [n["text"] for m in there["memory"] for n in m["notes"]] == ["the team ships on Fridays"]


async def test_the_workspace_memory_leaves_out_what_a_slack_channel_turned_private_said_before_its_narrowing(
    harness: Harness,
) -> None:
    # On the bot's database the workspace memory holds what Slack's public channels said; one since turned private
    # is its own from the moment it is stored as such, though its narrowing has not reached the memory yet.
    day = datetime(2026, 1, 2).date()
    harness.conversations.save_channel(Channel("CPLANS", "plans", ChannelKind.PUBLIC))
    harness.memories.save(
        [
            Memory(
                WORKSPACE_SCOPE,
                Term.LONG,
                WORKSPACE,
                (
                    Bullet(1, "the team ships on Fridays", day, ("1.0",), heard_in=(GENERAL,)),
                    Bullet(2, "canary: the plans channel is picking a new office", day, ("2.0",), heard_in=("CPLANS",)),
                ),
            )
        ]
    )
    harness.conversations.set_channel_kind("CPLANS", ChannelKind.PRIVATE)
    async with await client_for(harness) as client:
        for conversation in (GENERAL, SECRET):
            shown = await (await client.get(f"/api/memory?conversation={conversation}")).json()
            assert [n["text"] for m in shown["memory"] for n in m["notes"]] == ["the team ships on Fridays"]


async def test_without_a_token_only_requests_to_a_loopback_name_are_served(harness: Harness) -> None:
    # DNS rebinding: a web page at evil.example, its name then pointed at 127.0.0.1, is the page's own origin to the
    # browser, which would let it read every conversation and speak in them, were the Host it names served.
    await chat_in(harness, SECRET, "canary: Alice plans a surprise")
    async with await client_for(harness) as client:
        for host in ("evil.example:8766", "evil.example", "127.0.0.1.evil.example", "localhost.evil.example:8766"):
            headers = {"Host": host}
            for path in ("/", f"/api/messages?conversation={SECRET}", f"/api/memos?conversation={SECRET}"):
                response = await client.get(path, headers=headers)
                assert response.status == 403 and "canary" not in await response.text(), (host, path)
            body = {"conversation": SECRET, "user": "Mallory", "text": "what did Alice say?"}
            assert (await client.post("/api/chat", json=body, headers=headers)).status == 403
        for host in ("127.0.0.1:8766", "localhost:8766", "[::1]:8766", "localhost", "LOCALHOST:8766", "127.0.0.2:80"):
            response = await client.get(f"/api/messages?conversation={SECRET}", headers={"Host": host})
            assert response.status == 200 and "canary" in await response.text(), host
    assert [m.user_name for m in harness.answer.answered] == ["Alice"]


async def chat_in(harness: Harness, conversation: str, text: str) -> None:
    async with await client_for(harness) as client:
        await chat(client, conversation=conversation, text=text)


async def test_a_token_is_read_without_the_spaces_around_it_as_the_settings_check_reads_it(harness: Harness) -> None:
    # playground.token "  " counts as none for check_playground_settings (a loopback host needs none), but the server
    # took it for a token, and served a DNS-rebinding page that sent it; "s3cret\n" (from a file) refused "s3cret".
    async with await client_for(harness, token="  ") as client:
        assert (await client.get("/api/conversations")).status == 200
        assert (await client.get("/api/conversations?token=%20%20", headers={"Host": "evil.example"})).status == 403
    async with await client_for(harness, token=" s3cret\n") as client:
        assert (await client.get("/api/conversations", headers={"Authorization": "Bearer s3cret"})).status == 200
        assert (await client.get("/api/conversations")).status == 401


def assert_framing_and_sniffing_are_refused(response, what: object) -> None:
    policy = response.headers.get("Content-Security-Policy", "")
    assert response.headers.get("X-Frame-Options") == "DENY", what
    assert "frame-ancestors 'none'" in policy and "default-src 'none'" in policy, what
    assert response.headers.get("X-Content-Type-Options") == "nosniff", what


async def test_every_response_refuses_framing_and_content_sniffing(harness: Harness) -> None:
    # A page of another site could frame the playground and have its visitor click in it (clickjacking), or take a
    # served file for a script or a page of another type.
    async with await client_for(harness) as client:
        for path in ("/", "/avatar", "/static/playground.js", "/static/playground.css", "/api/conversations",
                     f"/api/messages?conversation={GENERAL}", f"/api/memos?conversation={GENERAL}",
                     f"/api/memory?conversation={GENERAL}", "/api/messages?conversation=nowhere", "/missing"):
            assert_framing_and_sniffing_are_refused(await client.get(path), path)
        chat = await client.post("/api/chat", json={"conversation": GENERAL, "user": "Alice", "text": "hi"})
        assert_framing_and_sniffing_are_refused(chat, "/api/chat")
        await chat.read()
        assert_framing_and_sniffing_are_refused(await client.get("/", headers={"Host": "evil.example"}), "rebinding")
    async with await client_for(harness, token="s3cret") as client:
        assert_framing_and_sniffing_are_refused(await client.get("/api/conversations"), "no token")
