from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import timedelta
from zoneinfo import ZoneInfo

import pytest

from myao2.application.agents import MemoryPrompt, MemoryUpdate, ModelUnavailable
from myao2.application.context import Persona
from myao2.application.memory_job import MemoryJob, MemorySettings
from myao2.domain.conversation import Channel, ChannelKind, Message
from myao2.domain.memory import WORKSPACE_SCOPE, Draft, Scope, Term
from myao2.domain.tokens import estimate_tokens
from myao2.domain.visibility import Audience
from myao2.infrastructure.db.conversation_store import SqlConversationStore
from myao2.infrastructure.db.engine import open_database
from myao2.infrastructure.db.forget import forget_person
from myao2.infrastructure.db.memory_store import SqlMemoryStore
from myao2.infrastructure.llm.phrases import prompt_marks
from tests.clocks import ManualClock

PERSONA = Persona("myao", "", "en", ZoneInfo("UTC"))
GENERAL = Channel("C1", "general")
RANDOM = Channel("C2", "random")
SECRET = Channel("G1", "secret", ChannelKind.PRIVATE)
DM = Channel("D1", "alice", ChannelKind.IM)
SETTINGS = MemorySettings(short_term_window=timedelta(hours=24), thread_memory_days=7, batch_max_tokens=2000, cut=prompt_marks("en").cut)
TS = re.compile(r"^(?:\S+ )?ts=([\d.,]+)")


def sources(line: str) -> tuple[str, ...]:
    match = TS.match(line)
    assert match, line
    return tuple(match.group(1).split(","))


def echo(prompt: MemoryPrompt) -> MemoryUpdate:
    """A model that remembers each new line, summarises each line short-term and each thread in one bullet."""
    lines = prompt.material
    return MemoryUpdate(
        long_term=tuple(Draft(f"L {line.split(': ', 1)[-1]}", sources(line)) for line in lines),
        short_term=tuple(Draft(f"S {line.split(': ', 1)[-1]}", sources(line)) for line in (*prompt.earlier, *lines)),
        threads=tuple(
            (ts, (Draft(f"T {ts}", tuple(s for line in lines if ts in line for s in sources(line))),))
            for ts, _ in prompt.threads
        ),
    )


class FakeWriter:
    def __init__(self, answer: Callable[[MemoryPrompt], MemoryUpdate] = echo) -> None:
        self.answer = answer
        self.prompts: list[MemoryPrompt] = []
        self.calls: list[list[str]] = []
        """The scopes each model call read."""

    async def update(self, prompts: Sequence[MemoryPrompt]) -> tuple[MemoryUpdate, ...]:
        self.calls.append([p.channel.id if p.channel else "workspace" for p in prompts])
        updates = []
        for prompt in prompts:
            self.prompts.append(prompt)
            updates.append(self.answer(prompt))
        return tuple(updates)

    def scopes(self) -> list[str]:
        return [p.channel.id if p.channel else "workspace" for p in self.prompts]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def engine(tmp_path):
    engine = open_database(f"sqlite:///{tmp_path}/m.db")
    yield engine
    engine.dispose()


@pytest.fixture
def conversations(engine, clock) -> SqlConversationStore:
    store = SqlConversationStore(engine, clock)
    for channel in (GENERAL, RANDOM, SECRET, DM):
        store.save_channel(channel)
    return store


@pytest.fixture
def memories(engine, clock) -> SqlMemoryStore:
    return SqlMemoryStore(engine, clock)


@pytest.fixture
def writer() -> FakeWriter:
    return FakeWriter()


@pytest.fixture
def job(conversations, memories, writer, clock) -> MemoryJob:
    return MemoryJob(
        conversations=conversations,
        memories=memories,
        writer=writer,
        clock=clock,
        persona=PERSONA,
        settings=SETTINGS,
    )


class Say:
    def __init__(self, store: SqlConversationStore, clock: ManualClock) -> None:
        self.store = store
        self.clock = clock

    def __call__(self, channel: Channel, text: str, thread_ts: str | None = None) -> Message:
        self.clock.advance(60)
        ts = f"{self.clock.now().timestamp():.6f}"
        message = Message(channel.id, ts, "U1", text, "Alice", thread_ts=thread_ts)
        self.store.save_message(message)
        return message


