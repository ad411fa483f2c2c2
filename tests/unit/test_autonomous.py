"""AutonomousResponder over a real SQLite conversation store, with a fake clock, judge and writer.

`spawn` only collects the coroutines a check starts; `World.run()` awaits them, so each
test decides when the background work happens.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Coroutine
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from myao2.application.activity import Activity
from myao2.application.agents import ModelUnavailable
from myao2.application.autonomous import AutonomousResponder, AutonomySettings
from myao2.application.context import Budget, ContextBuilder, Persona, PromptContext
from myao2.application.conversations import Conversations
from myao2.domain.conversation import BotIdentity, Channel, ChannelKind, Message, mentions_in
from myao2.domain.judgment import Judgment, SkipPolicy, WaitPolicy
from myao2.domain.memo import Origin
from myao2.infrastructure.db.activity_store import SqlActivityLog
from myao2.infrastructure.db.autonomy_store import SqlAutonomyStore
from myao2.infrastructure.db.conversation_store import SqlConversationStore
from myao2.infrastructure.db.engine import open_database
from myao2.infrastructure.db.memo_store import SqlMemoStore
from myao2.infrastructure.llm.phrases import prompt_marks
from tests.clocks import ManualClock

BOT = BotIdentity(user_id="UBOT", bot_id="BBOT", team_id="T1")
WAIT = 60.0
START = datetime(2026, 1, 2, 12, 0, tzinfo=timezone.utc)
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

SETTINGS = AutonomySettings(
    active_channel_days=7,
    max_message_age_seconds=86400,
    context_message_limit=30,
    wait=WaitPolicy(min_wait_seconds=WAIT, jitter_ratio=0, dynamic=False, thresholds=[], floor_seconds=0),
    skip=SkipPolicy(
        thresholds=[(0.9, timedelta(hours=12)), (0.7, timedelta(hours=1))], default=timedelta(minutes=10)
    ),
    interval_seconds=(0, 0),
    max_replies_per_hour=100,
    judgments_at_once=100,
    reply_to_bots=False,
    include=frozenset(),
    exclude=frozenset(),
)


class FakeJudge:
    """Answers with `decide(context)`; records what it was shown."""

    def __init__(self) -> None:
        self.decide: Callable[[PromptContext], Judgment] = lambda context: Judgment(True, "yes", 0.8)
        self.calls: list[tuple[PromptContext, timedelta]] = []

    async def judge(self, context: PromptContext, elapsed: timedelta) -> Judgment:
        self.calls.append((context, elapsed))
        return self.decide(context)


class FakeWriter:
    def __init__(self) -> None:
        self.calls: list[tuple[PromptContext, Origin]] = []

    async def write(self, context: PromptContext, origin: Origin) -> str:
        self.calls.append((context, origin))
        return f"reply {len(self.calls)}"


class FakeChat:
    """The chat platform as Conversations.post uses it: posts get a ts from the world's clock."""

    def __init__(self, world: World) -> None:
        self._world = world
        self.posts: list[tuple[str, str, str | None]] = []

    async def post(self, channel_id: str, text: str, thread_ts: str | None, answering: str | None = None) -> str:
        self.posts.append((channel_id, text, thread_ts))
        return self._world.next_ts()


