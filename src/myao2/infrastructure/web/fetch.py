"""Fetching one web page and turning it into Markdown for the model.

Every hop (the URL and each redirect) is checked by `myao2.infrastructure.web.addresses`;
the whole fetch, redirects and download included, has one time limit, and the body
one size limit. HTML becomes Markdown through trafilatura, in a worker thread.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from urllib.parse import urljoin

import aiohttp
from yarl import URL

from myao2.infrastructure.web.addresses import (
    AddressCheck,
    GuardedConnector,
    check_address,
    parse_address,
)
from myao2.infrastructure.web.errors import WebError

logger = logging.getLogger(__name__)

MAX_REDIRECTS = 5
USER_AGENT = "myao2-web-fetch/1.0"
HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
PLAIN_TYPES = frozenset({"text/plain", "text/markdown"})
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_CHUNK = 64 * 1024


@dataclass(frozen=True)
class Page:
    """A fetched page: where it ended up and its readable text as Markdown."""

    url: str
    markdown: str


@dataclass(frozen=True)
class _Body:
    url: str
    content_type: str
    charset: str | None
    data: bytes


class WebFetcher:
    """Fetches pages over HTTP(S), refusing addresses `allowed` rejects."""

    def __init__(self, timeout_seconds: float, max_response_bytes: int, allowed: AddressCheck) -> None:
        self._timeout = timeout_seconds
        self._max_bytes = max_response_bytes
        self._allowed = allowed

    async def fetch(self, url: str) -> Page:
        """The page at `url` as Markdown.

        Raises WebError: bad_url, refused_address, timeout, unreachable, http_status,
        too_many_redirects, not_text, too_large or no_text.
        """
        try:
            async with asyncio.timeout(self._timeout):
                body = await self._download(url)
        except TimeoutError:
            raise WebError("timeout", seconds=self._timeout) from None
        except aiohttp.InvalidURL:
            raise WebError("bad_url", url=url) from None
        except aiohttp.ClientError as exc:
            logger.info("web fetch failed: %s", type(exc).__name__)
            raise WebError("unreachable", host=_host(url)) from None
        markdown = await asyncio.to_thread(to_markdown, body)
        if not markdown:
            raise WebError("no_text", url=body.url)
        return Page(body.url, markdown)

    async def _download(self, url: str) -> _Body:
        connector = GuardedConnector(self._allowed)
        headers = {"User-Agent": USER_AGENT, "Accept": "text/html,application/xhtml+xml,text/plain;q=0.9,*/*;q=0.1"}
        async with aiohttp.ClientSession(connector=connector, headers=headers, trust_env=False) as session:
            current = url
            for _ in range(MAX_REDIRECTS + 1):
                target = self._checked(current)
                async with session.get(target, allow_redirects=False) as response:
                    location = response.headers.get("Location")
                    if response.status in _REDIRECTS and location:
                        current = urljoin(str(response.url), location)
                        continue
                    return await self._read(response)
            raise WebError("too_many_redirects", limit=MAX_REDIRECTS)

    def _checked(self, url: str) -> URL:
        """`url` as a URL worth connecting to: http(s), a host, and no refused IP literal."""
        try:
            parsed = URL(url.strip())
        except (ValueError, TypeError):
            raise WebError("bad_url", url=url) from None
        host = parsed.raw_host
        if parsed.scheme not in ("http", "https") or not host:
            raise WebError("bad_url", url=url)
        if parse_address(host) is not None:
            check_address(host, self._allowed, host)
        return parsed

    async def _read(self, response: aiohttp.ClientResponse) -> _Body:
        if response.status >= 400:
            raise WebError("http_status", status=response.status, url=str(response.url))
        content_type = response.content_type
        if content_type not in HTML_TYPES | PLAIN_TYPES:
            raise WebError("not_text", content_type=content_type)
        if response.content_length is not None and response.content_length > self._max_bytes:
            raise WebError("too_large", limit=self._max_bytes)
        data = bytearray()
        async for chunk in response.content.iter_chunked(_CHUNK):
            data += chunk
            if len(data) > self._max_bytes:
                raise WebError("too_large", limit=self._max_bytes)
        return _Body(str(response.url), content_type, response.charset, bytes(data))


def to_markdown(body: _Body) -> str:
    """The readable text of a body: plain text as it is, HTML through trafilatura."""
    text: str | bytes = body.data
    if body.charset:
        try:
            text = body.data.decode(body.charset, errors="replace")
        except LookupError:
            pass
    if body.content_type in PLAIN_TYPES:
        return (text if isinstance(text, str) else text.decode("utf-8", errors="replace")).strip()
    import trafilatura

    markdown = trafilatura.extract(text, url=body.url, output_format="markdown", include_links=True)
    return (markdown or "").strip()


def _host(url: str) -> str:
    try:
        return URL(url).host or url
    except (ValueError, TypeError):
        return url
