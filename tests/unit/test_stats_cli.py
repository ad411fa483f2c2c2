"""`myao2 stats`: figures from the activity log and the stores, since a period, with the estimated cost."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from myao2.cli import main
from myao2.domain.activity import CallOutcome, JudgmentOutcome, ModelCall, ReplyKind
from myao2.domain.conversation import Message
from myao2.domain.memo import MemoDraft, Origin
from myao2.infrastructure.db.activity_store import SqlActivityLog
from myao2.infrastructure.db.conversation_store import SqlConversationStore
from myao2.infrastructure.db.engine import open_database
from myao2.infrastructure.db.memo_store import SqlMemoStore
from tests.clocks import ManualClock

NOW = datetime.now(timezone.utc)
OLD = NOW - timedelta(days=30)


@pytest.fixture
def config_path(tmp_path: Path, database_url: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(
        f"memory:\n  database_url: '{database_url}'\n"
        "stats:\n  currency: EUR\n  prices:\n    big: {input: 2.0, output: 8.0}\n    small: {input: 0.5, output: 1.0}\n"
    )
    return path


def call(role: str, model: str, tokens_in: int, tokens_out: int, ok: bool = True) -> ModelCall:
    outcome = CallOutcome.OK if ok else CallOutcome.ERROR
    latency = 1000 if ok else 100
    return ModelCall(role, model, tokens_in, tokens_out, latency, outcome, "end_turn" if ok else "APIStatusError")


@pytest.fixture
def recorded(config_path: Path, database_url: str) -> None:
    engine = open_database(database_url)
    log = SqlActivityLog(engine)
    log.model_call(call("response", "big", 1_000_000, 100_000), NOW)
    log.model_call(call("response", "big", 0, 0, ok=False), NOW)
    log.model_call(ModelCall("response", "big", 0, 0, 250, CallOutcome.ABORTED, "cancelled"), NOW)
    log.model_call(call("judgment", "small", 200_000, 10_000), NOW)
    log.model_call(call("memory", "unpriced", 5_000, 500), NOW)
    log.model_call(call("response", "big", 1_000_000, 1_000_000), OLD)
    log.judgment("C1", JudgmentOutcome.RESPOND, 0.9, NOW)
    log.judgment("C1", JudgmentOutcome.QUIET, 0.8, NOW)
    log.judgment("C1", JudgmentOutcome.QUIET, 0.8, OLD)
    log.judgment("C2", JudgmentOutcome.FAILED, 0.0, NOW)
    log.reply("C1", ReplyKind.ANSWER, NOW)
    log.reply("C1", ReplyKind.UNASKED, NOW)
    log.reply("C1", ReplyKind.ANSWER, OLD)
    memos = SqlMemoStore(engine, ManualClock(OLD))
    memos.add(MemoDraft.create("old", "kept a month", 3), Origin("C1", user_id="U1"), "test")
    memos = SqlMemoStore(engine, ManualClock(NOW))
    memos.add(MemoDraft.create("new", "kept today", 3), Origin("C1", user_id="U1"), "test")
    memos.add(MemoDraft.create("gone", "removed today", 3), Origin("C1", user_id="U1"), "test")
    memos.remove("gone", None, "test")
    store = SqlConversationStore(engine, ManualClock())
    store.save_message(Message(channel_id="C1", ts=f"{NOW.timestamp():.6f}", user_id="U1", text="new", user_name="a"))
    store.save_message(Message(channel_id="C1", ts=f"{OLD.timestamp():.6f}", user_id="U1", text="old", user_name="a"))
    engine.dispose()


def stats(config_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(["--config", str(config_path), "stats", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_last_week_counts_only_what_happened_in_it_and_prices_it(
    recorded: None, config_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    figures = stats(config_path, capsys, "--since", "7d")
    assert figures["messages_stored"] == 1
    assert figures["memos"] == {"kept": 2, "added": 2}
    assert figures["replies_posted"] == {"answer": 1, "unasked": 1, "total": 2}
    assert figures["judgments"] == {"respond": 1, "quiet": 1, "invalid": 0, "failed": 1, "total": 3}
    roles = {r["role"]: r for r in figures["model_calls"]}
    assert [r["role"] for r in figures["model_calls"]] == ["response", "judgment", "memory"]
    assert roles["response"] | {"estimated_cost": None} == {
        "role": "response",
        "calls": 3,
        "failed": 1,
        "aborted": 1,
        "input_tokens": 1_000_000,
        "output_tokens": 100_000,
        "mean_latency_ms": 450,
        "estimated_cost": None,
    }
    assert roles["response"]["estimated_cost"] == pytest.approx(2.0 + 0.8)
    assert roles["judgment"]["estimated_cost"] == pytest.approx(0.1 + 0.01)
    assert roles["memory"]["estimated_cost"] == 0
    assert figures["estimated_cost"]["total"] == pytest.approx(2.91)
    assert figures["estimated_cost"]["currency"] == "EUR"
    assert figures["estimated_cost"]["unpriced_models"] == ["unpriced"]


def test_without_since_everything_counts(recorded: None, config_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    figures = stats(config_path, capsys)
    assert figures["since"] is None
    assert figures["messages_stored"] == 2
    assert figures["memos"] == {"kept": 2, "added": 3}
    assert figures["replies_posted"]["total"] == 3
    assert {r["role"]: r["calls"] for r in figures["model_calls"]} == {"response": 4, "judgment": 1, "memory": 1}


def test_text_output_names_each_figure(recorded: None, config_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--config", str(config_path), "stats", "--since", "7d"]) == 0
    out = capsys.readouterr().out
    assert "Messages stored:  1" in out
    assert "Replies posted:   2 (1 answers, 1 unasked)" in out
    assert "Judgments:        3 (1 respond, 1 quiet, 0 invalid, 1 failed)" in out
    assert "Estimated cost:   2.9100 EUR" in out
    assert "not priced (no entry in stats.prices): unpriced" in out
    response = next(line for line in out.splitlines() if line.startswith("response"))
    assert response.split() == ["response", "3", "1", "1", "1000000", "100000", "450", "2.8000"]


def test_an_empty_database_prints_zeros(config_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    figures = stats(config_path, capsys)
    assert figures["model_calls"] == [] and figures["messages_stored"] == 0
    assert figures["estimated_cost"]["total"] == 0


def test_a_negative_price_is_a_config_error_naming_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("memory:\n  database_path: m.db\nstats:\n  prices:\n    big: {input: -1, output: 2}\n")
    assert main(["--config", str(path), "stats"]) == 2
    err = capsys.readouterr().err
    assert "stats.prices.big.input" in err and "Traceback" not in err


def test_a_price_without_output_is_a_config_error_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("memory:\n  database_path: m.db\nstats:\n  prices:\n    big: {input: 1}\n")
    assert main(["--config", str(path), "stats"]) == 2
    assert "stats.prices.big.output" in capsys.readouterr().err


@pytest.mark.parametrize("since", ["7", "soon", "0d", "-1d", "999999d", "99999999999d", "9" * 30 + "w"])
def test_a_malformed_since_exits_2(config_path: Path, since: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--config", str(config_path), "stats", "--since", since])
    assert exited.value.code == 2
    assert "--since" in capsys.readouterr().err
