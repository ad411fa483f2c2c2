"""Background work the bot starts and must finish (or abandon) on shutdown."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import suppress
from typing import Any

logger = logging.getLogger(__name__)


class TaskSet:
    """Fire-and-forget tasks that are still tracked: failures are logged, shutdown waits for them."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run `coro` in the background; once `drain` has begun, it is dropped unstarted."""
        if self._closed:
            coro.close()
            return
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("background task failed", exc_info=task.exception())

    async def drain(self, timeout: float) -> None:
        """Take no new work; wait up to `timeout` seconds for running tasks, then cancel what is left."""
        self._closed = True
        if not self._tasks:
            return
        _, pending = await asyncio.wait(set(self._tasks), timeout=timeout)
        for task in pending:
            task.cancel()
        if pending:
            logger.warning("abandoned %d unfinished task(s) at shutdown", len(pending))
            await asyncio.wait(pending, timeout=1.0)

    def __len__(self) -> int:
        return len(self._tasks)


async def every(seconds: float, job: Callable[[], Awaitable[object]], stop: asyncio.Event) -> None:
    """Run `job` every `seconds` until `stop` is set; a failure is logged and the next round runs."""
    while not stop.is_set():
        with suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), seconds)
        if stop.is_set():
            return
        try:
            await job()
        except Exception:
            logger.exception("periodic job failed")