class World:
    """The store, the fakes and the responder under test."""

    def __init__(self, tmp_path: Path, settings: AutonomySettings = SETTINGS) -> None:
        self.clock = ManualClock(START)
        engine = open_database(f"sqlite:///{tmp_path}/a.db")
        self.store = SqlConversationStore(engine, self.clock)
        self.autonomy = SqlAutonomyStore(engine)
        self.judge = FakeJudge()
        self.writer = FakeWriter()
        self.chat = FakeChat(self)
        self.spawned: list[Coroutine[Any, Any, None]] = []
        self.sleeps: list[float] = []
        self.contexts = ContextBuilder(
            SqlMemoStore(engine, self.clock),
            self.clock,
            Persona("myao", "", "en", ZoneInfo("UTC")),
            bot_user_id=BOT.user_id,
            budget=Budget(conversation_tokens=6000, message_tokens=1000),
            marks=prompt_marks("en"),
        )
        activity = Activity(SqlActivityLog(engine), self.clock)  # where the bot's unasked posts are counted
        self.conversations = Conversations(self.store, self.chat, BOT, "myao", activity=activity)
        self.responder = self.build(settings)
        for channel in (Channel("C1", "general"), Channel("C2", "random"), Channel("D1", "alice", ChannelKind.IM)):
            self.store.save_channel(channel)

    def build(self, settings: AutonomySettings) -> AutonomousResponder:
        return AutonomousResponder(
            store=self.store,
            autonomy=self.autonomy,
            conversations=self.conversations,
            contexts=self.contexts,
            judge=self.judge,
            writer=self.writer,
            bot=BOT,
            clock=self.clock,
            settings=settings,
            spawn=self.spawned.append,
            sleep=self.sleep,
            rng=random.Random(7),
        )

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.clock.advance(seconds)

    def next_ts(self) -> str:
        """A new ts: the clock moves on by a microsecond, and the ts is that moment exactly."""
        self.clock.advance(1e-6)
        micros = (self.clock.now() - EPOCH) // timedelta(microseconds=1)
        return f"{micros // 1_000_000}.{micros % 1_000_000:06d}"

    def say(
        self,
        text: str,
        channel: str = "C1",
        user: str = "UALICE",
        thread_ts: str | None = None,
        is_bot: bool = False,
    ) -> str:
        ts = self.next_ts()
        name = {"UALICE": "Alice", "UBOB": "Bob", "UBOT": "myao"}.get(user, user)
        message = Message(channel, ts, user, text, name, is_bot=is_bot, thread_ts=thread_ts, mentions=mentions_in(text))
        self.store.save_message(message)
        return ts

    async def check(self, after: float = 0.0) -> int:
        """Advance the clock by `after` seconds, check, and run what the check started."""
        self.clock.advance(after)
        started = await self.responder.check()
        await self.run()
        return started

    async def run(self) -> None:
        spawned = list(self.spawned)
        self.spawned.clear()
        await asyncio.gather(*spawned)

    def judged_texts(self) -> list[str]:
        """The newest conversation line of each judgment, in order."""
        return [context.conversation[-1] for context, _ in self.judge.calls]


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


def with_settings(world: World, **changes: Any) -> World:
    world.responder = world.build(replace(SETTINGS, **changes))
    return world


async def test_a_lone_question_is_judged_and_answered_only_after_the_wait(world: World) -> None:
    question = world.say("does anyone know a good ramen place?")

    assert await world.check(after=WAIT - 1) == 0
    assert world.judge.calls == []

    assert await world.check(after=1) == 1
    [(context, elapsed)] = world.judge.calls
    assert elapsed == timedelta(seconds=WAIT)
    assert context.conversation[-1].endswith("Alice: does anyone know a good ramen place?")
    assert world.chat.posts == [("C1", "reply 1", None)]
    [(_, origin)] = world.writer.calls
    assert (origin.channel_id, origin.user_id, origin.message_ts) == ("C1", "UALICE", question)
    assert world.store.claimed("C1", [question]) == {question}

    assert await world.check(after=WAIT * 10) == 0, "the bot's own reply is now the newest message"
    assert len(world.judge.calls) == 1


@pytest.mark.parametrize(
    ("confidence", "holds"),
    [(0.95, timedelta(hours=12)), (0.8, timedelta(hours=1)), (0.3, timedelta(minutes=10))],
)
async def test_a_no_stands_for_as_long_as_its_confidence_says(
    world: World, confidence: float, holds: timedelta
) -> None:
    world.judge.decide = lambda context: Judgment(False, "they are chatting", confidence)
    world.say("did you see the match?")
    assert await world.check(after=WAIT) == 1
    judged_at = world.clock.now()

    world.clock.current = judged_at + holds - timedelta(seconds=1)
    assert await world.check() == 0
    world.clock.current = judged_at + holds
    assert await world.check() == 1
    assert len(world.judge.calls) == 2
    assert world.chat.posts == []


async def test_without_judgment_skip_every_check_judges_again(world: World) -> None:
    with_settings(world, skip=None)
    world.judge.decide = lambda context: Judgment(False, "no", 1.0)
    world.say("hmm")
    for _ in range(3):
        assert await world.check(after=WAIT) == 1
    assert len(world.judge.calls) == 3


