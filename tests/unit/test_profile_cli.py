"""`myao2 profile candidates` and `myao2 profile promote USER FACT_ID`."""

from __future__ import annotations

import json
from datetime import date

import pytest

from myao2.cli import main
from myao2.config import load_config
from myao2.domain.conversation import Channel, Person
from myao2.domain.profile import Confirmation, NewFact, Profile
from myao2.domain.visibility import WORKSPACE, Audience
from myao2.infrastructure.db.conversation_store import SqlConversationStore
from myao2.infrastructure.db.engine import open_database
from myao2.infrastructure.db.memo_store import SqlMemoStore
from myao2.infrastructure.db.profile_store import SqlProfileStore
from tests.clocks import ManualClock

DAY = date(2025, 1, 2)


def confirmed(profile: Profile, audience: Audience, fact_id: int, times: int) -> Profile:
    for n in range(times):
        profile = profile.learn(audience, [], [Confirmation(fact_id, 0.95, (f"9.{fact_id}{n}",))])
    return profile


@pytest.fixture
def config_path(tmp_path, database_url):
    path = tmp_path / "config.yaml"
    path.write_text(f"memory:\n  database_url: '{database_url}'\n")
    engine = open_database(load_config(path).memory.sqlalchemy_url)
    clock = ManualClock()
    SqlConversationStore(engine, clock).save_person(Person("UALICE", "Alice"))
    SqlConversationStore(engine, clock).save_channel(Channel("C1", "general"))
    dm = Audience("DALICE")
    profile = Profile("UALICE").learn(WORKSPACE, [(NewFact("likes jazz", 0.7, ("1.1",)), "C1", DAY)], [])
    profile = profile.learn(WORKSPACE, [(NewFact("likes tea", 0.7, ("1.2",)), "C1", DAY)], [])
    profile = profile.learn(dm, [(NewFact("is moving to Osaka", 0.8, ("1.3",)), "DALICE", DAY)], [])
    profile = confirmed(confirmed(confirmed(profile, WORKSPACE, 1, 3), WORKSPACE, 2, 2), dm, 3, 3)
    SqlProfileStore(engine, clock).save([profile])
    engine.dispose()
    return path


def profile(path, *argv: str) -> int:
    return main(["--config", str(path), "profile", *argv])


def memos(path):
    engine = open_database(load_config(path).memory.sqlalchemy_url)
    try:
        return SqlMemoStore(engine, ManualClock()).list(None).memos
    finally:
        engine.dispose()


def test_candidates_are_the_facts_sure_and_confirmed_three_times(config_path, capsys):
    assert profile(config_path, "candidates") == 0
    out = capsys.readouterr().out
    assert "UALICE (Alice) fact 1: likes jazz" in out and "confirmed 3 times" in out
    assert "fact 3: is moving to Osaka" in out and "private to DALICE" in out
    assert "likes tea" not in out  # confirmed only twice

    assert profile(config_path, "candidates", "--json") == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(c["fact_id"], c["private_to"]) for c in listed] == [(1, None), (3, "DALICE")]


def test_promote_makes_a_priority_5_memo_for_the_facts_audience_once(config_path, capsys):
    assert profile(config_path, "promote", "UALICE", "1") == 0
    assert profile(config_path, "promote", "UALICE", "3", "--name", "alice-move") == 0
    capsys.readouterr()

    made = {m.name: m for m in memos(config_path)}
    assert (made["Alice-1"].content, made["Alice-1"].priority, made["Alice-1"].audience) == (
        "Alice: likes jazz",
        5,
        WORKSPACE,
    )
    assert made["alice-move"].audience == Audience("DALICE")  # learnt in the DM: kept for the DM

    assert profile(config_path, "candidates") == 0
    assert capsys.readouterr().out.strip() == "No candidates."
    assert profile(config_path, "promote", "UALICE", "1") == 2
    assert "already promoted" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("user", "fact", "says"),
    [("UALICE", "2", "not a candidate"), ("UALICE", "9", "has no fact 9"), ("UBOB", "1", "no profile of UBOB")],
)
def test_promote_refuses_what_is_not_a_candidate_and_changes_nothing(config_path, capsys, user, fact, says):
    assert profile(config_path, "promote", user, fact) == 2
    assert says in capsys.readouterr().err
    assert memos(config_path) == []


def test_memory_show_user_prints_what_was_learnt_about_them_and_a_channel_sees_only_its_share(config_path, capsys):
    assert main(["--config", str(config_path), "memory", "show", "--user", "UALICE"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("== Alice (UALICE) ==")
    assert "1: likes jazz" in out and "2: likes tea" in out and "3: is moving to Osaka" in out
    assert "private to DALICE" in out

    assert main(["--config", str(config_path), "memory", "show", "--user", "UALICE", "--channel", "C1", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [f["text"] for f in shown["facts"]] == ["likes jazz", "likes tea"]  # not what was said in the DM
    assert main(["--config", str(config_path), "memory", "show", "--user", "UALICE", "--channel", "CNEVER", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["facts"] == []  # a conversation never stored: its own alone

    assert main(["--config", str(config_path), "memory", "show", "--user", "UNOBODY"]) == 0
    assert "Nothing learnt about UNOBODY yet." in capsys.readouterr().out
