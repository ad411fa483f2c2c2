"""A replica renews its leases even while the worker threads it shares with everything else are all busy."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

from myao2.application.replicas import Replica
from tests.clocks import ManualClock

SHARED_THREADS = 2


class Leases:
    """A `LeaseStore` that grants everything and notes each renewal."""

    def __init__(self) -> None:
        self.renewed = threading.Event()

    def take(self, name: str, holder: str, now: datetime, until: datetime) -> bool:
        return True

    def renew(self, holder: str, now: datetime, until: datetime) -> None:
        self.renewed.set()

    def alive(self, now: datetime) -> set[str]:
        return {"r1"}

    def release(self, holder: str) -> None:
        pass


async def test_leases_are_renewed_while_every_shared_worker_thread_waits() -> None:
    loop = asyncio.get_running_loop()
    shared = ThreadPoolExecutor(max_workers=SHARED_THREADS)
    loop.set_default_executor(shared)
    leases = Leases()
    replica = Replica(leases, ManualClock(), 0.3, "r1")
    await replica.join()
    leases.renewed.clear()
    # e.g. searches waiting for another replica's indexing: were renewals queued behind them, this live
    # replica would be taken for dead, and its unfinished answers given a second time by another.
    unblock = threading.Event()
    waiting = [loop.run_in_executor(None, unblock.wait) for _ in range(SHARED_THREADS)]
    stop = asyncio.Event()
    keeping = asyncio.create_task(replica.keep(stop, lambda: None))
    try:
        async with asyncio.timeout(30):
            while not leases.renewed.is_set():
                await asyncio.sleep(0.02)
    finally:
        stop.set()
        unblock.set()
        await asyncio.gather(keeping, *waiting)
        await replica.leave()
        shared.shutdown()