async def test_a_new_message_invalidates_the_standing_judgment(world: World) -> None:
    world.judge.decide = lambda context: Judgment(False, "no", 0.95)
    world.say("did you see the match?")
    parent = world.say("thread starter", channel="C2")
    world.say("reply in the thread", channel="C2", user="UBOB", thread_ts=parent)
    assert await world.check(after=WAIT) == 2

    world.say("what a goal", user="UBOB")
    assert await world.check(after=WAIT - 1) == 0, "the new message waits again"
    assert await world.check(after=1) == 1
    assert world.judged_texts()[-1].endswith("Bob: what a goal")
    assert await world.check(after=WAIT) == 0, "the thread in C2 is unchanged: its judgment stands"
    assert len(world.judge.calls) == 3


async def test_an_edit_of_the_newest_message_is_judged_once_more(world: World) -> None:
    world.judge.decide = lambda context: Judgment(False, "no", 0.95)
    older = world.say("lunch at noon?")
    newest = world.say("anyone know a good ramen place?", user="UBOB")
    assert await world.check(after=WAIT) == 1

    world.store.edit_message("C1", older, "lunch at one?")
    world.store.edit_message("C1", newest, "anyone know a good ramen place?")  # a link preview added, say
    assert await world.check(after=WAIT) == 0, "an older message, or the same text: the judgment stands"

    world.store.edit_message("C1", newest, "anyone know a good ramen place near the station?")
    assert await world.check() == 1
    assert world.judged_texts()[-1].endswith("Bob: anyone know a good ramen place near the station?")
    assert await world.check(after=WAIT) == 0, "one edit, one judgment"
    assert len(world.judge.calls) == 2


@pytest.mark.parametrize("joins", [False, True], ids=["no", "yes"])
async def test_an_edit_of_the_newest_message_while_it_is_judged_has_it_judged_once_more(
    world: World, joins: bool
) -> None:
    # The edit lands during the model call: the judgment of the old text must neither stand over the new one,
    # nor be acted on. The edited text is judged at the next check, once.
    newest = world.say("anyone know a good ramen place?", user="UBOB")

    def edited_meanwhile(context: PromptContext) -> Judgment:
        if len(world.judge.calls) == 1:
            world.store.edit_message("C1", newest, "anyone know a good ramen place near the station?")
        return Judgment(joins, "maybe", 0.95)

    world.judge.decide = edited_meanwhile
    assert await world.check(after=WAIT) == 1
    assert world.writer.calls == [] and world.chat.posts == [], "nothing written from the old text"
    assert await world.check() == 1
    assert world.judged_texts()[-1].endswith("Bob: anyone know a good ramen place near the station?")
    assert await world.check(after=WAIT) == 0, "one edit, one judgment"
    assert len(world.judge.calls) == 2
    assert len(world.chat.posts) == (1 if joins else 0)
    assert [context.conversation[-1][-len("the station?"):] for context, _ in world.writer.calls] == (
        ["the station?"] if joins else []
    )


async def test_an_edit_is_judged_only_once_the_hourly_budget_allows(world: World) -> None:
    with_settings(world, max_replies_per_hour=1)
    world.judge.decide = lambda context: Judgment("thread" in context.conversation[-1], "maybe", 0.95)
    parent = world.say("the deploy failed")
    world.say("a question in the thread?", user="UBOB", thread_ts=parent)
    question = world.say("anyone know a good ramen place?")
    assert await world.check(after=WAIT) == 2
    assert len(world.chat.posts) == 1, "the channel's budget is used"

    world.store.edit_message("C1", question, "anyone know a good ramen place near the station?")
    assert await world.check(after=WAIT) == 0
    assert await world.check(after=3600) == 1
    assert world.judged_texts()[-1].endswith("near the station?")


async def test_an_invalid_or_failed_judgment_is_a_no_that_holds_for_the_default(world: World) -> None:
    outcomes = iter([Judgment.invalid("no structured answer"), ModelUnavailable("down")])

    def decide(context: PromptContext) -> Judgment:
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    world.judge.decide = decide
    world.say("anyone?")
    assert await world.check(after=WAIT) == 1
    assert await world.check(after=599) == 0
    assert await world.check(after=1) == 1  # ten minutes later; this time the model is down
    assert await world.check(after=599) == 0
    assert world.chat.posts == [] and world.writer.calls == []


