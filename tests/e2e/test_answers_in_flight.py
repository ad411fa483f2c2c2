"""Answers in flight: a kill at each step of a streamed answer, Slack refusing some of its calls, mentions together."""

from __future__ import annotations

import json
import sqlite3
import time
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from tests.e2e.conftest import ALICE, BOB, GENERAL, ON_BOTH_DATABASES, BotProcess, wait_until
from tests.e2e.test_answers_exactly_once import QUICK_RETRIES, answers_to, mention, settled
from tests.e2e.test_streaming import STORY, finished, streaming_answer, streams_in
from tests.fakes.openai_server import FakeOpenAI, Raw, Text, ToolCall, ToolCalls
from tests.fakes.slack_server import FakeSlack

APOLOGY = "Sorry, I can't seem to think straight right now. Could you ask me again in a little while?"
"""The apology of the bot's persona in English, its default."""


def bot_messages(slack: FakeSlack, channel: str = GENERAL) -> list[dict]:
    return [m for m in slack.messages(channel) if m.get("user") == slack.bot_user_id]


def settled_in(bot: BotProcess, ts: str) -> str | None:
    """`settled` on either kind of database the bot stores in: the answer ts recorded for message `ts`, once settled."""
    found = bot.rows("SELECT answer_ts FROM claims WHERE ts = :ts AND settled_at IS NOT NULL", ts=ts)
    return found[0][0] if found else None


def test_sigkill_after_the_stream_stopped_but_before_it_was_recorded_gives_one_answer(
    bot: BotProcess, slack: FakeSlack, llm: FakeOpenAI
) -> None:
    bot.settings.update(QUICK_RETRIES)
    llm.script(Text("The one and only answer.", pieces=3, interval=0.5))  # written slowly: streamed
    llm.set_responder(lambda request: Text("A second answer that must not appear."))
    bot.start()
    slack.inject_delay("chat.stopStream", 30)  # Slack stops the stream, the bot never hears back
    ts = mention(slack)
    slack.wait_for(lambda: finished(slack, ts), what="the stream stopped")
    bot.kill()

    bot.start()
    wait_until(lambda: settled(bot, ts), what="the claim settled")
    time.sleep(2.5)  # a retry round more: room for a second answer to show up
    [stream] = streams_in(slack, ts)
    assert settled(bot, ts) == stream["ts"]
    assert [m["text"] for m in bot_messages(slack)] == ["The one and only answer."]
    assert [p["ts"] for m, p in slack.web_calls if m == "chat.stopStream"] == [stream["ts"]]  # stopped once
    assert len(llm.requests) == 1
    assert bot.stop() == 0


@ON_BOTH_DATABASES
def test_sigkill_after_slack_started_the_stream_but_before_the_bot_heard_its_ts_gives_one_answer(
    bot: BotProcess, slack: FakeSlack, llm: FakeOpenAI
) -> None:
    bot.settings.update(QUICK_RETRIES)
    llm.script(Text("The first words of an answer cut short", pieces=4, interval=0.5))  # written slowly: streamed
    llm.set_responder(lambda request: Text("A second answer that must not appear."))
    bot.start()
    slack.inject_delay("chat.startStream", 60)  # Slack starts the stream, the bot never hears its ts
    ts = mention(slack)
    slack.wait_for(lambda: streams_in(slack, ts), what="the stream started in Slack")
    bot.kill()

    bot.start()

    wait_until(lambda: settled_in(bot, ts), what="the claim settled")
    time.sleep(2.5)  # a retry round more: room for a second answer to show up
    [stream] = streams_in(slack, ts)
    assert not stream["streaming"]
    assert settled_in(bot, ts) == stream["ts"]
    [message] = bot_messages(slack)
    assert message["ts"] == stream["ts"] and message["text"].startswith("The first")
    assert message["text"].endswith("Could you ask me again in a little while?")
    assert [p["ts"] for p in answers_to(slack, ts)] == [stream["ts"]]
    assert len(llm.requests) == 1
    stored = [(stream["ts"], message["text"])]
    wait_until(lambda: bot.rows("SELECT ts, text FROM messages WHERE user_id = 'UBOT'") == stored, what="its text stored")
    assert bot.stop() == 0


