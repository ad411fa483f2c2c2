"""Every mention answered exactly once: crashes, deploys, Slack errors, lost events, a replaced database."""

from __future__ import annotations

import json
import signal
import sqlite3
import threading
import time
import urllib.error
import urllib.request

import pytest

from tests.e2e.conftest import ALICE, BOB, GENERAL, STOP_SECONDS, BotProcess, wait_until
from tests.fakes.openai_server import FakeOpenAI, Text
from tests.fakes.slack_server import FakeSlack

QUICK_RETRIES = {"response.answer_retry_seconds": [1, 1, 1], "memory.replica_lease_seconds": 2}
"""Quick retries; a killed bot's unanswered mentions pass to its successor 2 s after its last sign of life."""


def answers_to(slack: FakeSlack, ts: str) -> list[dict]:
    """The bot's posts marked as the answer to message `ts`."""
    return [p for p in slack.posted if (p.get("metadata") or {}).get("event_payload", {}).get("answers") == ts]


def settled(bot: BotProcess, ts: str) -> str | None:
    """The answer ts the bot's database records for message `ts`, once settled."""
    try:
        with sqlite3.connect(bot.database) as db:
            row = db.execute("SELECT answer_ts FROM claims WHERE ts = ? AND settled_at IS NOT NULL", (ts,)).fetchone()
    except sqlite3.Error:
        return None
    return row[0] if row else None


def ready_status(bot: BotProcess) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{bot.health_port}/ready", timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def mention(slack: FakeSlack, text: str = "are you there?", channel: str = GENERAL, user: str = ALICE) -> str:
    return slack.post_message(channel, user, f"<@{slack.bot_user_id}> {text}")


def test_sigkill_while_the_model_writes_then_restart_gives_one_answer(
    bot: BotProcess, slack: FakeSlack, llm: FakeOpenAI
) -> None:
    bot.settings.update(QUICK_RETRIES)
    llm.script(Text("never delivered", delay=30))
    llm.set_responder(lambda request: Text("Here I am."))
    bot.start()
    ts = mention(slack)
    llm.wait_for_requests(1)
    bot.kill()

    bot.start()
    slack.wait_for(lambda: answers_to(slack, ts), what="the answer after the restart")
    wait_until(lambda: settled(bot, ts), what="the claim settled")
    time.sleep(2.5)  # a retry round more: room for a second answer to show up
    assert [p["text"] for p in answers_to(slack, ts)] == ["Here I am."]
    assert [p["thread_ts"] for p in slack.posted] == [ts]
    assert bot.stop() == 0


def test_sigkill_after_the_post_landed_but_before_it_was_recorded_gives_one_answer(
    bot: BotProcess, slack: FakeSlack, llm: FakeOpenAI
) -> None:
    bot.settings.update(QUICK_RETRIES)
    bot.settings["response.streaming"] = False  # the whole-post path; streams: test_streaming.py
    llm.set_responder(lambda request: Text("Here I am."))
    bot.start()
    slack.inject_delay("chat.postMessage", 30)  # Slack stores the post, the bot never hears back
    ts = mention(slack)
    slack.wait_for(lambda: answers_to(slack, ts), what="the post to land")
    bot.kill()
    assert settled(bot, ts) is None

    bot.start()
    answer = answers_to(slack, ts)[0]["ts"]
    wait_until(lambda: settled(bot, ts) == answer, what="the claim settled with the posted answer")
    time.sleep(2.5)
    assert len(answers_to(slack, ts)) == 1 and len(slack.posted) == 1
    assert len(llm.requests) == 1
    assert bot.stop() == 0