async def test_thread_and_top_level_flow_are_separate_conversations(world: World) -> None:
    parent = world.say("the deploy failed again")
    world.say("what about the staging db?", user="UBOB", thread_ts=parent)
    world.say("is lunch at noon?", user="UBOB")
    assert await world.check(after=WAIT) == 2

    judged = {context.conversation[-1].split(": ", 1)[1]: context.conversation for context, _ in world.judge.calls}
    assert set(judged) == {"what about the staging db?", "is lunch at noon?"}
    assert [line.split(": ", 1)[1] for line in judged["what about the staging db?"]] == [
        "the deploy failed again",
        "what about the staging db?",
    ]
    assert [line.split(": ", 1)[1] for line in judged["is lunch at noon?"]] == [
        "the deploy failed again",
        "is lunch at noon?",
    ]
    assert sorted((thread or "", channel) for channel, _, thread in world.chat.posts) == [("", "C1"), (parent, "C1")]


async def test_a_top_level_message_answered_in_its_thread_is_not_a_conversation_of_its_own(world: World) -> None:
    world.judge.decide = lambda context: Judgment(False, "no", 0.95)
    parent = world.say("quick poll: tea or coffee?")
    world.say("coffee", user="UBOB", thread_ts=parent)
    assert await world.check(after=WAIT) == 1
    [(context, _)] = world.judge.calls
    assert context.conversation[-1].endswith("Bob: coffee")


async def test_claimed_messages_are_skipped(world: World) -> None:
    question = world.say("anyone there?")
    world.store.claim("C1", question)  # taken up by another replica's check
    assert await world.check(after=WAIT) == 0
    assert world.judge.calls == []


async def test_a_mention_not_claimed_yet_is_left_to_the_mention_path(world: World) -> None:
    world.say("<@UBOT> are you there?")  # stored by the history sync, say; the catch-up claims it next
    world.say("<@UBOT> is the deploy done?", channel="C2", user="BDEPLOY", is_bot=True)
    with_settings(world, reply_to_bots=True)
    assert await world.check(after=WAIT) == 1
    [judged] = world.judged_texts()
    assert "is the deploy done?" in judged  # another bot mentioning it is judged as before


async def test_own_and_other_bots_messages_are_not_answered(world: World) -> None:
    world.say("myao here", user="UBOT", is_bot=True)
    world.say("Deploy finished", channel="C2", user="BDEPLOY", is_bot=True)
    assert await world.check(after=WAIT) == 0

    with_settings(world, reply_to_bots=True)
    assert await world.check() == 1, "another bot may be answered when reply_to_bots is on; itself never"
    [judged] = world.judged_texts()
    assert judged.endswith("BDEPLOY: Deploy finished")


async def test_dms_are_left_to_the_mention_path(world: World) -> None:
    world.say("hello?", channel="D1")
    assert await world.check(after=WAIT) == 0


@pytest.mark.parametrize(
    ("include", "exclude", "considered"),
    [
        ((), (), {"C1", "C2"}),
        (("general",), (), {"C1"}),
        (("C2",), (), {"C2"}),
        ((), ("random",), {"C1"}),
        ((), ("C1",), {"C2"}),
        (("general", "random"), ("general",), {"C2"}),
    ],
)
async def test_include_and_exclude_by_id_or_name(
    world: World, include: tuple[str, ...], exclude: tuple[str, ...], considered: set[str]
) -> None:
    with_settings(world, include=frozenset(include), exclude=frozenset(exclude))
    world.say("anyone?", channel="C1")
    world.say("anyone?", channel="C2")
    await world.check(after=WAIT)
    assert {context.channel.id for context, _ in world.judge.calls} == considered


async def test_only_recently_active_channels_are_looked_at(world: World) -> None:
    with_settings(world, active_channel_days=1, max_message_age_seconds=3 * 86400)
    world.say("anyone?")
    assert await world.check(after=86400 + 1) == 0
    with_settings(world, active_channel_days=2, max_message_age_seconds=3 * 86400)
    assert await world.check() == 1


async def test_a_conversation_is_not_considered_twice_at_once(world: World) -> None:
    world.say("anyone?")
    world.clock.advance(WAIT)
    assert await world.responder.check() == 1
    assert await world.responder.check() == 0, "still being considered"
    await world.run()
    assert len(world.judge.calls) == 1


async def test_posts_in_one_channel_are_paced(world: World) -> None:
    with_settings(world, interval_seconds=(5, 5))
    parent = world.say("first question?")
    world.say("in a thread?", user="UBOB", thread_ts=parent)
    world.say("second question?")
    world.say("and elsewhere?", channel="C2")
    assert await world.check(after=WAIT) == 3
    assert len(world.chat.posts) == 3
    assert world.sleeps == [pytest.approx(5.0, abs=1e-3)], "the second post in C1 waited; C2 did not"


