"""A fake OpenAI-compatible chat completions server for tests and benchmarks.

Serves ``POST /v1/chat/completions`` (streaming and not) and ``GET /v1/models``
on 127.0.0.1, scripted by the test and recording every request::

    with FakeOpenAI() as llm:
        llm.script(ToolCalls([ToolCall("get_time", {})]), Text("It is noon."))
        # point the client at llm.base_url ("http://127.0.0.1:PORT/v1")

Replies are taken one per request from the ``script`` FIFO; when it is empty
the responder set with ``set_responder`` answers (default: ``Text("OK")``). A
responder gets the parsed request body and returns a reply (or a plain str).
Routing by request is a few lines, for example::

    def responder(request):
        system = next((m["content"] for m in request["messages"] if m["role"] == "system"), "")
        if "memo writer" in system:
            return Text("memo")
        tool_names = [t["function"]["name"] for t in request.get("tools") or []]
        if "post_message" in tool_names and request["messages"][-1]["role"] != "tool":
            return ToolCalls([ToolCall("post_message", {"text": "hi"})])
        return Text("done")

    llm.set_responder(responder)

Every reply may carry ``delay`` seconds, awaited without blocking other
requests. Usage figures are rough: characters / 4, at least 1.

Subprocess use: ``python -m tests.fakes.openai_server --port N [--text T]
[--delay S]`` prints the base URL and serves until SIGTERM/SIGINT; ``POST
/_fake/script`` with a JSON list of replies (``{"kind": "text", "content":
...}``, ``{"kind": "tool_calls", "calls": [{"name", "arguments"}]}``,
``{"kind": "error", "status", "message"}``) queues replies and ``GET
/_fake/requests`` returns the recorded requests.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Union

from aiohttp import web

from tests.fakes import WAIT_SECONDS
from tests.fakes._server import LoopbackServer, serve_until_signalled


@dataclass
class Text:
    """A plain assistant message.

    Streamed, the content goes out in ``pieces`` fragments, ``interval`` seconds
    apart (after ``delay``); with ``fail_after`` the connection is dropped after
    that many fragments, as a provider failing mid-answer does; with ``at_once``
    the whole stream goes out in one write, so the client reads its chunks together
    (as after a stall). With ``hold``, nothing goes out until the test sets the event:
    an answer the model is writing until something else has happened; with ``hold_after``
    too, that many pieces go out first (an answer the model pauses midway).
    """

    content: str
    delay: float = 0.0
    pieces: int = 3
    interval: float = 0.0
    fail_after: int | None = None
    at_once: bool = False
    hold: threading.Event | None = None
    hold_after: int = 0


@dataclass
class ToolCall:
    """One function call; ``arguments`` is a dict (JSON-encoded) or a raw string sent verbatim."""

    name: str
    arguments: dict[str, Any] | str = field(default_factory=dict)
    id: str | None = None


@dataclass
class ToolCalls:
    """An assistant message calling tools (finish_reason "tool_calls"); ``hold`` as for `Text`."""

    calls: list[ToolCall]
    content: str = ""
    delay: float = 0.0
    hold: threading.Event | None = None


@dataclass
class Error:
    """An HTTP error with an OpenAI-style body ``{"error": {message, type, param, code}}``."""

    status: int
    message: str
    type: str = "server_error"
    code: str | None = None
    headers: dict[str, str] | None = None
    delay: float = 0.0


@dataclass
class Raw:
    """A 200 event stream of exactly ``body`` (malformed JSON, no ``[DONE]``...); then the connection is held
    open ``hold_open`` seconds without a byte more before it is closed."""

    body: str
    hold_open: float = 0.0
    delay: float = 0.0


Reply = Union[Text, ToolCalls, Error, Raw]
BAD_KEY = Error(401, "Incorrect API key provided.", "invalid_request_error", "invalid_api_key")
Responder = Callable[[dict[str, Any]], Union[Reply, str]]


def default_responder(request: dict[str, Any]) -> Reply:
    """Answer every request with ``Text("OK")``."""
    return Text("OK")


def reply_from_dict(data: dict[str, Any]) -> Reply:
    """Build a reply from its JSON form (``kind``: text | tool_calls | error)."""
    data = dict(data)
    kind = data.pop("kind", "text")
    if kind == "text":
        return Text(**data)
    if kind == "tool_calls":
        calls = [ToolCall(**c) for c in data.pop("calls")]
        return ToolCalls(calls, **data)
    if kind == "error":
        return Error(**data)
    raise ValueError(f"unknown reply kind {kind!r}")


def _estimate_tokens(text: str) -> int:
    return max(1, len(text) // 4)


def _message_text(message: dict[str, Any]) -> str:
    """All text of a request message: content (string or parts) and tool call arguments."""
    content = message.get("content")
    parts: list[str] = []
    if isinstance(content, str):
        parts.append(content)
    elif isinstance(content, list):
        parts.extend(p.get("text", "") for p in content if isinstance(p, dict))
    for call in message.get("tool_calls") or []:
        parts.append(call.get("function", {}).get("arguments", ""))
    return "".join(parts)


def _split(text: str, pieces: int) -> list[str]:
    """Cut ``text`` into up to ``pieces`` non-empty fragments (to exercise client-side joining)."""
    if not text:
        return []
    size = max(1, -(-len(text) // pieces))
    return [text[i : i + size] for i in range(0, len(text), size)]


class FakeOpenAI(LoopbackServer):
    """A scripted OpenAI-compatible server on 127.0.0.1."""

    def __init__(self, api_key: str | None = None, port: int = 0, models: tuple[str, ...] = ("fake",)) -> None:
        """``api_key=None`` accepts any key; otherwise a different key gets HTTP 401."""
        super().__init__(port)
        self.api_key = api_key
        self.models = models
        self._lock = threading.Lock()
        self._queue: deque[Reply] = deque()
        self._responder: Responder = default_responder
        self._requests: list[dict[str, Any]] = []
        self._headers: list[dict[str, Any]] = []
        self._client_ports: list[int] = []
        self._arrivals: list[float] = []

    def _app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._handle_completions)
        app.router.add_get("/v1/models", self._handle_models)
        app.router.add_post("/_fake/script", self._handle_script)
        app.router.add_get("/_fake/requests", self._handle_requests)
        return app

    # ------------------------------------------------------------------ public API

    @property
    def base_url(self) -> str:
        """Base URL for OpenAI clients (``.../v1``)."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Parsed JSON bodies of chat completion requests, in arrival order."""
        with self._lock:
            return copy.deepcopy(self._requests)

    @property
    def request_headers(self) -> list[dict[str, Any]]:
        """Headers of those requests (lower-case names), Authorization replaced.

        Instead of the ``authorization`` value each dict holds
        ``authorization_present`` and ``api_key_matched`` (always True when no
        ``api_key`` was configured) booleans.
        """
        with self._lock:
            return copy.deepcopy(self._headers)

    @property
    def client_ports(self) -> list[int]:
        """The client's port of each of those requests: one port for two requests, one connection kept for both."""
        with self._lock:
            return list(self._client_ports)

    @property
    def arrivals(self) -> list[float]:
        """When each of those requests arrived (`time.monotonic()`)."""
        with self._lock:
            return list(self._arrivals)

    @property
    def pending_replies(self) -> int:
        """Number of scripted replies not consumed yet."""
        with self._lock:
            return len(self._queue)

    def script(self, *replies: Reply | str) -> None:
        """Queue replies, consumed one per request (a str means ``Text(str)``)."""
        with self._lock:
            self._queue.extend(Text(r) if isinstance(r, str) else r for r in replies)

    def set_responder(self, responder: Responder | None) -> None:
        """Set the function answering when the script is empty (None restores the default)."""
        with self._lock:
            self._responder = responder or default_responder

    def wait_for_requests(self, n: int, timeout: float = WAIT_SECONDS) -> list[dict[str, Any]]:
        """Block until ``n`` requests arrived; returns all requests so far."""
        deadline = time.monotonic() + timeout
        while True:
            requests = self.requests
            if len(requests) >= n:
                return requests
            if time.monotonic() >= deadline:
                raise TimeoutError(f"timed out after {timeout}s waiting for {n} request(s); got {len(requests)}")
            time.sleep(0.01)

    async def async_wait_for_requests(self, n: int, timeout: float = WAIT_SECONDS) -> list[dict[str, Any]]:
        """Like ``wait_for_requests`` but for use inside coroutines."""
        deadline = time.monotonic() + timeout
        while len(self.requests) < n:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"timed out after {timeout}s waiting for {n} request(s); got {len(self.requests)}")
            await asyncio.sleep(0.01)
        return self.requests

    # ------------------------------------------------------------------ HTTP handlers

    def _authorize(self, request: web.Request, record: bool = True) -> bool:
        """Check the API key; record the headers (aligned with ``requests``) when ``record``."""
        auth = request.headers.get("Authorization")
        matched = self.api_key is None or auth == f"Bearer {self.api_key}"
        if not record:
            return matched
        headers = {k.lower(): v for k, v in request.headers.items() if k.lower() != "authorization"}
        headers["authorization_present"] = auth is not None
        headers["api_key_matched"] = matched
        with self._lock:
            self._headers.append(headers)
        return matched

    async def _handle_completions(self, request: web.Request) -> web.StreamResponse:
        authorized = self._authorize(request)
        try:
            body = await request.json()
        except ValueError:
            body = None
        with self._lock:
            self._requests.append(copy.deepcopy(body))
            self._client_ports.append(request.transport.get_extra_info("peername")[1] if request.transport else 0)
            self._arrivals.append(time.monotonic())
        if not authorized:
            return self._error_response(BAD_KEY)
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return self._error_response(Error(400, "'messages' is a required property", "invalid_request_error"))
        reply = self._next_reply(body)
        if reply.delay:
            await asyncio.sleep(reply.delay)
        hold = reply.hold if isinstance(reply, (Text, ToolCalls)) else None
        if hold is not None and not (isinstance(reply, Text) and reply.hold_after and body.get("stream")):
            await _until(hold)
        if isinstance(reply, Error):
            return self._error_response(reply)
        if isinstance(reply, Raw):
            return await self._raw(request, reply)
        if body.get("stream"):
            return await self._stream(request, body, reply)
        return web.json_response(self._completion(body, reply))

    async def _handle_models(self, request: web.Request) -> web.Response:
        if not self._authorize(request, record=False):
            return self._error_response(BAD_KEY)
        data = [{"id": m, "object": "model", "created": 1700000000, "owned_by": "fake"} for m in self.models]
        return web.json_response({"object": "list", "data": data})

    async def _handle_script(self, request: web.Request) -> web.Response:
        try:
            replies = [reply_from_dict(d) for d in await request.json()]
        except (ValueError, TypeError) as e:
            return web.json_response({"error": str(e)}, status=400)
        self.script(*replies)
        return web.json_response({"queued": len(replies)})

    async def _handle_requests(self, request: web.Request) -> web.Response:
        return web.json_response(self.requests)

    def _next_reply(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            if self._queue:
                return self._queue.popleft()
            responder = self._responder
        try:
            reply = responder(body)
        except Exception as e:  # a broken responder should fail the request, not the server
            return Error(500, f"fake responder failed: {type(e).__name__}: {e}")
        return Text(reply) if isinstance(reply, str) else reply

    @staticmethod
    def _error_response(error: Error) -> web.Response:
        body = {"error": {"message": error.message, "type": error.type, "param": None, "code": error.code}}
        return web.json_response(body, status=error.status, headers=error.headers)

    # ------------------------------------------------------------------ response bodies

    @staticmethod
    def _calls_json(reply: ToolCalls) -> list[dict[str, Any]]:
        return [
            {
                "id": call.id or f"call_{uuid.uuid4().hex[:24]}",
                "type": "function",
                "function": {
                    "name": call.name,
                    "arguments": call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments),
                },
            }
            for call in reply.calls
        ]

    @staticmethod
    def _usage(body: dict[str, Any], completion_text: str) -> dict[str, int]:
        prompt = _estimate_tokens("".join(_message_text(m) for m in body["messages"] if isinstance(m, dict)))
        completion = _estimate_tokens(completion_text)
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    def _completion(self, body: dict[str, Any], reply: Text | ToolCalls) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": reply.content, "refusal": None}
        finish = "stop"
        completion_text = reply.content
        if isinstance(reply, ToolCalls):
            message["content"] = reply.content or None
            message["tool_calls"] = calls = self._calls_json(reply)
            finish = "tool_calls"
            completion_text += "".join(c["function"]["name"] + c["function"]["arguments"] for c in calls)
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "fake"),
            "system_fingerprint": None,
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
            "usage": self._usage(body, completion_text),
        }

    @staticmethod
    async def _raw(request: web.Request, reply: Raw) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        await response.write(reply.body.encode())
        await asyncio.sleep(reply.hold_open)
        await response.write_eof()
        return response

    async def _stream(self, request: web.Request, body: dict[str, Any], reply: Text | ToolCalls) -> web.StreamResponse:
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        base = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": body.get("model", "fake"),
            "system_fingerprint": None,
        }

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            data = {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
            if include_usage:
                data["usage"] = None
            return data

        chunks = [chunk({"role": "assistant", "content": "", "refusal": None})]
        text_pieces = _split(reply.content, reply.pieces if isinstance(reply, Text) else 3)
        chunks += [chunk({"content": piece}) for piece in text_pieces]
        completion_text = reply.content
        finish = "stop"
        if isinstance(reply, ToolCalls):
            finish = "tool_calls"
            for index, call in enumerate(self._calls_json(reply)):
                fn = call["function"]
                completion_text += fn["name"] + fn["arguments"]
                head = {"index": index, "id": call["id"], "type": "function", "function": {**fn, "arguments": ""}}
                chunks.append(chunk({"tool_calls": [head]}))
                chunks += [
                    chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                    for piece in _split(fn["arguments"], 2)
                ]
        chunks.append(chunk({}, finish))
        if include_usage:
            chunks.append({**base, "choices": [], "usage": self._usage(body, completion_text)})

        interval = reply.interval if isinstance(reply, Text) else 0.0
        fail_after = reply.fail_after if isinstance(reply, Text) else None
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        if isinstance(reply, Text) and reply.at_once:
            await response.write(b"".join(f"data: {json.dumps(data)}\n\n".encode() for data in chunks) + b"data: [DONE]\n\n")
            await response.write_eof()
            return response
        for index, data in enumerate(chunks):
            if fail_after is not None and index > fail_after:
                if request.transport is not None:
                    request.transport.abort()
                return response
            if interval and 1 < index <= len(text_pieces):
                await asyncio.sleep(interval)
            if isinstance(reply, Text) and reply.hold and reply.hold_after and index == reply.hold_after + 1:
                await _until(reply.hold)
            await response.write(f"data: {json.dumps(data)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


async def _until(event: threading.Event) -> None:
    """Return once the test has set `event` (a thread's), without blocking the server meanwhile."""
    while not event.is_set():
        await asyncio.sleep(0.01)


def main(argv: list[str] | None = None) -> None:
    """Serve a FakeOpenAI until SIGTERM/SIGINT, printing its base URL."""
    parser = argparse.ArgumentParser(description="Fake OpenAI-compatible server on 127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="port to listen on (0 = any free port)")
    parser.add_argument("--api-key", default=None, help="accept only this key (default: any)")
    parser.add_argument("--text", default="OK", help="default reply text")
    parser.add_argument("--delay", type=float, default=0.0, help="default reply delay in seconds")
    args = parser.parse_args(argv)
    fake = FakeOpenAI(api_key=args.api_key, port=args.port)
    fake.set_responder(lambda request: Text(args.text, delay=args.delay))
    serve_until_signalled(fake, lambda: fake.base_url)


if __name__ == "__main__":
    main()
