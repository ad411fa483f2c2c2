"""Observability end to end: what the running bot records shows in `myao2 stats`."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request

from tests.e2e.conftest import ALICE, GENERAL, BotProcess, wait_until
from tests.e2e.test_autonomous import FAST, judgment, responder
from tests.e2e.test_mentions import replies_in
from tests.fakes.openai_server import Error, FakeOpenAI, Text
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


def ready(bot: BotProcess) -> tuple[int, dict]:
    """/ready's status and JSON body."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{bot.health_port}/ready", timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_ready_names_the_model_while_it_fails_and_recovers_with_it(
    bot: BotProcess, slack: FakeSlack, llm: FakeOpenAI
) -> None:
    bot.start()
    assert wait_until(lambda: ready(bot)[0] == 200, what="/ready 200")
    llm.set_responder(lambda request: Error(500, "model down", headers={"retry-after-ms": "1"}))
    slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> are you there?")

    status, body = wait_until(lambda: (r := ready(bot))[0] == 503 and r, what="/ready 503")
    assert body["ready"] is False and body["not_ready"] == ["model"]
    assert body["checks"]["slack"] == {"ready": True} and body["checks"]["database"] == {"ready": True}
    assert "HTTP 500" in body["checks"]["model"]["reason"]

    time.sleep(1)
    assert ready(bot)[0] == 503, "no model call succeeded yet"

    llm.set_responder(lambda request: Text("Back now."))
    again = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> and now?")
    slack.wait_for(lambda: replies_in(slack, again), what="the answer once the model is back")
    assert wait_until(lambda: ready(bot)[0] == 200, what="/ready back at 200")
    assert bot.stop() == 0
