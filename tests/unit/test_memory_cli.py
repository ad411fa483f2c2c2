from __future__ import annotations

import json
from datetime import date

import pytest

from myao2.cli import build_parser, main
from myao2.config import Config, load_config
from myao2.domain.conversation import Channel, ChannelKind
from myao2.domain.memory import WORKSPACE_SCOPE, Bullet, Memory, Scope, Term
from myao2.domain.visibility import WORKSPACE, Audience
from myao2.infrastructure.db.conversation_store import SqlConversationStore
from myao2.infrastructure.db.engine import open_database
from myao2.infrastructure.db.memory_store import SqlMemoryStore
from myao2.memory_cli import run_memory_command
from tests.clocks import ManualClock

DAY = date(2025, 1, 2)


@pytest.fixture
def config_path(tmp_path, database_url):
    path = tmp_path / "config.yaml"
    path.write_text(f"memory:\n  database_url: '{database_url}'\n")
    return path


@pytest.fixture
def config(config_path) -> Config:
    return load_config(config_path)


@pytest.fixture
def remembered(config) -> None:
    engine = open_database(config.memory.sqlalchemy_url)
    conversations = SqlConversationStore(engine, ManualClock())
    conversations.save_channel(Channel("C1", "general"))
    conversations.save_channel(Channel("D1", "alice", ChannelKind.IM))
    SqlMemoryStore(engine, ManualClock()).save(
        [
            Memory(WORKSPACE_SCOPE, Term.LONG, WORKSPACE, (Bullet(1, "ws fact", DAY, ("1.0",)),)),
            Memory(
                Scope("C1"),
                Term.LONG,
                WORKSPACE,
                (Bullet(1, "old plan", DAY, ("1.0",), superseded_by=2), Bullet(2, "new plan", DAY, ("2.0", "3.0"))),
                label="#general",
            ),
            Memory(Scope("C1", "5.0"), Term.SHORT, WORKSPACE, (Bullet(1, "thread news", DAY, ("5.0",)),), label="#general"),
            Memory(Scope("D1"), Term.LONG, Audience("D1"), (Bullet(1, "dm secret", DAY, ("4.0",)),), label="#alice"),
        ]
    )
    engine.dispose()


def show(config: Config, capsys, *argv: str) -> str:  # type: ignore[no-untyped-def]
    assert run_memory_command(config, build_parser().parse_args(["memory", "show", *argv])) == 0
    return capsys.readouterr().out


def test_show_prints_everything_for_a_person(config, remembered, capsys):
    out = show(config, capsys)

    assert "== workspace: long-term ==\n- [2025-01-02] ws fact  (ts 1.0)" in out
    assert "== #general (C1): long-term ==\n- [2025-01-02] new plan  (ts 2.0, 3.0)\n(1 superseded note kept, not shown)" in out
    assert "old plan" not in out
    assert "== #alice (D1): long-term, private to this conversation ==\n- [2025-01-02] dm secret" in out


def test_show_for_a_channel_keeps_to_what_it_may_see(config, remembered, capsys):
    out = show(config, capsys, "--channel", "C1", "--thread", "5.0")

    assert "ws fact" in out and "new plan" in out and "thread news" in out
    assert "dm secret" not in out
    assert "thread news" not in show(config, capsys, "--channel", "C1")
    assert "dm secret" in show(config, capsys, "--channel", "D1")


def test_show_for_a_channel_leaves_out_what_was_heard_in_a_channel_stored_as_private(config, capsys):
    engine = open_database(config.memory.sqlalchemy_url)
    conversations = SqlConversationStore(engine, ManualClock())
    conversations.save_channel(Channel("C1", "general"))
    conversations.save_channel(Channel("C2", "plans"))
    heard = Bullet(2, "canary plans", DAY, ("2.0",), heard_in=("C1", "C2"))
    SqlMemoryStore(engine, ManualClock()).save(
        [Memory(WORKSPACE_SCOPE, Term.LONG, WORKSPACE, (Bullet(1, "ws fact", DAY, ("1.0",), heard_in=("C1",)), heard))]
    )
    conversations.set_channel_kind("C2", ChannelKind.PRIVATE)  # its narrowing not done yet
    engine.dispose()

    general = show(config, capsys, "--channel", "C1")
    assert "ws fact" in general and "canary" not in general
    assert "canary plans" in show(config, capsys, "--channel", "C2")
    assert "canary plans" in show(config, capsys)  # a person's own view


