"""FakeOpenAI against the real openai client and a real strands Agent."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import openai
import pytest
from strands import Agent, tool
from strands.models.openai import OpenAIModel

from tests.fakes import PROXY_VARIABLES
from tests.fakes.openai_server import Error, FakeOpenAI, Text, ToolCall, ToolCalls

MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hello to everyone here."}]


@pytest.fixture
def fake():
    with FakeOpenAI() as server:
        yield server


def client(fake: FakeOpenAI, api_key: str = "k") -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=fake.base_url, api_key=api_key, max_retries=0)


async def test_non_streaming_text_and_default_responder(fake: FakeOpenAI) -> None:
    fake.script(Text("Hello, everyone!"))
    first = await client(fake).chat.completions.create(model="fake", messages=MESSAGES)
    assert first.object == "chat.completion"
    assert first.choices[0].message.content == "Hello, everyone!" and first.choices[0].finish_reason == "stop"
    assert first.usage.prompt_tokens >= 1 and first.usage.completion_tokens >= 1
    assert first.usage.total_tokens == first.usage.prompt_tokens + first.usage.completion_tokens

    second = await client(fake).chat.completions.create(model="fake", messages=MESSAGES)
    assert second.choices[0].message.content == "OK"
    assert [r["messages"] for r in fake.wait_for_requests(2, 1)] == [MESSAGES, MESSAGES]
    headers = fake.request_headers[0]
    assert headers["authorization_present"] is True and headers["api_key_matched"] is True
    assert "authorization" not in headers and headers["content-type"] == "application/json"


async def test_non_streaming_tool_calls(fake: FakeOpenAI) -> None:
    fake.script(ToolCalls([ToolCall("lookup", {"q": "x"}, id="call_a"), ToolCall("raw", '{"broken"')]))
    resp = await client(fake).chat.completions.create(model="fake", messages=MESSAGES, tools=[])
    choice = resp.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    calls = choice.message.tool_calls
    assert [(c.id, c.function.name, c.function.arguments) for c in calls[:1]] == [("call_a", "lookup", '{"q": "x"}')]
    assert calls[1].function.arguments == '{"broken"' and calls[1].id.startswith("call_")


async def test_streaming_text_with_usage(fake: FakeOpenAI) -> None:
    fake.script(Text("Hello there, all of you!"))
    stream = await client(fake).chat.completions.create(
        model="fake", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    )
    chunks = [chunk async for chunk in stream]
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Hello there, all of you!"
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) > 1
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == len(text) // 4

    fake.script(Text("no usage"))
    stream = await client(fake).chat.completions.create(model="fake", messages=MESSAGES, stream=True)
    chunks = [chunk async for chunk in stream]
    assert chunks[-1].choices[0].finish_reason == "stop" and chunks[-1].usage is None


async def test_streaming_tool_calls_reassemble(fake: FakeOpenAI) -> None:
    args = {"channel": "C1", "text": "a fairly long message body"}
    fake.script(ToolCalls([ToolCall("post", args, id="call_1"), ToolCall("react", {"name": "eyes"})], content="Sure."))
    stream = await client(fake).chat.completions.create(
        model="fake", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    )
    calls: dict[int, dict] = {}
    fragments = 0
    finish = None
    async for chunk in stream:
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        finish = choice.finish_reason or finish
        for delta in choice.delta.tool_calls or []:
            if delta.index not in calls:
                assert delta.id and delta.type == "function" and delta.function.name and delta.function.arguments == ""
                calls[delta.index] = {"id": delta.id, "name": delta.function.name, "arguments": ""}
            else:
                assert delta.id is None and delta.function.name is None
                fragments += 1
            calls[delta.index]["arguments"] += delta.function.arguments or ""
    assert finish == "tool_calls" and fragments >= 3
    assert calls[0] == {"id": "call_1", "name": "post", "arguments": json.dumps(args)}
    assert calls[1]["name"] == "react" and json.loads(calls[1]["arguments"]) == {"name": "eyes"}


async def test_errors_and_api_key() -> None:
    with FakeOpenAI(api_key="secret") as fake:
        with pytest.raises(openai.AuthenticationError):
            await client(fake, "wrong").chat.completions.create(model="fake", messages=MESSAGES)
        assert fake.request_headers[0]["authorization_present"] and not fake.request_headers[0]["api_key_matched"]

        fake.script(Error(500, "boom"))
        with pytest.raises(openai.InternalServerError) as info:
            await client(fake, "secret").chat.completions.create(model="fake", messages=MESSAGES, stream=True)
        assert info.value.status_code == 500 and info.value.body["message"] == "boom"

        fake.script(Error(429, "Rate limit reached", "requests", "rate_limit_exceeded", headers={"retry-after": "0"}))
        with pytest.raises(openai.RateLimitError) as info:
            await client(fake, "secret").chat.completions.create(model="fake", messages=MESSAGES)
        assert info.value.code == "rate_limit_exceeded" and info.value.response.headers["retry-after"] == "0"

        models = await client(fake, "secret").models.list()
        assert [m.id for m in models.data] == ["fake"]
        assert len(fake.requests) == 3  # /v1/models is not a chat request


async def test_delay_does_not_block_other_requests(fake: FakeOpenAI) -> None:
    fake.set_responder(lambda request: Text("slow", delay=60) if request["model"] == "slow" else "fast")
    slow = asyncio.create_task(client(fake).chat.completions.create(model="slow", messages=MESSAGES))
    await fake.async_wait_for_requests(1, 5)
    fast = await client(fake).chat.completions.create(model="fast", messages=MESSAGES)
    assert fast.choices[0].message.content == "fast"
    assert not slow.done(), "the slow reply should still be waiting out its delay"
    slow.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await slow


async def test_a_held_reply_goes_out_once_released_and_others_pass_meanwhile(fake: FakeOpenAI) -> None:
    release = threading.Event()
    fake.set_responder(lambda request: Text("held", hold=release) if request["model"] == "held" else "fast")
    held = asyncio.create_task(client(fake).chat.completions.create(model="held", messages=MESSAGES))
    await fake.async_wait_for_requests(1, 5)
    fast = await client(fake).chat.completions.create(model="fast", messages=MESSAGES)
    assert fast.choices[0].message.content == "fast"
    await asyncio.sleep(0.3)
    assert not held.done(), "the held reply went out before it was released"
    release.set()
    assert (await asyncio.wait_for(held, 5)).choices[0].message.content == "held"


def test_a_reply_still_delayed_when_its_client_hung_up_ends_with_the_server(caplog: pytest.LogCaptureFixture) -> None:
    """aiohttp lets a handler run on when its client goes, unknown to the runner's cleanup: stopping ends it too,
    so no task is left pending on the closed loop (for the garbage collector to log in whichever test runs then)."""
    gc.collect()  # earlier tests' leftovers, if any, are not this test's
    body = json.dumps({"model": "fake", "messages": MESSAGES}).encode()
    head = "POST /v1/chat/completions HTTP/1.1\r\nHost: fake\r\nAuthorization: Bearer k\r\n"
    head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    with FakeOpenAI() as server:
        server.script(Text("too late", delay=60))
        with socket.create_connection(("127.0.0.1", server.port)) as connection:
            connection.sendall(head.encode() + body)
            server.wait_for_requests(1)
        time.sleep(0.5)  # room for the server to see the client go (asserting that nothing is left after)
    caplog.clear()
    gc.collect()
    assert "Task was destroyed" not in caplog.text


async def test_strands_agent_calls_tool_then_answers(fake: FakeOpenAI) -> None:
    calls: list[tuple[int, int]] = []

    @tool
    def add(a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: First addend.
            b: Second addend.
        """
        calls.append((a, b))
        return a + b

    fake.script(ToolCalls([ToolCall("add", {"a": 20, "b": 22}, id="call_add")]), Text("The answer is 42."))
    model = OpenAIModel(client_args={"base_url": fake.base_url, "api_key": "k"}, model_id="fake")
    agent = Agent(model=model, callback_handler=None, tools=[add], system_prompt="You add numbers.")
    result = await agent.invoke_async("What is 20 + 22?")

    assert calls == [(20, 22)]
    assert str(result).strip() == "The answer is 42."
    first, second = fake.requests
    assert first["stream"] is True and [t["function"]["name"] for t in first["tools"]] == ["add"]
    assert first["messages"][0] == {"role": "system", "content": "You add numbers."}
    tool_messages = [m for m in second["messages"] if m["role"] == "tool"]
    assert len(tool_messages) == 1 and tool_messages[0]["tool_call_id"] == "call_add"
    assert "42" in json.dumps(tool_messages[0]["content"])
    assert result.metrics.accumulated_usage["totalTokens"] > 0


def test_runs_as_subprocess() -> None:
    env = {k: v for k, v in os.environ.items() if k not in PROXY_VARIABLES}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.openai_server", "--port", "0", "--text", "hi"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        base_url = proc.stdout.readline().strip()
        assert base_url.startswith("http://127.0.0.1:") and base_url.endswith("/v1")
        resp = openai.OpenAI(base_url=base_url, api_key="k", max_retries=0).chat.completions.create(
            model="fake", messages=MESSAGES
        )
        assert resp.choices[0].message.content == "hi"
        with urllib.request.urlopen(base_url.removesuffix("/v1") + "/_fake/requests", timeout=5) as r:
            assert len(json.load(r)) == 1
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
