from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from datetime import date
from zoneinfo import ZoneInfo

import pytest

from myao2.application.agents import ModelUnavailable, PersonUpdate, ProfilePrompt
from myao2.application.context import Absorbed, Budget, ContextBuilder, Persona
from myao2.application.profiles import ProfileKeeper
from myao2.composition import memory_budgets
from myao2.config import Config
from myao2.domain.conversation import Channel, ChannelKind, Message
from myao2.domain.profile import Confirmation, NewFact, Profile
from myao2.domain.tokens import estimate_tokens
from myao2.domain.visibility import WORKSPACE, Audience, Reader
from myao2.infrastructure.db.conversation_store import SqlConversationStore
from myao2.infrastructure.db.memo_store import SqlMemoStore
from myao2.infrastructure.db.memory_store import SqlMemoryStore
from myao2.infrastructure.db.profile_store import SqlProfileStore
from myao2.infrastructure.llm.phrases import prompt_marks
from myao2.infrastructure.llm.prompts import PromptRenderer
from tests.clocks import ManualClock

PERSONA = Persona("myao", "", "en", ZoneInfo("UTC"))
GENERAL = Channel("C1", "general")
RANDOM = Channel("C2", "random")
DM = Channel("D1", "alice", ChannelKind.IM)
SECRET = Channel("G1", "secret", ChannelKind.PRIVATE)
LIKE = re.compile(r"^ts=([\d.]+) .*: I like (.+)$")
DAY = date(2025, 1, 2)


def liking(prompt: ProfilePrompt) -> tuple[PersonUpdate, ...]:
    """A model that learns "likes X" from "I like X", or confirms it when known."""
    updates = []
    for person in prompt.people:
        known = {f.text: f.id for f in person.facts}
        new, confirmed = [], []
        for line in person.messages:
            match = LIKE.match(line)
            if not match:
                continue
            ts, thing = match.groups()
            if f"likes {thing}" in known:
                confirmed.append(Confirmation(known[f"likes {thing}"], 0.95, (ts,)))
            else:
                new.append(NewFact(f"likes {thing}", 0.7, (ts,)))
        updates.append(PersonUpdate(person.user_id, tuple(new), tuple(confirmed)))
    return tuple(updates)


class FakeWriter:
    def __init__(self, answer: Callable[[ProfilePrompt], tuple[PersonUpdate, ...]] = liking) -> None:
        self.answer = answer
        self.prompts: list[ProfilePrompt] = []

    async def learn(self, prompt: ProfilePrompt) -> tuple[PersonUpdate, ...]:
        self.prompts.append(prompt)
        return self.answer(prompt)

    def calls(self) -> list[tuple[bool, list[str]]]:
        return [(p.conversation is not None, [person.user_id for person in p.people]) for p in self.prompts]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def conversations(engine, clock) -> SqlConversationStore:
    store = SqlConversationStore(engine, clock)
    for channel in (GENERAL, RANDOM, DM, SECRET):
        store.save_channel(channel)
    return store


@pytest.fixture
def profiles(engine, clock) -> SqlProfileStore:
    return SqlProfileStore(engine, clock)


@pytest.fixture
def writer() -> FakeWriter:
    return FakeWriter()


def profile_keeper(conversations, profiles, writer, clock, batch_max_tokens: int = 2000) -> ProfileKeeper:
    return ProfileKeeper(
        conversations=conversations, profiles=profiles, writer=writer, clock=clock, persona=PERSONA,
        batch_max_tokens=batch_max_tokens, cut=prompt_marks("en").cut,
    )


@pytest.fixture
def keeper(conversations, profiles, writer, clock) -> ProfileKeeper:
    return profile_keeper(conversations, profiles, writer, clock)


@pytest.fixture
def say(conversations, clock):
    def say(channel: Channel, user: str, text: str, *, bot: bool = False) -> Message:
        clock.advance(60)
        message = Message(channel.id, f"{clock.now().timestamp():.6f}", user, text, user.title(), is_bot=bot)
        conversations.save_message(message)
        return message

    return say


