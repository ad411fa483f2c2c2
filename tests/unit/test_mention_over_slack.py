"""AnswerMention over the fake Slack's Web API (streamed answers) and a real SQLite store: what Slack did
while the bot never heard back."""

from __future__ import annotations

import asyncio
import gc
import re
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import context as otel_context
from sqlalchemy import event
from sqlalchemy.exc import OperationalError

from myao2.application.agents import ModelUnavailable
from myao2.application.context import Absorbed
from myao2.application.reply_stream import ReplyDone, ReplyEvent, TextDelta
from myao2.composition import memory_budgets
from myao2.config import Config
from myao2.domain.conversation import Channel, ChannelKind, Message
from myao2.domain.visibility import Reader
from myao2.infrastructure.db.conversation_store import SqlConversationStore
from myao2.infrastructure.db.engine import open_database
from myao2.infrastructure.db.memory_store import SqlMemoryStore
from myao2.infrastructure.db.profile_store import SqlProfileStore
from myao2.infrastructure.slack import gateway as gateway_module
from myao2.infrastructure.slack import streaming as streaming_module
from myao2.infrastructure.slack.gateway import SlackGateway, make_web_client
from myao2.infrastructure.slack.streaming import SlackReplyPublisher, StreamSettings
from tests.clocks import ManualClock
from tests.fakes.slack_server import FakeSlack
from tests.stored import stored_message
from tests.unit.test_mention import APOLOGY, FakeWriter, answer_mention
from tests.unit.test_slack_streaming import SLOWLY

CALL_TIMEOUT_SECONDS = 1
"""How long the call starting the stream is waited for in the test where Slack answers it too late."""


class World:
    """The use case with its stores on SQLite and Slack behind the Web API client the bot uses; retries are taken
    up by moving the clock. Its model writes its answers `SLOWLY`: they stream."""

    def __init__(self, tmp_path: Path, slack: FakeSlack, replica: str | None = None, memories: bool = False) -> None:
        """With `memories`, prompts show the memories and profiles stored, as the bot's do."""
        self.slack = slack
        self.replica = replica
        self.clock = ManualClock(datetime.now(timezone.utc))
        self.engine = open_database(f"sqlite:///{tmp_path}/m.db")
        self.store = SqlConversationStore(self.engine, self.clock)
        self.client = make_web_client(slack.bot_token, slack.base_url)
        self.gateway = SlackGateway(self.client)
        self.writer = FakeWriter()
        self.writer.pause = SLOWLY
        self.spawned: list[Coroutine[Any, Any, None]] = []
        self.absorbed = (
            Absorbed(
                SqlMemoryStore(self.engine, self.clock),
                SqlProfileStore(self.engine, self.clock),
                memory_budgets(Config()),
            )
            if memories
            else None
        )
        self.store.save_channel(Channel("C1", "general"))

    async def start(self) -> None:
        bot = await self.gateway.auth()
        publisher = SlackReplyPublisher(self.client, self.gateway, bot.team_id, StreamSettings())
        self.answer = answer_mention(
            self.engine, self.store, self.gateway, publisher, self.writer, self.clock, self.spawned, bot, self.replica,
            self.absorbed,
        )

    def mention(self) -> Message:
        return self.mention_in(None)

    def mention_in(self, thread_ts: str | None) -> Message:
        ts = self.slack.post_message("C1", "U1", "<@UBOT> hello?", thread_ts=thread_ts)
        message = Message(
            channel_id="C1",
            ts=ts,
            user_id="U1",
            text="<@UBOT> hello?",
            user_name="alice",
            mentions=("UBOT",),
            thread_ts=thread_ts,
        )
        self.store.save_message(message)
        return message

    async def retry_after(self, seconds: float) -> int:
        self.clock.advance(seconds)
        started = await self.answer.catch_up()
        while self.spawned:
            await self.spawned.pop(0)
        return started


