"""This bot process among the replicas sharing one database: its leases, and noticing one gone."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from datetime import datetime, timedelta
from typing import TypeVar

from myao2.domain.ports import Clock, LeaseStore

_T = TypeVar("_T")

logger = logging.getLogger(__name__)

BEATS_PER_LEASE = 3
"""How often a lease is renewed within its duration: two beats may be missed before it expires."""


class Replica:
    """One replica: alive while its own lease is renewed; runs a periodic job only while it holds that job's lease.

    Leases last `lease_seconds` from their last renewal, so the jobs and the claims
    of a replica that died (no goodbye) pass to the others within that time; one that
    stops properly hands them over at once (`leave`).
    """

    def __init__(self, leases: LeaseStore, clock: Clock, lease_seconds: float, name: str | None = None) -> None:
        self.name = name or f"replica-{uuid.uuid4().hex[:16]}"
        self._leases = leases
        self._clock = clock
        self._lease = timedelta(seconds=lease_seconds)
        self._alive: set[str] = set()
        # Lease reads and writes have a thread of their own: queued behind the worker threads shared with
        # everything else (all busy, say, with searches waiting for another replica's indexing), the renewals
        # would come too late, and a live replica be taken for dead and its unfinished answers given twice.
        self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="replica-leases")

    async def join(self) -> None:
        """Take this replica's own lease and note which others are alive."""
        await self._beat()
        logger.info("running as %s (replicas alive: %d)", self.name, len(self._alive))

    async def holds(self, job: str) -> bool:
        """Take (or keep) the lease of `job`; False while another live replica holds it."""
        now = self._clock.now()
        return await self._off_loop(self._leases.take, job, self.name, now, now + self._lease)

    def only_here(self, job: str, run: Callable[[], Awaitable[object]]) -> Callable[[], Awaitable[object]]:
        """`run`, done only while this replica holds `job`'s lease (one replica at a time does it)."""

        async def leased() -> object:
            if await self.holds(job):
                return await run()
            return None

        return leased

    async def keep(self, stop: asyncio.Event, gone: Callable[[], None]) -> None:
        """Renew this replica's leases until `stop` is set; call `gone` when another replica's lease expired."""
        period = self._lease.total_seconds() / BEATS_PER_LEASE
        while not stop.is_set():
            with suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), period)
            if stop.is_set():
                return
            try:
                if await self._beat():
                    gone()
            except Exception:
                logger.exception("renewing this replica's leases failed")

    async def leave(self) -> None:
        """Give up every lease and unsettled claim of this replica (at shutdown), for the others to take at once."""
        try:
            await self._off_loop(self._leases.release, self.name)
        finally:
            self._io.shutdown(wait=False)

    def _renew(self, now: datetime) -> tuple[set[str], set[str]]:
        """(Lease thread) Take this replica's own lease again, renew the others; the replicas alive, and those
        found expired."""
        until = now + self._lease
        self._leases.take(self.name, self.name, now, until)  # taken again even after a stall let it expire
        expired = self._leases.renew(self.name, now, until)
        return self._leases.alive(now), expired

    async def _beat(self) -> bool:
        """Renew; True when a replica seen alive before is no longer, or one's lease was found expired."""
        alive, expired = await self._off_loop(self._renew, self._clock.now())
        gone = (self._alive - alive) | expired
        self._alive = alive
        if gone:
            logger.info("replica(s) %s gone; taking up what they left", ", ".join(sorted(gone)))
        return bool(gone)

    async def _off_loop(self, call: Callable[..., _T], *args: object) -> _T:
        """`call(*args)` in this replica's own lease thread."""
        return await asyncio.get_running_loop().run_in_executor(self._io, call, *args)
