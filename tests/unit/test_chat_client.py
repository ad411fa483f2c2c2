"""LeanChatClient: the chat completions strands asks for, sent as given and streamed as plain views (FieldsStream),
read to their end with nothing left to close."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import openai
import pytest
from openai._models import FinalRequestOptions

from myao2.infrastructure.llm.chat_client import Fields, LeanChatClient
from myao2.infrastructure.llm.merging_http_client import MergingHttpClient
from tests.fakes.openai_server import FakeOpenAI, Raw, Text

API_KEY = "sk-test-chat-client"


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(api_key=API_KEY) as server:
        yield server


@pytest.fixture
async def client(fake: FakeOpenAI) -> AsyncIterator[LeanChatClient]:
    sdk = openai.AsyncOpenAI(api_key=API_KEY, base_url=fake.base_url, max_retries=0)
    yield LeanChatClient(sdk)
    await sdk.close()


@pytest.fixture
async def bots_client(fake: FakeOpenAI) -> AsyncIterator[LeanChatClient]:
    """The client as the bot makes it: over aiohttp."""
    sdk = openai.AsyncOpenAI(api_key=API_KEY, base_url=fake.base_url, max_retries=0, http_client=MergingHttpClient())
    yield LeanChatClient(sdk)
    await sdk.close()


async def test_the_request_goes_out_as_given_and_the_options_as_options(fake: FakeOpenAI, client: LeanChatClient) -> None:
    messages = [{"role": "user", "content": [{"type": "text", "text": "hello"}]}]
    stream = await client.chat.completions.create(
        model="fake", messages=messages, stream=True, extra_headers={"X-Trace": "t1"}, extra_body={"seed": 7}
    )
    async for _ in stream:
        pass
    assert fake.requests[-1] == {"model": "fake", "messages": messages, "stream": True, "seed": 7}
    assert fake.request_headers[-1].get("x-trace") == "t1"


async def test_streamed_chunks_read_by_attribute_and_a_missing_field_reads_none(
    fake: FakeOpenAI, client: LeanChatClient
) -> None:
    fake.script(Text("one two three", pieces=3))
    stream = await client.chat.completions.create(
        model="fake", messages=[{"role": "user", "content": "hi"}], stream=True, stream_options={"include_usage": True}
    )
    chunks = [chunk async for chunk in stream]
    assert all(isinstance(chunk, Fields) for chunk in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "one two three"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage.completion_tokens > 0
    assert chunks[0].choices[0].delta.reasoning_content is None and chunks[0].choices[0].delta.tool_calls is None


async def test_a_chunks_fields_are_made_once_as_it_arrives(fake: FakeOpenAI, client: LeanChatClient) -> None:
    """Strands reads a chunk's choice and delta several times each: read twice, a field is the same object, not a
    view made again at every read."""
    fake.script(Text("one two", pieces=2))
    stream = await client.chat.completions.create(model="fake", messages=[{"role": "user", "content": "hi"}], stream=True)
    chunks = [chunk async for chunk in stream if chunk.choices]

    for chunk in chunks:
        assert chunk.choices is chunk.choices
        assert chunk.choices[0].delta is chunk.choices[0].delta
    assert chunks[0].choices[0].delta.no_such_field is None


def test_a_view_takes_the_json_object_it_is_given_as_its_fields_its_objects_made_views_in_place() -> None:
    """A chunk's JSON is parsed for it alone: its view takes the object as its attributes (no copy, no call per
    value), each object in it made a view, in lists (of lists) too."""
    data = {"id": "c1", "choices": [{"delta": {"content": "hi"}, "logprobs": None}], "grid": [[{"x": 1}], 2], "n": 0}
    view = Fields(data)

    assert vars(view) is data
    assert view.choices[0].delta.content == "hi" and view.choices[0].logprobs is None
    assert view.grid[0][0].x == 1 and view.grid[1] == 2 and view.n == 0 and view.usage is None


async def test_a_chunk_is_made_a_view_without_the_sdks_check_of_its_type_at_every_chunk(
    fake: FakeOpenAI, client: LeanChatClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Given a type for the chunks, the SDK checks at every chunk whether it builds itself (a runtime protocol's
    isinstance, about as costly as the view); the stream makes the views of the chunks it is given as JSON."""
    from openai._types import ModelBuilderProtocol

    checked: list[type] = []
    check = type(ModelBuilderProtocol).__subclasscheck__

    def recording(protocol: type, subclass: type) -> bool:
        if protocol is ModelBuilderProtocol:
            checked.append(subclass)
        return check(protocol, subclass)

    monkeypatch.setattr(type(ModelBuilderProtocol), "__subclasscheck__", recording)
    fake.script(Text("one two three", pieces=3))
    stream = await client.chat.completions.create(model="fake", messages=[{"role": "user", "content": "hi"}], stream=True)
    chunks = [chunk async for chunk in stream]

    assert checked == []
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "one two three"
    assert all(isinstance(chunk, Fields) for chunk in chunks)


async def test_a_completion_that_does_not_stream_is_the_sdk_model(fake: FakeOpenAI, client: LeanChatClient) -> None:
    fake.script("whole answer")
    completion = await client.chat.completions.create(model="fake", messages=[{"role": "user", "content": "hi"}])
    assert completion.choices[0].message.content == "whole answer"


async def test_a_server_error_is_the_sdk_error(fake: FakeOpenAI, client: LeanChatClient) -> None:
    from tests.fakes.openai_server import Error

    fake.script(Error(500, "boom"))
    with pytest.raises(openai.InternalServerError):
        await client.chat.completions.create(model="fake", messages=[{"role": "user", "content": "hi"}], stream=True)