@pytest.mark.parametrize("method", ["chat.postMessage", "chat.startStream"])
@pytest.mark.parametrize("failure", ["dropped", "500", "internal_error"])
def test_a_call_failing_after_slack_took_the_answer_gives_one_answer(
    bot: BotProcess, slack: FakeSlack, llm: FakeOpenAI, method: str, failure: str
) -> None:
    bot.settings.update(QUICK_RETRIES)
    bot.settings["response.streaming"] = method == "chat.startStream"
    llm.set_responder(lambda request: Text("Here I am.", interval=0.5))  # written slowly: streamed, if it may be
    bot.start()
    # Slack posts (starts) the answer, then the connection drops before it answers, or it answers 500.
    if failure == "dropped":
        slack.inject_drop(method)
    elif failure == "500":
        slack.inject_server_error(method, 500, after=True)
    else:  # HTTP 200, and Slack says some of the work may be done
        slack.inject_error(method, failure, after=True)
    ts = mention(slack)

    answer = wait_until(lambda: settled(bot, ts), what="the claim settled")
    time.sleep(2.5)  # a retry round more: room for a second answer to show up
    [message] = [m for m in slack.messages(GENERAL) if m.get("user") == slack.bot_user_id]
    assert message["ts"] == answer and message["thread_ts"] == ts
    assert message["text"] == "Here I am."  # a stream whose ts was never heard is found, and goes on there
    assert [p["ts"] for p in answers_to(slack, ts)] == [answer]
    assert [m for m, _ in slack.web_calls].count(method) == 1  # looked up, not sent again
    assert all(not s["streaming"] for s in slack.streams) and len(llm.requests) == 1
    assert bot.stop() == 0


def test_two_mentions_in_a_thread_whose_streams_started_unheard_are_each_answered_whole_by_their_own(
    bot: BotProcess, slack: FakeSlack, llm: FakeOpenAI
) -> None:
    bot.settings.update(QUICK_RETRIES)

    def answer(request: dict) -> Text:
        text = "The answer to the second one." if "second one" in json.dumps(request) else "The answer to the first one."
        return Text(text, pieces=3, interval=0.5)  # written slowly: streamed

    llm.set_responder(answer)
    bot.start()
    slack.inject_drop("chat.startStream", times=2)  # both streams start in Slack, neither ts is heard
    first = mention(slack, "the first one?")
    slack.wait_for(lambda: slack.streams, what="the first answer's stream")  # its prompt is read: no second one
    second = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> and the second one?", thread_ts=first)

    wait_until(lambda: settled(bot, first) and settled(bot, second), what="both claims settled")
    time.sleep(2.5)  # a retry round more: room for a second answer or an apology to show up
    texts = {m["ts"]: m["text"] for m in slack.messages(GENERAL) if m.get("user") == slack.bot_user_id}
    assert texts == {settled(bot, first): "The answer to the first one.", settled(bot, second): "The answer to the second one."}
    assert [p["ts"] for p in answers_to(slack, first)] == [settled(bot, first)]
    assert [p["ts"] for p in answers_to(slack, second)] == [settled(bot, second)]
    assert all(not s["streaming"] for s in slack.streams) and len(slack.streams) == 2
    assert bot.stop() == 0


def test_sigterm_while_the_model_writes_then_restart_gives_one_answer(
    bot: BotProcess, slack: FakeSlack, llm: FakeOpenAI
) -> None:
    bot.settings["agents.response.timeout_seconds"] = 10 * STOP_SECONDS  # the model call cannot end by itself first
    llm.script(Text("never written", hold=threading.Event()))  # the model never answers
    llm.set_responder(lambda request: Text("Here I am."))
    bot.start()
    ts = mention(slack)
    llm.wait_for_requests(1)
    assert bot.stop() == 0  # by itself: the grace period ended the wait
    assert answers_to(slack, ts) == []  # nothing half-posted

    bot.start()
    slack.wait_for(lambda: answers_to(slack, ts), what="the answer after the restart")
    wait_until(lambda: settled(bot, ts), what="the claim settled")
    time.sleep(2.5)
    assert [p["text"] for p in answers_to(slack, ts)] == ["Here I am."]
    assert bot.stop() == 0