@pytest.fixture
def say(conversations, clock) -> Say:
    return Say(conversations, clock)


def texts(memories: SqlMemoryStore, scope: Scope, term: Term) -> list[str]:
    memory = memories.get(scope, term)
    return [] if memory is None else [b.text for b in memory.active]


async def test_one_run_makes_workspace_channel_and_thread_memories_then_a_quiet_run_calls_nothing(
    job, writer, memories, say
):
    say(GENERAL, "lunch at noon")
    parent = say(GENERAL, "release on friday")
    say(GENERAL, "I will write the notes", thread_ts=parent.ts)
    say(RANDOM, "cats are great")

    report = await job.run()

    assert writer.scopes() == ["C1", "C2", "workspace"]
    assert writer.calls == [["C1", "C2"], ["workspace"]]  # the public channels read together
    assert report.calls == 2
    assert texts(memories, Scope("C1"), Term.LONG) == [
        "L lunch at noon", "L release on friday", "L I will write the notes"
    ]
    assert "S cats are great" in texts(memories, Scope("C2"), Term.SHORT)
    assert texts(memories, Scope("C1", parent.ts), Term.SHORT) == [f"T {parent.ts}"]
    assert texts(memories, WORKSPACE_SCOPE, Term.LONG)  # from the channels' notes
    assert texts(memories, WORKSPACE_SCOPE, Term.SHORT)

    again = await job.run()

    assert again.calls == 0
    assert len(writer.calls) == 2


async def test_a_message_longer_than_a_call_may_read_is_cut_to_the_batch_budget_with_a_marker(job, writer, say):
    # Slack takes 40,000 characters in a message; read whole, one would make a call many times the budget (a
    # model with a small context refuses it every round, and the channel's memory never moves past it).
    say(GENERAL, "lunch at noon")
    say(GENERAL, "word " * 20_000)  # 100,000 characters, about 25,000 tokens

    await job.run()

    lines = [line for p in writer.prompts if p.channel == GENERAL for line in p.material]
    assert len(lines) == 2 and lines[0].endswith("lunch at noon")
    assert estimate_tokens(lines[1]) <= SETTINGS.batch_max_tokens and "more characters left out" in lines[1]


async def test_a_new_message_in_one_channel_redoes_only_that_channel_and_the_workspace(job, writer, memories, say):
    say(GENERAL, "lunch at noon")
    say(RANDOM, "cats are great")
    await job.run()
    writer.prompts.clear()

    say(RANDOM, "dogs too")
    await job.run()

    assert writer.scopes() == ["C2", "workspace"]
    channel_prompt, workspace_prompt = writer.prompts
    assert [line.split(": ", 1)[1] for line in channel_prompt.material] == ["dogs too"]
    assert channel_prompt.earlier == ()  # the short-term memory stands for what was read
    assert [b.text for b in channel_prompt.short_term] == ["S cats are great"]
    assert not any("lunch" in line for line in workspace_prompt.material)  # #general did not change
    assert texts(memories, Scope("C2"), Term.LONG) == ["L cats are great", "L dogs too"]


async def test_a_thread_reply_brings_the_thread_so_far_as_context(job, writer, memories, say):
    parent = say(GENERAL, "who writes the notes?")
    say(GENERAL, "not me", thread_ts=parent.ts)
    say(GENERAL, "unrelated chat")
    await job.run()
    writer.prompts.clear()

    say(GENERAL, "I will", thread_ts=parent.ts)
    await job.run()

    prompt = writer.prompts[0]
    assert [line.split(": ", 1)[1] for line in prompt.earlier] == ["who writes the notes?", "not me"]
    assert [ts for ts, _ in prompt.threads] == [parent.ts]
    assert texts(memories, Scope(GENERAL.id, parent.ts), Term.SHORT) == [f"T {parent.ts}"]


