from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

from myao2.cli import build_parser
from myao2.config import Config, load_config
from myao2.domain.memo import MemoChanges, MemoDraft, Origin
from myao2.domain.visibility import Reader
from myao2.infrastructure.db.engine import open_database
from myao2.infrastructure.db.memo_store import SqlMemoStore
from myao2.memo_cli import run_memo_command
from tests.clocks import ManualClock

@pytest.fixture
def config_path(tmp_path, database_url):
    path = tmp_path / "config.yaml"
    path.write_text(f"persona:\n  timezone: Asia/Tokyo\nmemory:\n  database_url: '{database_url}'\n")
    return path


@pytest.fixture
def config(config_path) -> Config:
    return load_config(config_path)


@pytest.fixture
def store(config) -> Iterator[tuple[SqlMemoStore, ManualClock]]:
    """The configured database with three memos: one edited, one removed."""
    engine = open_database(config.memory.sqlalchemy_url)
    clock = ManualClock()
    memos = SqlMemoStore(engine, clock)
    origin = Origin(channel_id="G1", channel_private=True, user_id="U1", message_ts="1735786800.000100")
    detail = "Likes Ichiran\nin Shibuya"
    memos.add(MemoDraft.create("alice-ramen", "Alice loves spicy ramen", 3, ["food"], detail), origin, "model:U1")
    clock.advance()
    memos.add(MemoDraft.create("ボブの誕生日", "ボブの誕生日は5月3日", 5, ["family"]), Origin("C1"), "model:U2")
    clock.advance()
    memos.add(MemoDraft.create("dave-cold", "Dave has a cold", 1), Origin("C1"), "model:U3")
    clock.advance()
    memos.edit("alice-ramen", MemoChanges.create(priority=4, tags=["food", "alice"]), None, "model:U1")
    clock.advance()
    memos.remove("dave-cold", None, "model:U3")
    yield memos, clock
    engine.dispose()


def run(config: Config, *argv: str) -> int:
    return run_memo_command(config, build_parser().parse_args(["memo", *argv]))


def test_list_shows_a_table_in_local_time(config, store, capsys):
    assert run(config, "list") == 0

    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["NAME", "PRIORITY", "TAGS", "UPDATED", "CONTENT"]
    assert lines[1].split()[0] == "ボブの誕生日"
    assert "2025-01-02 12:01" in lines[1]
    assert lines[2].startswith("alice-ramen")
    assert "food, alice" in lines[2] and "2025-01-02 12:03" in lines[2]
    # The six wide characters of the first name take two columns each.
    assert lines[1].index("2025") + 6 == lines[2].index("2025")
    assert lines[-1] == "2 memos"
    assert "dave-cold" not in "\n".join(lines)


def test_list_filters_by_tag_and_priority(config, store, capsys):
    assert run(config, "list", "--tag", "alice") == 0
    assert "alice-ramen" in capsys.readouterr().out

    assert run(config, "list", "--min-priority", "5", "--json") == 0
    assert [m["name"] for m in json.loads(capsys.readouterr().out)] == ["ボブの誕生日"]


def test_list_removed_shows_when_they_were_removed(config, store, capsys):
    assert run(config, "list", "--removed") == 0

    lines = capsys.readouterr().out.splitlines()
    assert "REMOVED" in lines[0].split()
    assert lines[1].startswith("dave-cold") and "2025-01-02 12:04" in lines[1]
    assert lines[-1] == "1 memo"


def test_list_json_prints_memo_snapshots(config, store, capsys):
    assert run(config, "list", "--json") == 0

    memos = json.loads(capsys.readouterr().out)
    assert [m["name"] for m in memos] == ["ボブの誕生日", "alice-ramen"]
    assert memos[1]["tags"] == ["food", "alice"]
    assert memos[1]["visibility"] == "conversation"


def test_show_prints_every_field(config, store, capsys):
    assert run(config, "show", "alice-ramen") == 0

    out = capsys.readouterr().out
    for expected in (
        "Name:        alice-ramen",
        "Priority:    4",
        "Tags:        food, alice",
        "Detail:      Likes Ichiran\n             in Shibuya",
        "Visibility:  conversation",
        "User:        U1",
        "Channel:     G1",
        "Message ts:  1735786800.000100",
        "Created:     2025-01-02 12:00",
        "Updated:     2025-01-02 12:03",
    ):
        assert expected in out


