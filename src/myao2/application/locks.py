"""Per-key mutual exclusion that forgets keys nobody holds."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import AsyncIterator, Hashable
from contextlib import asynccontextmanager

RECENT_RELEASES = 1024
"""The keys whose last release is remembered (`KeyedLocks.released_since`); older releases count as recent."""


class KeyedLocks:
    """One asyncio lock per key (e.g. a thread), created on demand and dropped when idle. Tells whether a key's
    lock was released since a moment (`mark`), e.g. whether what was read before taking it is still as it was."""

    def __init__(self) -> None:
        self._locks: dict[Hashable, tuple[asyncio.Lock, list[int]]] = {}
        self._releases = 0
        self._released: OrderedDict[Hashable, int] = OrderedDict()
        """The number of each key's last release (the newest `RECENT_RELEASES`, oldest first)."""
        self._forgotten = 0
        """The number of the newest release left out of `_released`."""

    @asynccontextmanager
    async def hold(self, key: Hashable) -> AsyncIterator[None]:
        lock, users = self._locks.setdefault(key, (asyncio.Lock(), [0]))
        users[0] += 1
        try:
            async with lock:
                try:
                    yield
                finally:
                    self._release(key)
        finally:
            users[0] -= 1
            if users[0] == 0:
                del self._locks[key]

    def mark(self) -> int:
        """This moment, for `released_since`."""
        return self._releases

    def released_since(self, key: Hashable, mark: int) -> bool:
        """Whether the lock of `key` was released after `mark` was made (True too when that is no longer known)."""
        return self._released.get(key, self._forgotten) > mark

    def _release(self, key: Hashable) -> None:
        self._releases += 1
        self._released[key] = self._releases
        self._released.move_to_end(key)
        if len(self._released) > RECENT_RELEASES:
            self._forgotten = self._released.popitem(last=False)[1]

    def __len__(self) -> int:
        return len(self._locks)
