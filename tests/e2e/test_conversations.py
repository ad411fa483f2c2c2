"""DMs, edits and deletions, privacy between conversations, concurrency and shutdown, end to end."""

from __future__ import annotations

import json
import threading

from tests.e2e.conftest import ALICE, BOB, GENERAL, ON_BOTH_DATABASES, STOP_SECONDS, BotProcess, wait_until
from tests.e2e.test_mentions import prompt_text, replies_in
from tests.fakes.openai_server import Text, ToolCall, ToolCalls
from tests.fakes.slack_server import FakeSlack

SECRET_ROOM = "GSECRET"
ALICE_DM = "DALICE"


def stored_text(bot: BotProcess, channel: str, ts: str) -> str | None:
    found = bot.rows("SELECT text FROM messages WHERE channel_id = :channel AND ts = :ts", channel=channel, ts=ts)
    return found[0][0] if found else None


@ON_BOTH_DATABASES
def test_a_dm_is_answered_without_a_mention_and_without_a_thread(bot: BotProcess, slack: FakeSlack, llm) -> None:
    slack.add_channel(ALICE_DM, ALICE, is_im=True, members=[ALICE])
    bot.start()
    llm.script(Text("Hey Alice, I'm here."))
    slack.post_message(ALICE_DM, ALICE, "hi, are you around?")
    posts = slack.wait_for_posts(1)
    assert posts[0]["channel"] == ALICE_DM and posts[0]["text"] == "Hey Alice, I'm here."
    assert not posts[0].get("thread_ts")
    assert bot.stop() == 0


def test_nothing_of_a_dm_answer_reaches_the_next_channel_answers_model_request(bot: BotProcess, slack: FakeSlack, llm) -> None:
    """The agent that wrote the DM answer may write the next one (agents are reused): it starts blank."""
    slack.add_channel(ALICE_DM, ALICE, is_im=True, members=[ALICE])
    bot.start()
    memo = {"name": "alice-surgery", "content": "tool-canary-93ab: surgery on Tuesday", "priority": 3}
    llm.script(
        ToolCalls([ToolCall("add_memo", memo)], content="Noting that."),
        Text("answer-canary-52e0: I'll keep it to myself."),
    )
    slack.post_message(ALICE_DM, ALICE, "dm-canary-7c1f: my surgery is on Tuesday")
    slack.wait_for(lambda: any("answer-canary-52e0" in p["text"] for p in slack.posted), what="the DM answer")
    seen = len(llm.requests)

    llm.script(Text("Ramen it is."))
    public = slack.post_message(GENERAL, BOB, f"<@{slack.bot_user_id}> what's for lunch?")
    slack.wait_for(lambda: replies_in(slack, public), what="the reply in the public channel")

    request = llm.requests[seen]
    assert [m["role"] for m in request["messages"]] == ["system", "user"]
    assert "what's for lunch?" in prompt_text(request)
    assert not [c for c in ("dm-canary-7c1f", "answer-canary-52e0", "tool-canary-93ab") if c in json.dumps(request)]
    assert bot.stop() == 0


@ON_BOTH_DATABASES
def test_edits_and_deletions_reach_the_database(bot: BotProcess, slack: FakeSlack) -> None:
    bot.start()
    ts = slack.post_message(GENERAL, BOB, "lunch at 12?")
    wait_until(lambda: stored_text(bot, GENERAL, ts) == "lunch at 12?", what="the message stored")
    slack.edit_message(GENERAL, ts, "lunch at 1?")
    wait_until(lambda: stored_text(bot, GENERAL, ts) == "lunch at 1?", what="the edit stored")
    slack.delete_message(GENERAL, ts)
    wait_until(lambda: stored_text(bot, GENERAL, ts) is None, what="the deletion stored")
    assert bot.stop() == 0


@ON_BOTH_DATABASES
def test_a_memo_from_a_private_channel_never_reaches_another_channel(bot: BotProcess, slack: FakeSlack, llm) -> None:
    slack.add_channel(SECRET_ROOM, "secret-room", is_private=True, members=[ALICE, BOB])
    bot.start()
    llm.script(
        ToolCalls([ToolCall("add_memo", {"name": "surprise-party", "content": "Surprise party for Bob on Friday", "priority": 5})]),
        Text("My lips are sealed."),
    )
    secret = slack.post_message(SECRET_ROOM, ALICE, f"<@{slack.bot_user_id}> we're planning a surprise party for Bob on Friday")
    slack.wait_for(lambda: replies_in(slack, secret), what="the reply in the private channel")

    llm.script(
        ToolCalls([ToolCall("list_memo", {})]),
        Text("Nothing special planned that I know of!"),
    )
    public = slack.post_message(GENERAL, BOB, f"<@{slack.bot_user_id}> anything planned for me on Friday?")
    slack.wait_for(lambda: replies_in(slack, public), what="the reply in the public channel")

    public_requests = [r for r in llm.requests if "anything planned for me on Friday?" in prompt_text(r)]
    assert len(public_requests) == 2  # the first call, and the one after list_memo
    for request in public_requests:
        assert "Surprise party" not in prompt_text(request)
        assert "surprise-party" not in prompt_text(request)
    assert bot.stop() == 0


def test_simultaneous_mentions_are_all_answered(bot: BotProcess, slack: FakeSlack, llm) -> None:
    bot.start()
    llm.set_responder(lambda request: Text("On it!", delay=0.5))
    mentions = [slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> question {i}") for i in range(6)]
    slack.wait_for(lambda: all(replies_in(slack, ts) for ts in mentions), what="six replies")
    assert all(len(replies_in(slack, ts)) == 1 for ts in mentions)
    assert bot.stop() == 0


def test_sigterm_with_an_answer_in_flight_exits_0_without_waiting_for_the_model(bot: BotProcess, slack: FakeSlack,
                                                                                llm) -> None:
    bot.settings["agents.response.timeout_seconds"] = 10 * STOP_SECONDS  # the model call cannot end by itself first
    bot.start()
    llm.set_responder(lambda request: Text("never written", hold=threading.Event()))  # the model never answers
    slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> take your time")
    llm.wait_for_requests(1)
    assert bot.stop() == 0  # by itself: the grace period ended the wait
    assert "unfinished task(s) at shutdown" in bot.log()  # the answer, abandoned


def test_sigterm_while_the_model_libraries_load_exits_without_waiting_for_them(bot: BotProcess) -> None:
    bot.module = "tests.e2e.held_libraries"  # they never finish loading
    bot.start()
    wait_until(lambda: "connected to Slack as" in bot.log(), what="the bot past its connection")  # waiting for them
    assert bot.stop() == 0
    assert "unfinished task(s) at shutdown" not in bot.log()  # no answer was in progress: nothing to wait for
