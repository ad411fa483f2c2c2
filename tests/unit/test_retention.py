"""The retention job: digests, then condensed digests, then raw text deleted; resumable, and failures keep the raw data."""

from __future__ import annotations

from datetime import timedelta
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import inspect
from sqlalchemy import text as sql_text

from myao2.application.agents import DigestPrompt, ModelUnavailable
from myao2.application.context import Persona
from myao2.application.retention import RetentionJob
from myao2.domain.conversation import Channel, ChannelKind, Message
from myao2.domain.memory import RetentionPolicy, Stage
from myao2.domain.visibility import Audience
from myao2.infrastructure.db.conversation_store import SqlConversationStore
from myao2.infrastructure.db.memory_store import SqlMemoryStore
from tests.clocks import ManualClock
from tests.stored import stored_message

PERSONA = Persona("myao", "", "en", ZoneInfo("UTC"))
GENERAL = Channel("C1", "general")
SECRET = Channel("G1", "secret", ChannelKind.PRIVATE)
BOT = "UBOT"
DAY = 24 * 3600


class FakeDigests:
    """A model that digests each message line as "<stage>: text"; `failing` makes it unavailable."""

    def __init__(self) -> None:
        self.prompts: list[DigestPrompt] = []
        self.failing = False

    async def digest(self, prompt: DigestPrompt) -> tuple[str, ...]:
        self.prompts.append(prompt)
        if self.failing:
            raise ModelUnavailable("down")
        return tuple(f"{prompt.stage.value}: {line.split(': ', 1)[1]}" for line in prompt.messages)


class ReadAll:
    """A memory job that has read every message (the tests of retention alone)."""

    def absorbed(self, channel: Channel, messages) -> set[str]:
        return {m.ts for m in messages}


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def conversations(engine, clock) -> SqlConversationStore:
    store = SqlConversationStore(engine, clock)
    store.save_channel(GENERAL)
    store.save_channel(SECRET)
    return store


@pytest.fixture
def memories(engine, clock) -> SqlMemoryStore:
    return SqlMemoryStore(engine, clock)


@pytest.fixture
def writer() -> FakeDigests:
    return FakeDigests()


def make_job(conversations, memories, writer, clock, policy=RetentionPolicy(), memory=None) -> RetentionJob:
    return RetentionJob(
        conversations=conversations,
        memories=memories,
        writer=writer,
        clock=clock,
        persona=PERSONA,
        policy=policy,
        bot_user_id=BOT,
        max_tokens=2000,
        memory=memory or ReadAll(),
    )


@pytest.fixture
def job(conversations, memories, writer, clock) -> RetentionJob:
    return make_job(conversations, memories, writer, clock)


def say(store: SqlConversationStore, clock: ManualClock, channel: Channel, text: str, user: str = "U1", thread_ts=None) -> Message:
    clock.advance(60)
    message = Message(channel.id, f"{clock.now().timestamp():.6f}", user, text, "Alice", thread_ts=thread_ts)
    assert store.save_message(message)
    return message


def rows_of(engine, sql: str) -> list[tuple]:
    with engine.connect() as db:
        return [tuple(row) for row in db.execute(sql_text(sql))]


def rows_holding(engine, text: str) -> list[str]:
    """The tables any of whose rows holds `text`."""
    found = []
    with engine.connect() as db:
        for table in inspect(engine).get_table_names():
            for row in db.execute(sql_text(f'SELECT * FROM "{table}"')):
                if any(isinstance(v, str) and text in v for v in row):
                    found.append(table)
                    break
    return found


async def test_days_are_digested_then_condensed_from_the_raw_messages_then_their_raw_text_deleted(
    job, conversations, memories, writer, clock, engine
):
    said = say(conversations, clock, GENERAL, "the office moves to Osaka in May")
    say(conversations, clock, GENERAL, "cake on Friday")

    clock.advance(2 * DAY)
    assert (await job.run()).digests == 0
    assert memories.digests() == []

    clock.advance(1 * DAY)  # day 3
    report = await job.run()
    assert report.digests == 1
    [digest] = memories.digests()
    assert digest.stage is Stage.DIGEST and digest.audience == Audience()
    assert digest.lines == ("digest: the office moves to Osaka in May", "digest: cake on Friday")
    assert (await job.run()).digests == 0  # nothing new: no model call
    assert len(writer.prompts) == 1

    clock.advance(4 * DAY)  # day 7
    await job.run()
    [digest] = memories.digests()
    assert digest.stage is Stage.CONDENSED
    assert digest.lines[0] == "condensed: the office moves to Osaka in May"  # from the raw messages
    assert stored_message(conversations, GENERAL.id, said.ts) is not None

    clock.advance(7 * DAY)  # day 14
    report = await job.run()
    assert report.deleted == 2
    assert stored_message(conversations, GENERAL.id, said.ts) is None
    assert rows_holding(engine, "Osaka in May") == ["digests"]
    assert conversations.save_message(said) is False  # a late history fetch cannot bring it back


