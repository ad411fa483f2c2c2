"""The bot's threads by name, as `top -H` and `ps -L` show them (bench/mention_latency.py tells their CPU apart)."""

from __future__ import annotations

import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from pathlib import Path

WORKER_THREADS = "worker"
"""The threads of the event loop's default executor (`asyncio.to_thread`): the stores' trips, mostly."""


def name_thread(name: str) -> None:
    """Give the calling thread `name` in `top -H` and `ps -L` (Linux only); threads it starts inherit it."""
    if sys.platform != "linux":
        return
    with suppress(OSError):
        Path(f"/proc/self/task/{threading.get_native_id()}/comm").write_text(name, encoding="ascii")


def worker_threads() -> ThreadPoolExecutor:
    """An executor for the event loop's default, as many threads as asyncio's own, named `WORKER_THREADS`."""
    return ThreadPoolExecutor(thread_name_prefix=WORKER_THREADS, initializer=name_thread, initargs=(WORKER_THREADS,))