def test_show_for_a_channel_the_bot_has_left_shows_nothing_of_it_and_says_why(config, remembered, capsys):
    from myao2.domain.memory import Digest, Stage

    engine = open_database(config.memory.sqlalchemy_url)
    conversations = SqlConversationStore(engine, ManualClock())
    conversations.save_channel(Channel("C1", "general"))
    conversations.leave_channel("C1")
    SqlMemoryStore(engine, ManualClock()).save_digest(
        Digest("C1", DAY, Stage.DIGEST, WORKSPACE, ("plans were made",), "1.0", "2.0", label="#general")
    )
    engine.dispose()

    assert run_memory_command(config, build_parser().parse_args(["memory", "show", "--channel", "C1", "--thread", "5.0"])) == 0
    shown = capsys.readouterr()
    assert "ws fact" in shown.out  # the workspace's, which no one channel said
    assert "new plan" not in shown.out and "thread news" not in shown.out and "plans were made" not in shown.out
    assert "the bot is no longer in C1" in shown.err
    everything = show(config, capsys)  # a person's own view: what it remembers of C1 remains
    assert "new plan" in everything and "thread news" in everything and "plans were made" in everything


def test_show_json_includes_superseded_notes(config, remembered, capsys):
    data = json.loads(show(config, capsys, "--json", "--channel", "C1"))

    general = next(m for m in data if m["scope"] == "channel:C1")
    assert [(b["text"], b["superseded_by"]) for b in general["bullets"]] == [("old plan", 2), ("new plan", None)]


def test_show_with_nothing_remembered(config, capsys):
    assert show(config, capsys) == "Nothing remembered yet.\n"


def test_the_command_line_runs_memory_show(config_path, remembered, capsys):
    assert main(["memory", "show", "--config", str(config_path)]) == 0
    assert "ws fact" in capsys.readouterr().out


def test_show_prints_the_digests_a_conversation_may_see(config, remembered, capsys):
    from myao2.domain.memory import Digest, Stage

    engine = open_database(config.memory.sqlalchemy_url)
    store = SqlMemoryStore(engine, ManualClock())
    store.save_digest(Digest("C1", DAY, Stage.CONDENSED, WORKSPACE, ("plans were made",), "1.0", "2.0", label="#general"))
    store.save_digest(Digest("D1", DAY, Stage.DIGEST, Audience("D1"), ("dm digest",), "1.0", "2.0", label="#alice"))
    engine.dispose()

    out = show(config, capsys, "--channel", "C1")
    assert "== #general (C1): digests of past days ==\n- [2025-01-02] plans were made  (condensed)" in out
    assert "dm digest" not in out
    assert "dm digest" in show(config, capsys)
    entries = json.loads(show(config, capsys, "--channel", "D1", "--json"))
    assert {"scope": "channel:D1", "term": "digest", "label": "#alice", "private_to": "D1", "day": "2025-01-02",
            "stage": "digest", "lines": ["dm digest"]} in entries


def test_show_for_a_conversation_never_stored_shows_nothing_kept_for_the_workspace(config, remembered, capsys):
    """Nothing says who reads it: it is shown as people of another organisation would read it (its own alone)."""
    from myao2.domain.memory import Digest, Stage

    engine = open_database(config.memory.sqlalchemy_url)
    SqlMemoryStore(engine, ManualClock()).save_digest(
        Digest("CNEVER", DAY, Stage.DIGEST, WORKSPACE, ("canary digest",), "1.0", "2.0", label="#never")
    )
    engine.dispose()

    shown = show(config, capsys, "--channel", "CNEVER")
    assert "ws fact" not in shown and "new plan" not in shown and "canary" not in shown
    assert "ws fact" in show(config, capsys, "--channel", "C1")
