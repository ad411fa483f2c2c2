"""The playground's web server: the chat page, its JSON API and replies streamed as server-sent events."""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from myao2.domain.conversation import Channel, Message, Person, clean_text
from myao2.domain.memory import Memory, seen_in
from myao2.domain.memo import Memo
from myao2.domain.ports import ConversationStore, MemoStore, MemoryStore
from myao2.domain.visibility import Reader, not_public
from myao2.infrastructure.playground.chat import PlaygroundPublisher, Stamps
from myao2.infrastructure.playground.rooms import BOT_USER_ID, MAX_NAME_LENGTH, ROOMS, clean_name, person_id, room
from myao2.infrastructure.tasks import TaskSet

logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 16 * 1024
MAX_TEXT_CHARS = 4000
MESSAGES_SHOWN = 200
MEMOS_SHOWN = 100
LOOPBACK_NAMES = ("localhost",)
STATIC = Path(__file__).parent / "static"
SECURITY_HEADERS = {
    # the page's own files and API only: no inline script or style, no other site's, and no site may frame it
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",  # the page's address may hold the token
}
"""Headers of every response: another site may not frame the page (clickjacking), nor a file be taken for
another type."""

Answer = Callable[[Message], Awaitable[None]]
"""Answers a stored message addressed to the bot (the application's mention use case)."""


@dataclass(frozen=True)
class Playground:
    """What the server shows and talks to: the stores, the answering use case and the persona."""

    conversations: ConversationStore
    memos: MemoStore
    memories: MemoryStore
    answer: Answer
    publisher: PlaygroundPublisher
    stamps: Stamps
    tasks: TaskSet
    bot_name: str
    avatar: Path | None = None


class BadRequest(web.HTTPBadRequest):
    """400 with a JSON body {"error": message}."""

    def __init__(self, message: str) -> None:
        super().__init__(text=json.dumps({"error": message}, ensure_ascii=False), content_type="application/json")


def build_web_app(playground: Playground, token: str = "") -> web.Application:
    """The aiohttp application; with `token` (the spaces around it aside, as `check_playground_settings` reads it),
    every request but the page's static files must carry it. Without, it listens on a loopback address and serves
    only requests naming one as their host."""
    token = token.strip()
    app = web.Application(middlewares=[_token_check(token) if token else _loopback_check])
    app.on_response_prepare.append(_add_security_headers)
    routes = _Routes(playground)
    app.add_routes(
        [
            web.get("/", routes.page),
            web.get("/avatar", routes.avatar),
            web.get("/api/conversations", routes.conversations),
            web.get("/api/messages", routes.messages),
            web.get("/api/memos", routes.memos),
            web.get("/api/memory", routes.memory),
            web.post("/api/chat", routes.chat),
            web.static("/static", str(STATIC)),
        ]
    )
    return app


async def _add_security_headers(request: web.Request, response: web.StreamResponse) -> None:
    response.headers.update(SECURITY_HEADERS)


def _token_check(token: str):  # type: ignore[no-untyped-def]
    @web.middleware
    async def check(request: web.Request, handler):  # type: ignore[no-untyped-def]
        if request.path.startswith("/static/"):
            return await handler(request)
        given = request.query.get("token", "")
        header = request.headers.get("Authorization", "")
        if header.startswith("Bearer "):
            given = header.removeprefix("Bearer ")
        if not hmac.compare_digest(given.encode(), token.encode()):
            raise web.HTTPUnauthorized(
                text=json.dumps({"error": "a valid token is required"}), content_type="application/json"
            )
        return await handler(request)

    return check


def is_loopback(host: str) -> bool:
    """Whether `host` (a name or an address) is this machine's alone: a loopback address, or "localhost"."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: whatever it resolves to, others may reach it


@web.middleware
async def _loopback_check(request: web.Request, handler):  # type: ignore[no-untyped-def]
    """Refuse a request naming another host: a web page whose name was pointed at 127.0.0.1 after it loaded (DNS
    rebinding) is the page's own origin to the browser, which would let it read and speak in every conversation."""
    try:
        host = request.url.host or ""
    except ValueError:
        host = ""
    if not is_loopback(host):
        raise web.HTTPForbidden(
            text=json.dumps({"error": "without playground.token, open the page at 127.0.0.1 or localhost"}),
            content_type="application/json",
        )
    return await handler(request)


