"""Replicas sharing one database (SQLite file and PostgreSQL): leases, and claims held by a replica.

The races run in separate processes, each with its own engine, as replicas would.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import threading
from contextlib import suppress
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import Engine, event
from sqlalchemy.exc import DBAPIError

from myao2.application.replicas import Replica
from myao2.domain.answers import Unfinished
from myao2.domain.conversation import Message
from myao2.infrastructure.db.conversation_store import SqlConversationStore
from myao2.infrastructure.db.engine import open_database
from myao2.infrastructure.db.lease_store import SqlLeaseStore
from tests.clocks import ManualClock
from tests.unit.test_autonomous import SETTINGS, WAIT, World

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
LEASE = timedelta(seconds=15)
RACERS = 6


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.fixture
def leases(engine: Engine) -> SqlLeaseStore:
    return SqlLeaseStore(engine)


def mention(seconds: float) -> Message:
    return Message(channel_id="C1", ts=f"{at(seconds).timestamp():.6f}", user_id="U1", text="<@UBOT> hi", user_name="alice", mentions=("UBOT",))


# -- racing processes --------------------------------------------------------------------------------------------


def _race(url: str, what: str, racer: int, start, results) -> None:  # type: ignore[no-untyped-def]
    engine = open_database(url)
    try:
        store = SqlConversationStore(engine, ManualClock(T0))
        leases = SqlLeaseStore(engine)
        start.wait()
        # One time for every racer: read from the wall clock before the barrier, a racer ready long before the
        # last (imports on a busy machine) took a lease already expired for the others, and two won it.
        if what == "claim":
            won = store.claim("C1", "1.000001", T0 + LEASE, holder=f"r{racer}")
        else:
            won = leases.take("memory", f"r{racer}", T0, T0 + LEASE)
        results.put((racer, won))
    finally:
        engine.dispose()


def race(url: str, what: str) -> list[int]:
    """The racers (separate processes, released together) that got `what`."""
    context = multiprocessing.get_context("spawn")
    start, results = context.Barrier(RACERS), context.Queue()
    racers = [context.Process(target=_race, args=(url, what, i, start, results)) for i in range(RACERS)]
    for process in racers:
        process.start()
    # Generous: each racer is a fresh interpreter importing the project, slow on a busy 2-core machine.
    outcomes = [results.get(timeout=300) for _ in racers]
    for process in racers:
        process.join(timeout=30)
        assert process.exitcode == 0
    return [racer for racer, won in outcomes if won]


def test_processes_racing_for_one_claim_have_one_winner_which_holds_it(database_url: str, engine: Engine) -> None:
    [winner] = race(database_url, "claim")
    store = SqlConversationStore(engine, ManualClock(T0))
    assert store.claim("C1", "1.000001") is False
    with engine.connect() as connection:
        [(holder,)] = connection.exec_driver_sql("SELECT holder FROM claims").all()
    assert holder == f"r{winner}"


def test_processes_racing_for_one_lease_have_one_winner(database_url: str, leases: SqlLeaseStore) -> None:
    [winner] = race(database_url, "lease")
    assert leases.take("memory", f"r{winner}", T0, T0 + LEASE)  # kept by its holder
    assert not leases.take("memory", "someone else", T0, T0 + LEASE)


# -- leases ------------------------------------------------------------------------------------------------------


def test_a_lease_is_refused_to_others_until_it_expires_then_taken_over(leases: SqlLeaseStore) -> None:
    assert leases.take("memory", "A", at(0), at(15))
    assert not leases.take("memory", "B", at(14), at(29))
    assert leases.take("memory", "A", at(14), at(29))  # renewed by its holder
    assert not leases.take("memory", "B", at(29), at(44))  # valid up to its end
    assert leases.take("memory", "B", at(30), at(45))  # A went silent: B takes it over
    assert not leases.take("memory", "A", at(31), at(46))
    leases.renew("A", at(31), at(46))  # A's renewal does not take it back
    assert not leases.take("memory", "C", at(44), at(59))


def test_renew_extends_only_the_holders_unexpired_leases(engine: Engine, leases: SqlLeaseStore) -> None:
    leases.take("A", "A", at(0), at(15))
    leases.take("memory", "A", at(0), at(15))
    leases.take("history", "A", at(0), at(5))
    leases.renew("A", at(10), at(25))
    assert not leases.take("memory", "B", at(20), at(35))  # renewed
    assert leases.take("history", "B", at(20), at(35))  # had expired before the renewal
    assert leases.alive(at(20)) == {"A"}  # only a replica's own lease says it is alive
    assert leases.alive(at(26)) == set()
    leases.renew("B", at(26), at(41))  # forgets the expired leases
    with engine.connect() as connection:
        assert connection.exec_driver_sql("SELECT name FROM leases").all() == [("history",)]  # B's, from 20 to 35


def test_release_hands_over_the_leases_and_the_unsettled_claims(engine: Engine, leases: SqlLeaseStore) -> None:
    store = SqlConversationStore(engine, ManualClock(T0))
    store.save_message(first := mention(0))
    store.save_message(second := mention(1))
    leases.take("A", "A", at(0), at(15))
    leases.take("memory", "A", at(0), at(15))
    store.claim("C1", first.ts, at(5), holder="A")
    store.claim("C1", second.ts, at(5), holder="A")
    store.settle("C1", second.ts, "9.0", holder="A")
    leases.release("A")
    assert leases.alive(at(1)) == set()
    assert leases.take("memory", "B", at(1), at(16))
    [pending] = store.due_answers(at(5), at(-60), holder="B")
    assert pending.message.ts == first.ts


# -- claims held by replicas ---------------------------------------------------------------------------------------


def test_a_claim_passes_to_another_replica_only_once_its_holder_is_gone(engine: Engine, leases: SqlLeaseStore) -> None:
    store = SqlConversationStore(engine, ManualClock(T0))
    store.save_message(message := mention(0))
    leases.take("A", "A", at(0), at(15))
    leases.take("B", "B", at(0), at(15))
    assert store.claim("C1", message.ts, at(5), holder="A")

    def due_for(replica: str, now: float) -> list[str]:
        return [p.message.ts for p in store.due_answers(at(now), at(-60), holder=replica)]

    assert due_for("A", 5) == [message.ts]  # its own retry
    assert due_for("B", 5) == []  # A is alive: its attempt may still be under way
    assert store.next_due(at(1), at(-60), holder="B") is None
    assert store.next_due(at(1), at(-60), holder="A") == at(5)
    leases.take("B", "B", at(14), at(29))  # B lives on, A goes silent
    assert due_for("B", 16) == [message.ts]
    assert store.next_attempt("C1", message.ts, 1, at(31), holder="B")
    assert not store.next_attempt("C1", message.ts, 1, at(31), holder="C")  # the attempt is B's alone
    leases.take("A", "A", at(17), at(32))  # A is back (a stall): B holds the claim now
    leases.take("B", "B", at(28), at(43))
    assert due_for("A", 31) == []
    assert due_for("B", 31) == [message.ts]


def test_a_replica_whose_claim_was_taken_over_records_nothing_of_its_answer(engine: Engine, leases: SqlLeaseStore) -> None:
    store = SqlConversationStore(engine, ManualClock(T0))
    store.save_message(message := mention(0))
    assert store.claim("C1", message.ts, at(5), holder="A")
    assert store.holds("C1", message.ts, "A") and not store.holds("C1", message.ts, "B")
    leases.take("B", "B", at(14), at(29))  # A stalled: its lease expired, B took the answer over
    assert store.next_attempt("C1", message.ts, 1, at(31), holder="B")

    assert not store.holds("C1", message.ts, "A")
    assert not store.start_answer("C1", message.ts, "7.0", holder="A")
    assert not store.settle("C1", message.ts, "7.0", holder="A")
    assert not store.begin_showing("C1", message.ts, holder="A")
    assert store.unfinished_answer("C1", message.ts) == Unfinished(None, showing=False)
    assert store.start_answer("C1", message.ts, "8.0", holder="B")
    assert store.settle("C1", message.ts, "8.0", holder="B")
    assert not store.holds("C1", message.ts, "B")  # settled
    assert store.claimed("C1", [message.ts]) == {message.ts}


# -- the replica -------------------------------------------------------------------------------------------------


async def test_a_periodic_job_runs_on_one_replica_and_passes_to_another_when_it_dies(leases: SqlLeaseStore) -> None:
    clock = ManualClock(T0)
    first, second = Replica(leases, clock, 15, "r1"), Replica(leases, clock, 15, "r2")
    await first.join()
    await second.join()
    runs: list[str] = []

    async def job(name: str) -> None:
        runs.append(name)

    on_first = first.only_here("memory", lambda: job("r1"))
    on_second = second.only_here("memory", lambda: job("r2"))
    for _ in range(3):
        await on_first()
        await on_second()
        clock.advance(10)
    assert runs == ["r1"] * 3
    clock.advance(6)  # r1 last renewed 21 s ago: dead
    await on_second()
    await on_first()  # back after a stall: the job stays where it went
    assert runs == ["r1"] * 3 + ["r2"]


async def test_a_replica_notices_another_one_gone_and_takes_up_its_claims(engine: Engine, leases: SqlLeaseStore) -> None:
    clock = ManualClock(T0)
    store = SqlConversationStore(engine, clock)
    store.save_message(message := mention(0))
    # Leases of 3 s (a beat a second): on PostgreSQL a renewal's transaction is ended once idle for as long as its
    # lease, and a busy machine can pause for longer than a fraction of a second between two statements.
    dying, survivor = Replica(leases, clock, 3, "dying"), Replica(leases, clock, 3, "survivor")
    await dying.join()
    await survivor.join()
    store.claim("C1", message.ts, at(0.1), holder=dying.name)
    clock.advance(0.2)
    assert store.due_answers(clock.now(), at(-60), holder=survivor.name) == []
    stop, gone = asyncio.Event(), asyncio.Event()
    keeping = asyncio.create_task(survivor.keep(stop, gone.set))
    await asyncio.sleep(1.5)  # a beat with the dying replica still alive
    assert not gone.is_set()
    clock.advance(4)  # the dying replica renews nothing more
    await asyncio.wait_for(gone.wait(), 10)
    stop.set()
    await keeping
    [pending] = store.due_answers(clock.now(), at(-60), holder=survivor.name)
    assert pending.message.ts == message.ts


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
async def test_a_replica_frozen_while_it_renews_its_leases_is_noticed_gone_all_the_same(
    database_url: str, leases: SqlLeaseStore
) -> None:
    """Several replicas share a database only on PostgreSQL, where the rows a renewal changed stay locked until
    it ends: a replica frozen in it (stopped, starved of CPU) kept every other one's renewal waiting."""
    clock = ManualClock(T0)
    frozen_engine = open_database(database_url)
    frozen_store = SqlLeaseStore(frozen_engine)
    # Leases of 5 s: a renewal's transaction is ended by the server once idle for as long as its lease, and a busy
    # machine took over 1 s between two statements of a join. The stall below is the one renewal of 1 s.
    frozen, survivor = Replica(frozen_store, clock, 5, "frozen"), Replica(leases, clock, 5, "survivor")
    await frozen.join()
    await survivor.join()
    frozen_now, thaw = threading.Event(), threading.Event()

    def freeze_after_update(connection, statement, *_: object) -> None:  # type: ignore[no-untyped-def]
        if str(statement).startswith("UPDATE leases"):
            frozen_now.set()
            thaw.wait(30)  # the lease's row changed and locked, the transaction left open

    event.listen(frozen_engine, "after_execute", freeze_after_update)
    renewing = asyncio.get_running_loop().run_in_executor(None, frozen_store.renew, "frozen", clock.now(), at(1))
    stop, gone = asyncio.Event(), asyncio.Event()
    keeping = None
    try:
        assert await asyncio.to_thread(frozen_now.wait, 30)
        clock.advance(6)  # the frozen replica's lease runs out
        keeping = asyncio.create_task(survivor.keep(stop, gone.set))
        await asyncio.wait_for(gone.wait(), 20)
        assert leases.alive(clock.now()) == {"survivor"}
    finally:
        stop.set()
        thaw.set()
        with suppress(DBAPIError):  # back from the stall: its transaction was ended meanwhile
            await renewing
        if keeping is not None:
            await keeping
        frozen_engine.dispose()


async def test_leaving_hands_over_at_once(engine: Engine, leases: SqlLeaseStore) -> None:
    clock = ManualClock(T0)
    leaving, staying = Replica(leases, clock, 15, "leaving"), Replica(leases, clock, 15, "staying")
    await leaving.join()
    assert await leaving.holds("autonomous")
    assert not await staying.holds("autonomous")
    await leaving.leave()
    assert await staying.holds("autonomous")


async def test_two_replicas_judging_the_same_conversation_at_once_post_one_reply(tmp_path: Path) -> None:
    """The autonomous check runs on one replica at a time, but a lease handed over mid-check may overlap two:
    the reply is claimed on the message it answers, so only one of them posts."""
    world = World(tmp_path)
    other_replica = world.build(SETTINGS)  # a second responder on the same store
    world.say("does anyone know a good ramen place?")
    world.clock.advance(WAIT)
    assert await world.responder.check() == 1
    assert await other_replica.check() == 1
    await world.run()
    assert len(world.judge.calls) == 2
    assert world.chat.posts == [("C1", "reply 1", None)]