def test_show_json(config, store, capsys):
    assert run(config, "show", "alice-ramen", "--json") == 0

    memo = json.loads(capsys.readouterr().out)
    assert memo["detail"] == "Likes Ichiran\nin Shibuya"
    assert memo["priority"] == 4


def test_history_lists_revisions_with_changes(config, store, capsys):
    assert run(config, "history", "alice-ramen") == 0

    out = capsys.readouterr().out
    assert "2025-01-02 12:00  add      by model:U1\n    name: alice-ramen\n    content: Alice loves spicy ramen" in out
    assert "2025-01-02 12:03  edit     by model:U1\n    priority: 3 → 4\n    tags: food → food, alice\n" in out


def test_history_json(config, store, capsys):
    assert run(config, "history", "alice-ramen", "--json") == 0

    revisions = json.loads(capsys.readouterr().out)
    assert [r["action"] for r in revisions] == ["add", "edit"]
    assert revisions[0]["before"] is None
    assert revisions[1]["before"]["priority"] == 3 and revisions[1]["after"]["priority"] == 4


def test_restore_brings_a_memo_back(config, store, capsys):
    assert run(config, "restore", "dave-cold") == 0
    assert capsys.readouterr().out == "Restored memo 'dave-cold' (priority 1).\n"

    assert run(config, "history", "dave-cold") == 0
    assert "restore  by user:cli" in capsys.readouterr().out
    assert run(config, "list") == 0
    assert "dave-cold" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["show", "nope"], "myao2 memo: no memo named 'nope'\n"),
        (["history", "nope"], "myao2 memo: no memo named 'nope'\n"),
        (["restore", "alice-ramen"], "myao2 memo: no removed memo named 'alice-ramen'\n"),
        (["restore", "nope"], "myao2 memo: no removed memo named 'nope'\n"),
        (["list", "--min-priority", "7"], "myao2 memo: priority must be a whole number from 1 to 5, not 7\n"),
    ],
)
def test_refusals_exit_2_with_one_line(config, store, capsys, argv, message):
    assert run(config, *argv) == 2

    captured = capsys.readouterr()
    assert captured.err == message
    assert captured.out == ""


def test_an_empty_notebook(config, capsys):
    assert run(config, "list") == 0
    assert capsys.readouterr().out == "No memos.\n"


def test_the_command_line_runs_memo_list(config_path, store):
    result = subprocess.run(
        [sys.executable, "-m", "myao2", "memo", "list", "--config", str(config_path)],
        capture_output=True,
        text=True,
        timeout=180,  # a hang guard (see myao2 below)
    )

    assert result.returncode == 0, result.stderr
    assert "alice-ramen" in result.stdout
    assert result.stdout.splitlines()[-1] == "2 memos"


def test_a_name_shared_by_a_dm_and_the_workspace_is_picked_with_conversation(config, store, capsys):
    memos, _ = store
    # G1 is private: a public channel could take the same name, not seeing G1's memo
    memos.add(MemoDraft.create("alice-ramen", "Ramen night on Friday", 2), Origin("C1"), "model:U2")
    capsys.readouterr()

    assert run(config, "show", "alice-ramen") == 2
    assert capsys.readouterr().err == (
        "myao2 memo: several memos are named 'alice-ramen' (kept for G1, workspace); choose one with --conversation\n"
    )
    assert run(config, "show", "alice-ramen", "--conversation", "workspace") == 0
    assert "Ramen night on Friday" in capsys.readouterr().out
    assert run(config, "show", "alice-ramen", "--conversation", "G1", "--json") == 0
    assert json.loads(capsys.readouterr().out)["content"] == "Alice loves spicy ramen"
    assert run(config, "history", "alice-ramen", "--conversation", "G1") == 0
    assert "Ramen night" not in capsys.readouterr().out

    memos.remove("alice-ramen", Origin("C1"), "model:U2")
    memos.add(MemoDraft.create("alice-ramen", "Another one", 2), Origin("C1"), "model:U2")
    memos.remove("alice-ramen", Origin("C1"), "model:U2")
    memos.remove("alice-ramen", Origin("G1", channel_private=True), "model:U1")
    capsys.readouterr()
    assert run(config, "restore", "alice-ramen") == 2
    assert "choose one with --conversation" in capsys.readouterr().err
    assert run(config, "restore", "alice-ramen", "--conversation", "G1") == 0
    assert memos.get("alice-ramen", Reader("G1")).content == "Alice loves spicy ramen"