async def test_an_edit_is_a_change_and_is_read_again(job, writer, conversations, memories, say):
    message = say(GENERAL, "meeting at 3")
    await job.run()
    writer.prompts.clear()

    conversations.edit_message(GENERAL.id, message.ts, "meeting at 4")
    await job.run()

    assert writer.scopes() == ["C1", "workspace"]
    assert texts(memories, Scope("C1"), Term.LONG)[-1] == "L meeting at 4"
    assert (await job.run()).calls == 0


async def test_private_conversations_are_remembered_for_themselves_and_never_reach_the_workspace(
    job, writer, memories, say
):
    say(GENERAL, "lunch at noon")
    say(SECRET, "canary-secret plan")
    say(DM, "canary-dm worry")

    await job.run()

    workspace_prompt = writer.prompts[-1]
    assert workspace_prompt.channel is None
    assert not any("canary" in line for line in workspace_prompt.material)
    assert not any("canary" in t for t in texts(memories, WORKSPACE_SCOPE, Term.LONG))
    secret = memories.get(Scope(SECRET.id), Term.LONG)
    assert secret is not None and secret.audience == Audience(SECRET.id)
    assert memories.get(Scope(DM.id), Term.SHORT).audience == Audience(DM.id)


async def test_a_change_only_in_a_private_channel_leaves_the_workspace_alone(job, writer, say):
    say(GENERAL, "lunch at noon")
    await job.run()
    writer.prompts.clear()

    say(SECRET, "canary-secret plan")
    await job.run()

    assert writer.scopes() == ["G1"]


async def test_a_failed_call_keeps_the_old_memory_and_is_retried_next_round(job, writer, memories, say):
    say(GENERAL, "lunch at noon")
    await job.run()
    before = memories.get(Scope("C1"), Term.LONG)
    say(GENERAL, "dinner at seven")

    def fail(prompt: MemoryPrompt) -> MemoryUpdate:
        raise ModelUnavailable("down")

    writer.answer = fail
    report = await job.run()

    assert report.failures == 1
    assert memories.get(Scope("C1"), Term.LONG).bullets == before.bullets
    assert memories.get(Scope("C1"), Term.LONG).covered == before.covered

    writer.answer = echo
    await job.run()

    assert texts(memories, Scope("C1"), Term.LONG) == ["L lunch at noon", "L dinner at seven"]


async def test_a_crash_mid_run_resumes_with_the_rest_and_duplicates_nothing(job, writer, memories, say):
    say(GENERAL, "lunch at noon")
    say(SECRET, "plans")  # a private channel: a call of its own, after the public ones

    def crash_on_secret(prompt: MemoryPrompt) -> MemoryUpdate:
        if prompt.channel is not None and prompt.channel.id == SECRET.id:
            raise RuntimeError("killed")
        return echo(prompt)

    writer.answer = crash_on_secret
    with pytest.raises(RuntimeError):
        await job.run()
    writer.answer = echo
    writer.prompts.clear()

    await job.run()

    assert writer.scopes() == ["G1", "workspace"]
    assert texts(memories, Scope("C1"), Term.LONG) == ["L lunch at noon"]
    assert texts(memories, Scope("G1"), Term.LONG) == ["L plans"]


async def test_public_channels_share_calls_within_the_batch_budget_and_private_ones_never(job, writer, memories, say):
    for i in range(3):
        say(GENERAL, f"general {i} " + "word " * 100)
        say(RANDOM, f"random {i} " + "word " * 100)
    say(SECRET, "canary-secret plan")
    say(DM, "canary-dm worry")
    await job.run()

    assert writer.calls == [["C1", "C2"], ["D1"], ["G1"], ["workspace"]]
    assert not any("canary" in line for p in writer.prompts if p.channel in (GENERAL, RANDOM) for line in p.material)
    assert [t.split()[2] for t in texts(memories, Scope("C1"), Term.LONG)] == ["0", "1", "2"]
    assert [t.split()[2] for t in texts(memories, Scope("C2"), Term.LONG)] == ["0", "1", "2"]

    writer.calls.clear()
    start = len(writer.prompts)
    for i in range(8):  # more than one call can read: the rest waits for the next call
        say(GENERAL, f"general more {i} " + "word " * 150)
        say(RANDOM, f"random more {i} " + "word " * 150)
    await job.run()

    read = iter(writer.prompts[start:])
    sizes = [sum(estimate_tokens(line) for prompt in call for line in next(read).material) for call in writer.calls]
    assert len(writer.calls) > 2  # several calls for the public backlog, then the workspace
    assert all(size <= SETTINGS.batch_max_tokens for size in sizes[:-1])  # each channel call within the budget
    assert len(texts(memories, Scope("C1"), Term.LONG)) == len(texts(memories, Scope("C2"), Term.LONG)) == 11


