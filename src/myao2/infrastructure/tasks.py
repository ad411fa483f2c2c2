"""Background work the bot starts and must finish (or abandon) on shutdown."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

logger = logging.getLogger(__name__)


class TaskSet:
    """Fire-and-forget tasks that are still tracked: failures are logged, shutdown waits for them."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("background task failed", exc_info=task.exception())

    async def drain(self, timeout: float) -> None:
        """Wait up to `timeout` seconds for running tasks, then cancel what is left."""
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