@pytest.mark.parametrize("slash", ["", "/"])
async def test_the_sdk_is_handed_the_whole_url_not_a_path_to_merge_at_every_call(
    fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch, slash: str
) -> None:
    """Given a path, the SDK merges it with its base URL at every call (two URL parses and a copy); the whole URL
    it only parses."""
    sdk = openai.AsyncOpenAI(api_key=API_KEY, base_url=fake.base_url + slash, max_retries=0)
    urls: list[str] = []
    request = sdk.request

    async def recording(cast_to: Any, options: FinalRequestOptions, **kwargs: Any) -> Any:
        urls.append(options.url)
        return await request(cast_to, options, **kwargs)

    monkeypatch.setattr(sdk, "request", recording)
    client = LeanChatClient(sdk)
    for streamed in (True, False, True):
        answer = await client.chat.completions.create(
            model="fake", messages=[{"role": "user", "content": "hi"}], stream=streamed
        )
        if streamed:
            async for _ in answer:
                pass
    await sdk.close()

    assert urls == [f"{fake.base_url}/chat/completions"] * 3
    assert len(fake.requests) == 3


async def test_the_sdks_request_options_are_made_once_and_copied_at_every_call(
    fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK makes its options anew at every call (a pydantic model, its defaults deep-copied); copied from one
    made with the client, each call's are its own: what one call's options are given is not another's."""
    sdk = openai.AsyncOpenAI(api_key=API_KEY, base_url=fake.base_url, max_retries=0)
    client = LeanChatClient(sdk)
    sent: list[FinalRequestOptions] = []
    request = sdk.request

    async def recording(cast_to: Any, options: FinalRequestOptions, **kwargs: Any) -> Any:
        sent.append(options)
        return await request(cast_to, options, **kwargs)

    monkeypatch.setattr(sdk, "request", recording)
    monkeypatch.setattr(FinalRequestOptions, "construct", None)  # made at every call, this would fail
    messages = [{"role": "user", "content": "hi"}]
    stream = await client.chat.completions.create(model="fake", messages=messages, stream=True, extra_query={"q": "1"})
    async for _ in stream:
        pass
    await client.chat.completions.create(model="fake", messages=messages, extra_headers={"X-Trace": "t2"})
    await sdk.close()

    first, second = sent
    assert (first.params, second.params, second.headers) == ({"q": "1"}, {}, {"X-Trace": "t2"})
    assert isinstance(first.headers, openai.NotGiven)
    assert first.security == second.security and first.security is not second.security
    assert first.json_data["stream"] and "stream" not in second.json_data
    assert [headers.get("x-trace") for headers in fake.request_headers] == [None, "t2"]


async def _read_as_strands_does(client: LeanChatClient) -> tuple[str, Any]:
    """The text and the usage of a streamed completion, read as strands reads it: up to the chunk that finishes the
    choice, then on to the end for the usage."""
    stream = await client.chat.completions.create(
        model="fake", messages=[{"role": "user", "content": "hi"}], stream=True, stream_options={"include_usage": True}
    )
    text = ""
    async for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            if chunk.choices[0].finish_reason:
                break
    last = None
    async for last in stream:
        pass
    return text, last.usage if last else None


async def test_a_streamed_completion_leaves_no_generator_for_the_event_loop_to_close(
    fake: FakeOpenAI, bots_client: LeanChatClient
) -> None:
    """Stopped at the end mark ([DONE]), the SDK's stream left its generators of events, of their lines and of the
    body suspended: the event loop closed each in a task of its own, woken through its self-pipe (3 tasks and 3
    wake-ups per model call). Read to the end, they end by themselves."""
    hooks = sys.get_asyncgen_hooks()
    left: list[str] = []

    def finalizer(generator: Any) -> None:
        left.append(generator.ag_code.co_qualname)
        hooks.finalizer(generator)

    fake.script(Text("one two three", pieces=3), Text("four five", pieces=2))
    sys.set_asyncgen_hooks(hooks.firstiter, finalizer)
    try:
        answers = [await _read_as_strands_does(bots_client), await _read_as_strands_does(bots_client)]
    finally:
        sys.set_asyncgen_hooks(*hooks)

    assert [text for text, _ in answers] == ["one two three", "four five"]
    assert all(usage.completion_tokens > 0 for _, usage in answers)
    assert left == []


async def test_the_connection_is_kept_for_the_next_call_once_a_stream_is_read(
    fake: FakeOpenAI, bots_client: LeanChatClient
) -> None:
    fake.script(Text("one"), Text("two"), Text("three"))
    texts = [(await _read_as_strands_does(bots_client))[0] for _ in range(3)]

    assert texts == ["one", "two", "three"]
    assert len(set(fake.client_ports)) == 1


async def test_a_stream_its_server_leaves_open_after_its_end_mark_ends_at_the_mark(
    fake: FakeOpenAI, bots_client: LeanChatClient
) -> None:
    """The SDK reads a body on past [DONE] for a short while only (its connection kept then), and so does the
    stream: a server that holds it open does not hold the answer; the next call goes out on a new connection."""
    chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "fake",
             "choices": [{"index": 0, "delta": {"content": "held"}, "logprobs": None, "finish_reason": "stop"}]}
    fake.script(Raw(f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n", hold_open=120), Text("next"))

    text, _ = await asyncio.wait_for(_read_as_strands_does(bots_client), 60)
    assert text == "held"
    assert (await _read_as_strands_does(bots_client))[0] == "next"
    assert len(set(fake.client_ports)) == 2
