"""The bot's threads by name, as `top -H` and `ps -L` show them (bench/mention_latency.py tells their CPU apart)."""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from pathlib import Path
from typing import Any

WORKER_THREADS = "worker"
"""The threads of the event loop's default executor (`asyncio.to_thread`): the stores' trips, mostly."""


def name_thread(name: str) -> None:
    """Give the calling thread `name` in `top -H` and `ps -L` (Linux only); threads it starts inherit it."""
    if sys.platform != "linux":
        return
    with suppress(OSError):
        Path(f"/proc/self/task/{threading.get_native_id()}/comm").write_text(name, encoding="ascii")


class WorkerThreads(ThreadPoolExecutor):
    """A thread pool whose work sent from an event loop (`asyncio.to_thread`, `loop.run_in_executor`) hands its
    outcome straight to an asyncio future of that loop: asyncio chains none to the pool's own future, whose end
    it would otherwise hear of through callbacks of both (some 50 K instructions of a trip's 170 K).

    A trip whose future is cancelled before a thread takes it up is not run, as with the pool's own futures.
    """

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # from another thread: the pool's own future
            return super().submit(fn, *args, **kwargs)
        future = loop.create_future()
        super().submit(_run, loop, future, fn, args, kwargs)
        return future


def _run(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[Any],
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> None:
    """Run `fn` in a worker thread, unless `future` was cancelled meanwhile, and hand its outcome to `future` in
    the loop's thread (none when the loop is closed: nobody waits then)."""
    if future.cancelled():
        return
    try:
        outcome, failure = fn(*args, **kwargs), None
    except BaseException as exc:  # noqa: BLE001 - the caller's, as the pool's own future would hold it
        outcome, failure = None, exc
    try:
        loop.call_soon_threadsafe(_settle, future, outcome, failure)
    except RuntimeError:  # the loop is closed
        pass


def _settle(future: asyncio.Future[Any], outcome: Any, failure: BaseException | None) -> None:
    if future.done():  # cancelled while it ran
        return
    if failure is None:
        future.set_result(outcome)
    else:
        future.set_exception(failure)


def worker_threads() -> WorkerThreads:
    """An executor for the event loop's default, as many threads as asyncio's own, named `WORKER_THREADS`."""
    return WorkerThreads(thread_name_prefix=WORKER_THREADS, initializer=name_thread, initargs=(WORKER_THREADS,))
