"""The bot's worker threads (the event loop's default executor), named for `top -H`, `ps -L` and the benchmarks."""

from __future__ import annotations

import asyncio
import sys
import threading
from pathlib import Path

import pytest

from myao2.infrastructure.threads import WORKER_THREADS, WorkerThreads, worker_threads


def _names() -> tuple[str, str]:
    """The calling thread's name in Python and in /proc (what `top -H` shows)."""
    comm = Path(f"/proc/self/task/{threading.get_native_id()}/comm").read_text(encoding="ascii").strip()
    return threading.current_thread().name, comm


@pytest.mark.skipif(sys.platform != "linux", reason="thread names of their own are Linux's")
async def test_work_sent_to_a_thread_runs_in_a_worker_thread_named_so() -> None:
    loop = asyncio.get_running_loop()
    loop.set_default_executor(worker_threads())
    name, comm = await asyncio.to_thread(_names)
    assert name.startswith(WORKER_THREADS)
    assert comm == WORKER_THREADS


async def test_work_sent_from_the_event_loop_hands_its_result_straight_to_an_asyncio_future() -> None:
    loop = asyncio.get_running_loop()
    threads = worker_threads()
    loop.set_default_executor(threads)
    trip = threads.submit(sum, [1, 2])
    assert isinstance(trip, asyncio.Future) and trip.get_loop() is loop  # no concurrent.futures.Future to chain
    assert await trip == 3
    assert await asyncio.to_thread(sum, [3, 4]) == 7


async def test_a_trip_that_fails_raises_its_exception() -> None:
    asyncio.get_running_loop().set_default_executor(worker_threads())
    with pytest.raises(ZeroDivisionError):
        await asyncio.to_thread(lambda: 1 / 0)


async def test_a_trip_cancelled_before_a_worker_thread_took_it_never_runs() -> None:
    asyncio.get_running_loop().set_default_executor(WorkerThreads(max_workers=1))
    busy, release = threading.Event(), threading.Event()
    ran: list[str] = []

    def occupy() -> None:
        busy.set()
        release.wait(10)

    occupying = asyncio.ensure_future(asyncio.to_thread(occupy))
    while not busy.is_set():  # the one worker thread busy
        await asyncio.sleep(0.01)
    waiting = asyncio.ensure_future(asyncio.to_thread(ran.append, "ran"))
    await asyncio.sleep(0)
    waiting.cancel()
    release.set()
    await occupying
    await asyncio.to_thread(ran.append, "after")  # the worker thread has taken up what was queued before it
    assert waiting.cancelled() and ran == ["after"]


async def test_no_trip_is_taken_once_the_worker_threads_are_shut_down() -> None:
    threads = worker_threads()
    threads.shutdown()
    with pytest.raises(RuntimeError):
        await asyncio.get_running_loop().run_in_executor(threads, sum, [1])
