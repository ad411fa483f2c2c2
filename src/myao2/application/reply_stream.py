"""A reply as it is written: the events a reply writer yields, for whoever shows the reply."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from myao2.domain.conversation import Channel


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


@dataclass(frozen=True)
class PublishedReply:
    """A reply as it stands in the conversation: its ts and its whole final text."""

    ts: str
    text: str


Started = Callable[[str], Awaitable[None]]
"""Told the ts of a reply as soon as it shows in the conversation."""
Unheard = Callable[[str], Awaitable[list[str]]]
"""Told the text that the call starting to show a reply was sent, when it went unanswered (its connection dropped,
or it timed out) although the chat may have taken it: the messages that may be the reply and show just that
text, oldest first; empty when none may be taken for it."""
LeftOpen = Callable[[str, str], Awaitable[None]]
"""Told the ts of a reply left showing unfinished (its end failed for a passing reason: the attempt fails) and the
end it lacks, for the next attempt to end it with (`ReplyPublisher.finish`'s `ending`)."""
TasksRunning = Callable[[dict[str, str]], Awaitable[None]]
"""Told the tasks a reply shows still running (call id to title) before a task shows, and again once one is shown
finished: should the reply be left unfinished (the bot killed), the next attempt ends it with them marked failed
(`ReplyPublisher.finish`'s `tasks`)."""
AboutToShow = Callable[[], Awaitable[None]]
"""Awaited just before a reply first shows in the conversation (its stream starts, or it is posted whole)."""
NotShown = Callable[[], None]
"""Told when a reply `AboutToShow` announced did not show after all (the chat refused to start its stream): it
shows once written, posted whole (`AboutToShow` is awaited again first)."""


class ReplyHeldBack(Exception):
    """Raised by a reply stream (or by `Started`) for the publisher to show nothing more of the reply, not even the
    apology, and let the exception through: it is withdrawn or deferred."""


class ReplyWithdrawn(ReplyHeldBack):
    """The reply is withdrawn: another replica answers instead."""


class ReplyDeferred(ReplyHeldBack):
    """The reply failed before any of it showed, for a passing reason not the model's (the bot's database, or Slack
    as the conversation is read): the attempt fails, for a later one to answer."""


class ReplyPublisher(Protocol):
    """Shows a reply in the chat while it is written (or whole, where streaming is not possible)."""

    async def publish(
        self,
        channel: Channel,
        thread_ts: str | None,
        recipient_user_id: str | None,
        reply: ReplyStream,
        apology: str,
        *,
        answering: str | None = None,
        started: Started | None = None,
        unheard: Unheard | None = None,
        left_open: LeftOpen | None = None,
        tasks_running: TasksRunning | None = None,
        about_to_show: AboutToShow | None = None,
        not_shown: NotShown | None = None,
    ) -> PublishedReply:
        """Consume `reply` into one message answering `recipient_user_id` in `thread_ts`.

        `answering` (a message ts) marks the message as its answer, once it is complete.
        `started` is awaited with the message's ts as soon as it shows (a reply shown while it is written: one
        posted whole is not told). `unheard` offers the messages that may
        be the reply when the call starting it went unanswered: the newest is taken for it, and the reply goes
        on there. `left_open` is told the end a message left unfinished lacks; `tasks_running`, `about_to_show` and
        `not_shown`: see their types. When the stream
        fails (ModelUnavailable or any other error but `ReplyHeldBack`), the message
        ends with what was written and `apology`, or is `apology` alone.
        """
        ...

    async def finish(
        self,
        channel_id: str,
        ts: str,
        apology: str,
        *,
        answering: str | None = None,
        ending: str | None = None,
        tasks: dict[str, str] | None = None,
        left_open: LeftOpen | None = None,
    ) -> str | None:
        """End message `ts`, left half-written when the bot stopped, with `ending` (what an attempt told `LeftOpen`
        it lacks), else with `apology` (marked as `answering`'s answer), and its `tasks` still running (told
        `TasksRunning`) marked failed; returns its whole text as it ends ("" when not told). Should it stay
        unfinished, `left_open` is told what it lacks still.

        None when it was no message left half-written (already ended, expired, or never streamed): it is left
        as it is.
        """
        ...


def apology_tail(written: str, apology: str) -> str:
    """What ends a reply that failed after `written`: the apology on a line of its own, or alone if nothing was written."""
    return f"\n\n{apology}" if written.strip() else apology


def failed_reply_text(written: str, apology: str) -> str:
    """The whole text of a reply that failed after `written`, posted at once: what was written, trimmed, then
    `apology_tail`."""
    return written.strip() + apology_tail(written, apology)
