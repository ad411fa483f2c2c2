"""A model call that reads several public channels may put one channel's words into another's memory while
citing the other's messages: once that channel stops being public, nothing written with its words in sight
stays anywhere but in its own memory."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from myao2.application.agents import MemoryPrompt, MemoryUpdate
from myao2.application.memory_job import MemoryJob
from myao2.domain.conversation import ChannelKind
from myao2.domain.memory import WORKSPACE_SCOPE, Draft, Scope, Term
from myao2.domain.visibility import WORKSPACE, Audience, may_hold, narrowest
from tests.unit.test_memory_job import (  # noqa: F401 (fixtures)
    GENERAL,
    PERSONA,
    RANDOM,
    SETTINGS,
    Say,
    clock,
    conversations,
    engine,
    memories,
    sources,
)


class MixingWriter:
    """A model that writes every channel's bullets from everything the call read (every channel's new lines
    and the bullets shown), citing only the channel's own messages: the mix-up batching allows."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    async def update(self, prompts: Sequence[MemoryPrompt]) -> tuple[MemoryUpdate, ...]:
        self.calls.append([p.channel.id if p.channel else "workspace" for p in prompts])
        seen = [line.split(": ", 1)[-1] for p in prompts for line in p.material]
        seen += [b.text for p in prompts for b in (*p.long_term, *p.short_term)]
        everything = " | ".join(seen)
        updates = []
        for prompt in prompts:
            own = tuple(ts for line in prompt.material for ts in sources(line))
            draft = Draft(everything, own)
            updates.append(MemoryUpdate(long_term=(draft,), short_term=(draft,), threads=()))
        return tuple(updates)


@pytest.fixture
def writer() -> MixingWriter:
    return MixingWriter()


@pytest.fixture
def job(conversations, memories, writer, clock) -> MemoryJob:
    return MemoryJob(
        conversations=conversations, memories=memories, writer=writer, clock=clock, persona=PERSONA, settings=SETTINGS
    )


@pytest.fixture
def say(conversations, clock) -> Say:
    return Say(conversations, clock)


def everything_but(memories, channel_id: str) -> str:
    """All bullet text kept anywhere but in the channel's own memories (superseded bullets included)."""
    return " ".join(
        b.text for m in memories.all() if m.scope.channel_id != channel_id for b in m.bullets
    )


def turn_private(conversations, memories, channel_id: str) -> None:
    conversations.set_channel_kind(channel_id, ChannelKind.PRIVATE)
    memories.narrow(channel_id)


def test_the_narrowest_audience_of_what_several_conversations_said():
    assert narrowest([WORKSPACE, WORKSPACE]) == WORKSPACE
    assert narrowest([]) == WORKSPACE
    assert narrowest([WORKSPACE, Audience("G1")]) == Audience("G1")
    assert narrowest([Audience("G1"), Audience("G2")]) is None
    assert may_hold(Audience("G1"), [WORKSPACE, Audience("G1")])
    assert not may_hold(WORKSPACE, [WORKSPACE, Audience("G1")])
    assert not may_hold(Audience("G2"), [Audience("G1")])


async def test_words_of_a_channel_read_together_with_another_leave_the_other_when_it_turns_private(
    job, writer, conversations, memories, say
):
    say(GENERAL, "lunch at noon")
    say(RANDOM, "canary-merger with acme")
    await job.run()
    assert writer.calls[0] == ["C1", "C2"]  # read together
    assert "canary-merger" in " ".join(b.text for b in memories.get(Scope("C1"), Term.LONG).bullets)

    turn_private(conversations, memories, RANDOM.id)

    assert "canary-merger" not in everything_but(memories, RANDOM.id)
    assert "canary-merger" in " ".join(b.text for b in memories.get(Scope("C2"), Term.LONG).active)
    assert memories.get(Scope("C2"), Term.LONG).audience == Audience("C2")
    await job.run()  # the workspace memory is made again from what is left
    assert memories.get(WORKSPACE_SCOPE, Term.LONG) is not None
    assert "canary-merger" not in everything_but(memories, RANDOM.id)


async def test_what_was_written_from_a_mixed_bullet_later_leaves_too(job, writer, conversations, memories, say):
    say(GENERAL, "lunch at noon")
    say(RANDOM, "canary-merger with acme")
    await job.run()
    say(GENERAL, "lunch moved to one")  # read alone, with the mixed bullet shown: the model repeats it
    await job.run()
    assert writer.calls[2] == ["C1"]

    turn_private(conversations, memories, RANDOM.id)

    assert "canary-merger" not in everything_but(memories, RANDOM.id)


async def test_bullets_of_calls_that_never_read_the_channel_stay(job, writer, conversations, memories, say):
    say(GENERAL, "lunch at noon")
    await job.run()
    say(RANDOM, "canary-merger with acme")
    await job.run()

    turn_private(conversations, memories, RANDOM.id)

    assert [b.text for b in memories.get(Scope("C1"), Term.LONG).active] == ["lunch at noon"]


async def test_a_channel_turning_private_while_the_model_reads_it_with_another_keeps_its_words(
    job, writer, conversations, memories, say
):
    say(GENERAL, "lunch at noon")
    say(RANDOM, "canary-merger with acme")
    answer = writer.update

    async def narrowing_meanwhile(prompts):
        updates = await answer(prompts)
        if len(prompts) > 1:
            turn_private(conversations, memories, RANDOM.id)
        return updates

    writer.update = narrowing_meanwhile
    await job.run()

    assert "canary-merger" not in everything_but(memories, RANDOM.id)
