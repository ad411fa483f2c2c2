"""Recording what the bot does (for `myao2 stats`) without holding up the event loop or the work itself."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from myao2.domain.activity import ModelCall, ReplyKind, judgment_outcome
from myao2.domain.judgment import Judgment
from myao2.domain.ports import ActivityLog, Clock

logger = logging.getLogger(__name__)


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
        await self._record(self._log.model_call, call, self._clock.now())

    async def judgment(self, channel_id: str, judgment: Judgment | None) -> None:
        """A judgment, or None when the model could not be reached for one."""
        confidence = judgment.confidence if judgment else 0.0
        await self._record(self._log.judgment, channel_id, judgment_outcome(judgment), confidence, self._clock.now())

    def reply(self, channel_id: str, kind: ReplyKind) -> None:
        """Record a post of the bot's; synchronous: called in the worker thread that stores the post."""
        self._write(self._log.reply, channel_id, kind, self._clock.now())

    async def _record(self, write: Callable[..., None], *args: object) -> None:
        await asyncio.to_thread(self._write, write, *args)

    @staticmethod
    def _write(write: Callable[..., None], *args: object) -> None:
        try:
            write(*args)
        except Exception as exc:  # noqa: BLE001 - the figures are a courtesy: the work goes on
            logger.warning("could not record activity: %s", type(exc).__name__)
