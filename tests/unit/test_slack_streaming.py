"""Streamed replies against the fake Slack: chunking, tasks, refusals, failures midway."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import aiohttp
import pytest
from slack_sdk.errors import SlackApiError

from myao2.application.agents import ModelUnavailable
from myao2.application.reply_stream import (
    PublishedReply,
    ReplyDone,
    ReplyEvent,
    ReplyWithdrawn,
    TextDelta,
    ToolFinished,
    ToolStarted,
)
from myao2.domain.conversation import Channel, ChannelKind
from myao2.domain.ports import ConversationClosed
from myao2.infrastructure.slack.gateway import ANSWER_EVENT, SlackGateway, make_web_client
from myao2.infrastructure.slack.streaming import FIRST_WORDS_HOLD_SECONDS, SlackReplyPublisher, StreamSettings
from tests.fakes.slack_server import FakeSlack

GENERAL = Channel("C1", "general")
DM = Channel("D1", "alice", ChannelKind.IM)
APOLOGY = "Sorry!"
STREAM_METHODS = ("chat.startStream", "chat.appendStream", "chat.stopStream")
SLOWLY = 2 * FIRST_WORDS_HOLD_SECONDS
"""A pause of the model's between events longer than the first words' hold: its words stream as they come (the
hold's timer is due before the pause's, so it always ends first)."""


@pytest.fixture
def fake():
    with FakeSlack(ack_timeout=None) as slack:
        slack.add_user("U1", "alice")
        slack.add_channel("C1", "general", members=["U1"])
        slack.add_channel("D1", "alice-dm", is_im=True, members=["U1"])
        yield slack


@pytest.fixture
async def publisher_for(fake):
    client = make_web_client(fake.bot_token, fake.base_url)
    gateway = SlackGateway(client)
    await gateway.auth()  # the bot's own posts are told by its bot id: a retried post is looked up

    def make(**settings: bool) -> SlackReplyPublisher:
        return SlackReplyPublisher(client, gateway, "T1", StreamSettings(**settings))

    yield make


async def events(*items: ReplyEvent | Exception, pause: float = 0.0) -> AsyncIterator[ReplyEvent]:
    for item in items:
        if pause:
            await asyncio.sleep(pause)
        if isinstance(item, Exception):
            raise item
        yield item


def deltas(text: str, size: int) -> list[ReplyEvent]:
    return [TextDelta(text[i : i + size]) for i in range(0, len(text), size)]


def stream_calls(fake: FakeSlack) -> list[str]:
    return [method for method, _ in fake.web_calls if method in STREAM_METHODS]


class Kept:
    """A `LeftOpen` keeping the end each stream left open lacks, by its ts, as an answer's claim keeps it."""

    def __init__(self) -> None:
        self.ends: dict[str, str] = {}

    async def __call__(self, ts: str, ending: str) -> None:
        self.ends[ts] = ending


def chat_calls(fake: FakeSlack) -> list[str]:
    return [method for method, _ in fake.web_calls if method.startswith("chat.")]


async def test_a_1000_character_answer_streams_in_about_ten_calls(fake, publisher_for):
    parent = fake.post_message("C1", "U1", "tell me a story <@UBOT>")
    story = "".join(f"word{i:03d} " for i in range(125))  # 1,000 characters
    reply = events(*deltas(story, 10), ReplyDone(story.strip()))

    published = await publisher_for().publish(GENERAL, parent, "U1", reply, APOLOGY)

    calls = stream_calls(fake)
    assert calls[0] == "chat.startStream" and calls[-1] == "chat.stopStream"
    assert len(calls) <= 11
    assert "chat.postMessage" not in [m for m, _ in fake.web_calls]
    [stream] = fake.streams
    assert stream["thread_ts"] == parent and not stream["streaming"]
    assert (stream["recipient_user_id"], stream["recipient_team_id"]) == ("U1", "T1")
    assert fake.messages("C1")[-1]["text"].strip() == story.strip()
    assert published.ts == stream["ts"] and published.text == story.strip()


@pytest.mark.parametrize("first", ["", "Here it is: ", "only at the end"])
async def test_text_longer_than_a_stream_call_takes_arriving_at_once_is_sent_in_pieces(fake, publisher_for, first):
    # A model (or a proxy) may hand over a long answer in one delta, or only whole at the end; Slack refuses a
    # stream call's text over 12,000 characters (msg_too_long), which failed the answer (and its retries) into
    # the apology.
    parent = fake.post_message("C1", "U1", "paste the whole log <@UBOT>")
    long = "".join(f"line {i:05d}\n" for i in range(2500))  # 27,500 characters
    if first == "only at the end":  # a memo task started the stream; the text comes whole with the end
        answer = long
        reply = events(ToolStarted("c1", "get_memo", "Read memo: log"), ToolFinished("c1", "get_memo", True),
                       ReplyDone(answer.strip()))
    else:
        answer = first + long
        reply = events(*([TextDelta(first)] if first else []), TextDelta(long), ReplyDone(answer.strip()))

    published = await publisher_for().publish(GENERAL, parent, "U1", reply, APOLOGY)

    [stream] = fake.streams
    assert not stream["streaming"] and fake.messages("C1")[-1]["text"].strip() == answer.strip()
    assert published.text == answer.strip()


async def test_the_first_words_show_when_their_hold_ends_while_the_model_stalls(fake, publisher_for):
    parent = fake.post_message("C1", "U1", "hi <@UBOT>")
    gate = asyncio.Event()

    async def slow() -> AsyncIterator[ReplyEvent]:
        yield TextDelta("\n Hello")
        await gate.wait()  # a slow tool: set only once the first words show
        yield TextDelta(" there")
        yield ReplyDone("Hello there")

    task = asyncio.ensure_future(publisher_for().publish(GENERAL, parent, "U1", slow(), APOLOGY))
    await fake.async_wait_for(lambda: fake.streams, 5, "a stream")
    assert fake.streams[0]["calls"][0]["markdown"] == "Hello"
    gate.set()
    published = await task
    assert published.text == "Hello there" and fake.messages("C1")[-1]["text"] == "Hello there"


