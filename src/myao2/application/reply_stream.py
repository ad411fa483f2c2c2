"""A reply as it is written: the events a reply writer yields, for whoever shows the reply."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass


@dataclass(frozen=True)
class TextDelta:
    """More text of the reply, to append to what came before."""

    text: str


@dataclass(frozen=True)
class ToolStarted:
    """The model called a tool; `title` is the line to show for it, None for a tool not shown."""

    call_id: str
    tool: str
    title: str | None


@dataclass(frozen=True)
class ToolFinished:
    """A tool returned; `ok` is False when it refused or failed."""

    call_id: str
    tool: str
    ok: bool


@dataclass(frozen=True)
class ReplyDone:
    """The reply is complete; `text` is the whole of it, as it should be stored."""

    text: str


ReplyEvent = TextDelta | ToolStarted | ToolFinished | ReplyDone
ReplyStream = AsyncIterator[ReplyEvent]