async def test_a_model_failure_keeps_the_raw_messages_and_the_next_round_retries(
    job, conversations, memories, writer, clock
):
    said = say(conversations, clock, GENERAL, "remember the milk")
    clock.advance(15 * DAY)
    writer.failing = True
    report = await job.run()
    assert report.failures == 1 and report.deleted == 0
    assert stored_message(conversations, GENERAL.id, said.ts) is not None
    assert memories.digests() == []

    writer.failing = False
    report = await job.run()
    assert [d.stage for d in memories.digests()] == [Stage.CONDENSED]  # straight to the last stage
    assert report.deleted == 1


async def test_a_day_the_model_always_refuses_holds_back_no_other_conversation(
    job, conversations, memories, writer, clock
):
    # A model that refuses one day for good (a content filter, say) must not keep every conversation after it in
    # the round's order from being digested, and so their raw text from being deleted, for ever.
    random = Channel("C2", "random")
    conversations.save_channel(random)
    refused = say(conversations, clock, GENERAL, "what the filter refuses")
    kept = say(conversations, clock, random, "cake on Friday")
    clock.advance(15 * DAY)
    digest = writer.digest

    async def refusing_general(prompt: DigestPrompt) -> tuple[str, ...]:
        if prompt.channel.id == GENERAL.id:
            raise ModelUnavailable("content filter")
        return await digest(prompt)

    writer.digest = refusing_general
    for _ in range(2):
        assert (await job.run()).failures == 1  # a model that is down costs a round one call still

    assert [d.channel_id for d in memories.digests()] == [random.id]
    assert stored_message(conversations, random.id, kept.ts) is None
    assert stored_message(conversations, GENERAL.id, refused.ts) is not None


async def test_a_run_cut_short_resumes_without_redoing_finished_days(job, conversations, memories, writer, clock):
    say(conversations, clock, GENERAL, "day one")
    clock.advance(DAY)
    say(conversations, clock, GENERAL, "day two")
    clock.advance(DAY)
    say(conversations, clock, SECRET, "secret day three")
    clock.advance(5 * DAY)

    calls = 0
    original = writer.digest

    async def crash_after_first(prompt):
        nonlocal calls
        calls += 1
        if calls == 2:
            raise RuntimeError("killed")
        return await original(prompt)

    writer.digest = crash_after_first  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        await job.run()
    assert len(memories.digests()) == 1

    writer.digest = original  # type: ignore[method-assign]
    writer.prompts.clear()
    await job.run()
    assert len(writer.prompts) == 2  # only the two days not done
    assert sorted(str(d.day) for d in memories.digests()) == ["2025-01-02", "2025-01-03", "2025-01-04"]


async def test_a_private_conversation_s_digest_is_its_own(job, conversations, memories, clock):
    say(conversations, clock, SECRET, "canary-secret")
    clock.advance(3 * DAY)
    await job.run()
    [digest] = memories.digests(SECRET.id)
    assert digest.audience == Audience(SECRET.id)


async def test_a_thread_the_bot_takes_part_in_keeps_its_messages_until_quiet_for_a_day(
    job, conversations, clock
):
    parent = say(conversations, clock, GENERAL, "long running thread")
    say(conversations, clock, GENERAL, "I am in", user=BOT, thread_ts=parent.ts)
    other = say(conversations, clock, GENERAL, "plain message")
    clock.advance(14 * DAY)
    say(conversations, clock, GENERAL, "still going", thread_ts=parent.ts)

    await job.run()
    assert stored_message(conversations, GENERAL.id, other.ts) is None
    assert stored_message(conversations, GENERAL.id, parent.ts) is not None

    clock.advance(DAY)
    await job.run()
    assert stored_message(conversations, GENERAL.id, parent.ts) is None