def myao2(config_path, *argv: str) -> subprocess.CompletedProcess[str]:
    """The real `myao2 memo ...` command, as a person runs it."""
    return subprocess.run(
        [sys.executable, "-m", "myao2", "memo", *argv, "--config", str(config_path)],
        capture_output=True,
        text=True,
        timeout=180,  # a hang guard: starting the command is seconds of CPU, far more wall time on a busy machine
    )


def test_people_add_edit_and_remove_memos_from_the_command_line(config_path, store):
    memos, _ = store

    added = myao2(config_path, "add", "standup", "--content", "Standup at 10:00", "--priority", "4", "--tags", "team,daily", "--detail", "In room B")
    assert added.returncode == 0, added.stderr
    assert added.stdout == "Added memo 'standup' for the workspace (priority 4).\n"
    memo = memos.get("standup", Reader("C7"))
    assert (memo.content, memo.priority, memo.tags, memo.detail) == ("Standup at 10:00", 4, ("team", "daily"), "In room B")

    edited = myao2(config_path, "edit", "standup", "--content", "Standup at 10:30", "--tags", "", "--new-name", "daily-standup")
    assert edited.returncode == 0, edited.stderr
    assert edited.stdout == "Edited memo 'daily-standup' (revision 2).\n"
    memo = memos.get("daily-standup", None)
    assert (memo.content, memo.tags, memo.priority) == ("Standup at 10:30", (), 4)

    removed = myao2(config_path, "remove", "daily-standup")
    assert removed.returncode == 0, removed.stderr
    history = memos.history("daily-standup")
    assert [(r.action.value, r.actor) for r in history] == [("add", "user:cli"), ("edit", "user:cli"), ("remove", "user:cli")]


def test_a_memo_added_for_a_conversation_stays_there(config, store, capsys):
    memos, _ = store
    assert run(config, "add", "surprise", "--content", "Party on Friday", "--conversation", "D5") == 0
    assert capsys.readouterr().out == "Added memo 'surprise' for conversation D5 (priority 3).\n"
    assert memos.get("surprise", Reader("D5")).content == "Party on Friday"
    assert all(m.name != "surprise" for m in memos.list(Reader("C1")).memos)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["add", "x", "--content", "y", "--tags", "a,b,c,d"], "A memo can have at most 3 tags (4 were given).\n"),
        (["add", "x", "--content", "y", "--priority", "9"], "priority must be a whole number from 1 to 5, not 9\n"),
        (["add", "alice-ramen", "--content", "y", "--conversation", "G1"], "a memo named 'alice-ramen' already exists; rename or remove it first\n"),
        (["add", "x", "--content", "z" * 501], "the content is too long (501 characters; the limit is 500); put longer notes in --detail\n"),
        (["edit", "alice-ramen"], "nothing to change: give --content, --priority, --tags, --detail or --new-name\n"),
        (["edit", "nope", "--content", "y"], "no memo named 'nope'\n"),
        (["edit", "alice-ramen", "--new-name", "ボブの誕生日"], "a memo named 'ボブの誕生日' already exists; rename or remove it first\n"),
        (["remove", "dave-cold"], "no memo named 'dave-cold'\n"),
    ],
)
def test_invalid_writes_exit_2_with_the_rule_and_write_nothing(config, store, capsys, argv, message):
    """In-process (a refusal takes the same way out as above); the real command's writes: the test before."""
    memos, _ = store
    before = [memos.history(m.name) for m in memos.list(None).memos]

    assert run(config, *argv) == 2

    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", "myao2 memo: " + message)
    assert [memos.history(m.name) for m in memos.list(None).memos] == before