def test_sigterm_lets_an_answer_in_progress_finish(bot: BotProcess, slack: FakeSlack, llm: FakeOpenAI) -> None:
    written = threading.Event()
    llm.script(Text("Just in time.", hold=written))
    bot.start()
    ts = mention(slack)
    llm.wait_for_requests(1)
    bot.process.send_signal(signal.SIGTERM)  # while the model writes: the answer ends within the grace period
    written.set()
    assert bot.stop() == 0
    assert [p["text"] for p in answers_to(slack, ts)] == ["Just in time."]
    assert settled(bot, ts) == answers_to(slack, ts)[0]["ts"]

    bot.start()
    time.sleep(3)
    assert len(answers_to(slack, ts)) == 1 and len(llm.requests) == 1
    assert bot.stop() == 0


def test_post_failing_once_then_six_429s_gives_one_answer(bot: BotProcess, slack: FakeSlack, llm: FakeOpenAI) -> None:
    llm.set_responder(lambda request: Text("Finally through."))
    bot.settings["response.streaming"] = False  # the whole-post path; streams: test_streaming.py
    bot.start()
    slack.inject_error("chat.postMessage", "internal_error")
    slack.inject_rate_limit("chat.postMessage", times=6, retry_after=1)
    ts = mention(slack)
    slack.wait_for(lambda: answers_to(slack, ts), what="the answer")
    wait_until(lambda: settled(bot, ts), what="the claim settled")
    time.sleep(2.5)
    assert [p["text"] for p in slack.posted] == ["Finally through."]
    posts = [name for name, _ in slack.web_calls if name == "chat.postMessage"]
    assert len(posts) == 8
    assert bot.stop() == 0


@pytest.mark.parametrize(("method", "error"), [("chat.postMessage", "msg_too_long"), ("chat.startStream", "invalid_blocks")])
def test_an_answer_slack_refuses_once_is_written_again_by_the_next_attempt(
    bot: BotProcess, slack: FakeSlack, llm: FakeOpenAI, method: str, error: str
) -> None:
    bot.settings.update(QUICK_RETRIES)
    bot.settings["response.streaming"] = method == "chat.startStream"
    llm.set_responder(lambda request: Text("Here I am.", interval=0.5))  # written slowly: streamed, if it may be
    bot.start()
    slack.inject_error(method, error)  # no passing failure: the attempt fails, nothing shows
    ts = mention(slack)
    answer = wait_until(lambda: settled(bot, ts), what="the claim settled")
    time.sleep(2.5)  # a retry round more: room for a second answer to show up
    [message] = [m for m in slack.messages(GENERAL) if m.get("user") == slack.bot_user_id]
    assert (message["ts"], message["text"]) == (answer, "Here I am.")
    assert [m for m, _ in slack.web_calls].count(method) == 2 and len(llm.requests) == 2
    assert bot.stop() == 0


def test_with_no_catch_up_window_an_answer_that_failed_is_still_written_again(
    bot: BotProcess, slack: FakeSlack, llm: FakeOpenAI
) -> None:
    """`mention_catchup_seconds: 0` takes up nothing missed, but the answer the bot owes is not left silent."""
    bot.settings.update(QUICK_RETRIES)
    bot.settings["response.mention_catchup_seconds"] = 0
    bot.settings["response.streaming"] = False
    llm.set_responder(lambda request: Text("Second time lucky."))
    bot.start()
    slack.inject_error("chat.postMessage", "msg_too_long")  # no passing failure: the attempt fails, nothing shows
    ts = mention(slack)
    answer = wait_until(lambda: settled(bot, ts), what="the claim settled")
    [message] = [m for m in slack.messages(GENERAL) if m.get("user") == slack.bot_user_id]
    assert (message["ts"], message["text"]) == (answer, "Second time lucky.")
    assert bot.stop() == 0