async def test_steps_turned_off_are_skipped(conversations, memories, writer, clock):
    said = say(conversations, clock, GENERAL, "kept forever")
    job = make_job(conversations, memories, writer, clock, RetentionPolicy(0, 0, 0))
    clock.advance(30 * DAY)
    await job.run()
    assert writer.prompts == [] and stored_message(conversations, GENERAL.id, said.ts) is not None

    only_delete = make_job(conversations, memories, writer, clock, RetentionPolicy(0, 0, 14))
    await only_delete.run()
    assert writer.prompts == [] and stored_message(conversations, GENERAL.id, said.ts) is None


def test_the_policy_says_which_stage_is_due_and_when_raw_text_may_go() -> None:
    policy = RetentionPolicy(3, 7, 14)
    today = ManualClock().now().date()
    assert policy.stage_due(today - timedelta(days=2), today) is None
    assert policy.stage_due(today - timedelta(days=3), today) is Stage.DIGEST
    assert policy.stage_due(today - timedelta(days=7), today) is Stage.CONDENSED
    old = today - timedelta(days=14)
    assert not policy.deletable(old, today, Stage.DIGEST)
    assert policy.deletable(old, today, Stage.CONDENSED)
    assert RetentionPolicy(3, 0, 14).deletable(old, today, Stage.DIGEST)


async def test_a_channel_turned_private_keeps_its_memories_and_digests_to_itself_and_the_workspace_forgets_it(
    job, conversations, memories, clock
):
    from myao2.application.memory_job import MemoryJob
    from myao2.domain.memory import WORKSPACE_SCOPE, Scope, Term
    from tests.unit.test_memory_job import PERSONA as MEMORY_PERSONA, SETTINGS, FakeWriter

    random = Channel("C2", "random")
    conversations.save_channel(random)
    memory_job = MemoryJob(
        conversations=conversations, memories=memories, writer=FakeWriter(), clock=clock,
        persona=MEMORY_PERSONA, settings=SETTINGS,
    )
    say(conversations, clock, random, "cats are great")
    await memory_job.run()  # read before anything of GENERAL: its bullets never had GENERAL's words in sight
    parent = say(conversations, clock, GENERAL, "canary-general plans")
    say(conversations, clock, GENERAL, "in a thread", thread_ts=parent.ts)
    clock.advance(3 * DAY)
    await memory_job.run()
    await job.run()
    workspace = memories.get(WORKSPACE_SCOPE, Term.LONG)
    assert workspace is not None and any("canary-general" in b.text for b in workspace.bullets)

    conversations.set_channel_kind(GENERAL.id, ChannelKind.PRIVATE)
    memories.narrow(GENERAL.id)
    own = Audience(GENERAL.id)
    assert {m.audience for m in memories.all() if m.scope.channel_id == GENERAL.id} == {own}
    assert memories.get(Scope(GENERAL.id, parent.ts), Term.SHORT).audience == own
    assert [d.audience for d in memories.digests(GENERAL.id)] == [own]
    assert memories.get(WORKSPACE_SCOPE, Term.LONG) is None

    await memory_job.run()  # made again, from the public channels alone
    rebuilt = memories.get(WORKSPACE_SCOPE, Term.LONG)
    assert rebuilt is not None and [b.text for b in rebuilt.active] and not any(
        "canary-general" in b.text for b in rebuilt.bullets
    )


async def test_forgetting_a_person_deletes_the_digests_of_the_days_they_spoke_in(
    job, conversations, memories, clock, engine
):
    from myao2.infrastructure.db.forget import forget_person

    say(conversations, clock, GENERAL, "canary-alice loves jazz", user="UALICE")
    clock.advance(DAY)
    say(conversations, clock, GENERAL, "bob likes tea", user="UBOB")
    clock.advance(15 * DAY)
    await job.run()
    assert len(memories.digests()) == 2 and rows_holding(engine, "canary-alice") == ["digests"]

    from myao2.domain.memory import Bullet, Memory, Scope, Term

    alice_ts = rows_of(engine, "SELECT ts FROM expired_messages WHERE user_id = 'UALICE'")
    assert len(alice_ts) == 1 and rows_of(engine, "SELECT count(*) FROM messages") == [(0,)]
    note = Bullet(1, "canary-alice likes jazz", clock.now().date(), (alice_ts[0][0],))
    memories.save([Memory(Scope(GENERAL.id), Term.LONG, Audience(), (note,), label="#general")])

    forgotten = forget_person(engine, "UALICE")
    assert forgotten.notes == 2  # the digest of her day, and the memory note made from her (deleted) message
    assert rows_holding(engine, "canary-alice") == []
    assert rows_of(engine, "SELECT user_id FROM expired_messages") == [("UBOB",)]
    assert [d.lines for d in memories.digests()] == [("condensed: bob likes tea",)]