async def test_an_answer_done_while_its_first_words_are_held_is_posted_whole(fake, publisher_for):
    # An instant model's answer took chat.startStream and chat.stopStream (and a trip to the database to record
    # the stream's ts) where one chat.postMessage shows it.
    parent = fake.post_message("C1", "U1", "hi <@UBOT>")
    reply = events(TextDelta("Hello"), TextDelta(" there"), ReplyDone("Hello there"))
    told: list[str] = []

    async def started(ts: str) -> None:
        told.append(ts)

    published = await publisher_for().publish(GENERAL, parent, "U1", reply, APOLOGY, answering=parent, started=started)

    assert chat_calls(fake) == ["chat.postMessage"] and told == []
    [post] = fake.posted
    assert (post["text"], post["thread_ts"], post["metadata"]["event_payload"]) == ("Hello there", parent,
                                                                                   {"answers": parent})
    assert published == PublishedReply(post["ts"], "Hello there")


async def test_a_model_failing_while_its_first_words_are_held_posts_them_whole_with_the_apology(
    fake, publisher_for
):
    parent = fake.post_message("C1", "U1", "hi <@UBOT>")

    published = await publisher_for().publish(
        GENERAL, parent, "U1", events(TextDelta("I was saying"), ModelUnavailable("boom")), APOLOGY
    )

    assert stream_calls(fake) == [] and fake.posted[0]["text"] == f"I was saying\n\n{APOLOGY}" == published.text


async def test_a_task_starts_the_stream_at_once_with_the_first_words_held(fake, publisher_for):
    parent = fake.post_message("C1", "U1", "remember <@UBOT>")
    gate = asyncio.Event()

    async def noting() -> AsyncIterator[ReplyEvent]:
        yield TextDelta("Noting it.")
        yield ToolStarted("c1", "add_memo", "Add memo: x")
        await gate.wait()  # set once the task shows
        yield ToolFinished("c1", "add_memo", True)
        yield ReplyDone("Noting it.")

    task = asyncio.ensure_future(publisher_for().publish(GENERAL, parent, "U1", noting(), APOLOGY))
    await fake.async_wait_for(lambda: fake.streams, 5, "a stream")
    [start] = fake.streams[0]["calls"]
    assert start["markdown"] == "Noting it." and fake.streams[0]["task_history"][0]["status"] == "in_progress"
    gate.set()
    assert (await task).text == "Noting it."


async def test_the_reply_waits_for_about_to_show_before_it_first_shows(fake, publisher_for):
    parent = fake.post_message("C1", "U1", "hi <@UBOT>")
    seen: list[list[str]] = []

    async def about_to_show() -> None:
        seen.append(chat_calls(fake))

    await publisher_for().publish(GENERAL, parent, "U1", events(TextDelta("Hi"), ReplyDone("Hi")), APOLOGY,
                                  about_to_show=about_to_show)
    await publisher_for().publish(GENERAL, parent, "U1", events(TextDelta("Hi"), ReplyDone("Hi"), pause=SLOWLY),
                                  APOLOGY, about_to_show=about_to_show)
    await publisher_for(streaming=False).publish(GENERAL, parent, "U1", events(ReplyDone("Hi")), APOLOGY,
                                                 about_to_show=about_to_show)

    assert seen == [[], ["chat.postMessage"], ["chat.postMessage", "chat.startStream", "chat.stopStream"]]


@pytest.mark.parametrize("refused", ["the workspace", "the top level"])
async def test_a_reply_whose_stream_is_refused_is_told_not_shown_and_about_to_show_again_before_its_post(
    fake, publisher_for, refused
):
    # Its reaction, held back as it was about to show, is due again: the reply shows only once written.
    if refused == "the workspace":
        fake.refuse_streaming("not_allowed")
        channel, thread = GENERAL, fake.post_message("C1", "U1", "hi <@UBOT>")
    else:
        fake.add_channel("C9", "no-top-level", members=["U1"])
        channel, thread = Channel("C9", "x"), None
    told: list[tuple[str, list[str]]] = []

    async def about_to_show() -> None:
        told.append(("about to show", chat_calls(fake)))

    def not_shown() -> None:
        told.append(("not shown", chat_calls(fake)))

    reply = events(TextDelta("a"), TextDelta("b"), ReplyDone("ab"), pause=SLOWLY)
    await publisher_for().publish(channel, thread, "U1", reply, APOLOGY, about_to_show=about_to_show, not_shown=not_shown)

    assert told == [
        ("about to show", []),
        ("not shown", ["chat.startStream"]),
        ("about to show", ["chat.startStream"]),
    ]
    assert chat_calls(fake) == ["chat.startStream", "chat.postMessage"]


async def test_memo_tasks_show_and_complete(fake, publisher_for):
    parent = fake.post_message("C1", "U1", "remember my birthday <@UBOT>")
    reply = events(
        TextDelta("Noting it."),
        ToolStarted("c1", "add_memo", "Add memo: alice-birthday"),
        ToolStarted("c2", "list_memo_tags", None),
        ToolFinished("c2", "list_memo_tags", True),
        ToolFinished("c1", "add_memo", True),
        ToolStarted("c3", "get_memo", "Read memo: bob"),
        ToolFinished("c3", "get_memo", False),
        TextDelta(" Done!"),
        ReplyDone("Done!"),
    )

    published = await publisher_for().publish(GENERAL, parent, "U1", reply, APOLOGY)

    [stream] = fake.streams
    assert [(t["id"], t["title"], t["status"]) for t in stream["task_history"]] == [
        ("c1", "Add memo: alice-birthday", "in_progress"),
        ("c1", "Add memo: alice-birthday", "complete"),
        ("c3", "Read memo: bob", "in_progress"),
        ("c3", "Read memo: bob", "error"),
    ]
    assert published.text == "Noting it. Done!"


async def test_a_task_running_when_the_model_fails_ends_marked_failed_not_spinning(fake, publisher_for):
    parent = fake.post_message("C1", "U1", "look it up <@UBOT>")
    reply = events(TextDelta("Looking."), ToolStarted("c1", "get_memo", "Read memo: bob"), ModelUnavailable("boom"),
                   pause=SLOWLY)

    await publisher_for().publish(GENERAL, parent, "U1", reply, APOLOGY)

    [stream] = fake.streams
    assert not stream["streaming"] and stream["tasks"]["c1"]["status"] == "error"