def test_a_failing_reaction_never_holds_the_answer(bot: BotProcess, slack: FakeSlack, llm: FakeOpenAI) -> None:
    llm.set_responder(lambda request: Text("Here anyway.", delay=1.5))  # slow: the reaction is sent first
    bot.start()
    slack.inject_rate_limit("reactions.add", times=20, retry_after=40)  # a reaction stuck for minutes
    ts = mention(slack)
    slack.wait_for(lambda: answers_to(slack, ts), what="the answer, without its reaction")
    assert "reactions.add" in [method for method, _ in slack.web_calls] and slack.reactions == []
    assert bot.stop() == 0


def test_a_mention_lost_to_a_users_info_failure_is_answered_by_the_periodic_sync(
    bot: BotProcess, slack: FakeSlack, llm: FakeOpenAI
) -> None:
    bot.settings["response.history_sync_interval_seconds"] = 3
    llm.set_responder(lambda request: Text("Nice to meet you, Carol."))
    slack.add_user("UCAROL", "carol", display_name="Carol")
    bot.start()
    # the start-up sync has read #general (its answer made under the fake's lock): the mention is not in it
    slack.wait_for(
        lambda: [p for m, p in slack.web_calls if m == "conversations.history" and p["channel"] == GENERAL],
        what="the start-up sync's read of #general",
    )
    slack.inject_error("users.info", "internal_error", times=4)  # the first lookup and its three retries
    ts = mention(slack, "hi, I am new here", user="UCAROL")
    slack.wait_for(lambda: answers_to(slack, ts), what="the answer from the periodic sync")
    assert [p["text"] for p in answers_to(slack, ts)] == ["Nice to meet you, Carol."]
    lookups = [params["user"] for name, params in slack.web_calls if name == "users.info"]
    assert lookups.count("UCAROL") >= 5  # the live event's lookup and its retries failed; the sync's did not
    assert bot.stop() == 0


def test_a_mention_in_a_reply_to_a_thread_older_than_the_synced_span_is_answered_once_from_the_history(
    bot: BotProcess, slack: FakeSlack, llm: FakeOpenAI
) -> None:
    # The reply's event is lost; conversations.history lists only the thread's parent, posted days before the span
    # the sync reads (response.max_message_age_seconds). The sync finds the reply from the parent's latest_reply.
    bot.settings["response.history_sync_interval_seconds"] = 1
    llm.set_responder(lambda request: Text("Yes, still on."))
    days_ago = lambda days: f"{time.time() - days * 86400:.6f}"  # noqa: E731
    parent = slack.post_message(GENERAL, ALICE, "the spring trip", ts=days_ago(3), emit=False)
    slack.post_message(GENERAL, ALICE, "dates to follow", thread_ts=parent, ts=days_ago(2), emit=False)
    bot.start()
    ts = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> is it still on?", thread_ts=parent, emit=False)

    slack.wait_for(lambda: answers_to(slack, ts), what="the answer found from the history")
    wait_until(lambda: settled(bot, ts), what="the claim settled")
    reads = thread_reads(slack, parent)
    slack.wait_for(lambda: thread_reads(slack, parent) >= reads + 2, what="two more syncs reading the thread")
    assert [(p["text"], p["thread_ts"]) for p in answers_to(slack, ts)] == [("Yes, still on.", parent)]
    assert len(slack.posted) == 1 and len(llm.requests) == 1
    assert bot.stop() == 0