async def test_a_channel_turning_private_while_a_round_is_asking_the_model_stays_narrowed(
    conversations, memories, clock
):
    from myao2.application.memory_job import MemoryJob
    from myao2.domain.memory import WORKSPACE_SCOPE, Scope, Term
    from tests.unit.test_memory_job import PERSONA as MEMORY_PERSONA, SETTINGS, FakeWriter, echo

    def turned_private_meanwhile(prompt):  # type: ignore[no-untyped-def]
        if prompt.channel is None:  # the workspace's turn: the channel turns private while the model thinks
            conversations.set_channel_kind(GENERAL.id, ChannelKind.PRIVATE)
            memories.narrow(GENERAL.id)
        return echo(prompt)

    memory_job = MemoryJob(
        conversations=conversations, memories=memories, writer=FakeWriter(turned_private_meanwhile), clock=clock,
        persona=MEMORY_PERSONA, settings=SETTINGS,
    )
    say(conversations, clock, GENERAL, "canary-general plans")
    await memory_job.run()
    assert memories.get(Scope(GENERAL.id), Term.LONG).audience == Audience(GENERAL.id)
    workspace = memories.get(WORKSPACE_SCOPE, Term.LONG)
    assert workspace is None or not any("canary" in b.text for b in workspace.bullets)

    # A save of what was read before the narrowing does not widen it again.
    stale = memories.get(Scope(GENERAL.id), Term.LONG)
    from dataclasses import replace as replaced

    memories.save([replaced(stale, audience=Audience())])
    assert memories.get(Scope(GENERAL.id), Term.LONG).audience == Audience(GENERAL.id)


async def test_a_digest_made_while_its_channel_turned_private_is_narrowed(conversations, memories, clock):
    class TurningPrivate(FakeDigests):
        async def digest(self, prompt):  # type: ignore[no-untyped-def]
            conversations.set_channel_kind(GENERAL.id, ChannelKind.PRIVATE)
            memories.narrow(GENERAL.id)
            return await super().digest(prompt)

    job = make_job(conversations, memories, TurningPrivate(), clock)
    say(conversations, clock, GENERAL, "canary-general plans")
    clock.advance(3 * DAY)
    await job.run()
    assert [d.audience for d in memories.digests()] == [Audience(GENERAL.id)]


async def test_a_conversation_the_bot_never_stored_is_digested_as_its_own(job, conversations, memories, clock):
    say(conversations, clock, Channel("CUNKNOWN", "unknown"), "canary-unknown")  # its channel row never stored
    clock.advance(3 * DAY)
    await job.run()
    assert [d.audience for d in memories.digests("CUNKNOWN")] == [Audience("CUNKNOWN")]


async def test_a_message_deleted_or_edited_in_slack_leaves_no_trace_in_its_day_s_digest(
    job, conversations, memories, writer, clock
):
    kept = say(conversations, clock, GENERAL, "the picnic is on Sunday")
    regret = say(conversations, clock, GENERAL, "canary-regret my salary is 100k")
    changed = say(conversations, clock, GENERAL, "canary-typo meet at 5")
    clock.advance(3 * DAY)
    await job.run()
    assert any("canary-regret" in line for line in memories.digests()[0].lines)

    conversations.delete_message(GENERAL.id, regret.ts)
    conversations.edit_message(GENERAL.id, changed.ts, "meet at 6")
    assert memories.digests() == []  # dropped at once...
    await job.run()  # ...and made again from what is left
    [digest] = memories.digests()
    assert digest.lines == ("digest: the picnic is on Sunday", "digest: meet at 6")

    clock.advance(15 * DAY)
    await job.run()
    assert stored_message(conversations, GENERAL.id, kept.ts) is None
    conversations.delete_message(GENERAL.id, kept.ts)  # deleted in Slack after its text is gone here
    assert memories.digests() == []