@asynccontextmanager
async def started_world(tmp_path: Path, replica: str | None = None, memories: bool = False) -> AsyncIterator[World]:
    """A started `World` over a fake Slack where Alice is in #general (C1), for as long as the block runs."""
    with FakeSlack(ack_timeout=None) as slack:
        slack.add_user("U1", "alice")
        slack.add_channel("C1", "general", members=["U1"])
        world = World(tmp_path, slack, replica, memories)
        await world.start()
        yield world


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    async with started_world(tmp_path) as world:
        yield world


def answered(world: World, message: Message) -> list[tuple[str | None, bool]]:
    with world.engine.connect() as connection:
        return [
            (row[0], row[1])
            for row in connection.exec_driver_sql(
                "SELECT answer_ts, settled_at IS NOT NULL FROM claims WHERE ts = ?", (message.ts,)
            )
        ]


async def test_a_stream_slack_started_while_the_call_timed_out_is_found_and_completed_not_answered_twice(
    world: World,
) -> None:
    message = world.mention()
    world.slack.inject_delay("chat.startStream", CALL_TIMEOUT_SECONDS + 2)  # started in Slack, the answer too late

    timeout, world.client.timeout = world.client.timeout, CALL_TIMEOUT_SECONDS
    answering = asyncio.ensure_future(world.answer(message))
    await world.slack.async_wait_for(lambda: world.slack.streams, what="the stream started")
    world.client.timeout = timeout  # the lookup's calls are answered in time, however busy the machine
    await answering
    [stream] = world.slack.streams
    assert not stream["streaming"] and world.slack.messages("C1")[-1]["text"] == "answer 1"
    assert world.slack.messages("C1")[-1]["metadata"]["event_payload"] == {"answers": message.ts}
    assert answered(world, message) == [(stream["ts"], True)]
    with world.engine.connect() as connection:
        stored = connection.exec_driver_sql("SELECT ts, text FROM messages WHERE user_id = 'UBOT'").fetchall()
    assert stored == [(stream["ts"], "answer 1")]
    assert world.writer.calls == 1
    assert await world.retry_after(3600) == 0


async def test_a_stream_slack_started_while_the_connection_dropped_is_found_and_completed_not_started_twice(
    world: World,
) -> None:
    message = world.mention()
    await world.gateway.post("C1", "an unasked remark", message.ts)  # the bot's, marked as no answer: not it
    world.slack.inject_drop("chat.startStream")  # started in Slack, the connection dropped before it answered

    await world.answer(message)
    [stream] = world.slack.streams  # not sent again: a second stream would be a second answer
    assert not stream["streaming"] and world.slack.messages("C1")[-1]["text"] == "answer 1"  # whole, no apology
    assert [m["text"] for m in world.slack.messages("C1")] == ["<@UBOT> hello?", "an unasked remark", "answer 1"]
    assert world.slack.messages("C1")[-1]["metadata"]["event_payload"] == {"answers": message.ts}
    assert answered(world, message) == [(stream["ts"], True)] and world.writer.calls == 1
    assert await world.retry_after(3600) == 0


@pytest.mark.parametrize("shared_as", ["channel", "dm"])
async def test_an_answer_written_while_its_channel_was_shared_outside_is_not_shown_but_written_again(
    world: World, shared_as: str
) -> None:
    """Its prompt and memo tools read the workspace's text (the channel as read when the mention was claimed): once
    the channel is stored as read from outside (shared, or a DM found to be with people of another organisation),
    that answer never shows; the retry writes it from what the channel reads now."""
    message = world.mention()
    world.writer.block = asyncio.Event()
    answering = asyncio.ensure_future(world.answer(message))
    while world.writer.calls == 0:  # the model writes from the channel as read at the claim
        await asyncio.sleep(0.01)
    if shared_as == "channel":
        world.store.set_channel_kind("C1", ChannelKind.SHARED)
    else:
        world.store.save_channel(Channel("C1", "general", ext_shared=True))
    world.writer.block.set()
    await answering

    assert world.slack.streams == [] and answered(world, message) == [(None, False)]
    assert await world.retry_after(10) == 1
    assert len(world.slack.streams) == 1 and world.slack.messages("C1")[-1]["text"] == "answer 2"
    assert Reader.of("C1", world.writer.contexts[-1].channel).outside
    assert answered(world, message) == [(world.slack.streams[0]["ts"], True)]


