"""MergingHttpClient: the SDK's aiohttp client, merging a request's URL and headers with its own once."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx2
import openai
import pytest

from myao2.infrastructure.llm.chat_client import LeanChatClient
from myao2.infrastructure.llm.merging_http_client import KEPT, MergingHttpClient
from tests.fakes.openai_server import Error, FakeOpenAI, Text

API_KEY = "sk-test-merging"


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(api_key=API_KEY) as server:
        yield server


async def _answer(client: LeanChatClient, text: str) -> str:
    stream = await client.chat.completions.create(
        model="fake", messages=[{"role": "user", "content": text}], stream=True
    )
    return "".join([chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices])


async def _sent(fake: FakeOpenAI, http_client: httpx2.AsyncClient) -> list[dict[str, Any]]:
    """What the SDK sends with `http_client`: two answers, the second after a server error and its retry."""
    sdk = openai.AsyncOpenAI(api_key=API_KEY, base_url=fake.base_url, max_retries=1, http_client=http_client)
    client = LeanChatClient(sdk)
    fake.script(Text("one"), Error(500, "boom", headers={"retry-after-ms": "1"}), Text("two"))
    assert [await _answer(client, "first"), await _answer(client, "second")] == ["one", "two"]
    http_client.headers["X-Added"] = "later"  # the client's own headers changed: merged anew
    fake.script(Text("three"))
    assert await _answer(client, "third") == "three"
    await sdk.close()
    return fake.request_headers


async def test_requests_go_out_as_the_sdks_own_client_sends_them(fake: FakeOpenAI) -> None:
    sent = await _sent(fake, MergingHttpClient())
    first = len(sent)
    sdks = await _sent(fake, openai.DefaultAioHttpClient())
    assert sent == sdks[first:]
    assert [headers["x-stainless-retry-count"] for headers in sent] == ["0", "0", "1", "0"]
    assert [headers.get("x-added") for headers in sent] == [None, None, None, "later"]
    assert fake.requests[:first] == fake.requests[first:]


async def test_a_repeated_request_has_its_url_and_headers_merged_once(
    fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    merged: list[str] = []
    merge_url, merge_headers = httpx2.AsyncClient._merge_url, httpx2.AsyncClient._merge_headers

    def recording_url(self: httpx2.AsyncClient, url: Any) -> httpx2.URL:
        merged.append("url")
        return merge_url(self, url)

    def recording_headers(self: httpx2.AsyncClient, headers: Any = None) -> Any:
        merged.append("headers")
        return merge_headers(self, headers)

    monkeypatch.setattr(httpx2.AsyncClient, "_merge_url", recording_url)
    monkeypatch.setattr(httpx2.AsyncClient, "_merge_headers", recording_headers)
    sdk = openai.AsyncOpenAI(api_key=API_KEY, base_url=fake.base_url, max_retries=0, http_client=MergingHttpClient())
    client = LeanChatClient(sdk)
    for text in ("a", "b", "c"):
        await _answer(client, text)
    await sdk.close()

    assert sorted(merged) == ["headers", "url"]
    assert len(fake.requests) == 3


async def test_it_keeps_a_bounded_number_of_merges() -> None:
    http_client = MergingHttpClient()
    for retry in range(3 * KEPT):
        request = http_client.build_request("POST", "http://127.0.0.1:9/v1/x", headers=[("x-retry", str(retry))])
        assert request.headers["x-retry"] == str(retry)
        assert len(http_client._header_sets) <= KEPT
    await http_client.aclose()