def test_a_mention_in_a_reply_to_a_thread_older_than_the_history_pages_read_is_answered_once(
    bot: BotProcess, slack: FakeSlack, llm: FakeOpenAI
) -> None:
    # As above, but 200 top-level messages posted since the thread's parent fill the history page the sync reads:
    # Slack lists the parent on no page read, and the sync asks about the thread because the store knows of a
    # reply under it posted in the span.
    bot.settings["response.history_sync_interval_seconds"] = 1
    bot.settings["response.check_interval_seconds"] = 3600  # the reply Bob posts live is no autonomous model call
    llm.set_responder(lambda request: Text("Yes, still on."))
    days_ago = lambda days: f"{time.time() - days * 86400:.6f}"  # noqa: E731
    parent = slack.post_message(GENERAL, ALICE, "the spring trip", ts=days_ago(3), emit=False)
    for i in range(200):
        slack.post_message(GENERAL, BOB, f"chatter {i}", ts=days_ago(2 - i / 1000), emit=False)
    bot.start()
    known = slack.post_message(GENERAL, BOB, "dates to follow", thread_ts=parent)
    wait_until(lambda: bot.rows("SELECT ts FROM messages WHERE ts = :ts", ts=known), what="the reply stored")
    ts = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> is it still on?", thread_ts=parent, emit=False)

    slack.wait_for(lambda: answers_to(slack, ts), what="the answer found from the thread")
    wait_until(lambda: settled(bot, ts), what="the claim settled")
    reads = thread_reads(slack, parent)
    slack.wait_for(lambda: thread_reads(slack, parent) >= reads + 2, what="two more syncs reading the thread")
    assert [(p["text"], p["thread_ts"]) for p in answers_to(slack, ts)] == [("Yes, still on.", parent)]
    assert len(slack.posted) == 1 and len(llm.requests) == 1
    assert bot.stop() == 0


def thread_reads(slack: FakeSlack, thread_ts: str) -> int:
    """How many times the bot read thread `thread_ts` (conversations.replies)."""
    return sum(name == "conversations.replies" and params.get("ts") == thread_ts for name, params in slack.web_calls)


def test_a_replaced_database_turns_ready_to_503_and_old_answers_are_not_repeated(
    bot: BotProcess, slack: FakeSlack, llm: FakeOpenAI
) -> None:
    slack.add_channel("DALICE", "alice", is_im=True, members=[ALICE])
    llm.set_responder(lambda request: Text("Answered."))
    bot.start()
    in_dm = slack.post_message("DALICE", ALICE, "hello, are you there?")
    in_channel = mention(slack)
    slack.wait_for(lambda: answers_to(slack, in_dm) and answers_to(slack, in_channel), what="both answers")
    wait_until(lambda: settled(bot, in_dm) and settled(bot, in_channel), what="both claims settled")
    assert wait_until(lambda: ready_status(bot) == 200, what="/ready 200")

    for suffix in ("", "-wal", "-shm"):
        bot.database.with_name(bot.database.name + suffix).unlink(missing_ok=True)
    sqlite3.connect(bot.database).close()  # an empty file in its place
    assert wait_until(lambda: ready_status(bot) == 503, what="/ready 503")
    assert "replaced" in bot.log()
    assert bot.stop() == 0

    bot.start()  # a fresh database: the history brings both messages back, unclaimed
    wait_until(lambda: settled(bot, in_dm) and settled(bot, in_channel), what="both found answered")
    assert settled(bot, in_dm) == answers_to(slack, in_dm)[0]["ts"]
    time.sleep(1)
    assert len(slack.posted) == 2 and len(llm.requests) == 2
    assert bot.stop() == 0


def settled_unanswered(bot: BotProcess, ts: str) -> bool:
    """Whether the claim of message `ts` is settled with no answer."""
    return bot.rows("SELECT answer_ts FROM claims WHERE ts = :ts AND settled_at IS NOT NULL", ts=ts) == [(None,)]


def answer_calls(slack: FakeSlack) -> list[str]:
    """The Web API calls that would show an answer (taken by Slack or refused)."""
    return [method for method, _ in slack.web_calls if method in ("chat.postMessage", "chat.startStream")]