async def test_a_long_backlog_is_read_in_batches_each_saved_as_it_goes(job, writer, memories, say):
    for i in range(30):
        say(GENERAL, f"message {i} " + "word " * 200)

    def crash_on_third(prompt: MemoryPrompt) -> MemoryUpdate:
        if len(writer.prompts) == 3:
            raise RuntimeError("killed")
        return echo(prompt)

    writer.answer = crash_on_third
    with pytest.raises(RuntimeError):
        await job.run()
    assert len(writer.prompts) == 3
    done = len(texts(memories, Scope("C1"), Term.LONG))
    assert 0 < done < 30

    writer.answer = echo
    await job.run()

    remembered = texts(memories, Scope("C1"), Term.LONG)
    assert [t.split()[2] for t in remembered] == [str(i) for i in range(30)]  # each once, in order


async def test_long_term_bullets_may_only_come_from_new_messages_with_real_ts(job, writer, memories, say):
    say(GENERAL, "lunch at noon")
    await job.run()
    old = writer.prompts[0].material[0]
    say(GENERAL, "dinner at seven")

    def cheat(prompt: MemoryPrompt) -> MemoryUpdate:
        if prompt.channel is None:
            return MemoryUpdate()
        return MemoryUpdate(
            long_term=(
                Draft("again lunch", sources(old)),
                Draft("made up", ("123.000000",)),
                Draft("dinner", sources(prompt.material[0])),
            )
        )

    writer.answer = cheat
    await job.run()

    assert texts(memories, Scope("C1"), Term.LONG) == ["L lunch at noon", "dinner"]


async def test_ten_runs_never_drop_a_bullet_that_nothing_superseded(job, writer, memories, say):
    rng = random.Random(7)

    def forgetful(prompt: MemoryPrompt) -> MemoryUpdate:
        update = echo(prompt)
        if prompt.long_term and prompt.channel is not None:
            victim = rng.choice(prompt.long_term).id
            first = update.long_term[0]
            update = MemoryUpdate(
                long_term=(Draft(first.text, first.source_ts, (victim, 999)), *update.long_term[1:]),
                short_term=(),
            )
        return update

    writer.answer = forgetful
    ever: dict[int, str] = {}
    for run in range(10):
        for i in range(3):
            say(GENERAL, f"run {run} fact {i}")
        await job.run()
        memory = memories.get(Scope("C1"), Term.LONG)
        by_id = {b.id: b for b in memory.bullets}
        for bullet_id, text in ever.items():
            assert by_id[bullet_id].text == text  # still there, never rewritten
        ever = {b.id: b.text for b in memory.bullets}
        superseded = {b.id for b in memory.bullets if not b.active}
        assert {b.id for b in memory.active} == set(by_id) - superseded

    assert len(ever) == 30
    assert len(memories.get(Scope("C1"), Term.LONG).active) == 30 - 9


async def test_short_term_notes_leave_with_their_window_without_a_call(job, writer, memories, clock, say):
    say(GENERAL, "lunch at noon")
    await job.run()
    assert texts(memories, Scope("C1"), Term.SHORT) == ["S lunch at noon"]
    writer.prompts.clear()

    clock.advance(25 * 3600)
    await job.run()

    assert writer.prompts == []
    assert texts(memories, Scope("C1"), Term.SHORT) == []
    assert texts(memories, Scope("C1"), Term.LONG) == ["L lunch at noon"]