async def test_an_edit_that_leaves_the_text_as_it_was_keeps_the_day_s_digest(job, conversations, memories, writer, clock):
    # Slack reports a link preview added to a message as an edit of the same text: nothing to digest again.
    message = say(conversations, clock, GENERAL, "see https://example.com")
    clock.advance(3 * DAY)
    await job.run()
    [digest] = memories.digests()

    assert conversations.edit_message(GENERAL.id, message.ts, "see https://example.com")
    await job.run()
    assert memories.digests() == [digest]
    assert len(writer.prompts) == 1


async def test_a_person_forgotten_while_their_day_is_being_digested_does_not_come_back_in_it(
    conversations, memories, clock, engine
):
    from myao2.infrastructure.db.forget import forget_person

    class ForgettingMeanwhile(FakeDigests):
        async def digest(self, prompt):  # type: ignore[no-untyped-def]
            lines = await super().digest(prompt)
            if len(self.prompts) == 1:
                forget_person(engine, "UALICE")  # `myao2 memory forget` while the model writes
            return lines

    writer = ForgettingMeanwhile()
    job = make_job(conversations, memories, writer, clock)
    say(conversations, clock, GENERAL, "canary-alice loves jazz", user="UALICE")
    say(conversations, clock, GENERAL, "bob likes tea", user="UBOB")
    clock.advance(3 * DAY)
    await job.run()
    assert rows_holding(engine, "canary-alice") == []
    await job.run()  # made again from what is left
    assert [d.lines for d in memories.digests()] == [("digest: bob likes tea",)]


async def test_raw_text_stays_until_the_memory_job_has_read_it_even_when_only_its_model_fails(
    conversations, memories, writer, clock, engine
):
    from myao2.application.memory_job import MemoryJob
    from myao2.infrastructure.db.profile_store import SqlProfileStore
    from tests.unit.test_memory_job import PERSONA as MEMORY_PERSONA, SETTINGS, FakeWriter, echo
    from tests.unit.test_profiles import FakeWriter as FakeProfiles, profile_keeper

    def down(prompt):  # type: ignore[no-untyped-def]
        raise ModelUnavailable("down")

    channels, people = FakeWriter(down), FakeProfiles(down)
    keeper = profile_keeper(conversations, SqlProfileStore(engine, clock), people, clock)
    memory_job = MemoryJob(
        conversations=conversations, memories=memories, writer=channels, clock=clock,
        persona=MEMORY_PERSONA, settings=SETTINGS, profiles=keeper,
    )
    job = make_job(conversations, memories, writer, clock, memory=memory_job)
    say(conversations, clock, GENERAL, "I like canary-opera")
    clock.advance(15 * DAY)

    await memory_job.run()  # the memory model fails; the digests do not
    await job.run()
    assert [d.stage for d in memories.digests()] == [Stage.CONDENSED]
    assert "messages" in rows_holding(engine, "canary-opera")

    channels.answer = echo
    await memory_job.run()  # the channel's memory reads it; the profiles still fail
    await job.run()
    assert "messages" in rows_holding(engine, "canary-opera")

    from tests.unit.test_profiles import liking

    people.answer = liking
    await memory_job.run()
    await job.run()
    assert "messages" not in rows_holding(engine, "canary-opera")
    assert "profiles" in rows_holding(engine, "canary-opera") and "memories" in rows_holding(engine, "canary-opera")


async def test_raw_text_of_a_channel_the_bot_left_goes_on_time_though_the_memory_job_reads_it_no_more(
    conversations, memories, writer, clock, engine
):
    from myao2.application.memory_job import MemoryJob
    from tests.unit.test_memory_job import PERSONA as MEMORY_PERSONA, SETTINGS, FakeWriter

    memory_job = MemoryJob(
        conversations=conversations, memories=memories, writer=FakeWriter(), clock=clock,
        persona=MEMORY_PERSONA, settings=SETTINGS,
    )
    job = make_job(conversations, memories, writer, clock, memory=memory_job)
    say(conversations, clock, GENERAL, "canary-left behind")
    conversations.leave_channel(GENERAL.id)
    clock.advance(15 * DAY)

    await memory_job.run()
    await job.run()

    assert "messages" not in rows_holding(engine, "canary-left")
