"""Tests for the myao2 command line."""

import argparse
import asyncio
import logging
import os
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from myao2.cli import main
from myao2.config import Config, ConfigError
from myao2.infrastructure.db.engine import open_database
from myao2.infrastructure.slack.gateway import make_web_client
from tests.fakes.slack_server import FakeSlack


class Calls:
    """Records what the fake bot and memo modules were called with."""

    def __init__(self) -> None:
        self.run: list[Config] = []
        self.memo: list[tuple[Config, argparse.Namespace]] = []
        self.error: BaseException | None = None

    def run_bot(self, config: Config) -> int:
        self.run.append(config)
        if self.error:
            raise self.error
        return 0

    def run_memo_command(self, config: Config, args: argparse.Namespace) -> int:
        self.memo.append((config, args))
        return 3


@pytest.fixture(autouse=True)
def restore_root_logger() -> Iterator[None]:
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    yield
    root.setLevel(level)
    root.handlers[:] = handlers


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Calls:
    calls = Calls()
    bot = types.ModuleType("myao2.bot")
    bot.run_bot = calls.run_bot  # type: ignore[attr-defined]
    memo_cli = types.ModuleType("myao2.memo_cli")
    memo_cli.run_memo_command = calls.run_memo_command  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "myao2.bot", bot)
    monkeypatch.setitem(sys.modules, "myao2.memo_cli", memo_cli)
    return calls


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "custom.yaml"
    path.write_text("persona: {name: custom}\nlogging: {level: DEBUG}\n", encoding="utf-8")
    return path


def test_run_is_the_default(calls: Calls, config_file: Path) -> None:
    assert main(["--config", str(config_file)]) == 0

    assert [config.persona.name for config in calls.run] == ["custom"]
    assert logging.getLogger().level == logging.DEBUG


@pytest.mark.parametrize(("level", "formatted"), [("INFO", False), ("DEBUG", True)])
def test_slack_sdk_formats_its_debug_lines_of_a_web_api_call_only_when_logging_is_at_debug(
    calls: Calls, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, level: str, formatted: bool
) -> None:
    """slack_sdk builds its debug lines of a call (the request, the whole response) unless the level set on its
    client's own logger is above DEBUG, whatever the level it inherits."""
    web_logger = logging.getLogger("slack_sdk.web.async_base_client")
    monkeypatch.setattr(web_logger, "level", web_logger.level)  # main sets it: restored after the test
    config = tmp_path / "config.yaml"
    config.write_text(f"logging: {{level: {level}}}\n", encoding="utf-8")
    main(["--config", str(config)])
    lines: list[object] = []
    monkeypatch.setattr(web_logger, "debug", lambda message, *args, **kwargs: lines.append(message))

    with FakeSlack() as fake:
        asyncio.run(make_web_client(fake.bot_token, fake.base_url).auth_test())

    assert bool(lines) is formatted


@pytest.mark.parametrize(
    "argv",
    [
        ["--config", "{path}", "run"],
        ["run", "--config", "{path}"],
    ],
)
def test_config_before_or_after_run(calls: Calls, config_file: Path, argv: list[str]) -> None:
    assert main([arg.format(path=config_file) for arg in argv]) == 0

    assert [config.persona.name for config in calls.run] == ["custom"]


@pytest.mark.parametrize(
    "argv",
    [
        ["--config", "{path}", "memo", "show", "x"],
        ["memo", "--config", "{path}", "show", "x"],
        ["memo", "show", "x", "--config", "{path}"],
    ],
)
def test_config_before_or_after_memo(calls: Calls, config_file: Path, argv: list[str]) -> None:
    assert main([arg.format(path=config_file) for arg in argv]) == 3

    [(config, args)] = calls.memo
    assert config.persona.name == "custom"
    assert (args.memo_command, args.name, args.json) == ("show", "x", False)


def test_config_after_the_subcommand_wins(calls: Calls, config_file: Path, tmp_path: Path) -> None:
    main(["--config", str(tmp_path / "missing.yaml"), "run", "--config", str(config_file)])

    assert [config.persona.name for config in calls.run] == ["custom"]


def test_memo_list_options(calls: Calls, config_file: Path) -> None:
    options = ["--tag", "food", "--min-priority", "2", "--removed", "--json"]
    main(["memo", "list", *options, "--config", str(config_file)])

    [(_, args)] = calls.memo
    attributes = (args.memo_command, args.tag, args.min_priority, args.removed, args.json, args.name)
    assert attributes == ("list", "food", 2, True, True, None)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["memo", "list"], ("list", None, None, False, False, None)),
        (["memo", "history", "n", "--json"], ("history", None, None, False, True, "n")),
        (["memo", "restore", "n"], ("restore", None, None, False, False, "n")),
    ],
)
def test_memo_namespace_has_every_attribute(
    calls: Calls, config_file: Path, argv: list[str], expected: tuple[object, ...]
) -> None:
    main([*argv, "--config", str(config_file)])

    [(_, args)] = calls.memo
    assert (args.memo_command, args.tag, args.min_priority, args.removed, args.json, args.name) == expected


