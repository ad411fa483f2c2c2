"""A streamed completion's chunks as `Fields`, from the SDK's stream of their JSON (imported with the model libraries)."""

from __future__ import annotations

from typing import Any

from openai import AsyncStream

from myao2.infrastructure.llm.chat_client import as_fields


class FieldsStream(AsyncStream[object]):
    """The SDK's stream (its errors, its end, its closing), each chunk made `Fields` as it comes.

    Given a chunk type, the SDK checks at every chunk whether that type builds itself
    (`ModelBuilderProtocol`, a runtime protocol's check as costly as the view); for
    `object` it hands the chunk's JSON over as it is.
    """

    def __aiter__(self) -> FieldsStream:  # type: ignore[override]
        return self

    async def __anext__(self) -> Any:
        return as_fields(await super().__anext__())
