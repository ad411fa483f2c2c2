"""The search index worker: woken by this process's commits, asleep otherwise."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import Engine, text

from myao2.domain.conversation import Channel, ChannelKind, Message
from myao2.infrastructure.db.conversation_store import SqlConversationStore
from myao2.infrastructure.clock import SystemClock
from myao2.infrastructure.db.engine import open_database
from myao2.infrastructure.db.memo_store import SqlMemoStore
from myao2.infrastructure.search.index import SearchIndex
from myao2.infrastructure.search.setup import THREAD_NAME, IndexWorker
from tests.e2e.conftest import wait_until
from tests.fakes.embedder import HashEmbedder
from tests.unit.test_search_index import START, World, counted_clusterings


class CountingIndex:
    """Stands in for the index: counts the syncs the worker asks for, and notes when (by `clock`) each came."""

    def __init__(self, clock: Callable[[], float] = lambda: 0.0) -> None:
        self.syncs = 0
        self.synced_at: list[float] = []
        self.only_queued: list[bool] = []
        self._clock = clock
        self.synced = threading.Condition()
        self.wake: Callable[[], None] | None = None

    def sync(self, progress: object = None, *, only_queued: bool = False) -> int:
        with self.synced:
            self.syncs += 1
            self.synced_at.append(self._clock())
            self.only_queued.append(only_queued)
            self.synced.notify_all()
        return 0

    def warm(self, kinds: object = None) -> None:
        pass

    def wake_with(self, wake: Callable[[], None]) -> None:
        self.wake = wake

    def close(self) -> None:
        pass

    def wait_syncs(self, count: int) -> None:
        with self.synced:
            assert self.synced.wait_for(lambda: self.syncs >= count, timeout=30), f"{self.syncs} syncs, not {count}"


def test_a_message_stored_while_the_worker_runs_is_indexed(database_url: str) -> None:
    engine = open_database(database_url)
    conversations = SqlConversationStore(engine)
    index = SearchIndex(engine, HashEmbedder(), SqlMemoStore(engine, SystemClock()), conversations)
    worker = IndexWorker(index, engine, gather_seconds=0)
    worker.start()
    try:
        conversations.save_channel(Channel("C1", "general", ChannelKind.PUBLIC))
        at = datetime(2026, 1, 1, tzinfo=timezone.utc).timestamp()
        conversations.save_message(Message("C1", f"{at:.6f}", "U1", "ramen on friday", "Alice"))
        wait_until(lambda: index.pending() == 0, what="the worker to index the message")
        with engine.connect() as connection:
            assert connection.execute(text("SELECT count(*) FROM search_docs")).scalar_one() == 1
    finally:
        worker.stop()
        engine.dispose()


def test_each_commit_wakes_the_idle_worker_to_sync(database_url: str) -> None:
    engine = open_database(database_url)
    index = CountingIndex()
    worker = IndexWorker(index, engine, gather_seconds=0)  # type: ignore[arg-type]
    worker.start()
    try:
        index.wait_syncs(1)  # the catch-up at start
        for expected in (2, 3):
            with engine.begin() as connection:
                connection.execute(text("INSERT INTO search_queue (kind, ref_id) VALUES ('message', 1)"))
            index.wait_syncs(expected)
    finally:
        worker.stop()
        engine.dispose()


def test_two_workers_on_one_engine_are_each_woken_until_each_stops(database_url: str) -> None:
    # Stopping one deleted the engine's commit hook outright: the other was never woken again (and stopping it
    # too failed, the hook gone).
    engine = open_database(database_url)
    first, second = CountingIndex(), CountingIndex()
    workers = [IndexWorker(first, engine, gather_seconds=0), IndexWorker(second, engine, gather_seconds=0)]  # type: ignore[arg-type]
    for worker in workers:
        worker.start()
    try:
        first.wait_syncs(1)
        second.wait_syncs(1)
        workers[0].stop()
        with engine.begin() as connection:
            connection.execute(text("INSERT INTO search_queue (kind, ref_id) VALUES ('message', 1)"))
        second.wait_syncs(2)
        workers[1].stop()
        assert "do_commit" not in vars(engine.dialect)  # the dialect's own again
    finally:
        for worker in workers:
            worker.stop()
        engine.dispose()


def test_the_worker_leaves_the_engines_connections_without_event_dispatch(database_url: str) -> None:
    """A connection-level listener on the engine (its "commit" event, say) makes every connection of it dispatch
    each of its events (connect, begin, every statement before and after, commit) through listeners it builds for
    itself: ~50 us of CPU per trip of four statements, on every database trip of the bot. SQLAlchemy keeps that
    dispatch off while the engine has no such listener (`Engine._has_events`)."""
    engine = open_database(database_url)
    index = CountingIndex()
    worker = IndexWorker(index, engine, gather_seconds=0)  # type: ignore[arg-type]
    worker.start()
    try:
        index.wait_syncs(1)
        assert not engine._has_events
        with engine.connect() as connection:
            assert not connection._has_events
    finally:
        worker.stop()
        engine.dispose()


def test_the_workers_own_commits_do_not_wake_it(database_url: str) -> None:
    engine = open_database(database_url)
    index = CountingIndex()
    worker = IndexWorker(index, engine, gather_seconds=0)  # type: ignore[arg-type]
    committed = threading.Event()
    index.sync = lambda progress=None, only_queued=False, sync=index.sync: _commit_then(engine, committed, sync)  # type: ignore[method-assign]
    worker.start()
    try:
        index.wait_syncs(1)
        assert committed.wait(30)
        with engine.begin() as connection:  # a commit of another thread: one more sync, and no more
            connection.execute(text("INSERT INTO search_queue (kind, ref_id) VALUES ('message', 1)"))
        index.wait_syncs(2)  # its own commit came before it ended, and would have woken it again
        assert not worker._changed.is_set()
    finally:
        worker.stop()
        engine.dispose()


def _commit_then(engine, committed: threading.Event, sync: Callable[[], int]) -> int:  # type: ignore[no-untyped-def]
    """A sync that commits a write of its own, as the index's does."""
    with engine.begin() as connection:
        connection.execute(text("DELETE FROM search_queue WHERE 0 = 1"))
    committed.set()
    return sync()


