"""Joining conversations nobody answered, end to end: the bot process against the fake Slack and LLM.

Second-scale settings: a check every 0.25 s, a 1.5 s wait without jitter, no pacing.

A test whose conversation is several messages posts them before the bot starts: the start-up sync stores them
together. Posted live, each is stored as its event is handled, and on a busy machine one (its author's lookup,
say) can be stored more than the wait after another: the conversation is then judged, even answered, without it.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable

from tests.e2e.conftest import ALICE, BOB, GENERAL, BotProcess, wait_until
from tests.fakes.openai_server import FakeOpenAI, Reply, Text, ToolCall, ToolCalls
from tests.fakes.slack_server import FakeSlack

CHECK = 0.25
WAIT = 1.5
FAST = {
    "response.check_interval_seconds": CHECK,
    "response.min_wait_seconds": WAIT,
    "response.jitter_ratio": 0,
    "response.dynamic_wait": {"enabled": False},
    "response.response_interval": {"min": 0, "max": 0},
}


def start(bot: BotProcess, **extra: object) -> BotProcess:
    bot.settings.update(FAST)
    bot.settings.update(extra)
    return bot.start()


def is_judgment(request: dict) -> bool:
    return any(t["function"]["name"] == "JudgmentOutput" for t in request.get("tools") or [])


def prompt_text(request: dict) -> str:
    return "\n".join(
        m["content"] if isinstance(m["content"], str) else json.dumps(m["content"], ensure_ascii=False)
        for m in request["messages"]
        if m.get("content")
    )


def judgment(
    should_respond: bool, confidence: float = 0.8, reason: str = "because", hold: threading.Event | None = None
) -> ToolCalls:
    arguments = {"should_respond": should_respond, "reason": reason, "confidence": confidence}
    return ToolCalls([ToolCall("JudgmentOutput", arguments)], hold=hold)


def responder(judge: Callable[[dict], Reply], write: Callable[[dict], Reply]) -> Callable[[dict], Reply]:
    """Route judgment requests (the JudgmentOutput tool) to `judge`, the rest to `write`."""
    return lambda request: judge(request) if is_judgment(request) else write(request)


def judgments(llm: FakeOpenAI) -> list[dict]:
    return [r for r in llm.requests if is_judgment(r)]


def generations(llm: FakeOpenAI) -> list[dict]:
    return [r for r in llm.requests if not is_judgment(r)]


def stored(bot: BotProcess, ts: str) -> bool:
    with sqlite3.connect(bot.database) as db:
        return db.execute("SELECT count(*) FROM messages WHERE ts = ?", (ts,)).fetchone()[0] > 0


def stored_text(bot: BotProcess, ts: str) -> str | None:
    with sqlite3.connect(bot.database) as db:
        row = db.execute("SELECT text FROM messages WHERE ts = ?", (ts,)).fetchone()
    return row[0] if row else None


def standing(bot: BotProcess, ts: str) -> bool:
    with sqlite3.connect(bot.database) as db:
        return db.execute("SELECT count(*) FROM standing_judgments WHERE newest_ts = ?", (ts,)).fetchone()[0] > 0


def test_lone_question_gets_one_reply_after_the_wait(bot: BotProcess, slack: FakeSlack, llm: FakeOpenAI) -> None:
    llm.set_responder(responder(lambda r: judgment(True), lambda r: Text("Try the place on 5th street!")))
    start(bot)
    ts = slack.post_message(GENERAL, ALICE, "does anyone know a good ramen place?")

    slack.wait_for(lambda: slack.posted, what="the autonomous reply")
    time.sleep(4 * CHECK)  # room for a wrong second reply
    posts = slack.posted
    assert [(p["text"], p["thread_ts"]) for p in posts] == [("Try the place on 5th street!", None)]
    assert float(posts[0]["ts"]) - float(ts) >= WAIT  # posted after the wait, by Slack's clock

    [asked] = judgments(llm)
    text = prompt_text(asked)
    assert "Alice: does anyone know a good ramen place?" in text
    waited = re.search(r"Time since the last message: (\d+) seconds?", text)
    assert waited and int(waited.group(1)) >= int(WAIT)  # judged after the wait (shown in whole seconds)
    assert len(generations(llm)) == 1
    assert bot.stop() == 0


def test_an_autonomous_reply_written_slowly_is_posted_whole_not_streamed(
    bot: BotProcess, slack: FakeSlack, llm: FakeOpenAI
) -> None:
    # Slack asks that streamed messages answer a user request: an autonomous reply never streams, however slow.
    llm.set_responder(responder(lambda r: judgment(True), lambda r: Text("Try the place on 5th street!", pieces=4,
                                                                            interval=0.5)))
    start(bot)
    slack.post_message(GENERAL, ALICE, "does anyone know a good ramen place?")

    [post] = slack.wait_for(lambda: slack.posted, what="the autonomous reply")
    assert (post["method"], post["text"]) == ("chat.postMessage", "Try the place on 5th street!")
    assert slack.streams == [] and "chat.startStream" not in [m for m, _ in slack.web_calls]
    assert bot.stop() == 0


def test_an_autonomous_reply_shows_as_markdown_as_an_answer_does(bot: BotProcess, slack: FakeSlack,
                                                                 llm: FakeOpenAI) -> None:
    # Posted with `text` (Slack's mrkdwn), **Try** and [the place](...) showed literally.
    reply = "**Try** [the place on 5th street](https://example.com/ramen)!"
    llm.set_responder(responder(lambda r: judgment(True), lambda r: Text(reply)))
    start(bot)
    slack.post_message(GENERAL, ALICE, "does anyone know a good ramen place?")

    [post] = slack.wait_for(lambda: slack.posted, what="the autonomous reply")
    assert (post["method"], post["text"], post["markdown"]) == ("chat.postMessage", reply, True)
    assert bot.stop() == 0


def test_lively_exchange_judged_no_is_not_rejudged_until_someone_posts(
    bot: BotProcess, slack: FakeSlack, llm: FakeOpenAI
) -> None:
    llm.set_responder(responder(lambda r: judgment(False, 0.95), lambda r: Text("should never be written")))
    for user, text in [(ALICE, "did you see the match?"), (BOB, "yes! what a goal"), (ALICE, "that last minute"),
                       (BOB, "unreal"), (ALICE, "haha right")]:
        slack.post_message(GENERAL, user, text, emit=False)  # stored together by the start-up sync
    start(bot)

    slack.wait_for(lambda: judgments(llm), what="the first judgment")
    shown = prompt_text(judgments(llm)[0])
    assert "Alice: did you see the match?" in shown and "Bob: unreal" in shown
    time.sleep(8 * CHECK)
    assert len(judgments(llm)) == 1
    assert slack.posted == []

    slack.post_message(GENERAL, BOB, "see you at practice")
    slack.wait_for(lambda: len(judgments(llm)) == 2, what="a judgment of the new state")
    time.sleep(8 * CHECK)
    assert len(judgments(llm)) == 2
    assert "Bob: see you at practice" in prompt_text(judgments(llm)[1])
    assert slack.posted == [] and generations(llm) == []
    assert bot.stop() == 0


def test_thread_and_top_level_are_judged_and_answered_separately(
    bot: BotProcess, slack: FakeSlack, llm: FakeOpenAI
) -> None:
    def write(request: dict) -> Text:
        return Text("thread answer" if "what about the staging db?" in prompt_text(request) else "top answer")

    llm.set_responder(responder(lambda r: judgment(True), write))
    parent = slack.post_message(GENERAL, ALICE, "the deploy failed again", emit=False)  # stored together at start-up
    slack.post_message(GENERAL, BOB, "what about the staging db?", thread_ts=parent, emit=False)
    slack.post_message(GENERAL, BOB, "unrelated: is lunch at noon?", emit=False)
    start(bot)

    slack.wait_for(lambda: len(slack.posted) >= 2, what="two autonomous replies")
    time.sleep(4 * CHECK)
    posts = sorted((p["text"], p["thread_ts"]) for p in slack.posted)
    assert posts == [("thread answer", parent), ("top answer", None)]

    asked = [prompt_text(r) for r in judgments(llm)]
    assert len(asked) == 2
    thread_prompt = next(t for t in asked if "what about the staging db?" in t)
    top_prompt = next(t for t in asked if "is lunch at noon?" in t)
    assert "is lunch at noon?" not in thread_prompt
    assert "what about the staging db?" not in top_prompt
    assert bot.stop() == 0


INVALID = {
    "general": Text("Yes, I think I should respond."),
    "dev": ToolCalls([ToolCall("JudgmentOutput", '{"should_respond": "maybe", "confid')]),
    "qa": ToolCalls([ToolCall("JudgmentOutput", {"should_respond": True, "confidence": 7})]),
}


def test_invalid_judgment_output_means_no_reply_and_no_storm(
    bot: BotProcess, slack: FakeSlack, llm: FakeOpenAI
) -> None:
    """Plain text, broken JSON and out-of-schema arguments, one kind per channel."""
    slack.add_channel("CDEV", "dev", members=[ALICE, BOB])
    slack.add_channel("CQA", "qa", members=[ALICE, BOB])

    def judge(request: dict) -> Reply:
        where = re.search(r"Where: #(\w+)", prompt_text(request))
        return INVALID[where.group(1)]

    llm.set_responder(responder(judge, lambda r: Text("should never be written")))
    start(bot)
    for channel in (GENERAL, "CDEV", "CQA"):
        slack.post_message(channel, ALICE, "is the coffee machine fixed?")

    def calls_by_channel() -> Counter[str]:
        return Counter(re.search(r"Where: #(\w+)", prompt_text(r)).group(1) for r in llm.requests)

    # Three requests need not be one per channel: a channel's second call may come before another's first.
    slack.wait_for(lambda: set(calls_by_channel()) == set(INVALID), what="a judgment in each channel")
    time.sleep(10 * CHECK)  # room for a storm
    calls = calls_by_channel()
    assert all(1 <= n <= 2 for n in calls.values()), f"at most two model calls per conversation state: {calls}"
    assert all(is_judgment(r) for r in llm.requests)
    assert slack.posted == []
    assert bot.process.poll() is None
    assert "Traceback" not in bot.log()
    assert bot.stop() == 0


def test_mention_is_answered_during_a_slow_autonomous_reply(bot: BotProcess, slack: FakeSlack, llm: FakeOpenAI) -> None:
    written = threading.Event()

    def write(request: dict) -> Text:
        if "quick one" in prompt_text(request):
            return Text("mention answer")
        return Text("slow answer", hold=written)  # written until the mention is answered

    llm.set_responder(responder(lambda r: judgment(True), write))
    slack.add_channel("CDEV", "dev", members=[ALICE, BOB])
    start(bot, **{"agents.response.timeout_seconds": 120})  # the slow reply is not cut by the model's timeout
    slack.post_message(GENERAL, ALICE, "what should we do this weekend?")
    slack.wait_for(lambda: generations(llm), what="the slow autonomous generation to start")

    # In another channel: a post in #general would make the slow reply stale, and it would be dropped.
    mention = slack.post_message("CDEV", BOB, f"<@{slack.bot_user_id}> quick one: are you there?")
    slack.wait_for(lambda: any(p["thread_ts"] == mention for p in slack.posted), what="the mention reply")
    answered = next(p for p in slack.posted if p["thread_ts"] == mention)
    assert answered["text"] == "mention answer"

    written.set()
    slack.wait_for(lambda: len(slack.posted) >= 2, what="the slow autonomous reply")
    assert [(p["text"], p["thread_ts"]) for p in slack.posted] == [("mention answer", mention), ("slow answer", None)]
    assert bot.stop() == 0


def test_never_answers_itself_other_bots_or_excluded_channels(
    bot: BotProcess, slack: FakeSlack, llm: FakeOpenAI
) -> None:
    slack.add_user("UOTHER", "deploybot", is_bot=True, bot_id="BOTHER")
    slack.add_channel("CDEV", "dev", members=[ALICE, BOB])
    slack.add_channel("CRANDOM", "random", members=[ALICE, BOB])
    slack.add_channel("CQA", "qa", members=[ALICE, BOB])
    llm.set_responder(responder(lambda r: judgment(True), lambda r: Text("answer")))
    # All in history when the bot starts: stored together (and bolt drops the echo of the bot's own posts).
    slack.post_message("CDEV", slack.bot_user_id, "myao here, anyone need help?", bot_id=slack.bot_id, emit=False)
    parent = slack.post_message(GENERAL, ALICE, "deploy status?", emit=False)
    slack.post_message(GENERAL, "UOTHER", "Deploy finished, anything else?", thread_ts=parent, bot_id="BOTHER", emit=False)
    slack.post_message("CRANDOM", ALICE, "is anyone here?", emit=False)
    slack.post_message("CQA", BOB, "what time is the meeting?", emit=False)  # the control: this one is answered
    start(bot, **{"response.channels": {"exclude": ["random"]}})

    slack.wait_for(lambda: slack.posted, what="the answer in #qa")
    time.sleep(6 * CHECK)
    assert [(p["channel"], p["text"]) for p in slack.posted] == [("CQA", "answer")]
    [asked] = judgments(llm)
    assert "what time is the meeting?" in prompt_text(asked)
    with sqlite3.connect(bot.database) as db:  # the skipped messages were seen, not missed
        seen = {text for (text,) in db.execute("SELECT text FROM messages")}
    assert {"Deploy finished, anything else?", "myao here, anyone need help?", "is anyone here?"} <= seen
    assert bot.stop() == 0


def test_a_reply_made_stale_by_a_new_message_is_not_posted(bot: BotProcess, slack: FakeSlack, llm: FakeOpenAI) -> None:
    def judge(request: dict) -> Reply:
        return judgment("by the station" not in prompt_text(request), confidence=0.95)

    written = threading.Event()
    llm.set_responder(responder(judge, lambda r: Text("slow answer", hold=written)))
    start(bot, **{"agents.response.timeout_seconds": 120})  # the slow reply is not cut by the model's timeout
    slack.post_message(GENERAL, ALICE, "anyone know a good ramen place?")
    slack.wait_for(lambda: generations(llm), what="the autonomous generation to start")
    later = slack.post_message(GENERAL, BOB, "try the one by the station")
    wait_until(lambda: stored(bot, later), what="the new message stored while the reply is written")
    written.set()
    # The new state is judged once the stale reply is done with (one consideration at a time per conversation).
    slack.wait_for(lambda: len(judgments(llm)) == 2, what="the new state judged")
    assert "someone spoke while the reply was written" in bot.log()
    assert len(generations(llm)) == 1
    assert slack.posted == []
    assert bot.stop() == 0


def test_after_a_restart_only_conversations_with_something_new_are_judged(
    bot: BotProcess, slack: FakeSlack, llm: FakeOpenAI
) -> None:
    def where(request: dict) -> str:
        return re.search(r"Where: #(\w+)", prompt_text(request)).group(1)

    slack.add_channel("CDEV", "dev", members=[ALICE, BOB])
    llm.set_responder(responder(lambda r: judgment(False, 0.95), lambda r: Text("should never be written")))
    start(bot)
    slack.post_message(GENERAL, ALICE, "did you see the match?")
    slack.post_message("CDEV", BOB, "the build is green again")
    slack.wait_for(lambda: len(judgments(llm)) == 2, what="a judgment in each channel")
    assert sorted(where(r) for r in judgments(llm)) == ["dev", "general"]
    assert bot.stop() == 0

    before = len(llm.requests)
    start(bot)
    slack.post_message("CDEV", ALICE, "nice, merging now")
    slack.wait_for(lambda: len(judgments(llm)) > 2, what="the judgment of the new message")
    time.sleep(8 * CHECK)  # room for a judgment of #general, unchanged since its own
    after = [where(r) for r in llm.requests[before:]]
    assert after == ["dev"], f"only the conversation with a new message is judged again: {after}"
    assert "Alice: nice, merging now" in prompt_text(judgments(llm)[-1])
    assert bot.stop() == 0


def test_an_edit_of_the_newest_message_is_judged_once_more(bot: BotProcess, slack: FakeSlack, llm: FakeOpenAI) -> None:
    llm.set_responder(responder(lambda r: judgment(False, 0.95), lambda r: Text("should never be written")))
    start(bot)
    older = slack.post_message(GENERAL, ALICE, "lunch at noon?")
    newest = slack.post_message(GENERAL, BOB, "anyone know a good ramen place?")
    slack.wait_for(lambda: judgments(llm), what="the first judgment")
    wait_until(lambda: standing(bot, newest), what="the judgment to stand")

    slack.edit_message(GENERAL, older, "lunch at one?")
    wait_until(lambda: stored_text(bot, older) == "lunch at one?", what="the edit of the older message stored")
    time.sleep(8 * CHECK)  # room for a wrong judgment
    assert len(judgments(llm)) == 1, "an older message edited: the judgment stands"

    slack.edit_message(GENERAL, newest, "anyone know a good ramen place near the station?")
    slack.wait_for(lambda: len(judgments(llm)) == 2, what="a judgment of the edited message")
    assert "Bob: anyone know a good ramen place near the station?" in prompt_text(judgments(llm)[1])
    time.sleep(8 * CHECK)  # room for a third
    assert len(judgments(llm)) == 2, "one edit, one judgment"
    assert slack.posted == [] and generations(llm) == []
    assert bot.stop() == 0


def test_an_edit_of_the_newest_message_while_it_is_judged_is_judged_once_more(
    bot: BotProcess, slack: FakeSlack, llm: FakeOpenAI
) -> None:
    edited = threading.Event()
    llm.set_responder(responder(lambda r: judgment(False, 0.95, hold=edited), lambda r: Text("should never be written")))
    start(bot)
    newest = slack.post_message(GENERAL, BOB, "anyone know a good ramen place?")
    slack.wait_for(lambda: judgments(llm), what="the judgment of the first text")
    slack.edit_message(GENERAL, newest, "anyone know a good ramen place near the station?")
    wait_until(lambda: stored_text(bot, newest).endswith("the station?"), what="the edit stored while judged")
    edited.set()  # the judgment of the old text comes back after the edit

    slack.wait_for(lambda: len(judgments(llm)) == 2, what="a judgment of the edited message")
    assert "Bob: anyone know a good ramen place near the station?" in prompt_text(judgments(llm)[1])
    wait_until(lambda: standing(bot, newest), what="the judgment of the edited text to stand")
    time.sleep(8 * CHECK)  # room for a third
    assert len(judgments(llm)) == 2, "one edit, one judgment"
    assert slack.posted == [] and generations(llm) == []
    assert bot.stop() == 0
