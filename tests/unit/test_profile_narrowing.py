"""Profiles follow what they were learnt from: a channel that stops being the workspace's takes the facts learnt
there with it, and a person forgotten while the model learns about them gets nothing back."""

from __future__ import annotations


import pytest

from myao2.application.agents import PersonUpdate, ProfilePrompt
from myao2.application.channels import ChannelLifecycle
from myao2.domain.conversation import ChannelKind
from myao2.domain.profile import NewFact
from myao2.domain.visibility import WORKSPACE, Audience, Reader
from myao2.infrastructure.db.memo_store import SqlMemoStore
from myao2.infrastructure.db.memory_store import SqlMemoryStore
from tests.unit.test_profiles import (  # noqa: F401 (fixtures)
    DAY,
    GENERAL,
    RANDOM,
    FakeWriter,
    clock,
    conversations,
    keeper,
    liking,
    profile_keeper,
    profiles,
    say,
    writer,
)


@pytest.fixture
def lifecycle(engine, clock, conversations, profiles) -> ChannelLifecycle:
    async def refresh(channel_id: str) -> None:
        return None

    return ChannelLifecycle(
        conversations, SqlMemoStore(engine, clock), SqlMemoryStore(engine, clock), refresh, profiles=profiles
    )


def texts(profiles, user: str, reader: str | None) -> list[str]:
    profile = profiles.get(user)
    # by their audiences alone (none is heard in a conversation `reader` may not read: none is counted not public)
    return [] if profile is None else [f.text for f in profile.readable(None if reader is None else Reader(reader), ())]


async def test_facts_learnt_in_a_channel_that_turns_private_are_shown_only_there(
    keeper, profiles, say, lifecycle
):
    say(RANDOM, "ualice", "I like tea")
    await keeper.run()  # learnt before the model read anything of GENERAL
    say(GENERAL, "ualice", "I like canary-opera")
    await keeper.run()
    assert texts(profiles, "ualice", RANDOM.id) == ["likes tea", "likes canary-opera"]

    await lifecycle.became_private(GENERAL.id)

    assert texts(profiles, "ualice", RANDOM.id) == ["likes tea"]
    assert texts(profiles, "ualice", GENERAL.id) == ["likes tea", "likes canary-opera"]
    narrowed = [f for f in profiles.get("ualice").facts if f.text == "likes canary-opera"]
    assert [f.audience for f in narrowed] == [Audience(GENERAL.id)]


async def test_a_fact_citing_a_message_of_the_channel_is_narrowed_whichever_channel_came_first(
    conversations, profiles, clock, say, lifecycle
):
    # One workspace call reads both public channels: a fact may cite messages of each.
    def blended(prompt: ProfilePrompt) -> tuple[PersonUpdate, ...]:
        person = prompt.people[0]
        sources = tuple(line.split()[0].removeprefix("ts=") for line in person.messages)
        return (PersonUpdate(person.user_id, (NewFact("plans canary-trip", 0.8, sources),), ()),)

    keeper = profile_keeper(conversations, profiles, FakeWriter(blended), clock)
    say(RANDOM, "ualice", "a trip soon")
    say(GENERAL, "ualice", "to the canary islands")
    await keeper.run()
    [fact] = profiles.get("ualice").facts
    assert fact.conversation_id == RANDOM.id and fact.audience.is_workspace

    await lifecycle.became_private(GENERAL.id)

    assert texts(profiles, "ualice", RANDOM.id) == []
    assert texts(profiles, "ualice", GENERAL.id) == ["plans canary-trip"]


async def test_a_fact_learnt_with_the_channels_words_in_sight_is_narrowed_whatever_it_cites(
    conversations, profiles, clock, say, lifecycle
):
    # One workspace call reads several people in several public channels: the model may put what one said
    # in GENERAL into a fact about another, citing a message of RANDOM.
    def mixed_up(prompt: ProfilePrompt) -> tuple[PersonUpdate, ...]:
        bob = next(p for p in prompt.people if p.user_id == "ubob")
        cited = (bob.messages[0].split()[0].removeprefix("ts="),)
        return (PersonUpdate("ubob", (NewFact("plans canary-merger", 0.8, cited),), ()),)

    keeper = profile_keeper(conversations, profiles, FakeWriter(mixed_up), clock)
    say(GENERAL, "ualice", "the canary-merger is on")
    say(RANDOM, "ubob", "busy week")
    await keeper.run()
    [fact] = profiles.get("ubob").facts
    assert fact.conversation_id == RANDOM.id and fact.audience.is_workspace

    await lifecycle.became_private(GENERAL.id)

    assert texts(profiles, "ubob", RANDOM.id) == []
    assert texts(profiles, "ubob", GENERAL.id) == ["plans canary-merger"]


