"""The playground as a chat platform: posts and streamed replies go to the page that asked, over its event stream."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from myao2.application.agents import ModelUnavailable
from myao2.application.reply_stream import (
    AboutToShow,
    LeftOpen,
    NotShown,
    PublishedReply,
    ReplyDone,
    ReplyHeldBack,
    ReplyStream,
    Started,
    TasksRunning,
    TextDelta,
    ToolFinished,
    ToolStarted,
    Unheard,
    failed_reply_text,
)
from myao2.domain.conversation import Channel, History, Person, ts_to_datetime
from myao2.domain.ports import ConversationStore
from myao2.infrastructure.playground.rooms import ROOMS, person_name, room

logger = logging.getLogger(__name__)

Listener = Callable[[str, dict[str, Any]], None]
"""Told each event (name, data) of a reply; see `PlaygroundPublisher`."""


class Stamps:
    """Message timestamps in Slack's form ("1700000000.000100"), strictly increasing."""

    def __init__(self) -> None:
        self._last = 0

    def next(self) -> str:
        micros = max(int(time.time() * 1_000_000), self._last + 1)
        self._last = micros
        return f"{micros // 1_000_000}.{micros % 1_000_000:06d}"


class PlaygroundChat:
    """`ChatPlatform` for the playground's rooms: nothing to fetch, nobody to react to."""

    def __init__(self, store: ConversationStore, stamps: Stamps) -> None:
        self._store = store
        self._stamps = stamps

    async def post(self, channel_id: str, text: str, thread_ts: str | None, answering: str | None = None) -> str:
        return self._stamps.next()

    async def answer_ts(self, channel_id: str, ts: str, thread_ts: str | None) -> str | None:
        return None  # every answer is composed in this process, which records it when it shows

    async def unmarked_posts(self, channel_id: str, ts: str, thread_ts: str | None) -> dict[str, str]:
        return {}  # a reply's ts is made here, never left unheard

    async def react(self, channel_id: str, ts: str, emoji: str) -> None:
        return None

    async def person(self, user_id: str) -> Person:
        people = await asyncio.to_thread(self._store.people, [user_id])
        return people.get(user_id) or Person(user_id, person_name(user_id))

    async def channel(self, channel_id: str) -> Channel:
        found = room(channel_id)
        if found is None:
            raise LookupError(f"no playground conversation {channel_id}")
        return found

    async def member_channels(self) -> list[Channel]:
        return list(ROOMS)

    async def fetch_history(self, channel_id: str, oldest: str, limit: int) -> History:
        return History(channel_id, [], oldest, frozenset())  # the store is the whole history

    async def fetch_thread(self, channel_id: str, thread_ts: str, oldest: str, limit: int) -> History:
        return History(channel_id, [], oldest, frozenset(), top_level=False)  # nothing read, nothing deleted


class PlaygroundPublisher:
    """`ReplyPublisher` that hands a reply's events to the listener waiting for the answer to a message.

    Events: ``start`` {ts}, ``delta`` {text}, ``tool`` {id, tool, title, status:
    started|done|failed}, ``error`` {message}, ``done`` {ts, text, time}. A reply whose
    model fails ends with what was written and the apology, after an ``error`` event.
    """

    def __init__(self, stamps: Stamps) -> None:
        self._stamps = stamps
        self._listeners: dict[str, Listener] = {}

    def listen(self, answering: str, listener: Listener) -> None:
        """Send the events of the answer to message `answering` to `listener`."""
        self._listeners[answering] = listener

    def forget(self, answering: str) -> None:
        self._listeners.pop(answering, None)

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
        unheard: Unheard | None = None,  # unused: a playground reply always shows at once
        left_open: LeftOpen | None = None,  # unused: nor is one ever left unfinished
        tasks_running: TasksRunning | None = None,  # unused: as `left_open`
        about_to_show: AboutToShow | None = None,
        not_shown: NotShown | None = None,  # unused: its replies always show at once
    ) -> PublishedReply:
        emit = self._emitter(answering)
        if about_to_show is not None:
            await about_to_show()
        ts = self._stamps.next()
        if started is not None:
            await started(ts)
        emit("start", {"ts": ts})
        written = ""
        text: str | None = None
        try:
            async for event in reply:
                if isinstance(event, TextDelta):
                    written += event.text
                    emit("delta", {"text": event.text})
                elif isinstance(event, ToolStarted) and event.title is not None:
                    emit("tool", {"id": event.call_id, "tool": event.tool, "title": event.title, "status": "started"})
                elif isinstance(event, ToolFinished):
                    status = "done" if event.ok else "failed"
                    emit("tool", {"id": event.call_id, "tool": event.tool, "status": status})
                elif isinstance(event, ReplyDone):
                    text = event.text
        except ReplyHeldBack:
            raise
        except ModelUnavailable as exc:
            logger.warning("reply failed: %s", exc)
            emit("error", {"message": f"The model could not answer: {exc}"})
        except Exception as exc:  # noqa: BLE001 - the page is told, the log has the details
            logger.exception("reply failed")
            emit("error", {"message": f"The reply failed: {type(exc).__name__}"})
        if text is None:
            text = failed_reply_text(written, apology)
        text = text.strip()
        emit("done", {"ts": ts, "text": text, "time": ts_to_datetime(ts).isoformat()})
        return PublishedReply(ts, text)

    async def finish(
        self,
        channel_id: str,
        ts: str,
        apology: str,
        *,
        answering: str | None = None,
        ending: str | None = None,  # unused: no reply here is left unfinished (`publish`)
        tasks: dict[str, str] | None = None,  # unused: as `ending`
        left_open: LeftOpen | None = None,
    ) -> str | None:
        self._emitter(answering)("done", {"ts": ts, "text": apology, "time": ts_to_datetime(ts).isoformat()})
        return apology

    def _emitter(self, answering: str | None) -> Listener:
        listener = self._listeners.get(answering or "")
        return listener if listener is not None else (lambda name, data: None)
