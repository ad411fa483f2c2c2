"""TavilySearch against a fake of Tavily's search API on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from myao2.infrastructure.web.errors import WebError
from myao2.infrastructure.web.search import SearchHit, TavilySearch
from tests.fakes.tavily_server import DEFAULT_ANSWER, DEFAULT_RESULTS, FakeTavily

KEY = "tvly-unit-test-key"


@pytest.fixture
def tavily() -> Iterator[FakeTavily]:
    with FakeTavily(api_key=KEY) as fake:
        yield fake


def provider(tavily: FakeTavily, **overrides) -> TavilySearch:  # type: ignore[no-untyped-def]
    settings = {
        "api_key": KEY,
        "base_url": tavily.base_url,
        "search_depth": "advanced",
        "max_results": 3,
        "max_content_length": 500,
        "timeout_seconds": 5.0,
    } | overrides
    return TavilySearch(**settings)


async def failure(search: TavilySearch) -> WebError:
    with pytest.raises(WebError) as caught:
        await search.search("ramen")
    return caught.value


async def test_the_answer_and_hits_come_back_in_order(tavily: FakeTavily) -> None:
    results = await provider(tavily).search("where is tonkotsu ramen from?")
    assert results.answer == DEFAULT_ANSWER
    assert results.hits == tuple(SearchHit(r["title"], r["url"], r["content"]) for r in DEFAULT_RESULTS)


async def test_the_request_carries_the_key_depth_and_limits(tavily: FakeTavily) -> None:
    await provider(tavily, search_depth="basic", max_results=2).search("ramen")
    [request] = tavily.requests
    assert request == {
        "query": "ramen",
        "search_depth": "basic",
        "max_results": 2,
        "include_answer": True,
        "_authorized": True,
    }


async def test_a_base_url_with_a_trailing_slash_works(tavily: FakeTavily) -> None:
    results = await provider(tavily, base_url=tavily.base_url + "/").search("ramen")
    assert len(results.hits) == 2


async def test_each_hit_content_is_cut_and_the_result_count_asked_for(tavily: FakeTavily) -> None:
    tavily.results = [
        {"title": f"Page {i}", "url": f"https://example.com/{i}", "content": "ramen " * 100} for i in range(10)
    ]
    results = await provider(tavily, max_results=3, max_content_length=60).search("ramen")
    assert [hit.url for hit in results.hits] == [f"https://example.com/{i}" for i in range(3)]
    assert all(len(hit.content) == 60 and hit.content.endswith("…") for hit in results.hits)


async def test_no_answer_and_no_results(tavily: FakeTavily) -> None:
    tavily.answer = None
    tavily.results = []
    results = await provider(tavily).search("zzzz")
    assert results.answer is None and results.hits == ()


async def test_a_refused_key_is_reported(tavily: FakeTavily) -> None:
    error = await failure(provider(tavily, api_key="tvly-wrong"))
    assert error.kind == "search_key_refused"


@pytest.mark.parametrize(("status", "kind"), [(429, "search_limited"), (432, "search_limited"), (500, "search_failed")])
async def test_http_errors_are_reported(tavily: FakeTavily, status: int, kind: str) -> None:
    tavily.fail_with = status
    error = await failure(provider(tavily))
    assert error.kind == kind


@pytest.mark.parametrize("body", ["not json", "[]", '{"answer": "x"}'])
async def test_a_malformed_body_is_a_failure(tavily: FakeTavily, body: str) -> None:
    tavily.raw_body = body
    error = await failure(provider(tavily))
    assert error.kind == "search_failed"


async def test_a_slow_answer_times_out(tavily: FakeTavily) -> None:
    tavily.delay = 2.0
    error = await failure(provider(tavily, timeout_seconds=0.2))
    assert error.kind == "timeout"


async def test_an_unreachable_service_is_reported(tavily: FakeTavily) -> None:
    search = provider(tavily)
    tavily.stop()
    error = await failure(search)
    assert error.kind == "unreachable" and error.params == {"host": "127.0.0.1"}