@pytest.mark.skipif(sys.platform != "linux", reason="thread names and priorities of their own are Linux's")
def test_the_worker_thread_is_named_and_runs_at_the_process_priority(tmp_path: Path) -> None:
    engine = open_database(f"sqlite:///{tmp_path / 'w.db'}")
    index = CountingIndex()
    worker = IndexWorker(index, engine)  # type: ignore[arg-type]
    worker.start()
    try:
        index.wait_syncs(1)
        named = [task for task in Path("/proc/self/task").iterdir() if (task / "comm").read_text().strip() == THREAD_NAME]
        assert len(named) == 1
        # Not lowered: starved on a busy machine while holding the GIL or the index, it held up answers.
        assert os.getpriority(os.PRIO_PROCESS, int(named[0].name)) == os.getpriority(os.PRIO_PROCESS, os.getpid())
    finally:
        worker.stop()
        engine.dispose()


def _worker_running() -> bool:
    return any(thread.name == "search-index" for thread in threading.enumerate())


def test_stopping_an_idle_worker_ends_its_thread(tmp_path: Path) -> None:
    engine = open_database(f"sqlite:///{tmp_path / 'w.db'}")
    index = CountingIndex()
    worker = IndexWorker(index, engine)  # type: ignore[arg-type]
    worker.start()
    index.wait_syncs(1)
    worker.stop()
    wait_until(lambda: not _worker_running(), what="the worker thread to end")
    engine.dispose()


def test_a_worker_stopped_before_it_started_never_starts(tmp_path: Path) -> None:
    """The bot starts its worker once start-up settles, which may be after it was told to stop."""
    engine = open_database(f"sqlite:///{tmp_path / 'w.db'}")
    index = CountingIndex()
    worker = IndexWorker(index, engine)  # type: ignore[arg-type]
    worker.stop()
    worker.start()
    with engine.begin() as connection:
        connection.execute(text("INSERT INTO search_queue (kind, ref_id) VALUES ('message', 1)"))
    assert not _worker_running() and index.syncs == 0
    engine.dispose()