class _Routes:
    def __init__(self, playground: Playground) -> None:
        self._p = playground

    async def page(self, request: web.Request) -> web.StreamResponse:
        return web.FileResponse(STATIC / "index.html")

    async def avatar(self, request: web.Request) -> web.StreamResponse:
        return web.FileResponse(self._p.avatar or STATIC / "avatar.svg")

    async def conversations(self, request: web.Request) -> web.StreamResponse:
        return web.json_response(
            {
                "bot": {"name": self._p.bot_name},
                "conversations": [
                    {"id": c.id, "name": c.name, "kind": c.kind.value, "private": c.is_private} for c in ROOMS
                ],
            }
        )

    async def messages(self, request: web.Request) -> web.StreamResponse:
        channel = _conversation(request.query.get("conversation"))
        messages = await asyncio.to_thread(self._p.conversations.channel_messages, channel.id, MESSAGES_SHOWN)
        return web.json_response({"messages": [_message_json(m) for m in messages]})

    async def memos(self, request: web.Request) -> web.StreamResponse:
        channel = _conversation(request.query.get("conversation"))
        page = await asyncio.to_thread(self._p.memos.list, Reader.of(channel.id, channel), limit=MEMOS_SHOWN)
        return web.json_response({"memos": [_memo_json(m) for m in page.memos]})

    async def memory(self, request: web.Request) -> web.StreamResponse:
        channel = _conversation(request.query.get("conversation"))
        memories = await asyncio.to_thread(self._p.memories.all)
        # every stored conversation: on the bot's database the workspace memory also heard Slack's channels
        channels = await asyncio.to_thread(self._p.conversations.channels)
        shown = seen_in(memories, channel.id, None, not_public(channels), channel)
        return web.json_response({"memory": [_memory_json(m) for m in shown]})

    async def chat(self, request: web.Request) -> web.StreamResponse:
        channel, name, text = await _chat_request(request)
        user_id = person_id(name)
        message = Message(
            channel_id=channel.id,
            ts=self._p.stamps.next(),
            user_id=user_id,
            text=text,
            user_name=name,
            mentions=(BOT_USER_ID,),
        )

        def store() -> None:
            self._p.conversations.save_person(Person(user_id, name))
            self._p.conversations.save_message(message)

        await asyncio.to_thread(store)
        events: asyncio.Queue[tuple[str, dict[str, Any]] | None] = asyncio.Queue()
        self._p.publisher.listen(message.ts, lambda event, data: events.put_nowait((event, data)))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        try:
            await response.prepare(request)
            await _send(response, "message", _message_json(message))
            self._p.tasks.spawn(self._answer(message, events))
            answered = False
            while (item := await events.get()) is not None:
                answered = answered or item[0] == "done"
                await _send(response, *item)
            if not answered:
                await _send(response, "error", {"message": "The bot could not answer; the log says why."})
            await response.write_eof()
        except ConnectionResetError:
            logger.info("the page left before the answer to %s was shown", message.ts)
        finally:
            self._p.publisher.forget(message.ts)
        return response

    async def _answer(self, message: Message, events: asyncio.Queue[tuple[str, dict[str, Any]] | None]) -> None:
        try:
            await self._p.answer(message)
        finally:
            events.put_nowait(None)


async def _chat_request(request: web.Request) -> tuple[Channel, str, str]:
    """The conversation, the speaker's name and the text of a POST /api/chat, or 400 saying what is wrong."""
    if request.content_type != "application/json":
        raise BadRequest("Content-Type must be application/json")
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        raise BadRequest(f"the body is too large (at most {MAX_BODY_BYTES} bytes)")
    body = b""
    while len(body) <= MAX_BODY_BYTES and (chunk := await request.content.read(MAX_BODY_BYTES + 1 - len(body))):
        body += chunk
    if len(body) > MAX_BODY_BYTES:
        raise BadRequest(f"the body is too large (at most {MAX_BODY_BYTES} bytes)")
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise BadRequest("the body is not valid JSON") from None
    if not isinstance(data, dict):
        raise BadRequest('the body must be a JSON object: {"conversation", "user", "text"}')
    channel = _conversation(data.get("conversation"))
    name, text = data.get("user"), data.get("text")
    if not isinstance(name, str) or not clean_name(name):
        raise BadRequest("user: give the name you speak as")
    name = clean_text(clean_name(name))
    if len(name) > MAX_NAME_LENGTH:
        raise BadRequest(f"user: the name is too long (at most {MAX_NAME_LENGTH} characters)")
    if not isinstance(text, str) or not text.strip():
        raise BadRequest("text: the message is empty")
    if len(text) > MAX_TEXT_CHARS:
        raise BadRequest(f"text: the message is too long (at most {MAX_TEXT_CHARS} characters)")
    return channel, name, clean_text(text.strip())


def _conversation(conversation_id: object) -> Channel:
    channel = room(conversation_id) if isinstance(conversation_id, str) else None
    if channel is None:
        raise BadRequest(f"unknown conversation: {conversation_id!r} (see GET /api/conversations)")
    return channel


async def _send(response: web.StreamResponse, event: str, data: dict[str, Any]) -> None:
    payload = json.dumps(data, ensure_ascii=False)
    await response.write(f"event: {event}\ndata: {payload}\n\n".encode())


def _message_json(message: Message) -> dict[str, Any]:
    return {
        "ts": message.ts,
        "user": message.user_name,
        "bot": message.is_bot,
        "text": message.text,
        "time": message.posted_at.isoformat(),
    }


def _memo_json(memo: Memo) -> dict[str, Any]:
    return {
        "name": memo.name,
        "content": memo.content,
        "priority": memo.priority,
        "tags": list(memo.tags),
        "private": not memo.audience.is_workspace,
        "revision": memo.revision,
        "updated_at": memo.updated_at.isoformat(),
    }


def _memory_json(memory: Memory) -> dict[str, Any]:
    return {
        "scope": memory.scope.key,
        "term": memory.term.value,
        "label": memory.label,
        "private": not memory.audience.is_workspace,
        "notes": [{"day": b.day.isoformat(), "text": b.text} for b in memory.active],
    }