async def test_a_task_running_when_the_bot_stops_ends_marked_failed_not_spinning(fake, publisher_for):
    parent = fake.post_message("C1", "U1", "look it up <@UBOT>")

    async def slow_tool() -> AsyncIterator[ReplyEvent]:
        yield TextDelta("Looking.")
        yield ToolStarted("c1", "get_memo", "Read memo: bob")
        await asyncio.Event().wait()  # the tool never returns
        yield ReplyDone("unreachable")  # pragma: no cover

    shown = asyncio.Event()

    async def started(ts: str) -> None:  # the stream's ts heard: it shows the task
        shown.set()

    task = asyncio.ensure_future(publisher_for().publish(GENERAL, parent, "U1", slow_tool(), APOLOGY, started=started))
    await asyncio.wait_for(shown.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    [stream] = fake.streams
    assert not stream["streaming"] and stream["tasks"]["c1"]["status"] == "error"
    assert fake.messages("C1")[-1]["text"] == f"Looking.\n\n{APOLOGY}"


async def test_tasks_are_not_shown_when_turned_off(fake, publisher_for):
    parent = fake.post_message("C1", "U1", "remember <@UBOT>")
    reply = events(
        ToolStarted("c1", "add_memo", "Add memo: x"), ToolFinished("c1", "add_memo", True), TextDelta("ok"),
        ReplyDone("ok"), pause=SLOWLY,
    )

    await publisher_for(show_tasks=False).publish(GENERAL, parent, "U1", reply, APOLOGY)

    assert fake.streams[0]["task_history"] == []
    assert fake.messages("C1")[-1]["text"] == "ok"


@pytest.mark.parametrize("error", ["not_allowed", "feature_not_enabled", "unknown_method"])
async def test_a_refusing_workspace_gets_whole_posts_decided_once(fake, publisher_for, caplog, error):
    fake.refuse_streaming(error)
    publisher = publisher_for()
    first = fake.post_message("C1", "U1", "one <@UBOT>")
    second = fake.post_message("C1", "U1", "two <@UBOT>")

    with caplog.at_level(logging.WARNING, "myao2.infrastructure.slack.streaming"):
        one = await publisher.publish(GENERAL, first, "U1", events(TextDelta("a"), TextDelta("b"),
                                                                   ReplyDone("ab"), pause=SLOWLY), APOLOGY)
        two = await publisher.publish(GENERAL, second, "U1", events(TextDelta("c"), ReplyDone("c")), APOLOGY)

    assert stream_calls(fake) == ["chat.startStream"]
    assert [(p["text"], p["thread_ts"]) for p in fake.posted] == [("ab", first), ("c", second)]
    assert (one.text, two.text) == ("ab", "c")
    assert len([r for r in caplog.records if error in r.getMessage()]) == 1


async def test_streaming_off_posts_whole(fake, publisher_for):
    parent = fake.post_message("C1", "U1", "hi <@UBOT>")

    published = await publisher_for(streaming=False).publish(
        GENERAL, parent, "U1", events(TextDelta("hel"), TextDelta("lo"), ReplyDone("hello")), APOLOGY
    )

    assert stream_calls(fake) == [] and fake.posted[0]["text"] == "hello" == published.text


async def test_a_model_failing_midway_stops_the_stream_with_an_apology(fake, publisher_for):
    parent = fake.post_message("C1", "U1", "hi <@UBOT>")
    reply = events(TextDelta("I was saying"), TextDelta(" that"), ModelUnavailable("boom"), pause=SLOWLY)

    published = await publisher_for().publish(GENERAL, parent, "U1", reply, APOLOGY)

    [stream] = fake.streams
    assert not stream["streaming"] and stream["calls"][-1]["method"] == "chat.stopStream"
    assert published.text == f"I was saying that\n\n{APOLOGY}"
    assert fake.messages("C1")[-1]["text"] == published.text and published.ts == stream["ts"]


async def test_a_bug_midway_also_ends_the_stream(fake, publisher_for):
    parent = fake.post_message("C1", "U1", "hi <@UBOT>")

    published = await publisher_for().publish(
        GENERAL, parent, "U1", events(TextDelta("Half"), RuntimeError("bug"), pause=SLOWLY), APOLOGY
    )

    assert not fake.streams[0]["streaming"] and published.text == f"Half\n\n{APOLOGY}"


async def test_a_failure_before_any_text_posts_the_apology(fake, publisher_for):
    parent = fake.post_message("C1", "U1", "hi <@UBOT>")

    published = await publisher_for().publish(GENERAL, parent, "U1", events(ModelUnavailable("down")), APOLOGY)

    assert fake.streams == [] and fake.posted[0]["text"] == APOLOGY == published.text


async def test_appends_that_are_rate_limited_are_retried(fake, publisher_for):
    fake.append_min_interval = 0.5
    parent = fake.post_message("C1", "U1", "hi <@UBOT>")
    text = "x" * 400

    published = await publisher_for().publish(GENERAL, parent, "U1", events(*deltas(text, 50), ReplyDone(text)),
                                              APOLOGY)

    assert any(method == "chat.appendStream" for method, _ in fake.web_calls)
    assert fake.messages("C1")[-1]["text"] == text == published.text


async def test_a_stream_that_stops_taking_text_is_completed_by_update(fake, publisher_for):
    parent = fake.post_message("C1", "U1", "hi <@UBOT>")
    fake.inject_error("chat.appendStream", "message_not_in_streaming_state", times=5)
    fake.inject_error("chat.stopStream", "message_not_in_streaming_state")
    text = "y" * 300

    published = await publisher_for().publish(GENERAL, parent, "U1", events(*deltas(text, 150), ReplyDone(text)),
                                              APOLOGY)

    assert fake.posted[-1]["method"] == "chat.update" and fake.messages("C1")[-1]["text"] == text
    assert published.ts == fake.streams[0]["ts"]


@pytest.mark.parametrize("failure", ["cant_update_message", "internal_error"])
async def test_a_broken_stream_whose_update_fails_still_gets_its_lost_text_and_the_apology_in_the_thread(
    fake, publisher_for, failure
):
    parent = fake.post_message("C1", "U1", "hi <@UBOT>")
    fake.inject_error("chat.appendStream", "message_not_in_streaming_state", times=5)
    fake.inject_error("chat.update", failure, times=5)  # past the retries of a passing failure
    text = "x" * 150 + "y" * 150

    published = await publisher_for().publish(GENERAL, parent, "U1", events(*deltas(text, 150), ReplyDone(text)),
                                              APOLOGY)

    [stream] = fake.streams
    shown, rest = fake.messages("C1")[-2:]
    assert published == PublishedReply(stream["ts"], "x" * 150) and shown["ts"] == stream["ts"]
    assert shown["text"] == "x" * 150  # what the stream took before it broke
    assert rest["text"] == "y" * 150 + "\n\nSorry!" and rest["thread_ts"] == parent
    assert rest["metadata"]["event_payload"] == {"answers": stream["ts"]}  # the rest of it, not a second answer
    assert [p["method"] for p in fake.posted].count("chat.postMessage") == 1


async def test_the_lost_text_of_a_broken_stream_is_followed_once_when_its_post_fails_after_slack_stored_it(
    fake, publisher_for
):
    parent = fake.post_message("C1", "U1", "hi <@UBOT>")
    fake.inject_error("chat.appendStream", "message_not_in_streaming_state", times=5)
    fake.inject_error("chat.update", "cant_update_message", times=5)
    fake.inject_server_error("chat.postMessage", 500, after=True)  # stored, then failed: the bot retries
    text = "x" * 150 + "y" * 150

    published = await publisher_for().publish(GENERAL, parent, "U1", events(*deltas(text, 150), ReplyDone(text)),
                                              APOLOGY, answering=parent)

    [stream] = fake.streams
    assert [m["text"] for m in fake.messages("C1")] == ["hi <@UBOT>", "x" * 150, "y" * 150 + "\n\nSorry!"]
    assert published == PublishedReply(stream["ts"], "x" * 150)
    rest = fake.messages("C1")[-1]
    assert rest["metadata"]["event_payload"] == {"answers": stream["ts"]}  # not the answer to `parent`


async def test_an_append_dropped_after_slack_took_it_then_an_update_failing_repeats_no_piece_in_the_rest(
    fake, publisher_for
):
    parent = fake.post_message("C1", "U1", "hi <@UBOT>")
    fake.inject_drop("chat.appendStream")  # the y's are appended, unheard: the stream takes no more
    fake.inject_error("chat.update", "cant_update_message", times=5)
    text = "x" * 150 + "y" * 150 + "z" * 150

    published = await publisher_for().publish(
        GENERAL, parent, "U1", events(*deltas(text, 150), ReplyDone(text)), APOLOGY, answering=parent
    )

    [stream] = fake.streams
    shown, rest = fake.messages("C1")[-2:]
    assert shown["text"] == "x" * 150 + "y" * 150 and published == PublishedReply(stream["ts"], shown["text"])
    assert rest["text"] == "z" * 150 + "\n\nSorry!"  # the y's once, in the stream only
    assert rest["metadata"]["event_payload"] == {"answers": stream["ts"]}


async def test_a_broken_stream_whose_update_fails_once_gets_the_whole_text_by_update(fake, publisher_for):
    parent = fake.post_message("C1", "U1", "hi <@UBOT>")
    fake.inject_error("chat.appendStream", "message_not_in_streaming_state", times=5)
    fake.inject_server_error("chat.update", 500)
    text = "x" * 150 + "y" * 150

    published = await publisher_for().publish(GENERAL, parent, "U1", events(*deltas(text, 150), ReplyDone(text)),
                                              APOLOGY)

    assert fake.messages("C1")[-1]["text"] == text == published.text
    assert "chat.postMessage" not in [p["method"] for p in fake.posted]


async def test_a_dm_answer_streams_top_level_without_recipients(fake, publisher_for):
    fake.post_message("D1", "U1", "hi")

    published = await publisher_for().publish(
        DM, None, "U1", events(TextDelta("hey"), ReplyDone("hey"), pause=SLOWLY), APOLOGY
    )

    [stream] = fake.streams
    assert stream["thread_ts"] is None and stream["recipient_user_id"] is None
    assert stream["recipient_team_id"] is None and published.text == "hey"


async def test_a_refused_top_level_stream_falls_back_for_dms_only(fake, publisher_for):
    fake.add_channel("C9", "no-top-level", members=["U1"])
    publisher = publisher_for()
    top = await publisher.publish(
        Channel("C9", "x"), None, "U1", events(TextDelta("a"), ReplyDone("a"), pause=SLOWLY), APOLOGY
    )
    parent = fake.post_message("C1", "U1", "hi <@UBOT>")
    threaded = await publisher.publish(
        GENERAL, parent, "U1", events(TextDelta("b"), ReplyDone("b"), pause=SLOWLY), APOLOGY
    )
    again = await publisher.publish(
        Channel("C9", "x"), None, "U1", events(TextDelta("c"), ReplyDone("c"), pause=SLOWLY), APOLOGY
    )

    assert [p["text"] for p in fake.posted if p["method"] == "chat.postMessage"] == ["a", "c"]
    assert stream_calls(fake) == ["chat.startStream", "chat.startStream", "chat.stopStream"]
    assert (top.text, threaded.text, again.text) == ("a", "b", "c")


@pytest.mark.parametrize("error", ["not_allowed", "feature_not_enabled", "missing_recipient_user_id",
                                   "missing_recipient_team_id", "invalid_arguments"])
async def test_a_dm_whose_top_level_stream_is_refused_gets_whole_posts_while_threads_still_stream(
    fake, publisher_for, caplog, error
):
    fake.refuse_top_level_streams(error)
    publisher = publisher_for()
    fake.post_message("D1", "U1", "hi")

    with caplog.at_level(logging.WARNING, "myao2.infrastructure.slack.streaming"):
        dm = await publisher.publish(DM, None, "U1", events(TextDelta("a"), ReplyDone("a"), pause=SLOWLY), APOLOGY)
        parent = fake.post_message("C1", "U1", "hi <@UBOT>")
        threaded = await publisher.publish(
            GENERAL, parent, "U1", events(TextDelta("b"), ReplyDone("b"), pause=SLOWLY), APOLOGY
        )
        again = await publisher.publish(DM, None, "U1", events(TextDelta("c"), ReplyDone("c"), pause=SLOWLY), APOLOGY)

    assert [(p["channel"], p["text"]) for p in fake.posted if p["method"] == "chat.postMessage"] == [
        ("D1", "a"), ("D1", "c")
    ]
    assert stream_calls(fake) == ["chat.startStream", "chat.startStream", "chat.stopStream"]
    assert [s["channel"] for s in fake.streams] == ["C1"]
    assert (dm.text, threaded.text, again.text) == ("a", "b", "c")
    assert len([r for r in caplog.records if error in r.getMessage()]) == 1


async def test_a_dm_whose_stream_is_refused_for_want_of_the_method_turns_streaming_off_everywhere(fake, publisher_for):
    fake.refuse_top_level_streams("unknown_method")  # an older workspace: no streaming anywhere
    publisher = publisher_for()
    fake.post_message("D1", "U1", "hi")

    await publisher.publish(DM, None, "U1", events(TextDelta("a"), ReplyDone("a"), pause=SLOWLY), APOLOGY)
    parent = fake.post_message("C1", "U1", "hi <@UBOT>")
    await publisher.publish(GENERAL, parent, "U1", events(TextDelta("b"), ReplyDone("b"), pause=SLOWLY), APOLOGY)

    assert stream_calls(fake) == ["chat.startStream"] and fake.streams == []
    assert [p["text"] for p in fake.posted] == ["a", "b"]


async def test_an_answer_is_marked_when_complete_and_its_ts_told_when_it_shows(fake, publisher_for):
    parent = fake.post_message("C1", "U1", "hi <@UBOT>")
    told: list[tuple[str, bool]] = []

    async def started(ts: str) -> None:
        told.append((ts, fake.streams[0]["streaming"]))

    published = await publisher_for().publish(
        GENERAL, parent, "U1", events(TextDelta("Hi"), ReplyDone("Hi"), pause=SLOWLY), APOLOGY, answering=parent,
        started=started,
    )

    assert told == [(published.ts, True)]
    [post] = fake.posted
    assert post["method"] == "chat.stopStream"
    assert post["metadata"] == {"event_type": ANSWER_EVENT, "event_payload": {"answers": parent}}


async def test_a_whole_answer_is_marked_too(fake, publisher_for):
    parent = fake.post_message("C1", "U1", "hi <@UBOT>")

    await publisher_for(streaming=False).publish(
        GENERAL, parent, "U1", events(ReplyDone("Hi")), APOLOGY, answering=parent
    )

    assert fake.posted[0]["metadata"]["event_payload"] == {"answers": parent}


async def test_finish_ends_a_stream_left_open_with_the_apology(fake, publisher_for):
    parent = fake.post_message("C1", "U1", "hi <@UBOT>")
    client = make_web_client(fake.bot_token, fake.base_url)
    started = await client.chat_startStream(
        channel="C1", thread_ts=parent, recipient_user_id="U1", recipient_team_id="T1", markdown_text="Half an"
    )
    publisher = publisher_for()

    assert await publisher.finish("C1", started["ts"], APOLOGY, answering=parent) == f"Half an\n\n{APOLOGY}"
    assert await publisher.finish("C1", started["ts"], APOLOGY, answering=parent) is None  # already stopped: logged

    assert fake.messages("C1")[-1]["text"] == f"Half an\n\n{APOLOGY}"
    assert fake.messages("C1")[-1]["metadata"]["event_payload"] == {"answers": parent}
    assert not fake.streams[0]["streaming"]


async def test_a_whole_answer_cut_short_as_its_pieces_go_out_ends_with_the_apology_on_its_own_line(fake, publisher_for):
    parent = fake.post_message("C1", "U1", "hi <@UBOT>")
    answer = "a" * 12_000 + "b" * 1_000  # written whole (no text before it), after a task: sent in pieces as it ends
    fake.inject_delay("chat.appendStream", 30)
    reply = events(ToolStarted("c1", "web", "Searching"), ReplyDone(answer))
    task = asyncio.ensure_future(publisher_for().publish(GENERAL, parent, "U1", reply, APOLOGY))
    await fake.async_wait_for(lambda: any(m == "chat.appendStream" for m, _ in fake.web_calls), 10, "the first piece")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert fake.messages("C1")[-1]["text"].endswith("b" * 1_000 + f"\n\n{APOLOGY}")


async def test_a_whole_answer_cut_short_with_more_than_one_call_takes_still_buffered_is_ended_whole(
    fake, publisher_for
):
    # The tail left when the bot stops went out in one stopStream, which Slack refuses beyond 12,000 characters
    # (msg_too_long): the stream was left open for the next attempt, which ended it without the rest.
    parent = fake.post_message("C1", "U1", "hi <@UBOT>")
    answer = "a" * 12_000 + "b" * 12_000 + "c" * 1_000  # 13,000 characters still buffered as the first piece is cut
    fake.inject_delay("chat.appendStream", 30)
    reply = events(ToolStarted("c1", "web", "Searching"), ReplyDone(answer))
    task = asyncio.ensure_future(publisher_for().publish(GENERAL, parent, "U1", reply, APOLOGY, answering=parent))
    await fake.async_wait_for(lambda: any(m == "chat.appendStream" for m, _ in fake.web_calls), 10, "the first piece")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    [stream] = fake.streams
    assert not stream["streaming"]
    assert fake.messages("C1")[-1]["text"] == answer + f"\n\n{APOLOGY}"
    assert fake.messages("C1")[-1]["metadata"]["event_payload"] == {"answers": parent}


async def test_a_reply_cancelled_while_its_stream_is_stopped_is_stopped_once(fake, publisher_for):
    parent = fake.post_message("C1", "U1", "hi <@UBOT>")
    fake.inject_delay("chat.stopStream", 30)  # Slack stops the stream, the bot is stopping before it hears back
    task = asyncio.ensure_future(
        publisher_for().publish(GENERAL, parent, "U1", events(TextDelta("Hi"), ReplyDone("Hi"), pause=SLOWLY), APOLOGY)
    )
    await fake.async_wait_for(lambda: fake.streams and not fake.streams[0]["streaming"], 10, "the stream stopped")

    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert [method for method, _ in fake.web_calls].count("chat.stopStream") == 1
    assert fake.messages("C1")[-1]["text"] == "Hi"


@pytest.mark.parametrize(("error", "raised"), [("invalid_chunks", SlackApiError), ("is_archived", ConversationClosed)])
async def test_a_slack_error_starting_the_stream_raises_and_posts_nothing(fake, publisher_for, error, raised):
    parent = fake.post_message("C1", "U1", "hi <@UBOT>")
    fake.inject_error("chat.startStream", error)

    with pytest.raises(raised):
        await publisher_for().publish(
            GENERAL, parent, "U1", events(TextDelta("a"), ReplyDone("a"), pause=SLOWLY), APOLOGY
        )

    assert fake.posted == [] and fake.streams == []


async def test_a_stream_start_whose_connection_dropped_after_slack_started_it_raises_and_starts_no_second(
    fake, publisher_for
):
    parent = fake.post_message("C1", "U1", "hi <@UBOT>")
    fake.inject_drop("chat.startStream")  # started in Slack, its ts never heard: the next attempt looks for it

    with pytest.raises(aiohttp.ServerDisconnectedError):
        await publisher_for().publish(
            GENERAL, parent, "U1", events(TextDelta("Hi"), ReplyDone("Hi"), pause=SLOWLY), APOLOGY
        )

    assert len(fake.streams) == 1 and stream_calls(fake) == ["chat.startStream"] and fake.posted == []


@pytest.mark.parametrize("failure", ["dropped", "500", "internal_error", "fatal_error"])
async def test_a_stream_start_failing_after_slack_started_it_goes_on_in_the_stream_found(fake, publisher_for, failure):
    parent = fake.post_message("C1", "U1", "hi <@UBOT>")
    unasked = await publisher_for()._chat.post("C1", "x" * 100, parent)  # a message of the bot's: not the stream
    # Started in Slack with the x's, its ts never heard: the connection dropped, or Slack answered 500.
    if failure == "dropped":
        fake.inject_drop("chat.startStream")
    elif failure == "500":
        fake.inject_server_error("chat.startStream", 500, after=True)
    else:  # HTTP 200: Slack says some of the work may be done
        fake.inject_error("chat.startStream", failure, after=True)
    told: list[str] = []
    text = "x" * 150 + "y" * 150 + "z" * 150

    async def started(ts: str) -> None:
        told.append(ts)

    async def unheard(sent: str) -> list[str]:  # as the answer's claim offers them: showing just what was sent
        assert sent == "x" * 150
        return [m["ts"] for m in fake.messages("C1") if m.get("user") == "UBOT" and m["text"] == sent]

    published = await publisher_for().publish(
        GENERAL, parent, "U1", events(*deltas(text, 150), ReplyDone(text)), APOLOGY, answering=parent,
        started=started, unheard=unheard,
    )

    [stream] = fake.streams
    assert stream_calls(fake) == ["chat.startStream", "chat.appendStream", "chat.appendStream", "chat.stopStream"]
    assert published == PublishedReply(stream["ts"], text) and told == [stream["ts"]] != [unasked]
    assert fake.messages("C1")[-1]["text"] == text
    assert fake.messages("C1")[-1]["metadata"]["event_payload"] == {"answers": parent}


async def test_a_stream_start_whose_connection_dropped_raises_when_no_message_is_offered_for_it(
    fake, publisher_for
):
    parent = fake.post_message("C1", "U1", "hi <@UBOT>")
    fake.inject_drop("chat.startStream")

    async def unheard(sent: str) -> list[str]:
        return []  # none may be taken for it (say, another replica may be streaming unheard there)

    with pytest.raises(aiohttp.ServerDisconnectedError):
        await publisher_for().publish(
            GENERAL, parent, "U1", events(TextDelta("Hi"), ReplyDone("Hi"), pause=SLOWLY), APOLOGY, unheard=unheard
        )

    assert stream_calls(fake) == ["chat.startStream"]  # left to the next attempt, which ends it
    assert fake.messages("C1")[-1]["text"] == "Hi" and fake.streams[0]["streaming"]


async def test_an_append_whose_connection_dropped_after_slack_took_it_leaves_no_text_twice(fake, publisher_for):
    parent = fake.post_message("C1", "U1", "hi <@UBOT>")
    fake.inject_drop("chat.appendStream")  # appended, unheard: not sent again, the whole text set by chat.update
    text = "x" * 150 + "y" * 150 + "z" * 150

    published = await publisher_for().publish(
        GENERAL, parent, "U1", events(*deltas(text, 150), ReplyDone(text)), APOLOGY, answering=parent
    )

    [stream] = fake.streams
    assert stream_calls(fake) == ["chat.startStream", "chat.appendStream", "chat.stopStream"]
    assert fake.posted[-1]["method"] == "chat.update"
    assert fake.messages("C1")[-1]["text"] == text == published.text and published.ts == stream["ts"]
    assert fake.messages("C1")[-1]["metadata"]["event_payload"] == {"answers": parent}


async def test_a_stop_whose_connection_dropped_after_slack_stopped_it_is_stopped_once_with_the_whole_text(
    fake, publisher_for
):
    parent = fake.post_message("C1", "U1", "hi <@UBOT>")
    fake.inject_drop("chat.stopStream")
    text = "x" * 150 + "y" * 100

    published = await publisher_for().publish(
        GENERAL, parent, "U1", events(*deltas(text, 150), ReplyDone(text)), APOLOGY, answering=parent
    )

    assert stream_calls(fake).count("chat.stopStream") == 2  # sent again: refused, as the stream is stopped
    assert [p["method"] for p in fake.posted].count("chat.stopStream") == 1
    assert fake.messages("C1")[-1]["text"] == text == published.text
    assert fake.messages("C1")[-1]["metadata"]["event_payload"] == {"answers": parent}


@pytest.mark.parametrize("failure", ["server error", "ratelimited"])
async def test_a_stream_whose_stop_fails_for_a_passing_reason_is_left_unmarked_for_the_next_attempt_to_end(
    fake, publisher_for, failure
):
    # chat.update marked the message as the answer while its stream stayed open (until Slack expired it): the
    # attempt was settled on a message still streaming, which no attempt then ended.
    parent = fake.post_message("C1", "U1", "hi <@UBOT>")
    if failure == "ratelimited":
        # past the client's own retries of a 429 (5), each time the stop is sent again for a passing failure (4)
        fake.inject_rate_limit("chat.stopStream", times=6 * 4, retry_after=0)
    else:
        fake.inject_server_error("chat.stopStream", 503, times=4)
    text = "x" * 150 + "y" * 100
    publisher = publisher_for()

    with pytest.raises(SlackApiError):
        await publisher.publish(
            GENERAL, parent, "U1", events(*deltas(text, 150), ReplyDone(text)), APOLOGY, answering=parent
        )

    [stream] = fake.streams
    assert stream["streaming"] and "chat.update" not in [method for method, _ in fake.web_calls]
    assert not fake.messages("C1")[-1].get("metadata")  # the next attempt finds no answer: it ends this one
    ended = await publisher.finish("C1", stream["ts"], APOLOGY, answering=parent)
    assert not fake.streams[0]["streaming"] and fake.messages("C1")[-1]["text"] == ended
    assert fake.messages("C1")[-1]["metadata"]["event_payload"] == {"answers": parent}


async def test_the_next_attempt_ends_a_stream_whose_stop_failed_for_a_passing_reason_with_the_text_it_did_not_take(
    fake, publisher_for
):
    # It ended it with the apology alone: the y's, sent with the stop that failed, were missing.
    parent = fake.post_message("C1", "U1", "hi <@UBOT>")
    fake.inject_server_error("chat.stopStream", 503, times=4)  # past the retries of a passing failure
    text = "x" * 150 + "y" * 100
    publisher, kept = publisher_for(), Kept()
    with pytest.raises(SlackApiError):
        await publisher.publish(
            GENERAL, parent, "U1", events(*deltas(text, 150), ReplyDone(text)), APOLOGY,
            answering=parent, left_open=kept,
        )
    ts = fake.streams[0]["ts"]
    assert kept.ends == {ts: "y" * 100}

    assert await publisher.finish("C1", ts, APOLOGY, answering=parent, ending=kept.ends[ts]) == text
    assert fake.messages("C1")[-1]["text"] == text and not fake.streams[0]["streaming"]


async def test_an_attempt_that_fails_to_end_a_stream_left_open_tells_what_it_lacks_still(fake, publisher_for):
    parent = fake.post_message("C1", "U1", "hi <@UBOT>")
    client = make_web_client(fake.bot_token, fake.base_url)
    started = await client.chat_startStream(
        channel="C1", thread_ts=parent, recipient_user_id="U1", recipient_team_id="T1", markdown_text="Half an"
    )
    fake.inject_server_error("chat.stopStream", 503)
    publisher, kept = publisher_for(), Kept()

    with pytest.raises(SlackApiError):
        await publisher.finish("C1", started["ts"], APOLOGY, answering=parent, ending=" answer.", left_open=kept)
    assert kept.ends == {started["ts"]: " answer."}
    ended = await publisher.finish("C1", started["ts"], APOLOGY, answering=parent, ending=" answer.")
    assert ended == "Half an answer."


async def test_a_stream_that_stopped_taking_text_and_whose_stop_failed_is_ended_with_what_it_lost_not_the_apology_alone(
    fake, publisher_for
):
    # An append failed (the stream took no more text), then the stop too, for a passing reason: the next attempt
    # ended it with the apology alone, everything written from the failed append on lost.
    parent = fake.post_message("C1", "U1", "hi <@UBOT>")
    fake.inject_server_error("chat.appendStream", 503)
    fake.inject_server_error("chat.stopStream", 503, times=4)  # past the retries of a passing failure
    text = "x" * 150 + "y" * 150 + "z" * 150
    publisher, kept = publisher_for(), Kept()
    with pytest.raises(SlackApiError):
        await publisher.publish(
            GENERAL, parent, "U1", events(*deltas(text, 150), ReplyDone(text)), APOLOGY,
            answering=parent, left_open=kept,
        )
    ts = fake.streams[0]["ts"]
    assert kept.ends == {ts: "y" * 150 + "z" * 150}  # the message shows no y's (Slack did not take the append)

    assert await publisher.finish("C1", ts, APOLOGY, answering=parent, ending=kept.ends[ts]) == text
    assert fake.messages("C1")[-1]["text"] == text and not fake.streams[0]["streaming"]


async def test_a_long_tail_cut_short_after_a_piece_went_out_is_finished_by_the_next_attempt_before_the_apology(
    fake, publisher_for
):
    # The tail sent as the bot stops went out in pieces; the stop with the last one failed: the next attempt ended
    # the stream with the apology alone, the last piece missing.
    parent = fake.post_message("C1", "U1", "hi <@UBOT>")
    answer = "a" * 12_000 + "b" * 12_000 + "c" * 1_000
    fake.inject_delay("chat.appendStream", 30)
    fake.inject_server_error("chat.stopStream", 503)
    publisher, kept = publisher_for(), Kept()
    reply = events(ToolStarted("c1", "web", "Searching"), ReplyDone(answer))
    task = asyncio.ensure_future(
        publisher.publish(GENERAL, parent, "U1", reply, APOLOGY, answering=parent, left_open=kept)
    )
    await fake.async_wait_for(lambda: any(m == "chat.appendStream" for m, _ in fake.web_calls), 10, "the first piece")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    [stream] = fake.streams
    assert stream["streaming"]  # its stop failed
    assert kept.ends == {stream["ts"]: "c" * 1_000 + f"\n\n{APOLOGY}"}  # a piece that failed may show already

    ended = await publisher.finish("C1", stream["ts"], APOLOGY, answering=parent, ending=kept.ends[stream["ts"]])
    assert ended == answer + f"\n\n{APOLOGY}"
    assert fake.messages("C1")[-1]["text"] == answer + f"\n\n{APOLOGY}" and not fake.streams[0]["streaming"]


async def test_finishing_a_stream_whose_connection_dropped_after_slack_stopped_it_raises_rather_than_say_none_was_open(
    fake, publisher_for
):
    parent = fake.post_message("C1", "U1", "hi <@UBOT>")
    client = make_web_client(fake.bot_token, fake.base_url)
    started = await client.chat_startStream(
        channel="C1", thread_ts=parent, recipient_user_id="U1", recipient_team_id="T1", markdown_text="Half an"
    )
    fake.inject_drop("chat.stopStream")  # stopped and marked: the next attempt finds it as the answer

    with pytest.raises(aiohttp.ServerDisconnectedError):
        await publisher_for().finish("C1", started["ts"], APOLOGY, answering=parent)

    assert stream_calls(fake) == ["chat.startStream", "chat.stopStream"]
    assert fake.messages("C1")[-1]["text"] == f"Half an\n\n{APOLOGY}"


async def test_a_reply_withdrawn_as_it_starts_showing_is_taken_back(fake, publisher_for):
    parent = fake.post_message("C1", "U1", "hi <@UBOT>")

    async def started(ts: str) -> None:
        raise ReplyWithdrawn  # another replica took the answer over meanwhile

    with pytest.raises(ReplyWithdrawn):
        await publisher_for().publish(
            GENERAL, parent, "U1", events(TextDelta("Hi"), ReplyDone("Hi"), pause=SLOWLY), APOLOGY, started=started
        )

    assert [m["ts"] for m in fake.messages("C1")] == [parent]


async def test_a_reply_withdrawn_before_it_is_complete_is_never_posted_whole(fake, publisher_for):
    parent = fake.post_message("C1", "U1", "hi <@UBOT>")

    with pytest.raises(ReplyWithdrawn):
        await publisher_for(streaming=False).publish(
            GENERAL, parent, "U1", events(TextDelta("Hi"), ReplyWithdrawn()), APOLOGY
        )

    assert fake.posted == [] and [m["ts"] for m in fake.messages("C1")] == [parent]


async def test_a_stream_answering_someone_of_another_organisation_names_their_team(fake, publisher_for):
    """Slack asks for the team the asker belongs to: in a channel shared with another organisation, theirs."""
    fake.add_user("U2", "carol", team_id="T2")
    fake.add_channel("C2", "shared", members=["U1", "U2"])
    question = fake.post_message("C2", "U2", "hi <@UBOT>")

    await publisher_for().publish(Channel("C2", "shared", ChannelKind.SHARED), question, "U2",
                                  events(*deltas("Hello Carol", 5), ReplyDone("Hello Carol"), pause=SLOWLY), APOLOGY)

    [stream] = fake.streams
    assert (stream["recipient_user_id"], stream["recipient_team_id"]) == ("U2", "T2")


async def test_a_stream_whose_askers_team_cannot_be_read_names_the_bots_team(fake, publisher_for):
    parent = fake.post_message("C1", "U1", "hi <@UBOT>")
    fake.inject_error("users.info", "user_not_visible", times=10)

    published = await publisher_for().publish(GENERAL, parent, "U1",
                                              events(*deltas("Hello Alice", 5), ReplyDone("Hello Alice"), pause=SLOWLY), APOLOGY)

    [stream] = fake.streams
    assert stream["recipient_team_id"] == "T1" and published.text == "Hello Alice"


@pytest.mark.parametrize("posted_whole_by", ["streaming off", "streams refused"])
async def test_a_reply_failing_midway_posted_whole_keeps_what_was_written_before_the_apology(
    fake, publisher_for, posted_whole_by
):
    """As a stream stopped midway shows what was written and the apology, so does an answer posted whole."""
    if posted_whole_by == "streams refused":
        fake.refuse_streaming("not_allowed")
    parent = fake.post_message("C1", "U1", "hi <@UBOT>")
    reply = events(TextDelta("I was saying"), TextDelta(" that"), ModelUnavailable("boom"), pause=SLOWLY)

    published = await publisher_for(streaming=posted_whole_by != "streaming off").publish(
        GENERAL, parent, "U1", reply, APOLOGY
    )

    assert [p["text"] for p in fake.posted] == ["I was saying that\n\nSorry!"] == [published.text]
    assert stream_calls(fake) == ([] if posted_whole_by == "streaming off" else ["chat.startStream"])


async def test_a_reply_failing_before_any_text_posted_whole_is_the_apology_alone(fake, publisher_for):
    parent = fake.post_message("C1", "U1", "hi <@UBOT>")

    published = await publisher_for(streaming=False).publish(
        GENERAL, parent, "U1", events(TextDelta(" "), ModelUnavailable("boom")), APOLOGY
    )

    assert [p["text"] for p in fake.posted] == ["Sorry!"] == [published.text]


MARKDOWN = "# Plan\n**Bold**, `code` and [a link](https://example.com)"


@pytest.mark.parametrize("how", ["streamed", "done while held", "streaming off", "streams refused",
                                 "stream broken", "apology"])
async def test_an_answer_carries_markdown_however_it_is_published(fake, publisher_for, how):
    # A streamed answer was standard Markdown (markdown_text); one posted whole (or a broken stream set again by
    # chat.update) was mrkdwn (text), so the same answer showed **Bold** literally when written fast.
    if how == "streams refused":
        fake.refuse_streaming("not_allowed")
    if how == "stream broken":
        fake.inject_error("chat.appendStream", "message_not_in_streaming_state", times=5)
        fake.inject_error("chat.stopStream", "message_not_in_streaming_state")
    parent = fake.post_message("C1", "U1", "plan it <@UBOT>")
    written = events(ModelUnavailable("down")) if how == "apology" else events(
        *deltas(MARKDOWN, 20), ReplyDone(MARKDOWN), pause=0.0 if how == "done while held" else SLOWLY
    )

    published = await publisher_for(streaming=how != "streaming off").publish(
        GENERAL, parent, "U1", written, "**Sorry!**"
    )

    expected = "**Sorry!**" if how == "apology" else MARKDOWN
    assert (fake.posted[-1]["text"], fake.posted[-1]["markdown"]) == (expected, True)
    assert published.text == expected
    assert bool(fake.streams) == (how in ("streamed", "stream broken"))


async def test_a_whole_answer_longer_than_markdown_text_takes_is_posted_as_text(fake, publisher_for):
    # markdown_text takes 12,000 characters; an answer may run to 39,000 (a message keeps 40,000 of `text`).
    parent = fake.post_message("C1", "U1", "paste the whole log <@UBOT>")
    long = "".join(f"line {i:05d}\n" for i in range(2500)).strip()  # 27,500 characters

    published = await publisher_for(streaming=False).publish(
        GENERAL, parent, "U1", events(TextDelta(long), ReplyDone(long)), APOLOGY
    )

    [post] = fake.posted
    assert (post["text"], post["markdown"]) == (long, False) and published.text == long
