"""A streamed completion's chunks as `Fields`, from the SDK's stream of their JSON (imported with the model libraries)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

from openai import APIConnectionError, AsyncStream

from myao2.infrastructure.llm.chat_client import as_fields

if TYPE_CHECKING:
    from openai._streaming import ServerSentEvent

DRAIN_SECONDS = 0.1
"""How long the body is read on past the end mark for its connection to be kept, as the SDK reads it."""


class FieldsStream(AsyncStream[object]):
    """The SDK's stream (its errors, its end, its closing), each chunk made `Fields` as it comes.

    Given a chunk type, the SDK checks at every chunk whether that type builds itself
    (`ModelBuilderProtocol`, a runtime protocol's check as costly as the view); for
    `object` it hands the chunk's JSON over as it is.

    Its events (`_iter_events`, the SDK's) end at the end mark ([DONE]), the body read to its end
    first: at the mark the SDK stops reading its events, and left its generators of events, of
    their lines and of the body suspended, each closed by the event loop in a task of its own,
    woken through its self-pipe, and it read the rest of the body through anyio's cancel scopes.
    """

    def __aiter__(self) -> FieldsStream:  # type: ignore[override]
        return self

    async def __anext__(self) -> Any:
        return as_fields(await super().__anext__())

    async def _iter_events(self) -> AsyncIterator[ServerSentEvent]:
        async with aclosing(super()._iter_events()) as events:
            async for event in events:
                if event.data.startswith("[DONE]"):
                    if self.response.http_version == "HTTP/1.1":  # its connection kept once the body is read
                        await _drain(events)
                    return
                yield event


async def _drain(events: AsyncIterator[ServerSentEvent]) -> None:
    """Read `events` to their end for at most `DRAIN_SECONDS`; a failure then leaves the output as it was (the
    SDK's rule), the body closed with the stream."""
    try:
        async with asyncio.timeout(DRAIN_SECONDS):
            async for _ in events:
                pass
    except (TimeoutError, APIConnectionError):
        pass
