"""`myao2 preview`: the prompt it prints is the one the running bot sends the model."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys

from tests.e2e.conftest import ALICE, BOB, GENERAL, BotProcess, wait_until
from tests.e2e.test_memo_pins import myao2
from tests.e2e.test_mentions import replies_in
from tests.fakes.memory_model import is_channels_request, is_memory_request, remember
from tests.fakes.openai_server import Text
from tests.fakes.slack_server import FakeSlack

DM = "DALICE"
RANDOM = "CRANDOM"
CURRENT_TIME = re.compile(r"^Current time: .*$", re.MULTILINE)


def preview(bot: BotProcess, *argv: str) -> dict:
    result = myao2(bot, "preview", *argv, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


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

    # The prompt shows the time to the minute: should a minute turn between the bot's
    # request and the preview, the conversation goes on and both are compared again.
    for attempt in range(3):
        before = len(llm.requests)
        llm.script(Text("Ramen, of course!"))
        ts = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> what should I eat tonight? ({attempt})")
        request = llm.wait_for_requests(before + 1)[before]
        slack.wait_for(lambda: replies_in(slack, ts), what="the answer")
        shown = preview(bot, "response", "--channel", GENERAL)
        sent_query = request["messages"][1]["content"][0]["text"]
        if CURRENT_TIME.findall(sent_query) == CURRENT_TIME.findall(shown["query"]):
            break

    assert request["messages"][0] == {"role": "system", "content": shown["system"]}
    assert sent_query == shown["query"]
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
    # As above, a minute turning between the preview and the call means trying again with new messages.
    for attempt in range(3):
        bot.settings["memory.update_interval_seconds"] = 3600  # nothing read while the messages come
        bot.start()
        slack.post_message(GENERAL, ALICE, f"the release moves to friday ({attempt})")
        slack.post_message(RANDOM, BOB, f"the printer is jammed ({attempt})")
        wait_until(lambda: stored(bot, f"jammed ({attempt})") and stored(bot, f"friday ({attempt})"), what="stored")
        assert bot.stop() == 0

        shown = preview(bot, "memory", "--channel", GENERAL)
        before = len(llm.requests)
        bot.settings["memory.update_interval_seconds"] = 0.5
        bot.start()
        request = wait_until(
            lambda: next((r for r in llm.requests[before:] if is_channels_request(r)), None), what="the memory call"
        )
        assert bot.stop() == 0
        sent_query = request["messages"][1]["content"][0]["text"]
        if CURRENT_TIME.findall(sent_query) == CURRENT_TIME.findall(shown["query"]):
            break

    assert request["messages"][0] == {"role": "system", "content": shown["system"]}
    assert sent_query == shown["query"]
    assert [t["function"] for t in request["tools"]] == shown["tools"]
    assert f"the printer is jammed ({attempt})" in shown["query"]  # #random is read in the same call


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
    for _ in range(3):  # should a minute turn between the two, the bot judges again after a restart
        shown = json.loads(shifted_myao2(bot, "preview", "judgment", "--channel", GENERAL, "--json"))
        before = len(llm.requests)
        bot.start()
        request = wait_until(
            lambda: next((r for r in llm.requests[before:] if _tool_names(r) == ["JudgmentOutput"]), None),
            what="the judgment",
        )
        assert bot.stop() == 0
        sent_query = request["messages"][1]["content"][0]["text"]
        if CURRENT_TIME.findall(sent_query) == CURRENT_TIME.findall(shown["query"]):
            break

    assert request["messages"][0] == {"role": "system", "content": shown["system"]}
    assert sent_query == shown["query"]
    assert "Time since the last message: 1 hour" in sent_query
    assert [t["function"] for t in request["tools"]] == shown["tools"]


def shifted_myao2(bot: BotProcess, *argv: str) -> str:
    """`myao2` with the bot's shifted clock."""
    result = subprocess.run(
        [sys.executable, "-m", "tests.e2e.shifted_clock", *argv, "--config", str(bot.config_path)],
        env=bot.environment(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def _tool_names(request: dict) -> list[str]:
    return [t["function"]["name"] for t in request.get("tools") or []]
