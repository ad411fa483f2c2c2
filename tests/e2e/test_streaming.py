"""Answers streamed into Slack as the model writes them: the bot process against the fakes."""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest

from tests.e2e.conftest import ALICE, GENERAL, BotProcess, wait_until
from tests.e2e.test_answers_exactly_once import QUICK_RETRIES, answers_to, mention
from tests.fakes.openai_server import Error, FakeOpenAI, Text, ToolCall, ToolCalls
from tests.fakes.slack_server import FakeSlack

STORY = " ".join(f"word{i:03d}" for i in range(200)).strip()  # about 1,600 characters
PIECES = 50
"""The pieces the model writes STORY in."""


def streams_in(slack: FakeSlack, thread_ts: str | None, channel: str = GENERAL) -> list[dict]:
    return [s for s in slack.streams if s["thread_ts"] == thread_ts and s["channel"] == channel]


def finished(slack: FakeSlack, thread_ts: str | None, channel: str = GENERAL) -> list[dict]:
    return [s for s in streams_in(slack, thread_ts, channel) if not s["streaming"]]


def stored_bot_messages(bot: BotProcess, channel: str = GENERAL) -> list[tuple[str, str]]:
    with sqlite3.connect(bot.database) as db:
        return db.execute(
            "SELECT ts, text FROM messages WHERE channel_id = ? AND user_id = 'UBOT' ORDER BY ts", (channel,)
        ).fetchall()


def text_shown(stream: dict) -> str:
    """The text a stream's calls have added so far."""
    return "".join(call["markdown"] or "" for call in stream["calls"])


def appends(stream: dict) -> list[dict]:
    return [call for call in stream["calls"] if call["method"] == "chat.appendStream"]


