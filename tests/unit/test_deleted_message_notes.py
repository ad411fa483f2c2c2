"""A message deleted (or edited) in Slack takes the memory bullets and profile facts made from it along: they may
hold its words. An edited message is read again and remembered anew."""

from __future__ import annotations

from datetime import date

import pytest

from myao2.application.memory_job import MemoryJob
from myao2.domain.conversation import Message
from myao2.domain.memory import Bullet, Memory, Scope, Term
from myao2.domain.visibility import WORKSPACE
from tests.unit.test_memory_job import (  # noqa: F401 (fixtures)
    GENERAL,
    PERSONA,
    SECRET,
    SETTINGS,
    FakeWriter,
    Say,
    clock,
    conversations,
    engine,
    memories,
)
from tests.unit.test_profiles import FakeWriter as FakeProfiles
from tests.unit.test_profiles import ProfileKeeper, SqlProfileStore, profile_keeper


@pytest.fixture
def profiles(engine, clock) -> SqlProfileStore:
    return SqlProfileStore(engine, clock)


@pytest.fixture
def job(conversations, memories, profiles, clock) -> MemoryJob:
    keeper = profile_keeper(conversations, profiles, FakeProfiles(), clock)
    return MemoryJob(
        conversations=conversations, memories=memories, writer=FakeWriter(), clock=clock, persona=PERSONA,
        settings=SETTINGS, profiles=keeper,
    )


@pytest.fixture
def say(conversations, clock) -> Say:
    return Say(conversations, clock)


def kept_anywhere(memories, profiles, text: str) -> list[str]:
    found = [f"{m.scope.key}/{m.term.value}" for m in memories.all() for b in m.bullets if text in b.text]
    found += [f"profile:{p.user_id}" for p in profiles.all() for f in p.facts if text in f.text]
    return sorted(set(found))


async def test_a_message_deleted_in_slack_leaves_no_bullet_or_fact_made_from_it(
    job, conversations, memories, profiles, say
):
    say(GENERAL, "lunch at noon")
    gone = say(GENERAL, "I like canary-opera")
    await job.run()
    assert kept_anywhere(memories, profiles, "canary-opera")

    conversations.delete_message(GENERAL.id, gone.ts)

    assert kept_anywhere(memories, profiles, "canary-opera") == []
    assert [b.text for b in memories.get(Scope(GENERAL.id), Term.LONG).active] == ["L lunch at noon"]


async def test_a_message_edited_in_slack_is_remembered_anew_without_its_old_words(
    job, conversations, memories, profiles, say
):
    edited = say(GENERAL, "the code is canary-1234")
    await job.run()

    conversations.edit_message(GENERAL.id, edited.ts, "the code is secret")
    assert kept_anywhere(memories, profiles, "canary-1234") == []
    await job.run()

    assert kept_anywhere(memories, profiles, "canary-1234") == []
    assert "L the code is secret" in [b.text for b in memories.get(Scope(GENERAL.id), Term.LONG).active]


async def test_a_confirmation_by_a_deleted_message_no_longer_counts(job, conversations, profiles, say):
    say(GENERAL, "I like tea")
    await job.run()
    again = say(GENERAL, "I like tea")
    await job.run()
    assert [(f.text, f.confirmations) for f in profiles.get("U1").facts] == [("likes tea", 1)]

    conversations.delete_message(GENERAL.id, again.ts)

    assert [(f.text, f.confirmations, len(f.source_ts)) for f in profiles.get("U1").facts] == [("likes tea", 0, 1)]


def test_a_bullet_superseded_only_by_one_made_from_a_deleted_message_is_active_again():
    old = Bullet(1, "lunch at noon", date(2025, 1, 1), ("1.0",), superseded_by=2)
    new = Bullet(2, "lunch at one", date(2025, 1, 1), ("2.0",))
    memory = Memory(Scope("C1"), Term.LONG, WORKSPACE, (old, new))

    assert memory.without_sources({"2.0"}).active == (Bullet(1, "lunch at noon", date(2025, 1, 1), ("1.0",)),)


async def test_a_message_deleted_while_the_model_learns_from_it_teaches_nothing(
    conversations, profiles, clock, say
):
    gone: list = []

    class DeletingWriter(FakeProfiles):
        async def learn(self, prompt):  # type: ignore[no-untyped-def]
            if gone:
                conversations.delete_message(GENERAL.id, gone[0].ts)  # deleted in Slack while the model thinks
            return await super().learn(prompt)

    keeper = profile_keeper(conversations, profiles, DeletingWriter(), clock)
    say(GENERAL, "I like tea")
    await keeper.run()
    gone.append(say(GENERAL, "I like canary-opera"))
    say(GENERAL, "I like tea")

    await keeper.run()

    assert [(f.text, f.confirmations) for f in profiles.get("U1").facts] == [("likes tea", 1)]


def editing_job(conversations, memories, clock) -> tuple[MemoryJob, list]:
    """A memory job whose model, while it thinks (5 s), sees each message put in the list edited in Slack."""
    edited: list = []

    class EditingWriter(FakeWriter):
        async def update(self, prompts):  # type: ignore[no-untyped-def]
            if edited:
                clock.advance(5)
                message = edited.pop()
                conversations.edit_message(message.channel_id, message.ts, "the code is secret")
            return await super().update(prompts)

    job = MemoryJob(
        conversations=conversations, memories=memories, writer=EditingWriter(), clock=clock, persona=PERSONA,
        settings=SETTINGS,
    )
    return job, edited