async def test_a_stream_started_unheard_that_cannot_be_looked_up_at_once_is_ended_by_the_retry(world: World) -> None:
    message = world.mention()
    world.slack.inject_drop("chat.startStream")
    world.slack.inject_server_error("conversations.replies", 500, times=4)  # past the lookup's retries

    await world.answer(message)
    [stream] = world.slack.streams
    assert stream["streaming"] and answered(world, message) == [(None, False)]

    assert await world.retry_after(10) == 1
    assert [s["ts"] for s in world.slack.streams] == [stream["ts"]]
    assert world.slack.messages("C1")[-1]["text"] == f"answer 1\n\n{APOLOGY}"
    assert world.slack.messages("C1")[-1]["metadata"]["event_payload"] == {"answers": message.ts}
    assert answered(world, message) == [(stream["ts"], True)] and world.writer.calls == 1
    assert await world.retry_after(3600) == 0


async def test_two_answers_in_a_thread_whose_streams_started_unheard_each_show_as_their_own(world: World) -> None:
    first = world.mention()
    second = world.mention_in(first.ts)
    world.slack.inject_drop("chat.startStream", times=2)  # both started in Slack, neither ts heard

    await world.answer(first)
    await world.answer(second)
    # Were they left to their retries, the second would be taken up first (the first's due a minute later).
    world.store.next_attempt("C1", first.ts, 1, world.clock.now() + timedelta(minutes=1))
    await world.retry_after(10)
    await world.retry_after(60)

    one, two = world.slack.streams
    texts = {m["ts"]: m["text"] for m in world.slack.messages("C1")}
    assert (texts[one["ts"]], texts[two["ts"]]) == ("answer 1", "answer 2")
    assert answered(world, first) == [(one["ts"], True)] and answered(world, second) == [(two["ts"], True)]


async def test_two_answers_at_once_in_a_thread_whose_streams_started_unheard_with_the_same_words_each_take_one(
    world: World,
) -> None:
    # The answers in a thread take turns: the second looks for its stream once the first has taken its own.
    first = world.mention()
    second = world.mention_in(first.ts)
    world.slack.inject_drop("chat.startStream", times=2)  # both started in Slack, neither ts heard

    async def same_start(context: Any, origin: Any) -> AsyncIterator[ReplyEvent]:
        yield TextDelta("Sure")
        await asyncio.sleep(SLOWLY)  # each stream starts with "Sure"
        yield TextDelta(f", about {origin.message_ts}")
        yield ReplyDone(f"Sure, about {origin.message_ts}")

    world.writer.stream = same_start  # type: ignore[method-assign]
    await asyncio.gather(world.answer(first), world.answer(second))

    texts = {m["ts"]: m["text"] for m in world.slack.messages("C1")}
    [(first_answer, first_settled)] = answered(world, first)
    [(second_answer, second_settled)] = answered(world, second)
    assert first_settled and texts[first_answer] == f"Sure, about {first.ts}"
    assert second_settled and texts[second_answer] == f"Sure, about {second.ts}"
    assert len(world.slack.streams) == 2 and not [s for s in world.slack.streams if s["streaming"]]


