"""The model clients' HTTP client: the SDK's aiohttp-backed one, merging a request's URL and headers with its own once.

httpx merges them at every request: it parses again the URL the SDK made a string of, and
normalises its own headers and the SDK's one by one (a Python call per header and per
lookup). The SDK sends a model's calls to one URL with the same few header sets (they
differ by the retry's number), so each merge is kept, for the client's base URL and
headers as they are then. Imported with the model libraries, off the event loop.
"""

from __future__ import annotations

from typing import Any

import httpx2
import openai

KEPT = 16
"""Merges kept at most, forgotten all at once past that: a few per model role (its URL, its retries)."""


class MergingHttpClient(openai.DefaultAioHttpClient):  # type: ignore[misc,valid-type]
    """`openai.DefaultAioHttpClient` whose requests' URLs and headers are merged with its own once each."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._urls: dict[tuple[str, httpx2.URL], httpx2.URL] = {}
        self._header_sets: dict[tuple[object, ...], httpx2.Headers] = {}

    def _merge_url(self, url: httpx2.URL | str) -> httpx2.URL:
        if not isinstance(url, str):
            return super()._merge_url(url)
        key = (url, self.base_url)
        merged = self._urls.get(key)
        if merged is None:
            merged = self._urls[key] = super()._merge_url(url)
            _bound(self._urls)
        return merged  # a URL cannot change

    def _merge_headers(self, headers: Any = None) -> Any:
        if not isinstance(headers, list):  # the SDK's are a list of pairs
            return super()._merge_headers(headers)
        key = (*headers, None, *self.headers.raw)
        merged = self._header_sets.get(key)
        if merged is None:
            merged = self._header_sets[key] = super()._merge_headers(headers)
            _bound(self._header_sets)
        return httpx2.Headers(merged)  # a copy: headers can change


def _bound(kept: dict[Any, Any]) -> None:
    if len(kept) > KEPT:
        kept.clear()
