"""WebFetcher against a fake web site on 127.0.0.1.

Most tests let the fetcher treat 127.0.0.1 as if it were the public internet (every
other address keeps the real rule), so the fake can stand in for outside sites.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Iterator

import pytest

from myao2.infrastructure.web.addresses import IPAddress, any_address, is_public
from myao2.infrastructure.web.errors import WebError
from myao2.infrastructure.web.fetch import MAX_REDIRECTS, WebFetcher
from tests.fakes.web_server import (
    ARTICLE_SENTENCE,
    ARTICLE_TITLE,
    JAPANESE_SENTENCE,
    FakeWeb,
)

FAKE_ADDRESS = ipaddress.ip_address("127.0.0.1")
LIMIT = 200_000


def fake_is_public(address: IPAddress) -> bool:
    """The real rule, except that the fake's own address counts as public."""
    return address == FAKE_ADDRESS or is_public(address)


@pytest.fixture
def site() -> Iterator[FakeWeb]:
    with FakeWeb() as fake:
        yield fake


def fetcher(allowed=fake_is_public, timeout: float = 5.0, max_bytes: int = LIMIT) -> WebFetcher:  # type: ignore[no-untyped-def]
    return WebFetcher(timeout, max_bytes, allowed)


async def failure(fetch: WebFetcher, url: str) -> WebError:
    with pytest.raises(WebError) as caught:
        await fetch.fetch(url)
    return caught.value


async def test_an_html_article_becomes_markdown_without_the_page_furniture(site: FakeWeb) -> None:
    page = await fetcher().fetch(site.url("/article"))
    assert page.url == site.url("/article")
    assert page.markdown.startswith(f"# {ARTICLE_TITLE}")
    assert ARTICLE_SENTENCE in page.markdown
    assert "- pork bones" in page.markdown
    assert "[our noodle guide](https://example.com/noodles)" in page.markdown
    for furniture in ("About us", "Copyright", "tracking"):
        assert furniture not in page.markdown


async def test_plain_text_comes_back_as_it_is(site: FakeWeb) -> None:
    page = await fetcher().fetch(site.url("/plain"))
    assert page.markdown == f"{ARTICLE_SENTENCE}\nThat is all."


async def test_the_declared_charset_is_used(site: FakeWeb) -> None:
    page = await fetcher().fetch(site.url("/japanese"))
    assert JAPANESE_SENTENCE in page.markdown


async def test_a_redirect_is_followed_and_the_final_url_reported(site: FakeWeb) -> None:
    page = await fetcher().fetch(site.url("/redirect?to=/article"))
    assert page.url == site.url("/article")
    assert site.paths == ["/redirect", "/article"]


@pytest.mark.parametrize("target", ["http://127.0.0.2:{port}/article", "http://[::1]:{port}/article"])
async def test_a_redirect_to_a_private_address_is_refused_before_connecting(site: FakeWeb, target: str) -> None:
    error = await failure(fetcher(), site.url(f"/redirect?to={target.format(port=site.port)}"))
    assert error.kind == "refused_address"
    assert site.paths == ["/redirect"]


async def test_a_redirect_to_another_scheme_is_refused(site: FakeWeb) -> None:
    error = await failure(fetcher(), site.url("/redirect?to=file:///etc/passwd"))
    assert error.kind == "bad_url"


async def test_endless_redirects_stop(site: FakeWeb) -> None:
    error = await failure(fetcher(), site.url("/loop"))
    assert error.kind == "too_many_redirects"
    assert site.paths == ["/loop"] * (MAX_REDIRECTS + 1)


async def test_a_huge_page_is_refused_and_its_download_stopped(site: FakeWeb) -> None:
    error = await failure(fetcher(), site.url("/huge"))
    assert error.kind == "too_large" and error.params == {"limit": LIMIT}
    assert await asyncio.to_thread(site.huge_ended.wait, 30)  # the server saw the client hang up
    assert site.huge_bytes_sent < 50 * LIMIT  # it would send about 800 MB


async def test_a_page_declaring_a_huge_length_is_refused_unread(site: FakeWeb) -> None:
    error = await failure(fetcher(), site.url("/huge-declared"))
    assert error.kind == "too_large"


async def test_a_binary_file_is_refused(site: FakeWeb) -> None:
    error = await failure(fetcher(), site.url("/binary"))
    assert error.kind == "not_text" and error.params == {"content_type": "image/png"}


async def test_a_slow_page_times_out(site: FakeWeb) -> None:
    error = await asyncio.wait_for(failure(fetcher(timeout=0.3), site.url("/slow")), 30)  # it never answers
    assert error.kind == "timeout" and error.params == {"seconds": 0.3}


async def test_an_http_error_is_reported_with_its_status(site: FakeWeb) -> None:
    error = await failure(fetcher(), site.url("/missing"))
    assert error.kind == "http_status" and error.params["status"] == 404


async def test_a_page_without_readable_text_says_so(site: FakeWeb) -> None:
    error = await failure(fetcher(), site.url("/empty"))
    assert error.kind == "no_text"


async def test_a_closed_port_is_unreachable(site: FakeWeb) -> None:
    port = site.port
    site.stop()
    error = await failure(fetcher(), f"http://127.0.0.1:{port}/article")
    assert error.kind == "unreachable"


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://example.com/x", "", "not a url", "http://", "javascript:alert(1)"])
async def test_what_is_not_an_http_url_is_refused(site: FakeWeb, url: str) -> None:
    error = await failure(fetcher(), url)
    assert error.kind == "bad_url"
    assert site.paths == []


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::1]", "0x7f.1"])
async def test_loopback_is_refused_by_default_without_a_request(site: FakeWeb, host: str) -> None:
    error = await failure(fetcher(allowed=is_public), f"http://{host}:{site.port}/article")
    assert error.kind == "refused_address"
    assert site.paths == []


async def test_private_networks_can_be_allowed(site: FakeWeb) -> None:
    page = await fetcher(allowed=any_address).fetch(site.url("/article"))
    assert ARTICLE_SENTENCE in page.markdown


class ChangingAnswer:
    """Approves an address the first time it is asked, then refuses it: as if a name's
    address changed between the check and the connection."""

    def __init__(self) -> None:
        self.asked: list[IPAddress] = []

    def __call__(self, address: IPAddress) -> bool:
        self.asked.append(address)
        return len(self.asked) == 1


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
async def test_the_address_actually_connected_to_is_checked_again(site: FakeWeb, host: str) -> None:
    policy = ChangingAnswer()
    error = await failure(fetcher(allowed=policy), f"http://{host}:{site.port}/article")
    assert error.kind == "refused_address"
    assert policy.asked == [FAKE_ADDRESS, FAKE_ADDRESS]
    assert site.paths == []