async def test_threads_quiet_for_longer_than_thread_memory_days_get_no_memory(
    job, conversations, memories, clock, say
):
    parent = say(GENERAL, "old topic")
    clock.advance(8 * 86400)
    old_reply = Message(GENERAL.id, f"{float(parent.ts) + 1:.6f}", "U1", "late edit", "Alice", thread_ts=parent.ts)
    conversations.save_message(old_reply)  # arrives late, posted long ago

    await job.run()

    assert memories.get(Scope(GENERAL.id, parent.ts), Term.SHORT) is None



async def test_a_person_forgotten_while_the_model_reads_them_gets_no_note_back(job, writer, engine, memories, say, conversations):
    say(GENERAL, "lunch at noon")
    await job.run()
    conversations.save_message(Message(GENERAL.id, "1800000000.000001", "U2", "canary-bob secret", "Bob"))
    say(GENERAL, "dinner at seven")

    def forgetting_meanwhile(prompt: MemoryPrompt) -> MemoryUpdate:
        if prompt.channel is not None:
            forget_person(engine, "U2")
        return echo(prompt)

    writer.answer = forgetting_meanwhile
    await job.run()

    kept = [b.text for m in memories.all() for b in m.bullets]
    assert not any("canary-bob" in text for text in kept)
    assert "L dinner at seven" in texts(memories, Scope("C1"), Term.LONG)  # the others' notes are kept
    assert "L lunch at noon" in texts(memories, Scope("C1"), Term.LONG)


async def test_a_note_remade_from_an_edited_last_message_reaches_the_workspace_memory(
    job, writer, conversations, memories, say
):
    # The edit drops the channel's newest long-term note; the note made again from the new words must not take
    # its id back, which the workspace memory has already read up to (it would never read the new note).
    say(GENERAL, "lunch at noon")
    message = say(GENERAL, "meeting at 3")
    await job.run()
    writer.prompts.clear()

    conversations.edit_message(GENERAL.id, message.ts, "meeting at 4")
    await job.run()

    workspace_prompt = writer.prompts[-1]
    assert workspace_prompt.channel is None
    assert any(line.endswith("L meeting at 4") for line in workspace_prompt.material)
    long_ids = [b.id for b in memories.get(Scope("C1"), Term.LONG).bullets]
    assert len(long_ids) == len(set(long_ids)) == 2


async def test_the_workspace_memory_reads_the_channels_notes_within_the_batch_budget(job, writer, memories, conversations, say):
    # Long-term notes only grow: a channel turned private drops the workspace memory, to be made again from every
    # note of every public channel. Read in one call, a year of notes is past any model's context: the call fails
    # every round and the workspace memory is never made again.
    dev = Channel("C3", "dev")
    conversations.save_channel(dev)
    say(dev, "dev talk")
    await job.run()  # alone: the notes of channels read with it in sight would go with its narrowing
    for i in range(20):
        say(GENERAL, f"general {i} " + "word " * 100)
        say(RANDOM, f"random {i} " + "word " * 100)
    await job.run()
    conversations.save_channel(Channel(dev.id, dev.name, ChannelKind.PRIVATE))
    assert memories.narrow(dev.id) and memories.get(WORKSPACE_SCOPE, Term.LONG) is None
    writer.prompts.clear()

    report = await job.run()

    workspace = [p for p in writer.prompts if p.channel is None]
    assert len(workspace) > 1
    assert all(sum(estimate_tokens(line) for line in p.material) <= SETTINGS.batch_max_tokens for p in workspace)
    read = [line for p in workspace for line in p.material]
    for i in range(20):  # every public note read, once
        assert sum(f"L general {i} " in line for line in read) == 1
        assert sum(f"L random {i} " in line for line in read) == 1
    assert not any("dev talk" in line for line in read)
    assert report.failures == 0
    assert (await job.run()).calls == 0


