"""Mentions answered end to end: the bot process against the fake Slack and LLM."""

from __future__ import annotations

import json
import sqlite3
import time
import urllib.error
import urllib.request

from tests.e2e.conftest import ALICE, BOB, GENERAL, BotProcess, wait_until
from tests.fakes.openai_server import Error, Text, ToolCall, ToolCalls
from tests.fakes.slack_server import FakeSlack

MEMO_TOOLS = {"add_memo", "edit_memo", "remove_memo", "list_memo", "get_memo", "list_memo_tags"}
SEARCH_TOOLS = {"search_memo", "recall"}


def replies_in(slack: FakeSlack, thread_ts: str) -> list[dict]:
    return [p for p in slack.posted if p.get("thread_ts") == thread_ts]


def prompt_text(request: dict) -> str:
    return "\n".join(
        m["content"] if isinstance(m["content"], str) else json.dumps(m["content"], ensure_ascii=False)
        for m in request["messages"]
        if m.get("content")
    )


def test_mention_gets_a_threaded_reply_with_reaction_tools_and_names(bot: BotProcess, slack: FakeSlack, llm) -> None:
    bot.start()
    llm.script(Text("Hi Alice! Ramen sounds great.", delay=1.5))  # slow to come: the reaction says it is on its way
    slack.post_message(GENERAL, BOB, "I had sushi yesterday")
    ts = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> what should I eat tonight?")

    slack.wait_for(lambda: replies_in(slack, ts), what="a threaded reply")
    reply = replies_in(slack, ts)
    assert [p["text"] for p in reply] == ["Hi Alice! Ramen sounds great."]
    assert (GENERAL, ts, "eyes") in slack.reactions

    request = llm.requests[0]
    assert {t["function"]["name"] for t in request["tools"]} == MEMO_TOOLS | SEARCH_TOOLS
    text = prompt_text(request)
    assert "Alice" in text and "Bob" in text and "what should I eat tonight?" in text
    assert "@myao" in text and f"<@{slack.bot_user_id}>" not in text
    assert bot.stop() == 0


def test_add_memo_tool_call_is_stored_with_channel_and_user(bot: BotProcess, slack: FakeSlack, llm) -> None:
    bot.start()
    llm.script(
        ToolCalls([ToolCall("add_memo", {"name": "alice-ramen", "content": "Alice loves ramen", "priority": 4, "tags": ["food"]})]),
        Text("Noted, you love ramen!"),
    )
    ts = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> remember that I love ramen")
    slack.wait_for(lambda: replies_in(slack, ts), what="the reply")
    assert replies_in(slack, ts)[0]["text"] == "Noted, you love ramen!"
    with sqlite3.connect(bot.database) as db:
        rows = db.execute("SELECT name, content, priority, tags, channel_id, user_id FROM memos").fetchall()
    assert rows == [("alice-ramen", "Alice loves ramen", 4, '["food"]', GENERAL, ALICE)]
    assert bot.stop() == 0


def test_redelivered_envelope_gets_one_reply(bot: BotProcess, slack: FakeSlack, llm) -> None:
    bot.start()
    llm.set_responder(lambda request: Text("Only once."))
    ts = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> hello?")
    mention_event = slack.wait_for(
        lambda: next(
            (e["payload"]["event_id"] for e in slack.envelopes if e["payload"]["event"]["type"] == "app_mention"),
            None,
        ),
        what="the app_mention envelope",
    )
    slack.redeliver(mention_event, times=3)
    slack.wait_for(lambda: replies_in(slack, ts), what="the reply")
    slack.wait_for(lambda: len(slack.acks) >= len(slack.envelopes), what="every envelope acked")
    time.sleep(1.0)  # room for a wrongly duplicated answer to show up
    assert len(replies_in(slack, ts)) == 1
    assert len(llm.requests) == 1
    assert bot.stop() == 0


def test_llm_500_twice_then_answer(bot: BotProcess, slack: FakeSlack, llm) -> None:
    bot.start()
    llm.script(Error(500, "boom"), Error(500, "boom again"), Text("Sorry for the wait, here I am."))
    ts = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> are you there?")
    slack.wait_for(lambda: replies_in(slack, ts), what="the reply")
    assert [p["text"] for p in replies_in(slack, ts)] == ["Sorry for the wait, here I am."]
    assert len(llm.requests) == 3
    assert bot.stop() == 0


def test_llm_always_failing_gets_one_apology(bot: BotProcess, slack: FakeSlack, llm) -> None:
    bot.start()
    llm.set_responder(lambda request: Error(500, "down"))
    ts = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> are you there?")
    slack.wait_for(lambda: replies_in(slack, ts), what="the apology")
    time.sleep(0.5)
    replies = replies_in(slack, ts)
    assert len(replies) == 1 and "Sorry" in replies[0]["text"]
    assert "sk-e2e-secret-key" not in bot.log()
    assert bot.stop() == 0


def test_reconnects_after_the_websocket_drops(bot: BotProcess, slack: FakeSlack, llm) -> None:
    bot.start()
    before = slack.connection_count
    slack.disconnect(kind="close")
    slack.wait_for(lambda: slack.connection_count > before and slack.connected, what="a reconnect")
    llm.script(Text("Back again."))
    ts = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> still there?")
    slack.wait_for(lambda: replies_in(slack, ts), what="the reply after reconnecting")
    assert bot.stop() == 0


def test_socket_mode_is_opened_over_the_connection_auth_test_opened(bot: BotProcess, slack: FakeSlack) -> None:
    bot.start()
    ports = slack.web_call_ports
    first = {method: port for method, port in reversed(ports)}  # each method's first call
    assert first["apps.connections.open"] == first["auth.test"]  # one handshake with Slack's Web API, not two
    assert bot.stop() == 0


def test_mention_while_stopped_is_answered_after_start(bot: BotProcess, slack: FakeSlack, llm) -> None:
    early = slack.post_message(GENERAL, BOB, "anyone around?", emit=False)
    mention = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> did you miss me?", emit=False)
    llm.script(Text("I'm back! Sorry I missed you."))
    bot.start()
    slack.wait_for(lambda: replies_in(slack, mention), what="the catch-up reply")
    with sqlite3.connect(bot.database) as db:
        stored = {ts for (ts,) in db.execute("SELECT ts FROM messages WHERE channel_id = ?", (GENERAL,))}
    assert {early, mention} <= stored
    assert bot.stop() == 0


def test_missing_bot_token_exits_2_naming_it(bot: BotProcess) -> None:
    bot.env_overrides["SLACK_BOT_TOKEN"] = None
    bot.start(wait_connected=False)
    assert bot.wait_exit() == 2
    log = bot.log()
    assert "SLACK_BOT_TOKEN" in log and "slack.bot_token" in log
    assert "Traceback" not in log


def test_rejected_token_exits_2_with_an_explanation(bot: BotProcess) -> None:
    bot.env_overrides["SLACK_BOT_TOKEN"] = "xoxb-wrong-token"
    bot.start(wait_connected=False)
    assert bot.wait_exit() == 2
    log = bot.log()
    assert "SLACK_BOT_TOKEN" in log and "Traceback" not in log
    assert "xoxb-wrong-token" not in log


def test_health_endpoints(bot: BotProcess) -> None:
    bot.start()

    def status(path: str) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{bot.health_port}{path}", timeout=30) as response:
                return response.status
        except urllib.error.HTTPError as error:
            return error.code

    assert wait_until(lambda: status("/ready") == 200, what="/ready")
    assert status("/live") == 200
    assert bot.stop() == 0