async def test_the_pause_is_drawn_from_the_interval(world: World) -> None:
    with_settings(world, interval_seconds=(2, 8))
    for i in range(5):
        parent = world.say(f"question {i}?")
        world.say("reply", user="UBOB", thread_ts=parent)
    assert await world.check(after=WAIT) == 5
    assert len(world.sleeps) == 4
    assert all(2 - 1e-3 <= s <= 8 for s in world.sleeps)  # less the microseconds each post takes
    assert len(set(world.sleeps)) > 1


async def test_the_hourly_budget_is_kept_per_channel_and_recovers(world: World) -> None:
    with_settings(world, max_replies_per_hour=2)
    for i in range(3):
        parent = world.say(f"question {i}?")
        world.say("anyone?", user="UBOB", thread_ts=parent)
    world.say("over here?", channel="C2")

    assert await world.check(after=WAIT) == 4
    assert [channel for channel, _, _ in world.chat.posts].count("C1") == 2
    assert [channel for channel, _, _ in world.chat.posts].count("C2") == 1

    judged = len(world.judge.calls)
    assert await world.check(after=WAIT) == 0, "C1 is out of budget: nothing is judged there"
    assert len(world.judge.calls) == judged

    assert await world.check(after=3600) == 1, "an hour later the unanswered one is considered again"
    assert [channel for channel, _, _ in world.chat.posts].count("C1") == 3


async def test_no_budget_means_never_speaking_unasked(world: World) -> None:
    with_settings(world, max_replies_per_hour=0)
    world.say("anyone?")
    assert await world.check(after=WAIT) == 0
    assert world.judge.calls == []


async def test_the_judges_reason_is_logged_at_debug_only(world: World, caplog: pytest.LogCaptureFixture) -> None:
    world.judge.decide = lambda context: Judgment(True, "Alice asked about her secret ramen place", 0.8)
    world.say("does anyone know a good ramen place?")
    with caplog.at_level(logging.DEBUG, logger="myao2"):
        assert await world.check(after=WAIT) == 1
    above_debug = [r.getMessage() for r in caplog.records if r.levelno > logging.DEBUG]
    assert any("joining" in line for line in above_debug)
    assert not any("secret ramen" in line or "ramen place" in line for line in above_debug)
    assert any("secret ramen" in r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG)


@pytest.mark.parametrize("meanwhile", ["answered in its thread", "answered below it", "deleted"])
async def test_a_reply_written_while_the_question_is_answered_or_deleted_is_not_posted(
    world: World, meanwhile: str
) -> None:
    # The judgment saw a question nobody had answered; someone answers it while the reply is written, at the top
    # level or (as people do) in the question's thread: the reply would answer what is answered already.
    question = world.say("does anyone know a good ramen place?")
    write = world.writer.write

    async def answered_meanwhile(context: PromptContext, origin: Origin) -> str:
        if meanwhile == "deleted":
            world.store.delete_message("C1", question)
        else:
            world.say("Ichiran!", user="UBOB", thread_ts=question if meanwhile == "answered in its thread" else None)
        return await write(context, origin)

    world.writer.write = answered_meanwhile  # type: ignore[method-assign]
    assert await world.check(after=WAIT) == 1

    assert len(world.writer.calls) == 1 and world.chat.posts == []


async def test_a_reply_longer_than_a_slack_message_holds_is_not_posted(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    """Slack would cut it unmarked past 40,000 characters; nobody asked for it, so nothing is owed."""
    world.say("does anyone know a good ramen place?")

    async def rambling(context: PromptContext, origin: Origin) -> str:
        return "ramen " * 10_000  # 60,000 characters

    world.writer.write = rambling  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING, logger="myao2.application.autonomous"):
        assert await world.check(after=WAIT) == 1

    assert world.chat.posts == []
    assert "60000 characters" in caplog.text


@pytest.mark.parametrize("answerer", ["UBOB", "UBOT"])
async def test_a_question_answered_in_its_thread_while_judged_is_not_joined(world: World, answerer: str) -> None:
    # Bob, or the bot itself (answering a mention there), replies in the question's thread while the judge reads
    # the top-level flow: the flow no longer waits on the question, as the check would tell it now.
    question = world.say("does anyone know a good ramen place?")
    decide = world.judge.decide

    def answered_meanwhile(context: PromptContext) -> Judgment:
        world.say("Ichiran!", user=answerer, is_bot=answerer == "UBOT", thread_ts=question)
        return decide(context)

    world.judge.decide = answered_meanwhile
    assert await world.check(after=WAIT) == 1
    assert world.chat.posts == []
    assert await world.check(after=WAIT) == (1 if answerer == "UBOB" else 0), "only Bob's reply waits for an answer"


