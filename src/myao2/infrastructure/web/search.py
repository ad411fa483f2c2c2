"""Web search behind a small provider interface; Tavily is the one provider so far."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import aiohttp
from yarl import URL

from myao2.infrastructure.web.errors import WebError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SearchHit:
    """One result: a page's title, its URL and an excerpt of its content."""

    title: str
    url: str
    content: str


@dataclass(frozen=True)
class SearchResults:
    """What a search found: the engine's short answer (if any) and the hits, best first."""

    answer: str | None
    hits: tuple[SearchHit, ...]


class SearchProvider(Protocol):
    async def search(self, query: str) -> SearchResults:
        """Search the web for `query`.

        Raises WebError: timeout, unreachable, search_key_refused, search_limited or search_failed.
        """
        ...


class TavilySearch:
    """`SearchProvider` over Tavily's `POST /search` (an answer and up to `max_results` hits).

    Each hit's content is cut at `max_content_length` characters.
    """

    def __init__(
        self,
        api_key: str,
        base_url: str,
        search_depth: Literal["basic", "advanced"],
        max_results: int,
        max_content_length: int,
        timeout_seconds: float,
    ) -> None:
        self._api_key = api_key
        self._url = base_url.rstrip("/") + "/search"
        self._depth = search_depth
        self._max_results = max_results
        self._max_content = max_content_length
        self._timeout = timeout_seconds

    async def search(self, query: str) -> SearchResults:
        request = {
            "query": query,
            "search_depth": self._depth,
            "max_results": self._max_results,
            "include_answer": True,
        }
        headers = {"Authorization": f"Bearer {self._api_key}"}
        try:
            async with asyncio.timeout(self._timeout):
                async with aiohttp.ClientSession(trust_env=True) as session:
                    async with session.post(self._url, json=request, headers=headers) as response:
                        _check_status(response.status)
                        body = await response.json(content_type=None)
        except TimeoutError:
            raise WebError("timeout", seconds=self._timeout) from None
        except aiohttp.ClientError as exc:
            logger.warning("web search failed: %s", type(exc).__name__)
            raise WebError("unreachable", host=URL(self._url).host or "") from None
        except ValueError:  # not JSON
            raise WebError("search_failed", status=200) from None
        return self._results(body)

    def _results(self, body: Any) -> SearchResults:
        if not isinstance(body, dict) or not isinstance(body.get("results"), list):
            raise WebError("search_failed", status=200)
        hits = tuple(
            SearchHit(
                title=str(item.get("title") or ""),
                url=str(item.get("url") or ""),
                content=_cut(str(item.get("content") or ""), self._max_content),
            )
            for item in body["results"]
            if isinstance(item, dict) and item.get("url")
        )
        answer = body.get("answer")
        return SearchResults(answer if isinstance(answer, str) and answer.strip() else None, hits)


def _check_status(status: int) -> None:
    if status in (401, 403):
        raise WebError("search_key_refused")
    if status in (429, 432, 433):
        raise WebError("search_limited")
    if status >= 400:
        raise WebError("search_failed", status=status)


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
