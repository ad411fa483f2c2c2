"""Recording what the bot does (for `myao2 stats`) without holding up the event loop or the work itself."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from datetime import datetime

from myao2.domain.activity import ModelCall, ReplyKind, judgment_outcome
from myao2.domain.judgment import Judgment
from myao2.domain.ports import ActivityLog, Clock

logger = logging.getLogger(__name__)

_held_calls: ContextVar[list[tuple[ModelCall, datetime]] | None] = ContextVar("held model calls", default=None)
"""Within `held_for_reply`: the model calls made so far, not recorded yet."""


class Activity:
    """Writes to the activity log in a worker thread; a failure to record is logged, never raised.

    `watch` sees every model call first (e.g. to tell whether the model is reachable).
    """

    def __init__(self, log: ActivityLog, clock: Clock, watch: Callable[[ModelCall], None] | None = None) -> None:
        self._log = log
        self._clock = clock
        self._watch = watch

    async def model_call(self, call: ModelCall) -> None:
        if self._watch is not None:
            self._watch(call)
        held = _held_calls.get()
        if held is not None:
            held.append((call, self._clock.now()))
            return
        await self._record(self._log.model_call, call, self._clock.now())

    @asynccontextmanager
    async def held_for_reply(self) -> AsyncIterator[None]:
        """Within, model calls are recorded with the post `reply` records next, in its worker thread's trip and
        transaction rather than one each; any not recorded so when the block ends (no post: it failed) are recorded then."""
        held: list[tuple[ModelCall, datetime]] = []
        token = _held_calls.set(held)
        try:
            yield
        finally:
            _held_calls.reset(token)
            if held:
                await self._record(self._write_calls, held)

    async def judgment(self, channel_id: str, judgment: Judgment | None) -> None:
        """A judgment, or None when the model could not be reached for one."""
        confidence = judgment.confidence if judgment else 0.0
        await self._record(self._log.judgment, channel_id, judgment_outcome(judgment), confidence, self._clock.now())

    def reply(self, channel_id: str, kind: ReplyKind) -> None:
        """Record a post of the bot's, and the model calls held for it; synchronous: called in the worker thread
        that stores the post."""
        held = _held_calls.get()
        calls: list[tuple[ModelCall, datetime]] = []
        if held:
            count = len(held)
            calls = held[:count]
            del held[:count]  # one made meanwhile on the event loop stays held
        self._write(self._log.reply, channel_id, kind, self._clock.now(), calls)

    def _write_calls(self, calls: list[tuple[ModelCall, datetime]]) -> None:
        for call, at in calls:
            self._write(self._log.model_call, call, at)

    async def _record(self, write: Callable[..., None], *args: object) -> None:
        await asyncio.to_thread(self._write, write, *args)

    @staticmethod
    def _write(write: Callable[..., None], *args: object) -> None:
        try:
            write(*args)
        except Exception as exc:  # noqa: BLE001 - the figures are a courtesy: the work goes on
            logger.warning("could not record activity: %s", type(exc).__name__)