class ClaimsLock:
    """The bot's claims locked against its writes from another connection (`take`, then `release`).

    In SQLite the whole database is locked: the bot's write waits out its busy timeout, then fails. In
    PostgreSQL the claim rows are: the bot's write waits on them until `drop_waiting` drops its connection.
    """

    def __init__(self, bot: BotProcess) -> None:
        self._url = bot.database_url
        self._held: Any = None
        self._holder: int | None = None

    def take(self) -> None:
        if self._url.startswith("sqlite"):
            self._held = sqlite3.connect(self._url.removeprefix("sqlite:///"), isolation_level=None,
                                         check_same_thread=False)
            self._held.execute("BEGIN IMMEDIATE")
        else:
            self._held = create_engine(self._url, poolclass=NullPool).connect()
            self._holder = self._held.execute(text("SELECT pg_backend_pid()")).scalar()
            self._held.execute(text("SELECT ts FROM claims FOR UPDATE"))

    def drop_waiting(self) -> None:
        """Drop the bot's connection whose write waits on the lock (PostgreSQL; in SQLite the write fails alone)."""
        if self._url.startswith("sqlite"):
            return
        # Waiting on this lock itself: the bot's other writes may wait meanwhile on that one's transaction (a
        # channel it inserted, say), and dropping one of those instead left the claim's write waiting.
        waiting = "SELECT pid FROM pg_stat_activity WHERE :holder = ANY(pg_blocking_pids(pid))"
        admin = create_engine(self._url, poolclass=NullPool, isolation_level="AUTOCOMMIT")
        with admin.connect() as connection:
            pid = wait_until(
                lambda: connection.execute(text(waiting), {"holder": self._holder}).scalar(), what="the bot's write to wait"
            )
            connection.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        admin.dispose()

    def release(self) -> None:
        if self._held is not None:
            self._held.rollback()
            self._held.close()
            self._held = None


@ON_BOTH_DATABASES
def test_an_answer_whose_showing_cannot_be_noted_is_answered_by_a_retry_not_with_the_apology(
    bot: BotProcess, slack: FakeSlack, llm: FakeOpenAI
) -> None:
    bot.settings.update(QUICK_RETRIES)
    lock = ClaimsLock(bot)
    replies = iter(["An answer that must not appear.", "The one and only answer."])

    def respond(request: dict) -> Text:
        if len(llm.requests) == 1:  # before the bot notes in the claim that its answer shows, as it is about to
            lock.take()
        return Text(next(replies))

    llm.set_responder(respond)
    bot.start()
    try:
        ts = mention(slack)
        lock.drop_waiting()
        wait_until(lambda: "could not note the answer as showing" in bot.log(), what="the attempt failed")
    finally:
        lock.release()

    wait_until(lambda: settled_in(bot, ts), what="the claim settled")
    time.sleep(2.5)  # a retry round more: room for a second answer to show up
    [message] = bot_messages(slack)
    assert message["text"] == "The one and only answer." and settled_in(bot, ts) == message["ts"]
    assert [p["ts"] for p in answers_to(slack, ts)] == [message["ts"]]
    assert len(llm.requests) == 2
    assert bot.stop() == 0


def test_sigkill_after_a_memo_was_added_but_before_the_answer_ends_gives_one_memo_and_one_message(
    bot: BotProcess, slack: FakeSlack, llm: FakeOpenAI
) -> None:
    bot.settings.update(QUICK_RETRIES)
    add = ToolCalls([ToolCall("add_memo", {"name": "alice-birthday", "content": "May 3", "priority": 4})])
    llm.script(add, Text("never delivered", delay=60))
    llm.set_responder(lambda request: Text("A second answer that must not appear."))
    bot.start()
    ts = mention(slack, "my birthday is May 3")

    def memos() -> list[tuple]:
        with sqlite3.connect(bot.database) as db:
            return db.execute("SELECT name, content FROM memos").fetchall()

    wait_until(memos, what="the memo committed")
    llm.wait_for_requests(2)
    bot.kill()

    bot.start()
    wait_until(lambda: settled(bot, ts), what="the claim settled")
    time.sleep(2.5)
    assert memos() == [("alice-birthday", "May 3")]
    [message] = bot_messages(slack)
    assert message["text"].endswith("Could you ask me again in a little while?")
    assert "second answer" not in message["text"]
    assert [s["streaming"] for s in slack.streams] == [False]
    assert bot.stop() == 0


