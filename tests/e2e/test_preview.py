"""`myao2 preview`: the prompt it prints is the one the running bot sends the model."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from datetime import datetime, timedelta

from myao2.application.context import TIME_FORMAT
from tests.e2e.conftest import ALICE, BOB, CLI_SECONDS, GENERAL, BotProcess, wait_until
from tests.e2e.test_memo_pins import myao2
from tests.e2e.test_mentions import replies_in
from tests.fakes.memory_model import is_channels_request, is_memory_request, remember
from tests.fakes.openai_server import Text
from tests.fakes.slack_server import FakeSlack

DM = "DALICE"
RANDOM = "CRANDOM"
CURRENT_TIME = re.compile(r"^Current time: (.*)$", re.MULTILINE)


def preview(bot: BotProcess, *argv: str) -> dict:
    result = myao2(bot, "preview", *argv, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def at_the_bots_minute(shown: str, sent: str) -> str:
    """The preview's query `shown` with its current time made the one the bot's call `sent` showed.

    The prompt shows the time to the minute, and the preview is made with its own clock seconds
    before or after the bot's call (the bot's clock is not frozen: its holds and leases run on it),
    so a minute may turn between the two. The preview's time must be written the same way, in the
    same zone, and be the bot's but for those seconds; the rest is compared byte for byte.
    """
    (shown_time,) = CURRENT_TIME.findall(shown)
    (sent_time,) = CURRENT_TIME.findall(sent)
    gap = datetime.strptime(sent_time, TIME_FORMAT) - datetime.strptime(shown_time, TIME_FORMAT)
    assert abs(gap) <= timedelta(minutes=10), (shown_time, sent_time)
    return CURRENT_TIME.sub(f"Current time: {sent_time}", shown)


def stored(bot: BotProcess, text: str) -> bool:
    with sqlite3.connect(bot.database) as db:
        return db.execute("SELECT count(*) FROM messages WHERE text LIKE ?", (f"%{text}%",)).fetchone()[0] > 0


def test_the_preview_of_an_answer_is_byte_for_byte_what_the_bot_then_sends(
    bot: BotProcess, slack: FakeSlack, llm
) -> None:
    slack.add_channel(DM, ALICE, is_im=True, members=[ALICE])
    bot.start()
    added = myao2(bot, "memo", "add", "team-lunch", "--content", "Team lunch is on Fridays", "--priority", "4")
    assert added.returncode == 0, added.stderr
    secret = myao2(
        bot, "memo", "add", "alice-surprise", "--content", "Alice plans a surprise party for Bob",
        "--priority", "5", "--conversation", DM,
    )  # fmt: skip
    assert secret.returncode == 0, secret.stderr
    slack.post_message(GENERAL, BOB, f"I had sushi yesterday with <@{ALICE}>")
    wait_until(lambda: stored(bot, "sushi yesterday"), what="Bob's message stored")

    before = len(llm.requests)
    llm.script(Text("Ramen, of course!"))
    ts = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> what should I eat tonight?")
    request = llm.wait_for_requests(before + 1)[before]
    slack.wait_for(lambda: replies_in(slack, ts), what="the answer")
    shown = preview(bot, "response", "--channel", GENERAL)
    sent_query = request["messages"][1]["content"][0]["text"]

    assert request["messages"][0] == {"role": "system", "content": shown["system"]}
    assert sent_query == at_the_bots_minute(shown["query"], sent_query)
    assert len(request["messages"]) == 2
    assert [t["function"] for t in request["tools"]] == shown["tools"]
    assert "team-lunch" in shown["query"] and "@Alice" in shown["query"]
    assert "surprise" not in json.dumps(shown)  # the DM's memo stays in the DM
    names = {section["name"]: section for section in shown["sections"]}
    assert names["conversation"]["budget"] == 6000 and 0 < names["conversation"]["tokens"] < 6000
    assert bot.stop() == 0


def test_a_preview_needs_no_slack_and_names_what_it_cannot_find(bot: BotProcess, slack: FakeSlack, llm) -> None:
    bot.start()
    slack.post_message(GENERAL, BOB, "anyone around?")
    wait_until(lambda: stored(bot, "anyone around?"), what="Bob's message stored")
    assert bot.stop() == 0
    slack.stop()  # from here on nothing answers on Slack's side

    judged = preview(bot, "judgment", "--channel", GENERAL)
    assert "anyone around?" in judged["query"]
    assert [tool["name"] for tool in judged["tools"]] == ["JudgmentOutput"]
    text = myao2(bot, "preview", "response", "--channel", GENERAL, "--as", BOB)
    assert text.returncode == 0 and "===== system prompt =====" in text.stdout and "add_memo" in text.stdout
    unknown = myao2(bot, "preview", "response", "--channel", "CNOWHERE")
    assert unknown.returncode == 2 and "CNOWHERE" in unknown.stderr and "Traceback" not in unknown.stderr
    nobody = myao2(bot, "preview", "response", "--channel", GENERAL, "--as", "UCAROL")
    assert nobody.returncode == 2 and "UCAROL" in nobody.stderr
    assert llm.requests == []  # nor the model


def test_the_memory_preview_is_byte_for_byte_the_memory_call_the_bot_then_makes(
    bot: BotProcess, slack: FakeSlack, llm
) -> None:
    slack.add_channel(RANDOM, "random", members=[ALICE, BOB])
    llm.set_responder(lambda request: remember(request) if is_memory_request(request) else Text("Sure."))
    bot.settings["memory.update_interval_seconds"] = 3600  # nothing read while the messages come
    bot.start()
    slack.post_message(GENERAL, ALICE, "the release moves to friday")
    slack.post_message(RANDOM, BOB, "the printer is jammed")
    wait_until(lambda: stored(bot, "jammed") and stored(bot, "friday"), what="stored")
    assert bot.stop() == 0

    shown = preview(bot, "memory", "--channel", GENERAL)
    before = len(llm.requests)
    bot.settings["memory.update_interval_seconds"] = 0.5
    bot.start()
    request = wait_until(
        lambda: next((r for r in llm.requests[before:] if is_channels_request(r)), None),
        what="the memory call",
    )
    assert bot.stop() == 0
    sent_query = request["messages"][1]["content"][0]["text"]

    assert request["messages"][0] == {"role": "system", "content": shown["system"]}
    assert sent_query == at_the_bots_minute(shown["query"], sent_query)
    assert [t["function"] for t in request["tools"]] == shown["tools"]
    assert "the printer is jammed" in shown["query"]  # #random is read in the same call


def test_the_judgment_preview_is_byte_for_byte_the_judgment_the_bot_then_asks_for(
    bot: BotProcess, slack: FakeSlack, llm
) -> None:
    bot.start()
    slack.post_message(GENERAL, BOB, "anyone up for lunch?")
    wait_until(lambda: stored(bot, "up for lunch"), what="Bob's message stored")
    assert bot.stop() == 0
    # An hour and a half later the question has waited "1 hour" for minutes on end, so the
    # preview and the bot's judgment a few seconds after it say the same.
    bot.shift_clock(90 * 60)
    bot.settings["response.check_interval_seconds"] = 0.5
    shown = json.loads(shifted_myao2(bot, "preview", "judgment", "--channel", GENERAL, "--json"))
    before = len(llm.requests)
    bot.start()
    request = wait_until(
        lambda: next((r for r in llm.requests[before:] if _tool_names(r) == ["JudgmentOutput"]), None),
        what="the judgment",
    )
    assert bot.stop() == 0
    sent_query = request["messages"][1]["content"][0]["text"]

    assert request["messages"][0] == {"role": "system", "content": shown["system"]}
    assert sent_query == at_the_bots_minute(shown["query"], sent_query)
    assert "Time since the last message: 1 hour" in sent_query
    assert [t["function"] for t in request["tools"]] == shown["tools"]


def shifted_myao2(bot: BotProcess, *argv: str) -> str:
    """`myao2` with the bot's shifted clock."""
    result = subprocess.run(
        [sys.executable, "-m", "tests.e2e.shifted_clock", *argv, "--config", str(bot.config_path)],
        env=bot.environment(),
        capture_output=True,
        text=True,
        timeout=CLI_SECONDS,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def _tool_names(request: dict) -> list[str]:
    return [t["function"]["name"] for t in request.get("tools") or []]