def facts(profiles: SqlProfileStore, user: str, reader: str | None = None) -> list[tuple[str, int, float]]:
    profile = profiles.get(user)
    # by their audiences alone (none is heard in a conversation `reader` may not read: none is counted not public)
    readable = profile.readable(None if reader is None else Reader(reader), ()) if profile is not None else ()
    return [(f.text, f.confirmations, f.confidence) for f in readable]


# -- the domain ---------------------------------------------------------------


def test_a_fact_confirmed_by_three_more_messages_is_a_candidate_and_promotion_ends_that():
    profile = Profile("U1").learn(WORKSPACE, [(NewFact("likes tea", 0.7, ("1.0",)), "C1", DAY)], [])
    for n, ts in enumerate(("2.0", "3.0", "3.0", "4.0"), 1):
        profile = profile.learn(WORKSPACE, [], [Confirmation(1, 0.95, (ts,))])
        assert profile.facts[0].is_candidate == (n >= 4)  # the same message twice counts once
    assert profile.facts[0].confirmations == 3
    assert not profile.promoted(1, 7).facts[0].is_candidate


def test_a_private_conversation_neither_confirms_nor_supersedes_what_another_audience_learnt():
    profile = Profile("U1").learn(WORKSPACE, [(NewFact("likes tea", 0.7, ("1.0",)), "C1", DAY)], [])
    dm = Audience(DM.id)
    profile = profile.learn(dm, [(NewFact("hates tea", 0.9, ("2.0",), supersedes=(1,)), DM.id, DAY)], [Confirmation(1, 1.0, ("2.0",))])

    assert [(f.text, f.confirmations, f.audience) for f in profile.readable(None, ())] == [
        ("likes tea", 0, WORKSPACE),
        ("hates tea", 0, dm),
    ]
    assert [f.text for f in profile.readable(Reader(GENERAL.id), {DM.id})] == ["likes tea"]


def test_the_id_of_a_fact_dropped_is_never_given_again():
    profile = Profile("U1").learn(WORKSPACE, [(NewFact("likes tea", 0.7, ("1.0",)), "C1", DAY)], [])
    profile = profile.without_sources({"1.0"}).learn(WORKSPACE, [(NewFact("likes coffee", 0.7, ("2.0",)), "C1", DAY)], [])
    assert [(f.id, f.text) for f in profile.facts] == [(2, "likes coffee")]


# -- the keeper ---------------------------------------------------------------


async def test_facts_accumulate_confirmations_across_rounds_and_a_quiet_round_calls_nothing(keeper, writer, profiles, say):
    say(GENERAL, "U1", "I like ramen")
    say(GENERAL, "U2", "hello there")
    say(RANDOM, "U1", "and hello from random")
    assert (await keeper.run()).calls == 1
    assert writer.calls() == [(False, ["U1", "U2"])]  # one call for everyone with news in public channels
    assert len(writer.prompts[0].people[0].messages) == 2
    assert facts(profiles, "U1") == [("likes ramen", 0, 0.7)]

    for _ in range(3):
        say(GENERAL, "U1", "I like ramen")
        await keeper.run()
    assert facts(profiles, "U1") == [("likes ramen", 3, 0.95)]
    assert writer.calls()[1:] == [(False, ["U1"])] * 3  # U2 said nothing new

    writer.prompts.clear()
    assert (await keeper.run()).calls == 0
    assert writer.prompts == []


async def test_bots_and_the_bot_itself_get_no_profile(keeper, writer, say):
    say(GENERAL, "UBOT", "I like being helpful", bot=True)
    assert (await keeper.run()).calls == 0


