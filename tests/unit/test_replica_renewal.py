"""A replica renews its leases even while the worker threads it shares are all busy, and notices every replica gone."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

from sqlalchemy import Engine

from myao2.application.replicas import Replica
from myao2.infrastructure.db.conversation_store import SqlConversationStore
from myao2.infrastructure.db.lease_store import SqlLeaseStore
from tests.clocks import ManualClock
from tests.unit.test_replicas import T0, at, mention

SHARED_THREADS = 2


class Leases:
    """A `LeaseStore` that grants everything and notes each renewal."""

    def __init__(self) -> None:
        self.renewed = threading.Event()

    def take(self, name: str, holder: str, now: datetime, until: datetime) -> bool:
        return True

    def renew(self, holder: str, now: datetime, until: datetime) -> set[str]:
        self.renewed.set()
        return set()

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


async def test_a_replica_gone_before_another_ever_saw_it_alive_is_noticed(engine: Engine) -> None:
    """One that joined and died between two beats of the survivor: its claims are taken up all the same."""
    leases, clock = SqlLeaseStore(engine), ManualClock(T0)
    store = SqlConversationStore(engine, clock)
    store.save_message(message := mention(0))
    # Leases of 3 s: on PostgreSQL a renewal's transaction is ended once idle for as long as its lease, and a busy
    # machine can pause for longer than a fraction of a second between two statements of a join.
    survivor, short_lived = Replica(leases, clock, 3, "survivor"), Replica(leases, clock, 3, "short-lived")
    await survivor.join()
    clock.advance(1)
    await short_lived.join()  # after the survivor's last look at who is alive
    store.claim("C1", message.ts, at(6), holder=short_lived.name)
    clock.advance(20)  # it died (SIGKILL) without renewing
    stop, gone = asyncio.Event(), asyncio.Event()
    # a beat a second; the first finds the short-lived replica's lease expired
    keeping = asyncio.create_task(survivor.keep(stop, gone.set))
    try:
        await asyncio.wait_for(gone.wait(), 30)
    finally:
        stop.set()
        await keeping
        await survivor.leave()
    [pending] = store.due_answers(clock.now(), at(-60), holder=survivor.name)
    assert pending.message.ts == message.ts