def test_config_comes_from_myao2_config(
    calls: Calls, config_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MYAO2_CONFIG", str(config_file))

    assert main([]) == 0
    assert [config.persona.name for config in calls.run] == ["custom"]


def test_config_error_from_the_command(
    calls: Calls, config_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    calls.error = ConfigError("slack.bot_token: environment variable SLACK_BOT_TOKEN is not set")

    assert main(["--config", str(config_file)]) == 2
    assert capsys.readouterr().err == (
        "myao2: configuration error:\n  slack.bot_token: environment variable SLACK_BOT_TOKEN is not set\n"
    )


def test_keyboard_interrupt_exits_quietly(
    calls: Calls, config_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    calls.error = KeyboardInterrupt()

    assert main(["--config", str(config_file)]) == 130
    assert capsys.readouterr().err == ""


def run_module(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {key: value for key, value in os.environ.items() if key != "MYAO2_CONFIG"}
    return subprocess.run(
        [sys.executable, "-m", "myao2", *args],
        cwd=cwd,
        env={**environ, **env},
        capture_output=True,
        text=True,
        timeout=180,  # a hang guard: starting the command is seconds of CPU, far more wall time on a busy machine
    )


def test_invalid_config_exits_with_2(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("logging:\n  level: LOUD\n", encoding="utf-8")

    result = run_module(["run", "--config", str(path)], tmp_path)

    assert result.returncode == 2
    assert "myao2: configuration error:" in result.stderr
    assert "logging.level" in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_config_file_exits_with_2(tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"

    result = run_module(["memo", "list"], tmp_path, MYAO2_CONFIG=str(missing))

    assert result.returncode == 2
    assert str(missing) in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("memory", "key"),
    [
        ("{database_path: '%(dir)s'}", "memory.database_path"),  # a folder where the file should be
        ("{database_path: '%(dir)s/not-a-database.db'}", "memory.database_path"),
        ("{database_path: '%(dir)s/not-a-database.db/memory.db'}", "memory.database_path"),  # its folder is a file
        ("{database_url: 'postgresql+psycopg://myao2:s3cret-pw@127.0.0.1:1/myao2'}", "memory.database_url"),
        ("{database_path: '%(dir)s/newer.db'}", "memory.database_path"),  # migrated by a newer myao2
    ],
)
@pytest.mark.parametrize("command", [["memo", "list"], ["stats"], ["run"]])
def test_a_database_that_cannot_be_opened_exits_with_2_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], memory: str, key: str, command: list[str]
) -> None:
    (tmp_path / "not-a-database.db").write_text("hello, not SQLite\n", encoding="utf-8")
    newer = open_database(f"sqlite:///{tmp_path / 'newer.db'}")
    with newer.begin() as connection:
        connection.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    newer.dispose()
    path = tmp_path / "config.yaml"
    path.write_text(
        "slack: {bot_token: xoxb-1, app_token: xapp-1}\n"
        "agents: {response: {model_id: m, client_args: {api_key: k}}}\n"
        f"memory: {memory % {'dir': tmp_path}}\n",
        encoding="utf-8",
    )

    assert main(["--config", str(path), *command]) == 2
    err = capsys.readouterr().err
    assert err.startswith("myao2: configuration error:\n")
    assert f"  {key}: cannot open the database" in err
    assert "Traceback" not in err and "s3cret-pw" not in err


@pytest.mark.parametrize(
    ("command", "status"),
    [
        (["memo", "show", "lunch\udcff"], 2),  # no such memo
        (["memo", "add", "lunch", "--content", "ramen \udcff", "--tags", "food\udcff"], 0),
        (["search", "ramen \udcff", "--memos"], 0),
        (["memory", "show", "--channel", "C\udcff"], 0),
        (["memory", "show", "--user", "U\udcff"], 0),
    ],
)
def test_arguments_with_bytes_the_locale_cannot_decode_are_taken_as_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str], status: int
) -> None:
    # Python hands such bytes over as lone surrogates ("\udcff" for b"\xff"), which no store or model takes.
    path = tmp_path / "config.yaml"
    path.write_text(f"memory: {{database_path: '{tmp_path / 'memory.db'}'}}\n", encoding="utf-8")

    assert main(["--config", str(path), *command]) == status
    assert "Traceback" not in capsys.readouterr().err
