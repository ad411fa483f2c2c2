"""The reaction telling someone that their message is seen and its answer on the way: for answers that take a while."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

REACTION_DELAY_SECONDS = 0.5
"""How long an answer may take to start showing before the reaction is sent; one showing sooner gets none."""
REACTION_HEAD_START_SECONDS = 1.0
"""How long an answer waits for its reaction, once sent, to land first; a slow or failing reaction never holds it
longer."""


class PendingReaction:
    """A reaction sent `REACTION_DELAY_SECONDS` after it is made, unless the answer shows first (`before_answer`)
    or the attempt ends (`drop`)."""

    def __init__(self, send: Callable[[], Coroutine[Any, Any, None]]) -> None:
        self._send = send
        self._sent: asyncio.Future[None] | None = None
        self._dropped = False
        loop = asyncio.get_running_loop()
        self._at = loop.time() + REACTION_DELAY_SECONDS
        self._due = loop.call_at(self._at, self._fire)

    def _fire(self) -> None:
        self._sent = asyncio.ensure_future(self._send())

    async def before_answer(self) -> None:
        """The answer is about to show: a reaction not sent yet never is; one sent is given its head start to land
        first."""
        self._due.cancel()
        if self._sent is not None and not self._sent.done():
            await asyncio.wait({self._sent}, timeout=REACTION_HEAD_START_SECONDS)

    def not_shown(self) -> None:
        """The answer about to show did not (Slack refused to start its stream): a reaction not sent yet is due
        again, when it was due, as the answer shows only once it is written."""
        if self._sent is None and not self._dropped:
            self._due.cancel()
            self._due = asyncio.get_running_loop().call_at(self._at, self._fire)

    def drop(self) -> None:
        """The attempt is over: a reaction not sent yet never is."""
        self._dropped = True
        self._due.cancel()
