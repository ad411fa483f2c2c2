"""A fake of Tavily's search API (``POST /search``) on 127.0.0.1, recording every request.

It checks the ``Authorization: Bearer KEY`` header (HTTP 401 otherwise), answers
with ``answer`` and up to ``max_results`` of the configured results, and can be
told to fail (``fail_with``) or to answer late (``delay``)::

    with FakeTavily(api_key="tvly-test") as tavily:
        tavily.results = [{"title": ..., "url": ..., "content": ...}]
        # point the client at tavily.base_url
"""

from __future__ import annotations

import asyncio
import copy
import threading
from typing import Any

from aiohttp import web

from tests.fakes._server import LoopbackServer

DEFAULT_ANSWER = "Tonkotsu ramen comes from Fukuoka."
DEFAULT_RESULTS = [
    {
        "title": "Tonkotsu ramen - history",
        "url": "https://example.com/tonkotsu",
        "content": "Tonkotsu ramen was born in Kurume, Fukuoka, in 1937.",
        "score": 0.93,
    },
    {
        "title": "Best ramen shops in Hakata",
        "url": "https://example.org/hakata-ramen",
        "content": "Hakata is famous for thin noodles in a milky pork broth.",
        "score": 0.81,
    },
]


class FakeTavily(LoopbackServer):
    """Tavily's search endpoint, scripted by the test."""

    def __init__(self, api_key: str = "tvly-test-key", port: int = 0) -> None:
        super().__init__(port)
        self.api_key = api_key
        self.answer: str | None = DEFAULT_ANSWER
        self.results: list[dict[str, Any]] = copy.deepcopy(DEFAULT_RESULTS)
        self.fail_with: int | None = None
        """An HTTP status to answer every request with."""
        self.raw_body: str | None = None
        """A body to send as is (e.g. not JSON)."""
        self.delay = 0.0
        self._lock = threading.Lock()
        self._requests: list[dict[str, Any]] = []

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def requests(self) -> list[dict[str, Any]]:
        """The JSON bodies received, each with ``_authorized`` (whether the key matched)."""
        with self._lock:
            return copy.deepcopy(self._requests)

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/search", self._search)
        return app

    async def _search(self, request: web.Request) -> web.Response:
        body = await request.json()
        authorized = request.headers.get("Authorization") == f"Bearer {self.api_key}"
        with self._lock:
            self._requests.append({**body, "_authorized": authorized})
        if self.delay:
            await asyncio.sleep(self.delay)
        if not authorized:
            return web.json_response({"detail": {"error": "Unauthorized: missing or invalid API key."}}, status=401)
        if self.fail_with is not None:
            return web.json_response({"detail": {"error": "failure"}}, status=self.fail_with)
        if self.raw_body is not None:
            return web.Response(text=self.raw_body, content_type="application/json")
        limit = int(body.get("max_results", 5))
        return web.json_response(
            {
                "query": body.get("query"),
                "answer": self.answer if body.get("include_answer") else None,
                "images": [],
                "results": self.results[:limit],
                "response_time": 0.01,
            }
        )
