"""The event loop the bot's commands (and the async tests) run on: uvloop's on Linux and macOS."""

from __future__ import annotations

import asyncio
import sys

import pytest

import myao2.bot
from myao2 import start_up
from myao2.config import Config
from myao2.infrastructure import event_loop


async def running_loop() -> asyncio.AbstractEventLoop:
    return asyncio.get_running_loop()


@pytest.mark.skipif(sys.platform not in event_loop.UVLOOP_PLATFORMS, reason="uvloop is installed on Linux and macOS")
def test_commands_run_on_uvloop_on_linux_and_macos() -> None:
    import uvloop

    assert isinstance(event_loop.run(running_loop()), uvloop.Loop)


def test_commands_run_on_asyncios_loop_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "win32")

    assert type(event_loop.run(running_loop())).__module__.startswith("asyncio")


def test_the_bot_runs_on_the_commands_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    loops: list[type] = []

    class RecordingBot:
        def __init__(self, config: Config) -> None:
            pass

        async def run(self) -> int:
            loops.append(type(asyncio.get_running_loop()))
            return 0

    monkeypatch.setattr(myao2.bot, "Bot", RecordingBot)
    monkeypatch.setattr(start_up, "ending", lambda: None)  # would freeze the test process's objects
    monkeypatch.setattr(event_loop, "new_event_loop", lambda: Marked())
    config = Config.model_validate({
        "slack": {"bot_token": "xoxb-1", "app_token": "xapp-1"},
        "agents": {"response": {"model_id": "m"}},
    })

    assert myao2.bot.run_bot(config) == 0
    assert loops == [Marked]


class Marked(asyncio.SelectorEventLoop):
    """An event loop told apart from every other."""


async def test_async_tests_run_on_the_bots_event_loop() -> None:
    bots = event_loop.new_event_loop()
    bots.close()

    assert type(asyncio.get_running_loop()) is type(bots)
