"""AnswerMention over a real SQLite store: claims, retries, the existing-answer check, the apology, shutdown."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import Engine

from myao2.application.agents import ModelUnavailable
from myao2.application.context import Absorbed, Budget, ContextBuilder, Persona, PromptContext
from myao2.application.conversations import Conversations
from myao2.application import reaction as reaction_module
from myao2.application.mention import AnswerMention, MentionSettings
from myao2.application.reply_stream import PublishedReply, ReplyDone, ReplyStream, TextDelta
from myao2.domain.answers import RetryPolicy
from myao2.domain.conversation import BotIdentity, Channel, ChannelKind, Message, Person
from myao2.domain.memo import Origin
from myao2.infrastructure.db.conversation_store import SqlConversationStore
from myao2.infrastructure.db.engine import open_database
from myao2.infrastructure.db.memo_store import SqlMemoStore
from myao2.infrastructure.llm.phrases import prompt_marks
from tests.clocks import ManualClock

BOT = BotIdentity(user_id="UBOT", bot_id="BBOT", team_id="T1")
START = datetime(2026, 1, 2, 12, 0, tzinfo=timezone.utc)
RETRIES = RetryPolicy((10.0, 20.0, 30.0))
APOLOGY = "Sorry, I could not answer."


class FakeChat:
    """Slack as the use case sees it; `fail_posts` posts fail, and `answers` are what Slack holds."""

    def __init__(self) -> None:
        self.posts: list[tuple[str, str, str | None, str | None]] = []
        self.answers: dict[tuple[str, str], str] = {}  # (channel, answered ts) -> answer ts
        self.reactions: list[str] = []
        self.reacting = 0  # reactions sent, landed or not
        self.landing: asyncio.Event | None = None  # set, a reaction lands only once it is
        self.fail_posts = 0
        self.lookups = 0
        self._next = 0

    async def post(self, channel_id: str, text: str, thread_ts: str | None, answering: str | None = None) -> str:
        if self.fail_posts:
            self.fail_posts -= 1
            raise ConnectionError("Slack is down")
        self._next += 1
        ts = f"{2_000_000_000 + self._next}.000000"
        self.posts.append((channel_id, text, thread_ts, answering))
        if answering:
            self.answers[(channel_id, answering)] = ts
        return ts

    async def answer_ts(self, channel_id: str, ts: str, thread_ts: str | None) -> str | None:
        self.lookups += 1
        return self.answers.get((channel_id, ts))

    async def unmarked_posts(self, channel_id: str, ts: str, thread_ts: str | None) -> dict[str, str]:
        return {}  # every post here is an answer, marked

    async def react(self, channel_id: str, ts: str, emoji: str) -> None:
        self.reacting += 1
        if self.landing is not None:
            await self.landing.wait()
        self.reactions.append(ts)

    async def channel(self, channel_id: str) -> Channel:
        raise AssertionError("channels are stored")


class FakeWriter:
    def __init__(self) -> None:
        self.calls = 0
        self.contexts: list[PromptContext] = []
        self.block: asyncio.Event | None = None
        self.unavailable = False
        self.pause = 0.0  # seconds between its words and the end of its reply
        self.until: Callable[[], bool] | None = None  # then, polled: its reply ends once this is true

    async def stream(self, context: PromptContext, origin: Origin) -> ReplyStream:
        self.calls += 1
        self.contexts.append(context)
        if self.block is not None:
            await self.block.wait()
        if self.unavailable:
            raise ModelUnavailable("down")
        yield TextDelta(f"answer {self.calls}")
        if self.pause:
            await asyncio.sleep(self.pause)
        while self.until is not None and not self.until():
            await asyncio.sleep(0.01)
        yield ReplyDone(f"answer {self.calls}")


class WholePublisher:
    """Publishes like a workspace that refuses streaming: the whole reply, through `chat.post`.

    With `crash_after_start`, the next reply shows as that ts and the attempt dies there
    (as the process would); `finished` records the unfinished replies ended later. `showing` is set as a reply is
    about to show.
    """

    def __init__(self, chat: FakeChat) -> None:
        self.chat = chat
        self.showing = asyncio.Event()
        self.crash_after_start: str | None = None
        self.finished: list[tuple[str, str, str, str | None]] = []

    async def finish(  # type: ignore[no-untyped-def]
        self, channel_id: str, ts: str, apology: str, *, answering: str | None = None, ending=None, tasks=None,
        left_open=None,
    ) -> str | None:
        self.finished.append((channel_id, ts, apology, answering))
        return ""  # ended, its text not told

    async def publish(  # type: ignore[no-untyped-def]
        self, channel, thread_ts, recipient_user_id, reply, apology, *, answering=None, started=None, unheard=None,
        left_open=None, tasks_running=None, about_to_show=None, not_shown=None,
    ) -> PublishedReply:
        if self.crash_after_start is not None:
            ts, self.crash_after_start = self.crash_after_start, None
            await started(ts)
            raise ConnectionError("the bot died mid-stream")
        text = apology
        try:
            async for event in reply:
                if isinstance(event, ReplyDone):
                    text = event.text
        except ModelUnavailable:
            pass
        self.showing.set()
        if about_to_show is not None:
            await about_to_show()
        return PublishedReply(await self.chat.post(channel.id, text, thread_ts, answering), text)


def answer_mention(
    engine: Engine, store: SqlConversationStore, chat: Any, publisher: Any, writer: FakeWriter, clock: ManualClock,
    spawned: list[Coroutine[Any, Any, None]], bot: BotIdentity = BOT, replica: str | None = None,
    absorbed: Absorbed | None = None,
) -> AnswerMention:
    """The use case on these fakes, `spawned` collecting what it starts in the background; its prompts show
    what `absorbed` holds, if given."""
    contexts = ContextBuilder(
        SqlMemoStore(engine, clock),
        clock,
        Persona("myao", "", "en", ZoneInfo("UTC")),
        bot_user_id=bot.user_id,
        budget=Budget(conversation_tokens=6000, message_tokens=1000),
        marks=prompt_marks("en"),
        absorbed=absorbed,
    )
    return AnswerMention(
        store=store,
        chat=chat,
        contexts=contexts,
        writer=writer,
        conversations=Conversations(store, chat, bot, "myao", publisher),
        bot=bot,
        clock=clock,
        spawn=spawned.append,
        settings=MentionSettings(
            reaction="eyes",
            reply_in_thread=True,
            context_message_limit=30,
            max_message_age_seconds=86400,
            catchup_seconds=3600,
            retries=RETRIES,
            apology=APOLOGY,
        ),
        replica=replica,
    )


class World:
    def __init__(self, tmp_path: Path) -> None:
        self.clock = ManualClock(START)
        engine = open_database(f"sqlite:///{tmp_path}/m.db")
        self.store = SqlConversationStore(engine, self.clock)
        self.chat = FakeChat()
        self.writer = FakeWriter()
        self.publisher = WholePublisher(self.chat)
        self.spawned: list[Coroutine[Any, Any, None]] = []
        self.answer = answer_mention(engine, self.store, self.chat, self.publisher, self.writer, self.clock, self.spawned)
        self.store.save_channel(Channel("C1", "general"))
        self.store.save_channel(Channel("D1", "alice", ChannelKind.IM))

    def mention(self, channel: str = "C1", seconds: float = 0) -> Message:
        at = self.clock.now() + timedelta(seconds=seconds)
        message = Message(
            channel_id=channel,
            ts=f"{at.timestamp():.6f}",
            user_id="UALICE",
            text="<@UBOT> hello?",
            user_name="Alice",
            mentions=("UBOT",),
        )
        self.store.save_message(message)
        return message

    async def run_spawned(self) -> None:
        while self.spawned:
            await self.spawned.pop(0)

    async def retry_after(self, seconds: float) -> int:
        self.clock.advance(seconds)
        started = await self.answer.catch_up()
        await self.run_spawned()
        return started


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


def counted_trips(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """From now on, each function sent to a worker thread (`asyncio.to_thread`), in order."""
    trips: list[object] = []
    to_thread = asyncio.to_thread

    async def counted(func: Any, *args: Any, **kwargs: Any) -> Any:
        trips.append(func)
        return await to_thread(func, *args, **kwargs)

    monkeypatch.setattr(asyncio, "to_thread", counted)
    return trips


async def test_a_mention_is_answered_once_in_its_thread_and_settled(world: World) -> None:
    message = world.mention()
    await world.answer(message)
    await world.answer(message)  # the other event of the pair
    assert world.chat.posts == [("C1", "answer 1", message.ts, message.ts)]
    assert world.chat.lookups == 0  # nothing can have been posted before the first attempt
    assert await world.retry_after(3600) == 0


@pytest.mark.parametrize("ahead", [False, True], ids=["claimed", "claimed ahead"])
async def test_a_mention_whose_event_comes_after_its_deletion_is_not_answered(world: World, ahead: bool) -> None:
    """Slack's events come in any order, and one redelivered late: a message deleted before its event came is not
    claimed, so not answered (the deletion settled no claim, there was none yet)."""
    message = world.mention()
    world.store.delete_message("C1", message.ts)
    if ahead:
        claim = world.answer.claim_ahead(message)
        assert claim is not None
        await world.answer.take_up(message, claim.claim())
    else:
        await world.answer(message)
    assert world.chat.posts == []
    assert world.writer.calls == 0
    assert await world.retry_after(3600) == 0


async def test_an_answer_that_shows_before_the_reaction_is_due_gets_no_reaction(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reaction_module, "REACTION_DELAY_SECONDS", 60)  # far past this answer, however slow the test
    message = world.mention()
    await world.answer(message)
    assert world.chat.posts == [("C1", "answer 1", message.ts, message.ts)]
    assert world.chat.reacting == 0


async def test_an_answer_slow_to_show_gets_the_reaction_first(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reaction_module, "REACTION_DELAY_SECONDS", 0.01)
    message = world.mention()
    world.writer.block = asyncio.Event()  # the model thinks
    world.chat.landing = asyncio.Event()  # the reaction is slow to land
    attempt = asyncio.ensure_future(world.answer(message))
    while not world.chat.reacting:
        await asyncio.sleep(0.01)
    world.writer.block.set()
    await world.publisher.showing.wait()
    assert world.chat.posts == []  # the answer waits for the reaction to land
    world.chat.landing.set()
    await attempt
    assert world.chat.reactions == [message.ts]
    assert world.chat.posts == [("C1", "answer 1", message.ts, message.ts)]


async def test_a_mention_claimed_ahead_is_answered_once_and_settled(world: World) -> None:
    message = world.mention()
    ahead = world.answer.claim_ahead(message)
    assert ahead is not None and world.answer.claim_ahead(message) is None  # the other event of the pair
    claimed = await asyncio.to_thread(ahead.claim)  # in the trip that stored it
    assert claimed.claimed and claimed.channel == Channel("C1", "general")
    await world.answer(message)  # the other event of the pair, handed on as ever
    await world.answer.take_up(message, claimed)
    assert world.chat.posts == [("C1", "answer 1", message.ts, message.ts)]
    assert await world.retry_after(3600) == 0


async def test_the_people_a_prompt_names_are_read_in_the_trip_that_reads_the_conversation(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    world.store.save_person(Person("UBOB", "Bob"))
    world.store.save_message(
        Message("C1", f"{START.timestamp() - 60:.6f}", "UALICE", "ask <@UBOB>", "Alice", mentions=("UBOB",))
    )
    message = world.mention()
    trips = counted_trips(monkeypatch)
    await world.answer(message)
    assert any(line.endswith("ask @Bob") for line in world.writer.contexts[0].conversation)
    assert world.store.people not in trips


async def test_a_mention_claimed_ahead_reads_its_conversation_in_the_trip_of_its_claim(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    message = world.mention()
    ahead = world.answer.claim_ahead(message)
    assert ahead is not None
    claimed = await asyncio.to_thread(ahead.claim)  # in the trip that stored it
    trips = counted_trips(monkeypatch)
    await world.answer.take_up(message, claimed)
    assert world.chat.posts == [("C1", "answer 1", message.ts, message.ts)]
    assert any(line.endswith("hello?") for line in world.writer.contexts[0].conversation)
    assert len(trips) == 2  # noted as showing, then stored and settled: no trip to read the conversation


async def test_a_mention_claimed_ahead_keeps_its_conversation_read_while_an_answer_in_another_thread_ended(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = world.mention()
    world.writer.block = asyncio.Event()
    answering = asyncio.create_task(world.answer(first))
    while world.writer.calls == 0:
        await asyncio.sleep(0.01)
    later = world.mention(seconds=1)  # top-level too: its answer goes in a thread of its own
    claim = world.answer.claim_ahead(later)
    assert claim is not None
    claimed = await asyncio.to_thread(claim.claim)
    world.writer.block.set()
    await answering
    trips = counted_trips(monkeypatch)
    await world.answer.take_up(later, claimed)
    assert [post[2:] for post in world.chat.posts] == [(first.ts, first.ts), (later.ts, later.ts)]
    assert len(trips) == 2  # noted as showing, then stored and settled: read in the trip of its claim


@pytest.mark.parametrize("ahead", [True, False], ids=["claimed ahead", "claimed on its own"])
async def test_a_mention_in_a_thread_whose_answer_is_being_written_reads_the_thread_once_that_answer_is_stored(
    world: World, ahead: bool
) -> None:
    """Answers in one thread are written one after another: the later one's prompt shows the earlier answer,
    though it was claimed (and might have been read) while that answer was being written."""
    first = world.mention()
    world.writer.block = asyncio.Event()
    answering = asyncio.create_task(world.answer(first))
    while world.writer.calls == 0:
        await asyncio.sleep(0.01)
    then = world.clock.now() + timedelta(seconds=1)
    later = Message("C1", f"{then.timestamp():.6f}", "UBOB", "<@UBOT> and?", "Bob", mentions=("UBOT",), thread_ts=first.ts)
    world.store.save_message(later)
    if ahead:
        claim = world.answer.claim_ahead(later)
        assert claim is not None
        claimed = await asyncio.to_thread(claim.claim)
        second = asyncio.create_task(world.answer.take_up(later, claimed))
    else:
        second = asyncio.create_task(world.answer(later))
    while (later.channel_id, later.ts) not in world.answer._in_flight:  # its attempt began: claimed (and read)
        await asyncio.sleep(0.01)
    world.writer.block.set()
    await answering
    await second
    assert [post[1:] for post in world.chat.posts] == [("answer 1", first.ts, first.ts), ("answer 2", first.ts, later.ts)]
    assert any(line.endswith("answer 1") for line in world.writer.contexts[1].conversation)


async def test_a_claim_ahead_that_failed_is_raised_by_take_up_and_may_be_made_again(world: World) -> None:
    message = world.mention()
    ahead = world.answer.claim_ahead(message)
    assert ahead is not None
    claim = world.store.claim
    world.store.claim = lambda *args, **kwargs: (_ for _ in ()).throw(OSError("disk full"))  # type: ignore[method-assign]
    claimed = await asyncio.to_thread(ahead.claim)
    world.store.claim = claim  # type: ignore[method-assign]
    with pytest.raises(OSError):
        await world.answer.take_up(message, claimed)
    await world.answer(message)  # a redelivery claims it after all
    assert world.chat.posts == [("C1", "answer 1", message.ts, message.ts)]


async def test_a_failed_post_is_retried_when_due_after_checking_slack(world: World) -> None:
    message = world.mention()
    world.chat.fail_posts = 1
    await world.answer(message)
    assert world.chat.posts == []

    assert await world.retry_after(9) == 0  # not due before the first delay
    assert await world.retry_after(1) == 1
    assert [p[1] for p in world.chat.posts] == ["answer 2"]
    assert world.chat.lookups == 1
    assert await world.retry_after(3600) == 0


async def test_a_retry_finding_the_answer_in_slack_posts_nothing(world: World) -> None:
    """A crash between the post and its record: the answer is in Slack, not in the store."""
    message = world.mention()
    world.store.claim("C1", message.ts, retry_at=world.clock.now())
    world.chat.answers[("C1", message.ts)] = "2000000000.000001"
    assert await world.retry_after(1) == 1
    assert world.chat.posts == [] and world.writer.calls == 0
    assert await world.retry_after(3600) == 0


async def test_a_retry_ends_an_answer_left_half_streamed_instead_of_answering_again(world: World) -> None:
    message = world.mention()
    world.publisher.crash_after_start = "2000000000.000042"
    await world.answer(message)
    assert world.chat.posts == []

    assert await world.retry_after(10) == 1
    assert world.publisher.finished == [("C1", "2000000000.000042", APOLOGY, message.ts)]
    assert world.chat.posts == [] and world.chat.lookups == 1  # not complete in Slack: ended here
    assert await world.retry_after(3600) == 0  # settled with the streamed answer


async def test_after_the_attempts_come_one_apology(world: World) -> None:
    message = world.mention()
    world.chat.fail_posts = 3
    await world.answer(message)
    assert await world.retry_after(10) == 1
    assert await world.retry_after(20) == 1
    assert world.chat.posts == [] and world.writer.calls == 3
    assert await world.retry_after(30) == 1
    assert [p[1] for p in world.chat.posts] == [APOLOGY]
    assert world.writer.calls == 3
    assert await world.retry_after(3600) == 0


@pytest.mark.parametrize("catchup_seconds", [0, 60])
async def test_an_answer_owed_is_retried_then_apologised_for_however_short_the_catch_up_window(
    world: World, catchup_seconds: int
) -> None:
    """The catch-up window bounds what was missed, not what the bot claimed and owes: never silence."""
    world.answer._settings = replace(world.answer._settings, catchup_seconds=catchup_seconds)
    message = world.mention()
    world.chat.fail_posts = 3
    await world.answer(message)
    assert await world.retry_after(10) == 1
    assert await world.retry_after(20) == 1
    assert await world.retry_after(30) == 1
    assert [p[1] for p in world.chat.posts] == [APOLOGY]
    assert await world.retry_after(3600) == 0


async def test_an_answer_owed_for_a_message_older_than_the_conversation_span_is_left(world: World) -> None:
    """What the prompt would no longer show (`max_message_age_seconds`) is not answered late."""
    message = world.mention()
    world.chat.fail_posts = 1
    await world.answer(message)
    assert await world.retry_after(86401) == 0
    assert world.chat.posts == []


async def test_a_model_that_is_down_gets_an_apology_at_once(world: World) -> None:
    world.writer.unavailable = True
    await world.answer(world.mention())
    assert [p[1] for p in world.chat.posts] == [APOLOGY]


async def test_a_missed_mention_in_a_dm_already_answered_in_slack_is_not_answered_again(world: World) -> None:
    """A fresh database: the DM is in the history again, its answer only in Slack."""
    message = world.mention("D1")
    world.chat.answers[("D1", message.ts)] = "2000000000.000001"
    assert await world.answer.catch_up() == 1
    await world.run_spawned()
    assert world.chat.posts == [] and world.chat.lookups == 1
    assert await world.retry_after(3600) == 0


async def test_a_missed_mention_is_answered_inline_in_a_dm(world: World) -> None:
    message = world.mention("D1")
    assert await world.answer.catch_up() == 1
    await world.run_spawned()
    assert world.chat.posts == [("D1", "answer 1", None, message.ts)]


async def test_mentions_older_than_the_catch_up_window_are_left(world: World) -> None:
    world.mention(seconds=-3601)
    assert await world.answer.catch_up() == 0


async def test_a_mention_posted_after_the_catch_up_began_is_left_to_its_event(world: World) -> None:
    """Its event stored it and claims it next: the catch-up does not race it (with a window of 0, nothing is
    caught up at all)."""
    world.mention(seconds=1)
    assert await world.answer.catch_up() == 0


async def test_an_attempt_cancelled_at_shutdown_is_due_at_once_and_not_counted(world: World) -> None:
    message = world.mention()
    world.writer.block = asyncio.Event()
    task = asyncio.create_task(world.answer(message))
    while world.writer.calls == 0:
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    [pending] = world.store.due_answers(world.clock.now(), world.clock.now() - timedelta(hours=1))
    assert pending.attempts == 0
    world.writer.block = None
    assert await world.retry_after(0) == 1
    assert len(world.chat.posts) == 1


async def test_an_attempt_still_running_is_not_taken_up_twice(world: World) -> None:
    message = world.mention()
    world.writer.block = asyncio.Event()
    task = asyncio.create_task(world.answer(message))
    while world.writer.calls == 0:
        await asyncio.sleep(0.01)
    world.clock.advance(60)  # the attempt outlives its lease
    assert await world.answer.catch_up() == 0
    world.writer.block.set()
    await task
    assert len(world.chat.posts) == 1


async def test_waiting_for_due_answers_ends_when_an_attempt_fails(world: World) -> None:
    waiting = asyncio.create_task(world.answer.wait_until_due())  # nothing is owed: no end in sight
    await asyncio.sleep(0)
    message = world.mention()
    world.chat.fail_posts = 1
    await world.answer(message)
    await asyncio.wait_for(waiting, 30)
    assert await world.retry_after(10) == 1  # and the failed answer is taken up when due


async def test_an_answer_falling_due_just_after_a_catch_up_read_ends_the_wait_at_once(world: World) -> None:
    """The catch-up found nothing due; the answer falls due before the wait asks when the next one does: it is due
    now, not never (it fell out of both reads, and the bot waited for ever: a CI failure)."""
    message = world.mention()
    world.chat.fail_posts = 1
    await world.answer(message)  # due again 10 s after it was claimed
    await asyncio.wait_for(world.answer.wait_until_due(), 30)  # the failure is seen at once
    assert await world.answer.catch_up() == 0  # not due yet
    world.clock.advance(10)  # due as the catch-up ends
    await asyncio.wait_for(world.answer.wait_until_due(), 30)
    assert await world.retry_after(0) == 1


@pytest.mark.parametrize("failing", ["due_answers", "next_attempt"])
async def test_an_answer_due_when_a_catch_up_fails_ends_the_wait_after_it_at_once(
    world: World, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    """A catch-up failing (the database, once) takes up nothing: an answer due then is still due at the wait after
    it, not passed over as read (the bot slept until something else woke it)."""
    world.chat.fail_posts = 1
    await world.answer(world.mention())  # due again 10 s after it was claimed
    await asyncio.wait_for(world.answer.wait_until_due(), 30)  # the failure is seen at once
    world.clock.advance(10)
    real = getattr(world.store, failing)

    def fails_once(*args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(world.store, failing, real)
        raise ConnectionError("the database is down")

    monkeypatch.setattr(world.store, failing, fails_once)
    with pytest.raises(ConnectionError):
        await world.answer.catch_up()
    await asyncio.wait_for(world.answer.wait_until_due(), 30)
    assert await world.retry_after(0) == 1


async def test_an_attempt_outliving_its_due_time_does_not_end_the_wait_again_and_again(world: World) -> None:
    """A catch-up passes over an answer due whose attempt still runs: the wait after it sleeps (no busy loop) until
    that attempt fails."""
    message = world.mention()
    world.writer.block = asyncio.Event()
    task = asyncio.create_task(world.answer(message))
    while world.writer.calls == 0:
        await asyncio.sleep(0.01)
    world.clock.advance(60)  # due again, still being written
    assert await world.answer.catch_up() == 0
    waiting = asyncio.create_task(world.answer.wait_until_due())
    await asyncio.sleep(0.2)
    assert not waiting.done()
    world.chat.fail_posts = 1
    world.writer.block.set()
    await task
    await asyncio.wait_for(waiting, 30)  # the failure ends it
    assert await world.retry_after(0) == 1


async def test_waiting_for_due_answers_ends_when_the_next_one_falls_due(world: World) -> None:
    message = world.mention()
    world.chat.fail_posts = 1
    await world.answer(message)  # due again 10 s after it was claimed
    world.clock.advance(9.95)
    await asyncio.wait_for(world.answer.wait_until_due(), 30)  # the failure is seen at once
    await asyncio.wait_for(world.answer.wait_until_due(), 30)  # then it sleeps until the answer is due
    world.clock.advance(0.05)
    assert await world.retry_after(0) == 1