async def test_two_answers_in_a_thread_whose_streams_were_not_found_at_once_are_each_ended_as_their_own(
    world: World,
) -> None:
    first = world.mention()
    second = world.mention_in(first.ts)
    world.slack.inject_drop("chat.startStream", times=2)  # both started in Slack, neither ts heard
    world.slack.inject_server_error("conversations.replies", 500, times=8)  # nor found at once: past 2 lookups

    await world.answer(first)
    await world.answer(second)
    one, two = world.slack.streams
    assert one["streaming"] and two["streaming"] and answered(world, second) == [(None, False)]
    # The second is taken up first (the first's retry is due a minute later): each finds its own stream.
    world.store.next_attempt("C1", first.ts, 1, world.clock.now() + timedelta(minutes=1))
    assert await world.retry_after(10) == 1
    assert await world.retry_after(60) == 1

    texts = {m["ts"]: m["text"] for m in world.slack.messages("C1")}
    assert (texts[one["ts"]], texts[two["ts"]]) == (f"answer 1\n\n{APOLOGY}", f"answer 2\n\n{APOLOGY}")
    assert answered(world, first) == [(one["ts"], True)] and answered(world, second) == [(two["ts"], True)]
    assert len(world.slack.streams) == 2 and world.writer.calls == 2


async def test_a_message_of_the_bot_that_is_no_open_stream_is_not_taken_for_the_answer(world: World) -> None:
    message = world.mention()
    unasked = await world.gateway.post("C1", "an unasked remark", message.ts)
    world.slack.inject_server_error("chat.startStream", 500)  # the first attempt shows nothing

    await world.answer(message)
    assert world.slack.streams == [] and answered(world, message) == [(None, False)]

    assert await world.retry_after(10) == 1
    [stream] = world.slack.streams
    assert not stream["streaming"] and stream["ts"] != unasked
    assert [m["text"] for m in world.slack.messages("C1")] == ["<@UBOT> hello?", "an unasked remark", "answer 2"]
    assert answered(world, message) == [(stream["ts"], True)]


async def test_another_answer_still_streaming_in_the_thread_is_not_taken_for_the_answer(world: World) -> None:
    first = world.mention()
    second = world.mention_in(first.ts)
    assert world.store.claim("C1", first.ts)
    other = await world.client.chat_startStream(
        channel="C1", thread_ts=first.ts, recipient_user_id="U1", recipient_team_id="T1", markdown_text="Still"
    )
    assert world.store.start_answer("C1", first.ts, other["ts"])  # the first mention's answer, still streaming
    world.slack.inject_server_error("chat.startStream", 500)

    await world.answer(second)
    assert await world.retry_after(10) == 1
    opened, answer = world.slack.streams
    assert opened["ts"] == other["ts"] and opened["streaming"]
    assert not answer["streaming"] and world.slack.messages("C1")[-1]["text"] == "answer 2"
    assert answered(world, second) == [(answer["ts"], True)]


async def test_another_replicas_answer_streaming_before_it_recorded_its_ts_is_not_taken_for_the_answer(
    tmp_path: Path,
) -> None:
    async with started_world(tmp_path, replica="r1") as world:
        first = world.mention()
        second = world.mention_in(first.ts)
        world.slack.inject_server_error("chat.startStream", 500)  # the second's first attempt shows nothing
        await world.answer(second)
        assert world.slack.streams == [] and answered(world, second) == [(None, False)]
        # Replica r2 answers the first mention in the same thread: Slack started its stream, and r2 is about to
        # record its ts (chat.startStream has answered, start_answer is not written yet) as r1 retries.
        assert world.store.claim("C1", first.ts, holder="r2")
        assert world.store.begin_showing("C1", first.ts, holder="r2")
        other = await world.client.chat_startStream(
            channel="C1", thread_ts=first.ts, recipient_user_id="U1", recipient_team_id="T1", markdown_text="Still"
        )

        assert await world.retry_after(10) == 1
        opened, answer = world.slack.streams
        assert opened["ts"] == other["ts"] and opened["streaming"]  # r2's answer goes on
        assert not answer["streaming"] and world.slack.messages("C1")[-1]["text"] == "answer 2"
        assert answered(world, second) == [(answer["ts"], True)]


