"""End-to-end harness: the real bot process (`python -m myao2`) against the fake Slack and LLM."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import create_engine, text

from tests.fakes import PROXY_VARIABLES, WAIT_SECONDS
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.slack_server import FakeSlack
from tests.sqlite import copy_migrated

ROOT = Path(__file__).resolve().parents[2]

ALICE, BOB = "UALICE", "UBOB"
GENERAL = "CGENERAL"

START_SECONDS = 60.0
"""How long the bot process may take to start (imports, migrations, Slack's answers) before a test gives up:
about 3 s of CPU, which takes over 20 s of wall time on a machine busy with other work."""

CLI_SECONDS = 180.0
"""How long a `myao2` command may run before a test takes it for hung: `myao2 preview` spends about 5 s of CPU
(imports, mostly), 20-30 s of wall time at a load of 13 on 2 cores, and past 60 s when busier."""

STOP_SECONDS = 60.0
"""How long the bot may take to exit after SIGTERM before a test takes it for hung: the grace period it gives work in
progress (5 s), then its shutdown and the interpreter's exit, about 0.07 s of CPU that took 0.1 s idle but 1-4 s of
wall time past the grace period on a core shared with busier processes (the bot at nice 5-10 against two CPU burners,
load 10-17); at a load of 20-24, 15 s was too little."""

ON_BOTH_DATABASES = pytest.mark.parametrize("bot", ["sqlite", "postgresql"], indirect=True)
"""Runs a test with the bot storing in its SQLite file, then in a PostgreSQL database."""


HEALTH_PORT = re.compile(r"health endpoints on port (\d+)\n")
"""The bot's log line naming the port its health endpoints took (`health_check.port` 0: any free one)."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def held_port(host: str = "127.0.0.1") -> Iterator[int]:
    """A port held, bound and listening on `host`, for as long as the block runs: a server told to take it
    finds it in use, and nothing else can take it meanwhile."""
    with socket.socket() as taken:
        taken.bind((host, 0))
        taken.listen()
        yield taken.getsockname()[1]


def workspace(**options: Any) -> FakeSlack:
    """The fake Slack of the tests (`options` go to `FakeSlack`): Alice and Bob in #general, not started."""
    fake = FakeSlack(bot_name="myao", **options)
    fake.add_user(ALICE, "alice", display_name="Alice")
    fake.add_user(BOB, "bob", display_name="Bob")
    fake.add_channel(GENERAL, "general", members=[ALICE, BOB])
    return fake


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    with workspace() as fake:
        yield fake


@pytest.fixture
def llm() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(api_key="sk-e2e-secret-key") as fake:
        yield fake


class BotProcess:
    """The bot running as a subprocess with its own config, database and log.

    Its SQLite file, when there is none yet at the first start, is a copy of a migrated one
    (`tests.sqlite`); a file already there (an empty one in its place) the bot migrates itself.
    """

    def __init__(self, tmp_path: Path, slack: FakeSlack, llm: FakeOpenAI) -> None:
        self.tmp_path = tmp_path
        self.slack = slack
        self.llm = llm
        self.config_path = tmp_path / "config.yaml"
        self.database = tmp_path / "memory.db"
        self.log_path = tmp_path / "bot.log"
        self.settings: dict[str, Any] = {}
        self.env_overrides: dict[str, str | None] = {}
        self.process: subprocess.Popen[bytes] | None = None
        self.clock_shift_file: Path | None = None
        """Set (see `shift_clock`), the bot runs with its clock moved forward by the seconds in this file."""
        self.module = "myao2"
        """The module the bot runs as: myao2, or one of the tests' that changes it first, then runs myao2's main
        (tests/e2e/shifted_clock.py, held_libraries.py, long_hold.py)."""
        self.runner: list[str] = []
        """A command the bot's Python runs under, e.g. valgrind (bench/mention_cost.py)."""

    @property
    def database_url(self) -> str:
        """Where the bot stores: its SQLite file, or `memory.database_url` when set."""
        return self.settings.get("memory.database_url", f"sqlite:///{self.database}")

    def rows(self, query: str, **params: object) -> list[tuple[Any, ...]]:
        """The rows `query` reads from the bot's database (either kind; `:name` parameters)."""
        engine = create_engine(self.database_url)
        try:
            with engine.connect() as connection:
                return [tuple(row) for row in connection.execute(text(query), params)]
        finally:
            engine.dispose()

    def shift_clock(self, seconds: float) -> None:
        """Move the bot's clock `seconds` ahead of the real time (also while it runs)."""
        self.clock_shift_file = self.tmp_path / "clock_shift"
        self.clock_shift_file.write_text(str(seconds), encoding="utf-8")
        self.module = "tests.e2e.shifted_clock"

    def write_config(self) -> None:
        agent = {
            "model_id": "fake",
            "client_args": {"api_key": "${OPENAI_API_KEY}", "base_url": "${OPENAI_BASE_URL}"},
            "max_retries": 2,
            "timeout_seconds": 10,
        }
        config: dict[str, Any] = {
            "slack": {
                "bot_token": "${SLACK_BOT_TOKEN}",
                "app_token": "${SLACK_APP_TOKEN}",
                "api_base_url": "${SLACK_API_URL}",
            },
            "agents": {"response": agent, "judgment": agent, "memory": agent},
            "persona": {"name": "myao", "language": "en", "timezone": "UTC"},
            "memory": {"database_path": str(self.database)},
            "logging": {"level": "INFO"},
            "health_check": {"port": 0},  # a port picked free here could be taken before the bot binds it
        }
        for dotted, value in self.settings.items():
            node = config
            *parents, leaf = dotted.split(".")
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = value
        self.config_path.write_text(yaml.safe_dump(config), encoding="utf-8")

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in PROXY_VARIABLES}
        env.update(
            SLACK_BOT_TOKEN=self.slack.bot_token,
            SLACK_APP_TOKEN=self.slack.app_token,
            SLACK_API_URL=self.slack.base_url,
            OPENAI_API_KEY="sk-e2e-secret-key",
            OPENAI_BASE_URL=self.llm.base_url,
            PYTHONPATH=str(ROOT / "src"),
        )
        if self.module != "myao2":
            env.update(PYTHONPATH=f"{ROOT / 'src'}{os.pathsep}{ROOT}")
        if self.clock_shift_file is not None:
            env.update(MYAO2_TEST_CLOCK_SHIFT_FILE=str(self.clock_shift_file))
        for key, value in self.env_overrides.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        return env

    def start(self, wait_connected: bool = True) -> BotProcess:
        self.write_config()
        if "memory.database_url" not in self.settings and not self.database.exists():
            copy_migrated(self.database)
        connections = self.slack.connection_count
        self._ports_named = len(HEALTH_PORT.findall(self.log()))
        self._log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [*self.runner, sys.executable, "-m", self.module, "run", "--config", str(self.config_path)],
            cwd=self.tmp_path,
            env=self.environment(),
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        if wait_connected:
            self.slack.wait_for(
                lambda: self.slack.connection_count > connections or self.process.poll() is not None,
                timeout=START_SECONDS,
                what="the bot to connect",
            )
            assert self.process.poll() is None, f"the bot exited early:\n{self.log()}"
        return self

    @property
    def health_port(self) -> int:
        """The port of the health endpoints of the bot last started, once its log names it."""
        process = self.process
        assert process is not None, "start() first"

        def named() -> list[str]:
            ports = HEALTH_PORT.findall(self.log())[self._ports_named :]
            assert ports or process.poll() is None, f"the bot exited before its health endpoints started:\n{self.log()}"
            return ports

        return int(wait_until(named, timeout=START_SECONDS, what="the bot's health endpoints")[0])

    def wait_exit(self, timeout: float = START_SECONDS) -> int:
        """The exit status of a bot that ends by itself (`timeout` counts from now, so usually spans start-up)."""
        assert self.process is not None
        return self.process.wait(timeout=timeout)

    def stop(self) -> int:
        """SIGTERM, then the exit status (the bot must exit by itself within `STOP_SECONDS`)."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=STOP_SECONDS)
        finally:
            if self.process.poll() is None:
                self.process.kill()
            self._log.close()

    def kill(self) -> None:
        """SIGKILL: the bot gets no chance to finish anything."""
        assert self.process is not None
        self.process.kill()
        self.process.wait(timeout=15)
        self._log.close()

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace") if self.log_path.exists() else ""


@pytest.fixture
def bot(request: pytest.FixtureRequest, tmp_path: Path, slack: FakeSlack, llm: FakeOpenAI) -> Iterator[BotProcess]:
    """The bot, storing in an SQLite file; in a fresh PostgreSQL database under `ON_BOTH_DATABASES`' "postgresql"."""
    process = BotProcess(tmp_path, slack, llm)
    with ExitStack() as stack:
        if getattr(request, "param", "sqlite") == "postgresql":
            process.settings["memory.database_url"] = stack.enter_context(request.getfixturevalue("postgres").database())
        yield process
        if process.process is not None and process.process.poll() is None:
            process.stop()


LOG_TAIL_CHARS = 20_000
"""How much of the bot's log a failed test's report shows (its end)."""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed end-to-end test's report shows the end of the bot's log and the Web API calls Slack got: a failure
    seen once in CI can be read there."""
    report = yield
    if report.failed and call.when == "call":
        process = getattr(item, "funcargs", {}).get("bot")
        if isinstance(process, BotProcess):
            report.sections.append(("bot log (end)", process.log()[-LOG_TAIL_CHARS:]))
            calls = [f"{name} {params}" for name, params in process.slack.web_calls]
            report.sections.append(("Web API calls", "\n".join(calls)[-LOG_TAIL_CHARS:]))
    return report


def wait_until(predicate, timeout: float = WAIT_SECONDS, what: str = "condition"):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise TimeoutError(f"timed out waiting for {what}")