async def test_a_workspace_call_that_fails_midway_leaves_only_the_notes_it_did_not_read_for_the_next_round(
    job, writer, say
):
    for i in range(20):
        say(GENERAL, f"general {i} " + "word " * 100)

    def fail_second_workspace_call(prompt: MemoryPrompt) -> MemoryUpdate:
        if prompt.channel is None and sum(p.channel is None for p in writer.prompts) == 2:
            raise ModelUnavailable("down")
        return echo(prompt)

    writer.answer = fail_second_workspace_call
    assert (await job.run()).failures == 1
    first = [line for p in writer.prompts[:-1] if p.channel is None for line in p.material]  # the last one failed
    writer.answer = echo
    writer.prompts.clear()

    await job.run()

    again = [line for p in writer.prompts for line in p.material]
    assert all(p.channel is None for p in writer.prompts)
    read = first + again
    assert all(sum(f"L general {i} " in line for line in read) == 1 for i in range(20))


@pytest.mark.parametrize("words", [1000, 10], ids=["a call each", "one call for all"])
async def test_a_channel_the_model_always_refuses_holds_back_no_other_channel(
    job, writer, memories, conversations, say, words
):
    # A call the model refuses for good (a content filter, say) must not keep the public channels read with it, or
    # after it in the round's order, unread for ever (their memories stale, their raw text never deleted).
    dev = Channel("C3", "dev")
    conversations.save_channel(dev)
    for channel in (GENERAL, RANDOM, dev):
        say(channel, f"{channel.name} news " + "word " * words)

    def refusing_general(prompt: MemoryPrompt) -> MemoryUpdate:
        if prompt.channel == GENERAL:
            raise ModelUnavailable("content filter")
        return echo(prompt)

    writer.answer = refusing_general
    for _ in range(2):
        assert (await job.run()).failures == 1  # a model that is down costs a round one call still

    assert texts(memories, Scope("C1"), Term.LONG) == []
    assert [t.split()[1:3] for t in texts(memories, Scope("C2"), Term.LONG)] == [["random", "news"]]
    assert [t.split()[1:3] for t in texts(memories, Scope("C3"), Term.LONG)] == [["dev", "news"]]


async def test_a_channel_whose_notes_the_model_always_refuses_holds_back_no_other_from_the_workspace_memory(
    job, writer, memories, conversations, say
):
    dev = Channel("C3", "dev")
    conversations.save_channel(dev)
    for channel in (GENERAL, RANDOM, dev):
        say(channel, f"{channel.name} news")

    def refusing_general_notes(prompt: MemoryPrompt) -> MemoryUpdate:
        if prompt.channel is None and any("general news" in line for line in prompt.material):
            raise ModelUnavailable("content filter")
        return echo(prompt)

    writer.answer = refusing_general_notes
    for _ in range(2):
        assert (await job.run()).failures == 1  # a model that is down costs a round one call still

    learnt = " ".join(texts(memories, WORKSPACE_SCOPE, Term.LONG))
    assert "random news" in learnt and "dev news" in learnt and "general news" not in learnt


async def test_a_runaway_models_short_term_notes_are_kept_up_to_a_quarter_of_the_batch_budget_the_rest_logged(
    job, writer, memories, say, caplog
):
    # a model that runs away writes short-term notes until its output limit: stored whole, every later memory
    # call (and its preview) showed them all again
    say(GENERAL, "lunch at noon")
    parent = say(GENERAL, "release on friday")
    say(GENERAL, "I will write the notes", thread_ts=parent.ts)

    def runaway(prompt: MemoryPrompt) -> MemoryUpdate:
        update = echo(prompt)
        source = sources(prompt.material[0])
        notes = (Draft("x" * 40_000, source), *(Draft(f"S note {i} of many words", source) for i in range(500)))
        return replace(update, short_term=notes, threads=tuple((ts, notes) for ts, _ in update.threads))

    writer.answer = runaway
    report = await job.run()

    assert report.failures == 0
    cap = SETTINGS.batch_max_tokens // 4
    for scope in (Scope("C1"), Scope("C1", parent.ts), WORKSPACE_SCOPE):
        kept = texts(memories, scope, Term.SHORT)
        assert kept[0] == "S note 0 of many words"  # a note alone over the cap is dropped, the others read on
        assert kept == [f"S note {i} of many words" for i in range(len(kept))]
        assert len(kept) < 500
        assert cap // 4 < sum(estimate_tokens(text) for text in kept) <= cap
        assert f"short-term note(s) of {scope.key} dropped" in caplog.text