async def test_an_answer_whose_showing_note_fails_to_be_written_is_retried_not_apologised_for(world: World) -> None:
    message = world.mention()
    begin_showing = world.store.begin_showing

    def locked(*args: Any, **kwargs: Any) -> bool:
        world.store.begin_showing = begin_showing  # type: ignore[method-assign]
        raise OperationalError("UPDATE claims", {}, Exception("database is locked"))

    world.store.begin_showing = locked  # type: ignore[method-assign]
    await world.answer(message)
    assert world.slack.streams == [] and world.slack.posted == []  # nothing shown: the attempt failed
    assert answered(world, message) == [(None, False)]

    assert await world.retry_after(10) == 1
    [stream] = world.slack.streams
    assert [m["text"] for m in world.slack.messages("C1")] == ["<@UBOT> hello?", "answer 2"]
    assert answered(world, message) == [(stream["ts"], True)]
    assert await world.retry_after(3600) == 0


async def test_an_answer_whose_conversation_cannot_be_read_is_retried_not_apologised_for(world: World) -> None:
    message = world.mention()
    one_connection = world.store.one_connection

    def dropped() -> Any:
        raise OperationalError("SELECT", {}, Exception("server closed the connection unexpectedly"))

    world.store.one_connection = dropped  # type: ignore[method-assign]
    await world.answer(message)  # read in the claim's trip, and again in its turn
    assert world.slack.posted == [] and world.writer.calls == 0  # nothing shown: the attempt failed
    assert answered(world, message) == [(None, False)]

    world.store.one_connection = one_connection  # type: ignore[method-assign]
    assert await world.retry_after(10) == 1
    [stream] = world.slack.streams
    assert [m["text"] for m in world.slack.messages("C1")] == ["<@UBOT> hello?", "answer 1"]
    assert answered(world, message) == [(stream["ts"], True)]