def test_a_slow_answer_streams_into_the_thread_while_it_is_written(bot: BotProcess, slack: FakeSlack, llm) -> None:
    bot.start()
    written = threading.Event()
    llm.script(Text(STORY, pieces=PIECES, hold=written, hold_after=PIECES // 2))  # the model pauses midway
    ts = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> tell me a long story")

    # the first answer after start-up waits for the model libraries: seconds of CPU, like the start-up's
    slack.wait_for(lambda: streams_in(slack, ts) and len(appends(streams_in(slack, ts)[0])) >= 3, what="appends")
    [stream] = streams_in(slack, ts)
    so_far = text_shown(stream)
    assert stream["streaming"] and STORY.startswith(so_far) and len(so_far) <= len(STORY) // 2  # the rest unwritten
    written.set()
    slack.wait_for(lambda: finished(slack, ts), what="the stream to finish")
    [stream] = streams_in(slack, ts)
    calls = stream["calls"]
    assert calls[0]["method"] == "chat.startStream" and calls[-1]["method"] == "chat.stopStream"
    assert text_shown(stream) == STORY == slack.messages(GENERAL)[-1]["text"]
    assert len(calls) < PIECES // 2  # several of the model's pieces a call
    assert (stream["recipient_user_id"], stream["recipient_team_id"]) == (ALICE, slack.team_id)
    assert not [p for p in slack.posted if p["method"] == "chat.postMessage"]
    assert wait_until(lambda: stored_bot_messages(bot), what="the stored reply") == [(stream["ts"], STORY)]
    assert bot.stop() == 0


def test_an_answer_written_at_once_is_posted_whole_without_a_reaction(bot: BotProcess, slack: FakeSlack,
                                                                      llm) -> None:
    bot.module = "tests.e2e.long_hold"  # done within the hold and before the reaction is due, however loaded
    bot.start()
    llm.set_responder(lambda request: Text("Right here.", at_once=True))
    first = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> hello")
    slack.wait_for_posts(1)
    ts = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> are you there?")

    posts = slack.wait_for_posts(2)
    assert [(p["method"], p["thread_ts"], p["text"]) for p in posts] == [
        ("chat.postMessage", first, "Right here."),
        ("chat.postMessage", ts, "Right here."),
    ]
    assert not [m for m, _ in slack.web_calls if m.startswith("chat.") and m.endswith("Stream")]
    stored = [(p["ts"], "Right here.") for p in posts]
    wait_until(lambda: stored_bot_messages(bot) == stored, what="the stored replies")
    assert slack.reactions == []  # it showed before the reaction was due
    assert bot.stop() == 0


def test_an_answer_written_fast_or_slowly_and_the_apology_all_show_as_markdown(bot: BotProcess, slack: FakeSlack,
                                                                               llm) -> None:
    # A streamed answer was standard Markdown; posted whole (done within the hold, or the apology) it was Slack's
    # mrkdwn, which shows **Bold**, [a link](...) and # headings literally.
    bot.module = "tests.e2e.long_hold"  # done within the hold however loaded; the slow one streams from its task
    bot.settings.update(QUICK_RETRIES)
    bot.start()
    answer = "# Plan\n**Bold**, `code` and [a link](https://example.com)"  # under 120 characters: held back
    llm.script(Text(answer, at_once=True))
    fast = mention(slack, "plan it, quickly")
    slack.wait_for(lambda: answers_to(slack, fast), what="the fast answer")
    llm.script(ToolCalls([ToolCall("add_memo", {"name": "plan", "content": "Alice plans", "priority": 3})]),
               Text(answer, pieces=4, interval=0.2))
    slow = mention(slack, "plan it, slowly")
    slack.wait_for(lambda: answers_to(slack, slow), what="the slow answer")
    llm.set_responder(lambda request: Error(500, "down"))
    failed = mention(slack, "plan it again")
    slack.wait_for(lambda: answers_to(slack, failed), what="the apology")

    shown = [(p["method"], p["text"], p["markdown"]) for ts in (fast, slow, failed) for p in answers_to(slack, ts)]
    apology = answers_to(slack, failed)[0]["text"]
    assert shown == [("chat.postMessage", answer, True), ("chat.stopStream", answer, True),
                     ("chat.postMessage", apology, True)]
    assert "Sorry" in apology
    assert bot.stop() == 0


def test_a_slow_answer_gets_the_reaction_before_it_streams(bot: BotProcess, slack: FakeSlack, llm) -> None:
    bot.start()
    thought = threading.Event()
    llm.script(Text("Let me think. Here it is.", pieces=3, interval=0.5, hold=thought))  # written once the reaction shows
    ts = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> a hard question")

    slack.wait_for(lambda: slack.reactions, what="the reaction")
    thought.set()
    slack.wait_for(lambda: finished(slack, ts), what="the stream to finish")
    assert slack.reactions == [(GENERAL, ts, "eyes")]
    methods = [m for m, _ in slack.web_calls]
    assert methods.index("reactions.add") < methods.index("chat.startStream")
    assert slack.messages(GENERAL)[-1]["text"] == "Let me think. Here it is."
    assert bot.stop() == 0


def test_the_first_words_show_while_the_model_is_busy(bot: BotProcess, slack: FakeSlack, llm) -> None:
    written = threading.Event()
    bot.start()
    llm.script(
        ToolCalls([ToolCall("list_memo_tags", {})], content="Let me look that up."),  # a tool shown as no task
        Text("Nothing noted yet.", hold=written),  # the model writes on only once the first words show
    )
    ts = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> what do you know about me?")

    slack.wait_for(lambda: streams_in(slack, ts), what="the first words")
    [stream] = streams_in(slack, ts)
    assert stream["calls"][0]["markdown"] == "Let me look that up." and stream["streaming"]
    written.set()
    slack.wait_for(lambda: finished(slack, ts), what="the stream to finish")
    assert slack.messages(GENERAL)[-1]["text"] == "Let me look that up.\n\nNothing noted yet."
    assert bot.stop() == 0


def test_a_memo_written_while_answering_shows_as_a_task(bot: BotProcess, slack: FakeSlack, llm) -> None:
    bot.start()
    llm.script(
        ToolCalls([ToolCall("add_memo", {"name": "alice-birthday", "content": "Alice's birthday is May 3",
                                         "priority": 4})]),
        Text("Got it, May 3!"),
    )
    ts = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> my birthday is May 3, remember it")

    slack.wait_for(lambda: finished(slack, ts), what="the stream to finish")
    [stream] = streams_in(slack, ts)
    assert [(t["title"], t["status"]) for t in stream["task_history"]] == [
        ("Add memo: alice-birthday", "in_progress"),
        ("Add memo: alice-birthday", "complete"),
    ]
    assert slack.messages(GENERAL)[-1]["text"] == "Got it, May 3!"
    assert bot.stop() == 0


def test_a_broadcast_in_a_tasks_title_notifies_nobody(bot: BotProcess, slack: FakeSlack, llm) -> None:
    bot.start()
    llm.script(ToolCalls([ToolCall("get_memo", {"memo_name": "<!channel> lunch"})]), Text("No such memo."))
    ts = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> what about lunch?")

    slack.wait_for(lambda: finished(slack, ts), what="the stream to finish")
    [stream] = streams_in(slack, ts)
    assert {t["title"] for t in stream["task_history"]} == {"Read memo: @\u200bchannel lunch"}
    assert bot.stop() == 0


def test_task_display_can_be_turned_off(bot: BotProcess, slack: FakeSlack, llm) -> None:
    bot.settings["response.show_memo_tasks"] = False
    bot.start()
    llm.script(ToolCalls([ToolCall("get_memo", {"memo_name": "alice-birthday"})]),
               Text("I don't know yet.", interval=0.5))  # written slowly: streamed
    ts = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> when is my birthday?")

    slack.wait_for(lambda: finished(slack, ts), what="the stream to finish")
    assert streams_in(slack, ts)[0]["task_history"] == []
    assert bot.stop() == 0


def test_a_workspace_refusing_streams_gets_whole_posts_and_one_log_line(bot: BotProcess, slack: FakeSlack,
                                                                         llm) -> None:
    slack.refuse_streaming("not_allowed")
    bot.start()
    llm.set_responder(lambda request: Text("Here is the whole answer.", interval=0.5))  # a stream is tried first
    first = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> one")
    slack.wait_for_posts(1)  # after the model libraries, loading since start-up
    second = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> two")
    posts = slack.wait_for_posts(2)

    assert [(p["method"], p["thread_ts"], p["text"]) for p in posts] == [
        ("chat.postMessage", first, "Here is the whole answer."),
        ("chat.postMessage", second, "Here is the whole answer."),
    ]
    assert [m for m, _ in slack.web_calls].count("chat.startStream") == 1
    assert bot.log().count("not_allowed") == 1
    assert bot.stop() == 0


def test_streaming_turned_off_posts_whole(bot: BotProcess, slack: FakeSlack, llm) -> None:
    bot.settings["response.streaming"] = False
    bot.start()
    llm.script(Text("Whole."))
    ts = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> hi")

    [post] = slack.wait_for_posts(1)
    assert (post["method"], post["thread_ts"], post["text"]) == ("chat.postMessage", ts, "Whole.")
    assert "chat.startStream" not in [m for m, _ in slack.web_calls]
    assert bot.stop() == 0


def test_a_model_failing_midway_ends_the_stream_with_an_apology(bot: BotProcess, slack: FakeSlack, llm) -> None:
    bot.start()
    llm.script(Text("I was just about to tell you that the answer is", pieces=8, interval=0.5, fail_after=4))
    ts = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> what is the answer?")

    slack.wait_for(lambda: finished(slack, ts), what="the stream to be stopped")
    [stream] = streams_in(slack, ts)
    text = slack.messages(GENERAL)[-1]["text"]
    partial, _, apology = text.partition("\n\n")
    assert partial and "I was just about to tell you that the answer is".startswith(partial)
    assert "Sorry" in apology
    assert wait_until(lambda: stored_bot_messages(bot), what="the stored reply") == [(stream["ts"], text)]
    assert not [p for p in slack.posted if p["method"] == "chat.postMessage"]
    assert bot.stop() == 0


def test_a_dm_answer_streams_into_the_conversation_without_recipients(bot: BotProcess, slack: FakeSlack,
                                                                       llm) -> None:
    slack.add_channel("DALICE", "alice-dm", is_im=True, members=[ALICE])
    bot.start()
    llm.script(Text("Hello in private!", pieces=4, interval=0.5))  # written slowly: streamed
    slack.post_message("DALICE", ALICE, "hi there")

    slack.wait_for(lambda: finished(slack, None, "DALICE"), what="the DM stream to finish")
    [stream] = streams_in(slack, None, "DALICE")
    assert stream["recipient_user_id"] is None and stream["recipient_team_id"] is None
    assert slack.messages("DALICE")[-1]["text"] == "Hello in private!"
    assert bot.stop() == 0


def test_a_dm_whose_top_level_stream_slack_refuses_gets_a_whole_post_and_threads_still_stream(
    bot: BotProcess, slack: FakeSlack, llm
) -> None:
    slack.add_channel("DALICE", "alice-dm", is_im=True, members=[ALICE])
    slack.refuse_top_level_streams("missing_recipient_user_id")  # a workspace wanting the recipient in DMs too
    bot.start()
    llm.set_responder(lambda request: Text("Hello there, slowly.", pieces=4, interval=0.5))  # a stream is tried
    slack.post_message("DALICE", ALICE, "hi there")
    [post] = slack.wait_for_posts(1)
    ts = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> and here?")

    slack.wait_for(lambda: finished(slack, ts), what="the threaded answer streamed")
    assert (post["method"], post["channel"], post["text"]) == ("chat.postMessage", "DALICE", "Hello there, slowly.")
    assert slack.messages(GENERAL)[-1]["text"] == "Hello there, slowly."
    assert bot.log().count("missing_recipient_user_id") == 1
    assert bot.stop() == 0


def recorded_answer(bot: BotProcess, ts: str) -> str | None:
    with sqlite3.connect(bot.database) as db:
        row = db.execute("SELECT answer_ts FROM claims WHERE ts = ?", (ts,)).fetchone()
    return row[0] if row else None


def streaming_answer(bot: BotProcess, slack: FakeSlack, llm: FakeOpenAI, text: str, pieces: int) -> str:
    """Start the bot with quick retries and mention it; the mention's ts once its answer, `text` written slowly,
    streams and is recorded as the answer. Any later model call writes a second answer that must not appear."""
    bot.settings.update(QUICK_RETRIES)
    llm.script(Text(text, pieces=pieces, interval=0.5))
    llm.set_responder(lambda request: Text("A second answer that must not appear."))
    bot.start()
    ts = mention(slack, "tell me something")
    slack.wait_for(lambda: streams_in(slack, ts), what="the stream to start")
    wait_until(lambda: recorded_answer(bot, ts), what="the stream's ts recorded")
    return ts


def test_a_crash_mid_stream_is_ended_after_restart_not_answered_twice(bot: BotProcess, slack: FakeSlack,
                                                                       llm) -> None:
    ts = streaming_answer(bot, slack, llm, "This answer is cut short by a crash, sadly", pieces=20)
    bot.kill()

    bot.start()
    slack.wait_for(lambda: finished(slack, ts), what="the unfinished stream to be ended")
    time.sleep(2.5)  # a retry round more: room for a second answer to show up
    [stream] = streams_in(slack, ts)
    text = slack.messages(GENERAL)[-1]["text"]
    assert text.startswith("Thi") and text.endswith("Could you ask me again in a little while?")
    assert "second answer" not in text and not [p for p in slack.posted if p["method"] == "chat.postMessage"]
    wait_until(  # the claim is settled once the stream is ended
        lambda: bot.rows("SELECT answer_ts FROM claims WHERE ts = :ts AND settled_at IS NOT NULL", ts=ts) == [(stream["ts"],)],
        what="the claim settled",
    )
    wait_until(lambda: stored_bot_messages(bot) == [(stream["ts"], text)], what="its whole text stored")
    assert bot.stop() == 0


@pytest.mark.parametrize("failure", ["500", "500 after taking the text", "dropped after taking the text"])
def test_an_append_failing_once_still_ends_the_stream_with_the_whole_text(
    bot: BotProcess, slack: FakeSlack, llm, failure: str
) -> None:
    bot.start()
    llm.script(Text(STORY, pieces=20, interval=0.1))
    if failure.startswith("dropped"):  # the connection drops before Slack answers: the text is not sent again
        slack.inject_drop("chat.appendStream")
    else:
        slack.inject_server_error("chat.appendStream", 500, after=failure != "500")
    ts = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> tell me a long story")

    slack.wait_for(lambda: finished(slack, ts), what="the stream to be stopped, not left open")
    slack.wait_for(lambda: slack.messages(GENERAL)[-1]["text"] == STORY, what="the whole text")
    [stream] = streams_in(slack, ts)
    assert len([m for m in slack.messages(GENERAL) if m.get("user") == slack.bot_user_id]) == 1
    assert all(p["markdown"] for p in slack.posted)  # set again by chat.update as the stream wrote it: Markdown
    assert wait_until(lambda: stored_bot_messages(bot), what="the stored reply") == [(stream["ts"], STORY)]
    assert bot.stop() == 0


@pytest.mark.parametrize(
    ("broken", "post_fails_after_landing"),
    [("expired", False), ("expired", True), ("dropped after taking the text", False)],
)
def test_a_broken_stream_that_cannot_be_updated_either_is_followed_by_its_lost_text_and_the_apology(
    bot: BotProcess, slack: FakeSlack, llm, broken: str, post_fails_after_landing: bool
) -> None:
    bot.settings["response.answer_retry_seconds"] = [1, 1, 1]  # a failed attempt would be taken up again at once
    bot.start()
    llm.script(Text(STORY, pieces=20, interval=0.1))
    if broken == "expired":
        slack.inject_error("chat.appendStream", "message_not_in_streaming_state", times=100)
    else:  # the text of one append shows in the stream, unheard: it is not in the rest that follows
        slack.inject_drop("chat.appendStream")
    slack.inject_error("chat.update", "cant_update_message", times=100)
    if post_fails_after_landing:  # the rest is posted, then Slack answers 500: the bot retries the post
        slack.inject_server_error("chat.postMessage", 500, after=True)
    ts = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> tell me a long story")

    slack.wait_for(lambda: [p for p in slack.posted if p["method"] == "chat.postMessage"], what="the rest")
    [stream] = streams_in(slack, ts)
    wait_until(
        lambda: bot.rows("SELECT answer_ts FROM claims WHERE ts = :ts AND settled_at IS NOT NULL", ts=ts) == [(stream["ts"],)],
        what="the answer settled",
    )
    time.sleep(4)  # retry rounds more: room for a second answer or a stray apology to show up
    shown, rest = [m for m in slack.messages(GENERAL) if m.get("user") == slack.bot_user_id]
    assert shown["ts"] == stream["ts"] and STORY.startswith(shown["text"]) and shown["text"]
    assert rest["thread_ts"] == ts and rest["metadata"]["event_payload"] == {"answers": stream["ts"]}  # not `ts`'s
    assert rest["text"] == STORY[len(shown["text"]) :].strip() + "\n\nSorry, I can't seem to think straight right now. Could you ask me again in a little while?"
    assert len(streams_in(slack, ts)) == 1 and finished(slack, ts)
    assert bot.stop() == 0


def test_a_slow_answer_gets_the_reaction_where_slack_refuses_its_stream(bot: BotProcess, slack: FakeSlack,
                                                                          llm) -> None:
    # The workspace is found to refuse streams only as the first words are about to show: the answer, held back
    # until it is written and then posted whole, is slow to show all the same.
    bot.start()
    llm.script(Text("Hello!"))
    first = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> hello")  # the model libraries load here
    wait_until(lambda: stored_bot_messages(bot), what="the first answer stored")
    slack.refuse_streaming("not_allowed")
    written = threading.Event()
    llm.script(
        ToolCalls([ToolCall("list_memo_tags", {})], content="Let me look that up."),  # the first words, at once
        Text("Nothing noted yet.", hold=written),  # the model writes on only once the reaction shows
    )
    ts = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> what do you know about me?")

    slack.wait_for(lambda: (GENERAL, ts, "eyes") in slack.reactions, what="the reaction")
    written.set()
    [post] = slack.wait_for(lambda: [p for p in slack.posted if p["thread_ts"] == ts], what="the answer")
    assert post["method"] == "chat.postMessage" and post["text"].endswith("Nothing noted yet.")
    assert "not_allowed" in bot.log()  # its stream was refused
    assert [r for r in slack.reactions if r[1] != first] == [(GENERAL, ts, "eyes")]
    assert bot.stop() == 0


def test_an_answer_to_someone_of_another_organisation_streams_naming_their_team(bot: BotProcess, slack: FakeSlack,
                                                                                 llm) -> None:
    slack.add_user("UCAROL", "carol", team_id="TOTHER")
    slack.add_channel("CSHARED", "shared", members=[ALICE, "UCAROL"], is_ext_shared=True)
    bot.start()
    llm.script(Text("Hello from over here!", pieces=4, interval=0.5))  # written slowly: streamed
    ts = slack.post_message("CSHARED", "UCAROL", f"<@{slack.bot_user_id}> hi")

    slack.wait_for(lambda: finished(slack, ts, "CSHARED"), what="the answer to stream")
    [stream] = streams_in(slack, ts, "CSHARED")
    assert (stream["recipient_user_id"], stream["recipient_team_id"]) == ("UCAROL", "TOTHER")
    assert bot.stop() == 0


def test_a_model_failing_midway_where_streaming_is_off_posts_what_was_written_and_an_apology(
    bot: BotProcess, slack: FakeSlack, llm
) -> None:
    bot.settings["response.streaming"] = False
    bot.start()
    llm.script(Text("I was just about to tell you that the answer is", pieces=8, interval=0.2, fail_after=4))
    ts = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> what is the answer?")

    [post] = slack.wait_for_posts(1)
    partial, _, apology = post["text"].partition("\n\n")
    assert post["thread_ts"] == ts and "Sorry" in apology
    assert partial and "I was just about to tell you that the answer is".startswith(partial)
    assert wait_until(lambda: stored_bot_messages(bot), what="the stored reply") == [(post["ts"], post["text"])]
    assert bot.stop() == 0


def test_a_task_running_when_the_bot_is_killed_is_marked_failed_as_the_next_attempt_ends_its_stream(
    bot: BotProcess, slack: FakeSlack, llm
) -> None:
    bot.settings.update(QUICK_RETRIES)
    bot.module = "tests.e2e.held_memo"  # reading memo "held" never ends
    llm.script(ToolCalls([ToolCall("get_memo", {"memo_name": "held"})], content="Let me look."))
    llm.set_responder(lambda request: Text("A second answer that must not appear."))
    bot.start()
    ts = mention(slack, "what is held?")
    slack.wait_for(lambda: [s for s in streams_in(slack, ts) if s["task_history"]], what="the task shown running")
    wait_until(lambda: recorded_answer(bot, ts), what="the stream's ts recorded")
    bot.kill()

    bot.start()
    slack.wait_for(lambda: finished(slack, ts), what="the unfinished stream to be ended")
    [stream] = streams_in(slack, ts)
    assert [(t["title"], t["status"]) for t in stream["task_history"]] == [
        ("Read memo: held", "in_progress"),
        ("Read memo: held", "error"),
    ]
    assert slack.messages(GENERAL)[-1]["text"].startswith("Let me look.")
    wait_until(lambda: bot.rows("SELECT answer_ts FROM claims WHERE ts = :ts AND settled_at IS NOT NULL", ts=ts)
               == [(stream["ts"],)], what="the claim settled")
    assert bot.stop() == 0