async def test_a_fact_heard_with_two_channels_that_turn_private_is_kept_for_neither(
    conversations, profiles, clock, say, lifecycle
):
    def blended(prompt: ProfilePrompt) -> tuple[PersonUpdate, ...]:
        person = prompt.people[0]
        sources = (person.messages[0].split()[0].removeprefix("ts="),)
        return (PersonUpdate(person.user_id, (NewFact("plans canary-trip", 0.8, sources),), ()),)

    keeper = profile_keeper(conversations, profiles, FakeWriter(blended), clock)
    say(RANDOM, "ualice", "a trip soon")
    say(GENERAL, "ualice", "to the canary islands")
    await keeper.run()

    await lifecycle.became_private(GENERAL.id)
    await lifecycle.became_private(RANDOM.id)

    assert texts(profiles, "ualice", None) == []


async def test_a_save_of_a_profile_read_before_the_narrowing_does_not_widen_it_again(
    keeper, profiles, say, lifecycle
):
    say(GENERAL, "ualice", "I like canary-opera")
    await keeper.run()
    stale = profiles.get("ualice")

    await lifecycle.became_private(GENERAL.id)
    profiles.save([stale])

    assert texts(profiles, "ualice", RANDOM.id) == []


async def test_a_channel_turning_private_while_the_model_learns_keeps_what_it_learnt_to_itself(
    conversations, profiles, clock, say, lifecycle
):
    async def turn_private() -> None:
        await lifecycle.became_private(GENERAL.id)

    turned: list[bool] = []

    class RacingWriter(FakeWriter):
        async def learn(self, prompt: ProfilePrompt) -> tuple[PersonUpdate, ...]:
            if not turned:  # the channel turns private while the model thinks
                turned.append(True)
                await turn_private()
            return liking(prompt)

    keeper = profile_keeper(conversations, profiles, RacingWriter(), clock)
    say(GENERAL, "ualice", "I like canary-opera")
    await keeper.run()

    assert conversations.get_channel(GENERAL.id).kind is ChannelKind.PRIVATE
    assert texts(profiles, "ualice", RANDOM.id) == []
    assert texts(profiles, "ualice", GENERAL.id) == ["likes canary-opera"]


async def test_a_fact_saved_after_its_channel_turned_private_is_kept_for_that_channel_alone(
    keeper, profiles, say, lifecycle
):
    said = say(GENERAL, "ualice", "I like canary-opera")
    await keeper.run()
    read = profiles.get("ualice")  # as a model call about the workspace read it, the channel still public
    await lifecycle.became_private(GENERAL.id)

    learnt = read.learn(WORKSPACE, [(NewFact("sings canary-arias", 0.8, (said.ts,)), GENERAL.id, DAY)], [], (GENERAL.id,))
    profiles.save([learnt], heard=True)  # the call's save, nothing run after it yet

    assert texts(profiles, "ualice", RANDOM.id) == []
    assert texts(profiles, "ualice", GENERAL.id) == ["likes canary-opera", "sings canary-arias"]


async def test_narrowing_leaves_other_channels_and_private_facts_alone(keeper, profiles, say, lifecycle):
    say(RANDOM, "ualice", "I like tea")
    await keeper.run()
    before = profiles.get("ualice")

    await lifecycle.became_private(GENERAL.id)

    assert profiles.get("ualice") == before


async def test_a_person_forgotten_while_the_model_learns_about_them_gets_no_profile_back(
    engine, conversations, profiles, clock, say
):
    from myao2.infrastructure.db.forget import forget_person

    class ForgettingWriter(FakeWriter):
        async def learn(self, prompt: ProfilePrompt) -> tuple[PersonUpdate, ...]:
            forget_person(engine, "ualice")  # `myao2 memory forget` runs while the model thinks
            return liking(prompt)

    keeper = profile_keeper(conversations, profiles, ForgettingWriter(), clock)
    say(GENERAL, "ualice", "I like canary-opera")
    say(GENERAL, "ubob", "I like tea")
    await keeper.run()

    assert profiles.get("ualice") is None
    assert texts(profiles, "ubob", None) == ["likes tea"]
