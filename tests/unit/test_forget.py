"""`myao2 memory forget --user U`: no row keeps that person's text; everyone else's stays."""

from __future__ import annotations

import io
from datetime import date

import pytest
from sqlalchemy import inspect
from sqlalchemy import text as sql_text

from myao2.cli import build_parser
from myao2.application.notebook import Actor, Notebook
from myao2.config import load_config
from myao2.domain.conversation import Channel, Message, Person
from myao2.domain.memo import MemoChanges, MemoDraft, Origin
from myao2.domain.memory import WORKSPACE_SCOPE, Bullet, Memory, Scope, Term
from myao2.domain.profile import NewFact, Profile
from myao2.domain.visibility import WORKSPACE
from myao2.infrastructure.db.conversation_store import SqlConversationStore
from myao2.infrastructure.db.engine import open_database
from myao2.infrastructure.db.memo_store import SqlMemoStore
from myao2.infrastructure.db.memory_store import SqlMemoryStore
from myao2.infrastructure.db.profile_store import SqlProfileStore
from myao2.memory_cli import run_memory_command
from tests.clocks import ManualClock

DAY = date(2025, 1, 2)


@pytest.fixture
def config(tmp_path, database_url):
    path = tmp_path / "config.yaml"
    path.write_text(f"memory:\n  database_url: '{database_url}'\n")
    config = load_config(path)
    engine = open_database(config.memory.sqlalchemy_url)
    clock = ManualClock()
    conversations = SqlConversationStore(engine, clock)
    conversations.save_channel(Channel("C1", "general"))
    conversations.save_person(Person("UALICE", "canary-alice-name"))
    conversations.save_person(Person("UBOB", "Bob"))
    conversations.save_message(Message("C1", "1.000001", "UALICE", "canary-alice loves jazz", "Alice"))
    conversations.save_message(Message("C1", "1.000002", "UBOB", "bob likes tea", "Bob"))
    memos = SqlMemoStore(engine, clock)
    memos.add(MemoDraft.create("alice-jazz", "canary-alice loves jazz", 3), Origin("C1", user_id="UALICE"), "model:UALICE")
    memos.edit("alice-jazz", MemoChanges.create(detail="canary-alice detail"), None, "user:cli")
    memos.pin("alice-jazz", "user:cli")
    memos.add(MemoDraft.create("bob-tea", "bob likes tea", 3), Origin("C1", user_id="UBOB"), "model:UBOB")
    SqlMemoryStore(engine, clock).save(
        [
            Memory(
                Scope("C1"),
                Term.LONG,
                WORKSPACE,
                (
                    Bullet(1, "canary-alice jazz fan", DAY, ("1.000001",)),
                    Bullet(2, "bob drinks tea", DAY, ("1.000002",)),
                    Bullet(3, "canary-alice and bob chat", DAY, ("1.000001", "1.000002")),
                ),
            ),
            Memory(WORKSPACE_SCOPE, Term.SHORT, WORKSPACE, (Bullet(1, "canary-alice news", DAY, ("1.000001",)),)),
        ]
    )
    profiles = SqlProfileStore(engine, clock)
    for user, text, ts in (("UALICE", "canary-alice likes jazz", "1.000001"), ("UBOB", "likes tea", "1.000002")):
        profiles.save([Profile(user).learn(WORKSPACE, [(NewFact(text, 0.95, (ts,)), "C1", DAY)], [])])
    promoted = Notebook(memos, Actor.CLI).add("alice-fact", "Alice: canary-alice fact", 5)
    profiles.save([profiles.get("UALICE").promoted(1, promoted.id)])
    engine.dispose()
    return config


def every_text(config) -> str:  # type: ignore[no-untyped-def]
    engine = open_database(config.memory.sqlalchemy_url)
    with engine.connect() as db:
        tables = inspect(engine).get_table_names()
        text = "\n".join(str(row) for table in tables for row in db.execute(sql_text(f"SELECT * FROM {table}")))
    engine.dispose()
    return text


def forget(config, *argv: str) -> int:  # type: ignore[no-untyped-def]
    return run_memory_command(config, build_parser().parse_args(["memory", "forget", *argv]))


def test_forget_leaves_no_row_with_their_text_and_keeps_everyone_elses(config, capsys):
    assert "canary-alice" in every_text(config)

    assert forget(config, "--user", "UALICE", "--yes") == 0

    text = every_text(config)
    assert "canary-alice" not in text and "UALICE" not in text
    assert "bob likes tea" in text and "bob drinks tea" in text and "likes tea" in text
    assert "Forgot UALICE: 1 message(s), 2 memo(s), 3 memory note(s), 1 profile fact(s) deleted." in (
        capsys.readouterr().out
    )


def test_forget_asks_first_and_a_no_deletes_nothing(config, monkeypatch, capsys):
    before = every_text(config)
    monkeypatch.setattr("builtins.input", lambda prompt: "n")

    assert forget(config, "--user", "UALICE") == 1

    assert every_text(config) == before
    assert "Nothing deleted." in capsys.readouterr().out


def test_forget_without_anyone_to_answer_the_prompt_deletes_nothing(config, monkeypatch, capsys):
    # stdin at its end (a script, cron, `docker exec` without -i): no answer is a no, not a traceback
    before = every_text(config)
    monkeypatch.setattr("sys.stdin", io.StringIO(""))

    assert forget(config, "--user", "UALICE") == 1

    assert every_text(config) == before
    captured = capsys.readouterr()
    assert "Nothing deleted." in captured.out and "--yes" in captured.out


def test_forget_after_a_yes_at_the_prompt(config, monkeypatch):
    monkeypatch.setattr("builtins.input", lambda prompt: "yes")

    assert forget(config, "--user", "UALICE") == 0
    assert "canary-alice" not in every_text(config)