async def test_a_dm_fact_is_kept_for_the_dm_and_read_in_a_call_of_its_own_on_the_next_round(
    keeper, writer, profiles, say
):
    say(DM, "U1", "I like canary-secret cake")
    say(GENERAL, "U1", "I like ramen")
    await keeper.run()
    await keeper.run()

    assert writer.calls() == [(False, ["U1"]), (True, ["U1"])]  # one call per person per round
    assert all("canary" not in line for line in writer.prompts[0].people[0].messages)
    assert writer.prompts[1].people[0].facts == ()  # the public facts are not the DM call's to change
    assert facts(profiles, "U1", GENERAL.id) == [("likes ramen", 0, 0.7)]
    assert facts(profiles, "U1", DM.id) == [("likes ramen", 0, 0.7), ("likes canary-secret cake", 0, 0.7)]
    fact = profiles.get("U1").facts[1]
    assert (fact.conversation_id, fact.audience) == (DM.id, Audience(DM.id))


async def test_nothing_said_in_a_channel_the_bot_has_left_reaches_the_model_until_it_joins_again(
    keeper, writer, profiles, conversations, clock, say
):
    say(SECRET, "U1", "I like canary-left cake")
    say(GENERAL, "U1", "I like ramen")
    conversations.leave_channel(SECRET.id)  # removed before the round read it
    await keeper.run()
    await keeper.run()

    assert writer.calls() == [(False, ["U1"])]
    assert all("canary" not in line for prompt in writer.prompts for p in prompt.people for line in p.messages)
    assert [f.text for f in profiles.get("U1").facts] == ["likes ramen"]

    clock.advance(60)
    conversations.save_channel(SECRET, clock.now())  # invited back: read as before
    await keeper.run()
    assert writer.calls()[1:] == [(True, ["U1"])]
    assert facts(profiles, "U1", SECRET.id) == [("likes ramen", 0, 0.7), ("likes canary-left cake", 0, 0.7)]


async def test_a_message_longer_than_a_call_may_read_is_cut_to_the_batch_budget_with_a_marker(keeper, writer, say):
    say(GENERAL, "U1", "I like " + "ramen " * 20_000)  # 120,000 characters

    await keeper.run()

    [line] = writer.prompts[0].people[0].messages
    assert estimate_tokens(line) <= 2000 and "more characters left out" in line


async def test_a_failed_call_keeps_the_profile_and_reads_the_messages_again(keeper, writer, profiles, say):
    say(GENERAL, "U1", "I like tea")

    def down(prompt: ProfilePrompt) -> tuple[PersonUpdate, ...]:
        raise ModelUnavailable("down")

    writer.answer = down
    report = await keeper.run()
    assert (report.calls, report.failures) == (1, 1)
    assert profiles.get("U1") is None

    writer.answer = liking
    await keeper.run()
    assert facts(profiles, "U1") == [("likes tea", 0, 0.7)]


async def test_facts_may_only_cite_the_messages_read(keeper, writer, profiles, say):
    say(GENERAL, "U1", "I like tea")
    writer.answer = lambda prompt: (
        PersonUpdate("U1", (NewFact("made up", 0.9, ("123.000000",)), NewFact("likes tea", 0.8, ("123.0", LIKE.match(prompt.people[0].messages[0]).group(1))))),
        PersonUpdate("U9", (NewFact("not asked about", 0.9, ("1.0",)),)),
    )
    await keeper.run()
    assert facts(profiles, "U1") == [("likes tea", 0, 0.8)]
    assert profiles.get("U9") is None


async def test_a_long_backlog_is_read_a_batch_per_round(conversations, profiles, writer, clock, say):
    keeper = profile_keeper(conversations, profiles, writer, clock, batch_max_tokens=100)
    for i in range(12):
        say(GENERAL, "U1", f"I like thing number {i}")
    rounds = 0
    while (await keeper.run()).calls:
        rounds += 1
    assert rounds > 1
    assert [text for text, _, _ in facts(profiles, "U1")] == [f"likes thing number {i}" for i in range(12)]


# -- prompts --------------------------------------------------------------------


