"""The event loop the bot's commands run on: uvloop's on Linux and macOS, asyncio's elsewhere.

uvloop (libuv) runs the same asyncio code with less CPU per callback, socket read and timer than asyncio's own
loop (the event loop thread's instructions per mention: ``bench/mention_cost.py``). It has no Windows build, so
there the standard loop runs (the dependency's marker in pyproject.toml names the same platforms).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

UVLOOP_PLATFORMS = ("linux", "darwin")
"""Where uvloop is installed (pyproject.toml's marker) and used."""


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A new event loop: uvloop's on its platforms, asyncio's elsewhere."""
    if sys.platform in UVLOOP_PLATFORMS:
        import uvloop

        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run `main` to completion on a new event loop (`new_event_loop`), as `asyncio.run` does on asyncio's."""
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(main)