async def test_a_channel_shared_outside_while_judged_is_joined_only_with_what_is_read_there_now(world: World) -> None:
    # The judgment's context was read for the workspace's members (workspace memos, memory): shared meanwhile, the
    # channel's people of another organisation must not get a reply written from it, nor tools reading as before.
    world.say("does anyone know a good ramen place?")
    decide = world.judge.decide

    def shared_meanwhile(context: PromptContext) -> Judgment:
        world.store.set_channel_kind("C1", ChannelKind.SHARED)
        return decide(context)

    world.judge.decide = shared_meanwhile
    assert await world.check(after=WAIT) == 1
    assert world.writer.calls == [] and world.chat.posts == []

    world.judge.decide = decide
    assert await world.check(after=WAIT) == 1, "judged afresh"
    [(context, origin)] = world.writer.calls
    assert context.channel.kind is ChannelKind.SHARED and origin.outside


def restarted(world: World, **changes: Any) -> World:
    """The bot started again (or another replica taking over): a new responder over the same database."""
    return with_settings(world, **changes)


async def test_a_standing_judgment_survives_a_restart(world: World) -> None:
    world.judge.decide = lambda context: Judgment(False, "they are chatting", 0.95)
    world.say("did you see the match?")
    world.say("anyone for lunch?", channel="C2")
    assert await world.check(after=WAIT) == 2

    restarted(world)
    assert await world.check(after=WAIT) == 0, "nothing new: no judgment after the restart"
    world.say("what a goal", user="UBOB")
    assert await world.check(after=WAIT) == 1
    assert world.judged_texts()[-1].endswith("Bob: what a goal")
    assert len(world.judge.calls) == 3


async def test_the_hourly_budget_counts_replies_sent_before_a_restart(world: World) -> None:
    with_settings(world, max_replies_per_hour=2)
    for i in range(2):
        parent = world.say(f"question {i}?")
        world.say("anyone?", user="UBOB", thread_ts=parent)
    assert await world.check(after=WAIT) == 2
    assert len(world.chat.posts) == 2

    restarted(world, max_replies_per_hour=2)
    world.say("one more question?")
    assert await world.check(after=WAIT) == 0, "C1 is still out of budget after the restart"
    assert len(world.judge.calls) == 2
    assert await world.check(after=3600) == 1, "an hour after those replies it is considered"
    assert len(world.chat.posts) == 3


async def test_the_pause_after_a_post_holds_across_a_restart(world: World) -> None:
    with_settings(world, interval_seconds=(30, 30))
    world.say("first question?")
    assert await world.check(after=WAIT) == 1
    world.say("second question?", user="UBOB")
    restarted(world, interval_seconds=(30, 30), wait=replace(SETTINGS.wait, min_wait_seconds=10))
    assert await world.check(after=10) == 1
    assert len(world.chat.posts) == 2
    assert world.sleeps == [pytest.approx(20.0, abs=1e-3)], "30 s after the first post, 10 s of them gone by"


async def test_judgments_run_a_few_at_once(world: World) -> None:
    gate = asyncio.Event()
    running: list[int] = [0]
    peak: list[int] = [0]

    class GatedJudge(FakeJudge):
        async def judge(self, context: PromptContext, elapsed: timedelta) -> Judgment:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
            try:
                await gate.wait()
                return await super().judge(context, elapsed)
            finally:
                running[0] -= 1

    world.judge = GatedJudge()
    world.judge.decide = lambda context: Judgment(False, "no", 0.95)
    world.responder = world.build(replace(SETTINGS, judgments_at_once=2))
    for i in range(5):
        parent = world.say(f"question {i}?")
        world.say("anyone?", user="UBOB", thread_ts=parent)
    world.clock.advance(WAIT)
    assert await world.responder.check() == 5
    considering = asyncio.ensure_future(world.run())
    for _ in range(200):  # the considerations build their prompts in worker threads: give them time to queue
        await asyncio.sleep(0.005)
        if peak[0] > 2:
            break
    assert peak[0] == 2, "two judgments at a time; the others wait their turn"
    gate.set()
    await considering
    assert len(world.judge.calls) == 5
    assert peak[0] == 2
