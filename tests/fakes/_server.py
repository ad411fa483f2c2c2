"""The part both fakes share: an aiohttp app served on 127.0.0.1 from a thread of its own."""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Callable
from typing import Self

from aiohttp import web


class LoopbackServer:
    """Serves `_app()` on 127.0.0.1 in a background thread with its own event loop.

    Usable as a context manager; subclasses build the app and may close their own
    connections in `_before_cleanup`.
    """

    def __init__(self, port: int = 0) -> None:
        self._requested_port = port
        self._port: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None

    def _app(self) -> web.Application:
        raise NotImplementedError

    async def _before_cleanup(self) -> None:
        """Runs on the server's loop before the app shuts down."""

    def start(self) -> Self:
        """Start serving in a background thread; returns self."""
        if self._thread is not None:
            return self
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=type(self).__name__, daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._serve(), self._loop).result(timeout=10)
        return self

    def stop(self) -> None:
        """Stop the server and its thread."""
        if self._thread is None or self._loop is None:
            return
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        left = asyncio.all_tasks(self._loop)
        self._loop.close()
        self._thread = self._loop = None
        if left:  # else the garbage collector logs them, "destroyed but pending", in whichever test runs then
            raise RuntimeError(f"{type(self).__name__} stopped with tasks still pending: {left}")

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The TCP port the server listens on (after ``start()``)."""
        if self._port is None:
            raise RuntimeError(f"{type(self).__name__} is not started")
        return self._port

    async def _serve(self) -> None:
        self._runner = web.AppRunner(self._app(), access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self._requested_port).start()
        self._port = self._runner.addresses[0][1]

    async def _shutdown(self) -> None:
        await self._before_cleanup()
        if self._runner is not None:
            await self._runner.cleanup()
        await _end_tasks_left()


async def _end_tasks_left() -> None:
    """Cancel the tasks still on this loop and wait until they end.

    The runner's cleanup waits for the requests of the connections still open only: a handler whose client hung
    up (one whose answer is delayed past the client's timeout, say) runs on, unknown to it, as aiohttp does not
    cancel a handler when its client goes.
    """
    current = asyncio.current_task()
    left = [task for task in asyncio.all_tasks() if task is not current]
    for task in left:
        task.cancel()
    await asyncio.gather(*left, return_exceptions=True)


def serve_until_signalled(server: LoopbackServer, url: Callable[[], str]) -> None:
    """Subprocess mode: serve, print the URL, and stop on SIGTERM or SIGINT."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    with server:
        print(url(), flush=True)
        while not stop.wait(0.5):
            pass
