"""With a token, a path that starts under /static/ and climbs out of it reaches no API without the token."""

from __future__ import annotations

import asyncio

import pytest

from tests.unit.test_playground_api import Harness, client_for, engine, harness  # noqa: F401 (fixtures)

SECRET = "play-secret"


@pytest.mark.parametrize(
    "path",
    [
        f"/static/../api/memos?conversation={SECRET}",
        f"/static/..%2Fapi/memos?conversation={SECRET}",
        f"/static/%2E%2E/api/messages?conversation={SECRET}",
        "/static/x/../../api/conversations",
        "/static//../api/memory?conversation=" + SECRET,
    ],
)
async def test_a_path_climbing_out_of_static_still_needs_the_token(harness: Harness, path: str) -> None:
    async with await client_for(harness, token="s3cret") as client:
        # Sent as written: an HTTP client library would resolve the dots itself.
        reader, writer = await asyncio.open_connection("127.0.0.1", client.server.port)
        writer.write(f"GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        status = (await reader.read()).split()[1]  # the whole answer: the server is done with it
        writer.close()
        await writer.wait_closed()
    assert status in (b"401", b"403", b"404")