def test_appends_rate_limited_are_waited_out_and_the_answer_ends_whole(
    bot: BotProcess, slack: FakeSlack, llm: FakeOpenAI
) -> None:
    bot.start()
    llm.script(Text(STORY, pieces=20, interval=0.1))
    slack.inject_rate_limit("chat.appendStream", times=2, retry_after=1)
    slack.inject_rate_limit("chat.stopStream", times=1, retry_after=1)
    ts = mention(slack, "tell me a long story")

    slack.wait_for(lambda: finished(slack, ts), what="the stream stopped")
    assert [m["text"] for m in bot_messages(slack)] == [STORY]
    assert wait_until(lambda: settled(bot, ts), what="the claim settled")
    assert bot.stop() == 0


def test_mentions_together_in_one_thread_and_across_threads_while_the_model_is_slow_are_each_answered_once(
    bot: BotProcess, slack: FakeSlack, llm: FakeOpenAI
) -> None:
    bot.settings.update(QUICK_RETRIES)
    llm.set_responder(lambda request: Text("Answer.", delay=1.5, pieces=3, interval=0.2))
    bot.start()
    first = mention(slack, "one")
    other = mention(slack, "elsewhere", user=BOB)
    asked = [first, other]
    for n in range(3):
        asked.append(slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> more {n}", thread_ts=first))
        asked.append(slack.post_message(GENERAL, BOB, f"<@{slack.bot_user_id}> again {n}", thread_ts=other))

    wait_until(lambda: all(settled(bot, ts) for ts in asked), what="every mention settled")
    time.sleep(3)  # retry rounds more: room for a second answer to show up
    assert {ts: len(answers_to(slack, ts)) for ts in asked} == {ts: 1 for ts in asked}
    assert len(bot_messages(slack)) == len(asked)
    assert not [s for s in slack.streams if s["streaming"]]
    assert bot.stop() == 0


def sse(*deltas: dict, finish: str | None = "stop") -> str:
    """Chat completion chunks as an event stream, without the closing `[DONE]`."""
    chunks = [{"index": 0, "delta": delta, "finish_reason": None} for delta in deltas]
    if finish:
        chunks.append({"index": 0, "delta": {}, "finish_reason": finish})
    return "".join(
        "data: " + json.dumps({"id": "chatcmpl-raw", "object": "chat.completion.chunk", "created": 0, "model": "fake",
                               "choices": [choice]}) + "\n\n"
        for choice in chunks
    )


def test_a_model_stream_closed_without_done_still_gives_the_answer(
    bot: BotProcess, slack: FakeSlack, llm: FakeOpenAI
) -> None:
    bot.start()
    llm.script(Raw(sse({"role": "assistant", "content": "Hello "}, {"content": "there."})))
    ts = mention(slack)
    slack.wait_for(lambda: answers_to(slack, ts), what="the answer")
    assert [m["text"] for m in bot_messages(slack)] == ["Hello there."]
    assert bot.stop() == 0


def test_a_model_stream_going_silent_without_done_ends_the_answer_within_the_timeout(
    bot: BotProcess, slack: FakeSlack, llm: FakeOpenAI
) -> None:
    bot.start()
    llm.script(Raw(sse({"role": "assistant", "content": "Hello "}, {"content": "there."}, finish=None), hold_open=120))
    ts = mention(slack)
    slack.wait_for(lambda: finished(slack, ts), what="the stream stopped")
    [message] = bot_messages(slack)
    assert message["text"].startswith("Hello there.")
    assert wait_until(lambda: settled(bot, ts), what="the claim settled")
    assert bot.stop() == 0


def test_malformed_json_in_the_model_stream_gets_the_apology(bot: BotProcess, slack: FakeSlack, llm: FakeOpenAI) -> None:
    bot.start()
    llm.script(Raw(sse({"role": "assistant", "content": "Hel"}, finish=None) + 'data: {"id": "x", "choices": [{"del\n\n'
                   + "data: [DONE]\n\n"))
    ts = mention(slack)
    slack.wait_for(lambda: finished(slack, ts) or [p for p in slack.posted if p["method"] == "chat.postMessage"],
                   what="the answer ended")
    [message] = bot_messages(slack)
    assert message["text"].endswith("Could you ask me again in a little while?")
    assert wait_until(lambda: settled(bot, ts), what="the claim settled")
    assert not [s for s in slack.streams if s["streaming"]]
    assert bot.stop() == 0


@pytest.mark.parametrize("posted", ["streamed", "whole"])
def test_a_model_writing_without_end_is_stopped_within_what_one_slack_message_holds(
    bot: BotProcess, slack: FakeSlack, llm: FakeOpenAI, posted: str
) -> None:
    # Streamed or posted whole (streaming off), what was written is ended with the apology, as for any answer the
    # model failed midway.
    bot.settings["response.streaming"] = posted == "streamed"
    bot.start()
    endless = "la " * 20_000  # 60,000 characters, more than a Slack message's 40,000, in 600 pieces
    llm.script(Text(endless, pieces=600, interval=0.01))
    ts = mention(slack, "sing")
    slack.wait_for(lambda: answers_to(slack, ts), what="the answer")
    [message] = bot_messages(slack)
    assert [s["streaming"] for s in slack.streams] == ([False] if posted == "streamed" else [])
    assert message["text"].startswith("la la") and message["text"].endswith(APOLOGY)
    assert len(message["text"]) <= 40_000
    assert wait_until(lambda: settled(bot, ts), what="the claim settled")
    assert bot.stop() == 0
    assert "Traceback" not in bot.log()  # the model's stream, closed at the cap, ends without an error logged


@pytest.mark.parametrize("error", ["is_archived", "restricted_action"])
def test_an_answer_slack_takes_no_post_for_is_given_up_once_not_retried(
    bot: BotProcess, slack: FakeSlack, llm: FakeOpenAI, error: str
) -> None:
    # Archived between the mention and its answer, or a channel where only admins may post (restricted_action).
    bot.settings.update(QUICK_RETRIES)
    llm.set_responder(lambda request: Text("Nobody will read this."))
    bot.start()
    for method in ("chat.startStream", "chat.postMessage"):
        slack.inject_error(method, error, times=1000)
    ts = mention(slack)
    wait_until(lambda: "given up" in bot.log(), what="the answer given up")
    attempts = [m for m, _ in slack.web_calls if m in ("chat.startStream", "chat.postMessage")]
    time.sleep(5)  # several retry rounds: room for another attempt
    assert [m for m, _ in slack.web_calls if m in ("chat.startStream", "chat.postMessage")] == attempts
    assert len(attempts) == 1 and len(llm.requests) == 1
    wait_until(  # settled unanswered, just after the warning
        lambda: bot.rows("SELECT answer_ts FROM claims WHERE ts = :ts AND settled_at IS NOT NULL", ts=ts) == [(None,)],
        what="the claim settled",
    )
    assert bot.stop() == 0


def test_a_model_calling_tools_without_end_is_stopped_at_its_cap_with_the_apology(
    bot: BotProcess, slack: FakeSlack, llm: FakeOpenAI
) -> None:
    bot.settings["agents.response.max_tool_cycles"] = 4
    llm.set_responder(lambda request: ToolCalls([ToolCall("list_memo_tags", {})]))
    bot.start()
    ts = mention(slack, "what do you know?")
    slack.wait_for(lambda: finished(slack, ts) or bot_messages(slack), what="the answer ended")
    assert wait_until(lambda: settled(bot, ts), what="the claim settled")
    [message] = bot_messages(slack)
    assert message["text"].endswith("Could you ask me again in a little while?")
    assert len(llm.requests) == 4
    assert not [s for s in slack.streams if s["streaming"]]
    assert bot.stop() == 0


def test_a_stream_left_open_by_a_crash_is_ended_even_when_slack_fails_the_first_stop(
    bot: BotProcess, slack: FakeSlack, llm: FakeOpenAI
) -> None:
    ts = streaming_answer(bot, slack, llm, "This answer is cut short by a crash, sadly", pieces=20)
    bot.kill()

    slack.inject_server_error("chat.stopStream", 503)  # the restarted bot's first try to end it
    bot.start()
    slack.wait_for(lambda: finished(slack, ts), what="the unfinished stream to be ended")
    wait_until(lambda: settled(bot, ts), what="the claim settled")
    [message] = bot_messages(slack)
    assert message["text"].startswith("Thi") and message["text"].endswith("Could you ask me again in a little while?")
    assert bot.stop() == 0


@ON_BOTH_DATABASES
def test_sigkill_after_a_streams_stop_failed_ends_it_after_restart_with_what_it_lost_then_the_apology(
    bot: BotProcess, slack: FakeSlack, llm: FakeOpenAI
) -> None:
    # What the stream lacked was kept in the bot's memory only: restarted, it ended the stream with the apology
    # alone, the words from the failed append on never shown.
    bot.settings.update(QUICK_RETRIES)
    bot.settings["response.answer_retry_seconds"] = [60, 1, 1]  # not taken up again before the bot is killed
    shown, lost = "x" * 150, "y" * 150 + "z" * 50
    deltas = ({"role": "assistant", "content": shown}, {"content": "y" * 150}, {"content": "z" * 50})
    llm.script(Raw(sse(*deltas, finish=None) + 'data: {"id": "x", "choices": [{"del\n\n'))  # the model fails then
    llm.set_responder(lambda request: Text("A second answer that must not appear."))
    bot.start()
    slack.inject_server_error("chat.appendStream", 503)  # the y's: the stream takes no more text
    slack.inject_server_error("chat.stopStream", 503, times=4)  # past the retries of a passing failure
    ts = mention(slack)
    wait_until(lambda: "to be taken up again" in bot.log(), what="the attempt failed, its stream left open")
    [stream] = streams_in(slack, ts)
    assert stream["streaming"]
    bot.kill()

    bot.shift_clock(60)  # the answer due again
    bot.start()
    wait_until(lambda: settled_in(bot, ts), what="the claim settled")
    time.sleep(2.5)  # a retry round more: room for a second answer to show up
    [stream] = streams_in(slack, ts)
    assert not stream["streaming"] and settled_in(bot, ts) == stream["ts"]
    [message] = bot_messages(slack)
    assert message["text"] == f"{shown}{lost}\n\n{APOLOGY}"
    assert [p["ts"] for p in answers_to(slack, ts)] == [stream["ts"]]
    assert len(llm.requests) == 1
    assert bot.stop() == 0


def test_sigterm_while_an_answer_streams_leaves_no_stream_open_and_one_answer_after_restart(
    bot: BotProcess, slack: FakeSlack, llm: FakeOpenAI
) -> None:
    ts = streaming_answer(bot, slack, llm, "This answer is longer than the grace period lets it be", pieces=30)
    assert bot.stop() == 0
    stopped_at_exit = finished(slack, ts)

    bot.start()
    wait_until(lambda: settled(bot, ts), what="the claim settled")
    time.sleep(2.5)
    [message] = bot_messages(slack)
    assert message["text"].startswith("Thi") and message["text"].endswith("Could you ask me again in a little while?")
    assert "second answer" not in message["text"] and message["text"].count("Could you ask me again") == 1
    assert stopped_at_exit, "the bot exited with its answer's stream still open"
    assert [p["ts"] for m, p in slack.web_calls if m == "chat.stopStream"] == [message["ts"]]  # stopped once
    assert bot.stop() == 0