@pytest.mark.parametrize("replied", [False, True], ids=["deleted", "deleted after a reply: a tombstone"])
def test_a_mention_deleted_while_its_answer_is_written_is_not_answered(
    bot: BotProcess, slack: FakeSlack, llm: FakeOpenAI, replied: bool
) -> None:
    bot.settings.update(QUICK_RETRIES)
    bot.settings["response.check_interval_seconds"] = 3600  # a reply is no autonomous model call
    written = threading.Event()
    llm.script(Text("Too late.", hold=written))
    llm.set_responder(lambda request: Text("A second answer that must not appear."))
    bot.start()
    ts = mention(slack)
    llm.wait_for_requests(1)
    if replied:  # Slack leaves a tombstone in its place, and would take an answer in its thread
        reply = slack.post_message(GENERAL, BOB, "what she said", thread_ts=ts)
        wait_until(lambda: bot.rows("SELECT ts FROM messages WHERE ts = :ts", ts=reply), what="the reply stored")
        slack.delete_thread_parent(GENERAL, ts)
    else:
        slack.delete_message(GENERAL, ts)  # the person takes it back
    wait_until(lambda: not bot.rows("SELECT ts FROM messages WHERE ts = :ts", ts=ts), what="the deletion stored")
    written.set()

    wait_until(lambda: settled_unanswered(bot, ts), what="the claim settled unanswered")
    time.sleep(2.5)  # a retry round more: room for an answer or an apology to show up
    assert answer_calls(slack) == [] and len(llm.requests) == 1
    assert bot.stop() == 0


@pytest.mark.parametrize("method", ["chat.postMessage", "chat.startStream"])
def test_a_mention_deleted_unheard_before_its_answer_is_given_up_once_slack_refuses_its_thread(
    bot: BotProcess, slack: FakeSlack, llm: FakeOpenAI, method: str
) -> None:
    bot.settings.update(QUICK_RETRIES)
    written = threading.Event()
    pace = {"interval": 0.5} if method == "chat.startStream" else {}  # written slowly: streamed
    llm.script(Text("Too late.", hold=written, **pace))
    llm.set_responder(lambda request: Text("A second answer that must not appear."))
    bot.start()
    ts = mention(slack)
    llm.wait_for_requests(1)
    slack.delete_message(GENERAL, ts, emit=False)  # its event lost: the bot learns of it from Slack's refusal
    written.set()

    wait_until(lambda: settled_unanswered(bot, ts), what="the claim settled unanswered")
    time.sleep(2.5)  # a retry round more: room for another attempt or an apology
    assert answer_calls(slack) == [method] and len(llm.requests) == 1  # refused once: thread_not_found
    assert not [m for m in slack.messages(GENERAL) if m.get("user") == slack.bot_user_id]
    assert bot.log().count("thread_not_found") == 1
    assert bot.stop() == 0


def test_an_answer_streaming_when_its_mention_is_deleted_ends_normally(
    bot: BotProcess, slack: FakeSlack, llm: FakeOpenAI
) -> None:
    bot.settings.update(QUICK_RETRIES)
    rest = threading.Event()
    llm.script(Text("Already on my way, here it is.", pieces=3, hold=rest, hold_after=1))
    llm.set_responder(lambda request: Text("A second answer that must not appear."))
    bot.start()
    ts = mention(slack)
    slack.wait_for(lambda: slack.streams, what="the answer streaming")
    wait_until(lambda: bot.rows("SELECT answer_ts FROM claims WHERE ts = :ts", ts=ts) != [(None,)], what="its ts recorded")
    slack.delete_message(GENERAL, ts)  # the stream lives on in the thread under the deleted message
    wait_until(lambda: not bot.rows("SELECT ts FROM messages WHERE ts = :ts", ts=ts), what="the deletion stored")
    rest.set()

    [stream] = slack.streams
    wait_until(lambda: settled(bot, ts) == stream["ts"], what="the claim settled with the stream")
    assert not slack.streams[0]["streaming"]
    assert [m["text"] for m in slack.messages(GENERAL) if m.get("user") == slack.bot_user_id] == [
        "Already on my way, here it is."
    ]
    assert answer_calls(slack) == ["chat.startStream"] and len(llm.requests) == 1
    assert bot.stop() == 0