@pytest.fixture
def contexts(engine, clock, profiles):
    def build(people_tokens: int = 400) -> ContextBuilder:
        budgets = replace(memory_budgets(Config()), people=people_tokens)
        return ContextBuilder(
            SqlMemoStore(engine, clock),
            clock,
            PERSONA,
            bot_user_id="UBOT",
            budget=Budget(6000, 1000),
            marks=prompt_marks("en"),
            absorbed=Absorbed(SqlMemoryStore(engine, clock), profiles, budgets),
        )

    return build


@pytest.mark.parametrize("language", ["en", "ja"])
async def test_a_channel_prompt_shows_the_speakers_facts_but_never_one_learnt_in_a_dm(
    keeper, profiles, say, contexts, language
):
    say(DM, "U1", "I like canary-dm-cake")
    say(SECRET, "U1", "I like canary-secret-pie")
    say(GENERAL, "U1", "I like ramen")
    for _ in range(3):  # one audience per person per round
        await keeper.run()

    channel = [say(GENERAL, "U2", "hi"), say(GENERAL, "U1", "what's for lunch?")]
    text = PromptRenderer(language).render("response", "query", await contexts().build(GENERAL, channel))
    dm = await contexts().build(DM, [say(DM, "U1", "remember me?")])
    dm_text = PromptRenderer(language).render("response", "query", dm)

    assert "- U1: likes ramen" in text
    assert "canary" not in text
    judgment = PromptRenderer(language).render("judgment", "query", await contexts().build(GENERAL, channel), elapsed="1")
    assert "- U1: likes ramen" in judgment and "canary" not in judgment
    assert "- U1: likes canary-dm-cake" in dm_text and "- U1: likes ramen" in dm_text
    assert "canary-secret" not in dm_text
    secret = await contexts().build(SECRET, [say(SECRET, "U1", "pie?")])
    secret_text = PromptRenderer(language).render("response", "query", secret)
    assert "- U1: likes canary-secret-pie" in secret_text and "canary-dm" not in secret_text
    assert ("the rule wins" if language == "en" else "ルールが優先") in text


async def test_the_people_section_is_trimmed_at_whole_facts_least_sure_last_with_a_marker(profiles, say, contexts):
    learnt = [(NewFact(f"likes thing {i} " + "x" * 40, 0.5 + i / 100, ("1.0",)), GENERAL.id, DAY) for i in range(20)]
    profiles.save([Profile("U1").learn(WORKSPACE, learnt, [])])

    context = await contexts(people_tokens=120).build(GENERAL, [say(GENERAL, "U1", "hi")])
    text = PromptRenderer("en").render("response", "query", context)

    section = context.memory.people
    assert 0 < len(section.lines) < 20
    assert section.omitted == 20 - len(section.lines)
    assert section.lines[0].startswith("- U1: likes thing 19 ")  # the surest first
    assert all(line.endswith("x" * 40) for line in section.lines)  # whole facts only
    assert f"({section.omitted} less certain facts left out)" in text
    assert sum(len(line) + 1 for line in section.lines) / 4 <= 120


@pytest.mark.parametrize(("language", "scope"), [("en", "Scope: a direct message"), ("ja", "範囲: ダイレクトメッセージ")])
async def test_the_profile_prompt_names_its_conversation_and_shows_each_persons_facts_and_messages(
    keeper, writer, say, language, scope
):
    say(DM, "U1", "I like tea")
    await keeper.run()
    say(DM, "U1", "I like tea")
    await keeper.run()

    text = PromptRenderer(language).render("profile", "query", writer.prompts[1])
    assert scope in text
    assert "1: likes tea [0.70, 0]" in text
    assert "#alice [" in text and ": I like tea" in text