async def test_an_answer_withdrawn_as_it_starts_showing_ends_the_models_stream_in_its_own_task(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The model's stream attaches an OpenTelemetry context as strands' does: left to the garbage collector, it
    # would be closed in another task, whose Context cannot detach it (an ERROR traceback logged).
    async with started_world(tmp_path, replica="r1") as world:
        message = world.mention()

        async def traced(context: Any, origin: Any) -> AsyncIterator[ReplyEvent]:
            token = otel_context.attach(otel_context.set_value("reply", "traced"))
            try:
                yield TextDelta("The first words")
                await asyncio.sleep(SLOWLY)
                yield ReplyDone("The first words")
            finally:
                otel_context.detach(token)

        world.writer.stream = traced  # type: ignore[method-assign]
        world.store.start_answer = lambda *args, **kwargs: False  # type: ignore[method-assign]  # r2 took it over
        await world.answer(message)
        gc.collect()
        await asyncio.sleep(0.5)  # room for a left-over stream to be finalised (asserting that nothing happens)

        assert "chat.delete" in [method for method, _ in world.slack.web_calls]  # the answer taken back
        assert "Failed to detach context" not in caplog.text


@pytest.mark.parametrize("while_recording", [False, True], ids=["after-its-ts-is-recorded", "as-its-ts-is-recorded"])
async def test_an_answer_cancelled_as_it_streams_is_stopped_once_and_its_retry_settles_it(
    world: World, while_recording: bool
) -> None:
    message = world.mention()
    held = asyncio.Event()
    waiting = asyncio.Event()  # the first words handled, the model writes on
    recorded = threading.Event()  # the ts is in the database, as another task can see it
    cancelled = threading.Event()
    start_answer = world.store.start_answer

    def recording(*args: Any, **kwargs: Any) -> bool:
        started = start_answer(*args, **kwargs)
        recorded.set()
        if while_recording:
            cancelled.wait(10)  # the bot is told to stop before the attempt hears that the ts is recorded
        return started

    async def halting(context: Any, origin: Any) -> AsyncIterator[ReplyEvent]:
        yield TextDelta("The first words")
        waiting.set()
        await held.wait()  # the bot is told to stop meanwhile
        yield ReplyDone("never")

    world.store.start_answer = recording  # type: ignore[method-assign]
    world.writer.stream = halting  # type: ignore[method-assign]
    attempt = asyncio.ensure_future(world.answer(message))
    await asyncio.to_thread(recorded.wait, 10)
    if not while_recording:
        await waiting.wait()
    attempt.cancel()
    with pytest.raises(asyncio.CancelledError):
        await attempt
    cancelled.set()
    world.store.start_answer = start_answer  # type: ignore[method-assign]
    [stream] = world.slack.streams
    assert not stream["streaming"]  # ended with the apology as the bot stopped

    assert await world.retry_after(0) == 1  # the bot back: the answer is due at once
    assert [method for method, _ in world.slack.web_calls].count("chat.stopStream") == 1
    assert world.slack.messages("C1")[-1]["text"] == f"The first words\n\n{APOLOGY}"
    assert answered(world, message) == [(stream["ts"], True)]
    assert await world.retry_after(3600) == 0


async def test_a_stream_whose_stop_failed_is_ended_after_a_restart_with_what_it_lost_then_the_apology(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What the stream lacked was kept in the publisher's memory only: restarted, the bot ended it with the apology
    # alone, the words from the failed append on never shown.
    monkeypatch.setattr(gateway_module, "RETRY_DELAYS", (0.01, 0.01, 0.01))
    message = world.mention()
    written: list[Any] = []

    async def cut_short(context: Any, origin: Any) -> AsyncIterator[ReplyEvent]:
        written.append(context)
        yield TextDelta("x" * 150)  # starts the stream
        yield TextDelta("y" * 150)  # its append fails: the stream takes no more text
        yield TextDelta("z" * 50)
        raise ModelUnavailable("down")

    world.writer.stream = cut_short  # type: ignore[method-assign]
    world.slack.inject_server_error("chat.appendStream", 503)
    world.slack.inject_server_error("chat.stopStream", 503, times=4)  # past the retries of a passing failure
    await world.answer(message)
    [stream] = world.slack.streams
    assert stream["streaming"] and answered(world, message) == [(stream["ts"], False)]

    world.client = make_web_client(world.slack.bot_token, world.slack.base_url)  # the bot restarted
    world.gateway = SlackGateway(world.client)
    await world.start()
    assert await world.retry_after(10) == 1

    whole = "x" * 150 + "y" * 150 + "z" * 50 + f"\n\n{APOLOGY}"
    assert world.slack.messages("C1")[-1]["text"] == whole and not world.slack.streams[0]["streaming"]
    assert world.slack.messages("C1")[-1]["metadata"]["event_payload"] == {"answers": message.ts}
    assert answered(world, message) == [(stream["ts"], True)] and len(written) == 1
    assert stored_message(world.store, "C1", stream["ts"]).text == whole  # type: ignore[union-attr]
    assert await world.retry_after(3600) == 0


READS = ("SELECT", "WITH")
"""How the statements that only read begin (a WITH names what the SELECT after it reads: the memo read's CTE)."""


async def test_an_answer_is_stored_and_settled_in_one_commit(world: World) -> None:
    message = world.mention()
    written: list[str] = []  # the writes to the database and its commits, in order

    def executed(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        if not statement.startswith(READS):
            written.append(" ".join(statement.split()[:3]))

    event.listen(world.engine, "before_cursor_execute", executed)
    event.listen(world.engine, "commit", lambda _: written.append("COMMIT"))
    await world.answer(message)
    event.remove(world.engine, "before_cursor_execute", executed)

    [stream] = world.slack.streams
    assert answered(world, message) == [(stream["ts"], True)]
    assert stored_message(world.store, "C1", stream["ts"]).text == "answer 1"  # type: ignore[union-attr]
    assert written == [
        "INSERT INTO claims", "COMMIT",  # the claim
        "UPDATE claims SET", "COMMIT",  # noted as showing, before the stream starts
        "UPDATE claims SET", "COMMIT",  # the stream's ts, as soon as Slack told it
        "INSERT INTO messages", "UPDATE claims SET", "COMMIT",  # the answer stored and settled: both or neither
    ]


_TRIP: ContextVar[int] = ContextVar("trip to a worker thread", default=0)


@contextmanager
def trips_to_the_database(world: World, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[list[str]]]:
    """Within, each trip to a worker thread (`asyncio.to_thread`), with the statements and commits it sent to the
    database in order (a SELECT named by the table it reads); a statement sent outside a trip is a trip of its own."""
    trips: list[list[str]] = []
    to_thread = asyncio.to_thread

    async def counted(func: Any, /, *args: Any, **kwargs: Any) -> Any:
        trips.append([])
        _TRIP.set(len(trips))  # copied into the worker thread's context by to_thread
        return await to_thread(func, *args, **kwargs)

    def sent(what: str) -> None:
        trip = _TRIP.get()
        if trip == 0:
            trips.append([what])
        else:
            trips[trip - 1].append(what)

    def executed(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        words = statement.split()
        table = re.search(r"\bFROM (\w+)", statement)
        sent(f"SELECT {table.group(1) if table else '?'}" if statement.startswith(READS) else " ".join(words[:3]))

    monkeypatch.setattr(asyncio, "to_thread", counted)
    event.listen(world.engine, "before_cursor_execute", executed)
    event.listen(world.engine, "commit", sent_commit := lambda _: sent("COMMIT"))
    try:
        yield trips
    finally:
        event.remove(world.engine, "before_cursor_execute", executed)
        event.remove(world.engine, "commit", sent_commit)


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "posted-whole"])
async def test_a_mention_is_answered_in_these_trips_to_the_database_and_no_more(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, streamed: bool
) -> None:
    """Every statement a mention answered by a replica sends to the database, trip by trip (each costs CPU: a
    read or a trip more shows here). An answer done before its first words would show is posted whole: no
    stream's ts to record, and one check that it is still this replica's, as it is noted as showing."""
    if not streamed:  # done within the first words' hold, however slow the test
        monkeypatch.setattr(streaming_module, "FIRST_WORDS_HOLD_SECONDS", 60.0)
    async with started_world(tmp_path, replica="r1", memories=True) as world:
        world.writer.pause = SLOWLY if streamed else 0.0
        message = world.mention()
        with trips_to_the_database(world, monkeypatch) as trips:
            if streamed:  # it ends once its stream's ts is recorded, however slowly the stream started
                world.writer.until = lambda: len(trips) >= 3 and trips[2][-1:] == ["COMMIT"]
            await world.answer(message)

    [answer] = world.slack.streams if streamed else [p for p in world.slack.posted if p["method"] == "chat.postMessage"]
    assert answered(world, message) == [(answer["ts"], True)]
    streaming = [
        ["UPDATE claims SET", "COMMIT"],  # still this replica's, and noted as showing, before the stream starts
        ["UPDATE claims SET", "COMMIT"],  # the stream's ts, as soon as Slack told it
        ["SELECT claims"],  # still this replica's, before the stream ends as the answer
    ]
    whole = [["UPDATE claims SET", "COMMIT"]]  # still this replica's, and noted as showing, before it is posted
    assert trips == [
        [
            "INSERT INTO claims", "COMMIT", "SELECT channels",  # the claim, and the channel for the answer
            "SELECT messages",  # the prompt: the conversation, the memos, memories, digests and profiles
            "SELECT memos",  # the pinned, the important and the newest memos
            "SELECT memories",  # those of this conversation, and the news from other channels they are in
            "SELECT digests",
            "SELECT profiles",
        ],
        *(streaming if streamed else whole),
        ["INSERT INTO messages", "UPDATE claims SET", "COMMIT"],  # the answer stored and settled
    ]
