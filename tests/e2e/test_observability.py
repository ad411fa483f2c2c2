"""Observability end to end: what the running bot records shows in `myao2 stats`."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.e2e.conftest import ALICE, GENERAL, BotProcess
from tests.e2e.test_autonomous import FAST, judgment, responder
from tests.fakes.openai_server import FakeOpenAI, Text
from tests.fakes.slack_server import FakeSlack


def stats(bot: BotProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "myao2", "stats", "--config", str(bot.config_path), *args],
        cwd=bot.tmp_path,
        env=bot.environment(),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_stats_count_the_answer_the_judgment_the_unasked_reply_and_price_the_calls(
    bot: BotProcess, slack: FakeSlack, llm: FakeOpenAI
) -> None:
    llm.set_responder(responder(lambda r: judgment(True, 0.9), lambda r: Text("Ramen on 5th street.")))
    bot.settings.update(FAST)
    bot.settings["stats.prices"] = {"fake": {"input": 1.0, "output": 2.0}}
    bot.start()
    mention = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> a ramen place?")
    slack.wait_for(lambda: any(p.get("thread_ts") == mention for p in slack.posted), what="the answer")
    slack.post_message(GENERAL, ALICE, "anyone else hungry for secret-sauce noodles?")
    slack.wait_for(lambda: any(p.get("thread_ts") is None for p in slack.posted), what="the unasked reply")
    assert bot.stop() == 0

    result = stats(bot, "--since", "1d", "--json")
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout)
    assert figures["messages_stored"] >= 4  # two of Alice's, two of the bot's
    assert figures["replies_posted"] == {"answer": 1, "unasked": 1, "total": 2}
    assert figures["judgments"]["respond"] == 1
    roles = {r["role"]: r for r in figures["model_calls"]}
    assert roles["response"]["calls"] == 2 and roles["judgment"]["calls"] == 1
    tokens = sum(r["input_tokens"] + r["output_tokens"] for r in figures["model_calls"])
    assert tokens > 0
    assert figures["estimated_cost"]["total"] > 0 and figures["estimated_cost"]["unpriced_models"] == []
    assert "secret-sauce" not in result.stdout

    text = stats(bot)
    assert text.returncode == 0 and "Replies posted:   2 (1 answers, 1 unasked)" in text.stdout


def test_an_invalid_price_table_exits_2_naming_the_key(bot: BotProcess) -> None:
    bot.settings["stats.prices"] = {"fake": {"input": "cheap", "output": 1}}
    bot.write_config()
    result = stats(bot)
    assert result.returncode == 2
    assert "stats.prices.fake.input" in result.stderr and "Traceback" not in result.stderr