async def test_a_message_edited_while_the_model_reads_it_is_remembered_by_its_new_words_only(
    conversations, memories, clock, say
):
    job, edited = editing_job(conversations, memories, clock)
    edited.append(say(GENERAL, "the code is canary-1234"))
    await job.run()
    assert not any("canary-1234" in b.text for m in memories.all() for b in m.bullets)

    await job.run()
    assert "L the code is secret" in [b.text for b in memories.get(Scope(GENERAL.id), Term.LONG).active]


def editing_keeper(conversations, profiles, clock) -> tuple[ProfileKeeper, list]:
    """A keeper whose model, while it thinks (5 s), sees each message put in the list edited in Slack."""
    edited: list = []

    class EditingWriter(FakeProfiles):
        async def learn(self, prompt):  # type: ignore[no-untyped-def]
            if edited:
                clock.advance(5)
                message = edited.pop()
                conversations.edit_message(message.channel_id, message.ts, "I like nothing much")
            return await super().learn(prompt)

    keeper = profile_keeper(conversations, profiles, EditingWriter(), clock)
    return keeper, edited


async def test_a_message_edited_while_the_model_learns_from_it_leaves_no_fact_of_its_old_words(
    conversations, profiles, clock, say
):
    keeper, edited = editing_keeper(conversations, profiles, clock)
    say(GENERAL, "I like tea")
    await keeper.run()
    edited.append(say(GENERAL, "I like canary-opera"))
    await keeper.run()

    assert [f.text for f in profiles.get("U1").facts] == ["likes tea"]


async def test_an_earlier_message_edited_while_the_model_learns_from_a_new_one_leaves_no_fact_of_its_old_words(
    conversations, profiles, clock, say
):
    # The round read the profile (with "likes tea") before the edit dropped that fact: its save must not bring
    # it back, though the edited message is not among those this round read.
    keeper, edited = editing_keeper(conversations, profiles, clock)
    tea = say(GENERAL, "I like tea")
    await keeper.run()
    assert [f.text for f in profiles.get("U1").facts] == ["likes tea"]
    edited.append(tea)
    say(GENERAL, "I like coffee")
    await keeper.run()

    assert [f.text for f in profiles.get("U1").facts] == ["likes coffee"]


async def test_a_message_edited_while_the_model_learns_of_someone_else_leaves_no_fact_of_its_old_words(
    conversations, profiles, clock, say
):
    # A round reads every profile first, then makes one model call per audience: Bob's tea message is edited
    # during the call about Alice, before Bob's own call; his save must not bring back what the edit dropped.
    keeper, edited = editing_keeper(conversations, profiles, clock)

    def bob(text: str) -> Message:
        clock.advance(60)
        message = Message(SECRET.id, f"{clock.now().timestamp():.6f}", "U2", text, "Bob")
        conversations.save_message(message)
        return message

    tea = bob("I like tea")
    await keeper.run()
    assert [f.text for f in profiles.get("U2").facts] == ["likes tea"]
    edited.append(tea)
    say(GENERAL, "I like cake")  # Alice's call (the workspace's) comes before Bob's (the private channel's)
    bob("I like coffee")
    await keeper.run()

    assert [f.text for f in profiles.get("U1").facts] == ["likes cake"]
    assert [f.text for f in profiles.get("U2").facts] == ["likes coffee"]


async def test_an_earlier_message_edited_while_the_model_reads_new_ones_leaves_no_bullet_of_its_old_words(
    conversations, memories, clock, say
):
    # The round read the memory (with the code's bullet) before the edit dropped that bullet: its save must not
    # bring it back, though the edited message is not among those this round read.
    job, edited = editing_job(conversations, memories, clock)
    code = say(GENERAL, "the code is canary-1234")
    await job.run()
    assert "L the code is canary-1234" in [b.text for b in memories.get(Scope(GENERAL.id), Term.LONG).active]
    edited.append(code)
    say(GENERAL, "lunch at noon")
    await job.run()

    assert not any("canary-1234" in b.text for m in memories.all() for b in m.bullets)


async def test_a_message_edited_while_the_model_writes_the_workspace_memory_leaves_no_bullet_of_its_old_words(
    conversations, memories, clock, say
):
    edited: list = []

    class EditingWriter(FakeWriter):
        async def update(self, prompts):  # type: ignore[no-untyped-def]
            if edited and prompts[0].channel is None:  # the workspace's call, after the channels'
                clock.advance(5)
                conversations.edit_message(GENERAL.id, edited.pop().ts, "the code is secret")
            return await super().update(prompts)

    job = MemoryJob(
        conversations=conversations, memories=memories, writer=EditingWriter(), clock=clock, persona=PERSONA,
        settings=SETTINGS,
    )
    edited.append(say(GENERAL, "the code is canary-1234"))
    await job.run()

    assert not edited  # the edit was made
    assert not any("canary-1234" in b.text for m in memories.all() for b in m.bullets)