def test_a_search_leaves_clustering_to_the_background_and_wakes_it(database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Clustering a million vectors takes seconds: a search reads the rows added since the last clustering exactly,
    and wakes the background to cluster them again (it may not be woken otherwise: another process may have indexed them)."""
    builds = counted_clusterings(monkeypatch)
    world = World(database_url)
    woken = threading.Event()
    world.index.wake_with(woken.set)
    try:
        for number in range(10):
            world.memo(f"note{number}", f"note number {number}")
        world.index.sync()
        world.index.warm()
        assert len(builds) == 1 and not woken.is_set()
        for number in range(10, 20):  # as many again, indexed by the search itself
            world.memo(f"note{number}", f"note number {number}")
        assert world.memo_names("note number 15", limit=1) == ["note15"]
        assert len(builds) == 1 and woken.is_set()
        world.index.sync()  # what the woken worker does
        assert len(builds) == 2
        assert world.memo_names("note number 15", limit=1) == ["note15"]
    finally:
        world.close()


def test_the_worker_syncs_when_the_index_wakes_it(tmp_path: Path) -> None:
    engine = open_database(f"sqlite:///{tmp_path / 'w.db'}")
    index = CountingIndex()
    _woken_once(IndexWorker(index, engine, gather_seconds=0), index, engine)  # type: ignore[arg-type]


def _woken_once(worker: IndexWorker, index: CountingIndex, engine: Engine) -> None:
    """Start `worker`, wake it once through its index once it has caught up, and stop it once it has synced."""
    worker.start()
    try:
        index.wait_syncs(1)  # the catch-up at start
        assert index.wake is not None
        index.wake()
        index.wait_syncs(2)
    finally:
        worker.stop()
        engine.dispose()
    wait_until(lambda: not _worker_running(), what="the worker thread to end")


class FakeTime:
    """The worker's clock and its timed waits, run by the test: each wait the worker asks for is noted and ends at
    once, `passing` (the test's) having moved the clock on, and maybe made changes meanwhile."""

    def __init__(self) -> None:
        self.now = 0.0
        self.waits: list[float] = []
        self.passing: Callable[[float], None] = self.sleep

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def wait(self, event: threading.Event, seconds: float) -> bool:
        self.waits.append(seconds)
        self.passing(seconds)
        return event.is_set()


def _gathering_worker(engine: Engine, time: FakeTime) -> tuple[IndexWorker, CountingIndex]:
    index = CountingIndex(time.clock)
    worker = IndexWorker(index, engine, gather_seconds=0.5, cap_seconds=5.0, clock=time.clock, wait=time.wait)  # type: ignore[arg-type]
    return worker, index


def test_a_burst_of_changes_is_indexed_once_the_pause_after_the_last_has_passed(tmp_path: Path) -> None:
    """Embedding takes the cores the answers need: while changes keep coming (a conversation going on), it waits."""
    time = FakeTime()
    engine = open_database(f"sqlite:///{tmp_path / 'w.db'}")
    worker, index = _gathering_worker(engine, time)

    def burst(seconds: float) -> None:  # three more changes, each a quarter of a second after the one before
        if len(time.waits) <= 3:
            time.sleep(0.25)
            assert index.wake is not None
            index.wake()
        else:
            time.sleep(seconds)

    time.passing = burst
    _woken_once(worker, index, engine)  # the first change at 0
    assert index.synced_at == [0.0, 0.75 + 0.5]  # once, half a second after the last change
    assert time.waits == [0.5, 0.5, 0.5, 0.5]


def test_changes_that_never_pause_are_indexed_at_the_cap_after_the_first(tmp_path: Path) -> None:
    """A busy channel is still indexed every few seconds."""
    time = FakeTime()
    engine = open_database(f"sqlite:///{tmp_path / 'w.db'}")
    worker, index = _gathering_worker(engine, time)

    def steady(seconds: float) -> None:  # a change every quarter of a second, until the worker syncs
        time.sleep(0.25)
        assert index.wake is not None
        index.wake()

    time.passing = steady
    _woken_once(worker, index, engine)
    assert index.synced_at == [0.0, 5.0]
    # the changes that come while it runs wait for the next gathering: it does not run on with them
    assert index.only_queued == [False, True]  # the catch-up at start takes in everything, a backlog of hours too


def test_a_sync_of_only_what_is_queued_leaves_what_comes_meanwhile_to_the_next(database_url: str) -> None:
    """In a channel that never goes quiet the worker's sync, given all that came while it ran, ran on: each text
    embedded as it came, beside the answers, the gathering undone."""
    arrivals = ["ramen arrives while embedding", "sushi arrives too"]

    class Busy(HashEmbedder):
        def passages(self, texts: list[str]):  # type: ignore[no-untyped-def]
            if arrivals:
                world.message("C1", arrivals.pop(0), START + timedelta(minutes=10 - len(arrivals)))
            return super().passages(texts)

    world = World(database_url, Busy())
    try:
        world.message("C1", "lunch at noon", START)
        world.index.sync(only_queued=True)
        assert indexed(world) == ["lunch"] and world.index.pending() == 1  # the ramen, come while it ran
        world.index.sync(only_queued=True)
        assert indexed(world) == ["lunch", "ramen"] and world.index.pending() == 1
        world.index.sync()  # everything, as the catch-up at start and the command line do
        assert indexed(world) == ["lunch", "ramen", "sushi"] and world.index.pending() == 0
    finally:
        world.close()


def indexed(world: World) -> list[str]:
    """Which of the texts (by their first word) are in the index with a vector."""
    with world.engine.connect() as connection:
        texts = connection.execute(text("SELECT text FROM search_docs WHERE vector IS NOT NULL")).scalars().all()
    return [word for word in ("lunch", "ramen", "sushi") if any(f"Alice: {word}" in t.splitlines()[-1] for t in texts)]


def test_stopping_a_gathering_worker_ends_it_at_once(tmp_path: Path) -> None:
    """A stopped worker does not sit out the pause nor the cap (an hour each here)."""
    engine = open_database(f"sqlite:///{tmp_path / 'w.db'}")
    index = CountingIndex()
    gathering = threading.Event()

    def wait(event: threading.Event, seconds: float) -> bool:
        gathering.set()
        return event.wait(seconds)

    worker = IndexWorker(index, engine, gather_seconds=3600, cap_seconds=3600, wait=wait)  # type: ignore[arg-type]
    worker.start()
    try:
        index.wait_syncs(1)
        assert index.wake is not None
        index.wake()
        assert gathering.wait(30)
    finally:
        worker.stop()
    wait_until(lambda: not _worker_running(), what="the worker thread to end")
    assert index.syncs == 1  # nothing indexed on the way out
    engine.dispose()