async def test_ten_rounds_never_drop_or_rewrite_a_fact(keeper, writer, profiles, say):
    def forgetful(prompt: ProfilePrompt) -> tuple[PersonUpdate, ...]:
        (update,) = liking(prompt)
        known = [f.id for f in prompt.people[0].facts]
        victims = tuple(known[:1]) + (999,)  # one real fact, and one that does not exist
        return (replace(update, new=tuple(replace(f, supersedes=victims) for f in update.new)),)

    writer.answer = forgetful
    ever: dict[int, str] = {}
    for round_ in range(10):
        say(GENERAL, "U1", f"I like thing {round_}")
        await keeper.run()
        facts_now = {f.id: f for f in profiles.get("U1").facts}
        assert all(facts_now[i].text == text for i, text in ever.items())  # still there, never rewritten
        ever = {i: f.text for i, f in facts_now.items()}
    profile = profiles.get("U1")
    assert len(profile.facts) == 10
    assert [f.text for f in profile.readable(None, ())] == ["likes thing 9"]  # each superseded by the next


async def test_many_people_are_read_in_calls_within_the_batch_budget(conversations, profiles, writer, clock, say):
    # Each person's known facts are shown (up to a quarter of the budget) with their new messages: read in one
    # call, a busy hour of a hundred people who have been around is past any model's context, and the call
    # fails every round (their messages are never read, nor deleted).
    keeper = profile_keeper(conversations, profiles, writer, clock, batch_max_tokens=2000)
    people = [f"U{i:02}" for i in range(40)]
    known = [(NewFact(f"likes the {j}th kind of noodle soup with extra toppings", 0.7, ("1.0",)), GENERAL.id, DAY) for j in range(30)]
    profiles.save([Profile(user).learn(WORKSPACE, known, []) for user in people])
    for user in people:
        say(GENERAL, user, f"I like {user} " + "word " * 100)

    await keeper.run()

    def size(prompt: ProfilePrompt) -> int:
        return sum(
            estimate_tokens(line) for person in prompt.people for line in (*(f.text for f in person.facts), *person.messages)
        )

    assert len(writer.prompts) > 1
    assert all(size(prompt) <= 2000 * 1.5 for prompt in writer.prompts), [size(p) for p in writer.prompts]
    assert sorted(user for _, users in writer.calls() for user in users) == people  # each once
    assert all(f"likes {user} word" in " ".join(text for text, _, _ in facts(profiles, user)) for user in people)


async def test_a_person_whose_words_the_model_always_refuses_holds_back_no_one_read_with_them(keeper, writer, profiles, say):
    # A call the model refuses for good (a content filter on one person's words, say) must not keep the people
    # read with that person from being read for ever (no profile, and their raw text never deleted).
    for user in ("U1", "U2", "U3"):
        say(GENERAL, user, f"I like {user.lower()}-things")

    def refusing_u2(prompt: ProfilePrompt) -> tuple[PersonUpdate, ...]:
        if any(person.user_id == "U2" for person in prompt.people):
            raise ModelUnavailable("content filter")
        return liking(prompt)

    writer.answer = refusing_u2
    for _ in range(3):
        assert (await keeper.run()).failures == 1  # a model that is down costs a round one call still

    assert facts(profiles, "U1") == [("likes u1-things", 0, 0.7)]
    assert facts(profiles, "U3") == [("likes u3-things", 0, 0.7)]
    assert facts(profiles, "U2") == []


async def test_a_fact_learnt_after_one_was_dropped_never_takes_its_id(keeper, conversations, profiles, say):
    # `myao2 profile promote USER FACT_ID` after a listing must never promote another fact than the one listed
    say(GENERAL, "U1", "I like ramen")
    tea = say(GENERAL, "U1", "I like tea")
    await keeper.run()
    assert [(f.id, f.text) for f in profiles.get("U1").facts] == [(1, "likes ramen"), (2, "likes tea")]

    conversations.delete_message(GENERAL.id, tea.ts)  # deleted in Slack: what was learnt from it goes
    say(GENERAL, "U1", "I like coffee")
    await keeper.run()
    assert [(f.id, f.text) for f in profiles.get("U1").facts] == [(1, "likes ramen"), (3, "likes coffee")]
