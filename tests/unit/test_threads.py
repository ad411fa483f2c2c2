"""The bot's worker threads (the event loop's default executor), named for `top -H`, `ps -L` and the benchmarks."""

from __future__ import annotations

import asyncio
import sys
import threading
from pathlib import Path

import pytest

from myao2.infrastructure.threads import WORKER_THREADS, worker_threads


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
