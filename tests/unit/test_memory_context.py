from __future__ import annotations

from dataclasses import replace
from datetime import date
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import event

from myao2.application.channels import ChannelLifecycle
from myao2.application.context import Absorbed, Budget, ContextBuilder, MemoryBudgets, Persona
from myao2.composition import memory_budgets
from myao2.config import Config
from myao2.domain.conversation import Channel, ChannelKind, Message
from myao2.domain.memory import WORKSPACE_SCOPE, Bullet, Digest, Memory, Scope, Stage, Term, seen_in
from myao2.domain.profile import Fact, Profile
from myao2.domain.visibility import WORKSPACE, Audience
from myao2.infrastructure.db.conversation_store import SqlConversationStore
from myao2.infrastructure.db.engine import open_database
from myao2.infrastructure.db.memo_store import SqlMemoStore
from myao2.infrastructure.db.memory_store import SqlMemoryStore
from myao2.infrastructure.db.profile_store import SqlProfileStore
from myao2.infrastructure.llm.phrases import prompt_marks
from myao2.infrastructure.llm.prompts import PromptRenderer
from tests.clocks import ManualClock

PERSONA = Persona("myao", "", "en", ZoneInfo("UTC"))
GENERAL = Channel("C1", "general")
RANDOM = Channel("C2", "random")
SECRET = Channel("G1", "secret", ChannelKind.PRIVATE)
DM = Channel("D1", "alice", ChannelKind.IM)
THREAD = "1735786800.000100"
DAY = date(2025, 1, 2)


def memory(scope: Scope, term: Term, audience: Audience, *texts: str, label: str = "") -> Memory:
    bullets = tuple(Bullet(i + 1, text, DAY, ("1735786800.000100",)) for i, text in enumerate(texts))
    return Memory(scope, term, audience, bullets, label=label)


@pytest.fixture
def stores(database_url):
    engine = open_database(database_url)
    clock = ManualClock()
    memories = SqlMemoryStore(engine, clock)
    memories.save(
        [
            memory(WORKSPACE_SCOPE, Term.LONG, WORKSPACE, "ws-long fact"),
            memory(WORKSPACE_SCOPE, Term.SHORT, WORKSPACE, "ws-short news"),
            memory(Scope(GENERAL.id), Term.LONG, WORKSPACE, "general-long fact", label="#general"),
            memory(Scope(GENERAL.id), Term.SHORT, WORKSPACE, "general-short news", label="#general"),
            memory(Scope(GENERAL.id, THREAD), Term.SHORT, WORKSPACE, "thread-short news", label="#general"),
            memory(Scope(RANDOM.id), Term.SHORT, WORKSPACE, "random-short news", label="#random"),
            memory(Scope(SECRET.id), Term.LONG, Audience(SECRET.id), "canary-secret-long", label="#secret"),
            memory(Scope(SECRET.id), Term.SHORT, Audience(SECRET.id), "canary-secret-short", label="#secret"),
            memory(Scope(DM.id), Term.SHORT, Audience(DM.id), "canary-dm-short", label="#alice"),
        ]
    )
    conversations = SqlConversationStore(engine, clock)
    for channel in (GENERAL, RANDOM, SECRET, DM):
        conversations.save_channel(channel)
    yield SqlMemoStore(engine, clock), memories, SqlProfileStore(engine, clock), clock, conversations
    engine.dispose()


DEFAULT_BUDGETS = memory_budgets(Config())


def builder(stores, budgets: MemoryBudgets = DEFAULT_BUDGETS, with_memories: bool = True) -> ContextBuilder:
    memos, memories, profiles, clock, conversations = stores
    return ContextBuilder(
        memos,
        clock,
        PERSONA,
        bot_user_id="UBOT",
        budget=Budget(6000, 1000),
        marks=prompt_marks("en"),
        absorbed=Absorbed(memories, profiles, budgets) if with_memories else None,
    )


def reply(channel: Channel, thread_ts: str | None = None) -> list[Message]:
    return [Message(channel.id, "1735786900.000100", "U1", "hi", "Alice", thread_ts=thread_ts)]


async def test_a_thread_prompt_has_its_thread_its_channel_and_the_workspace_memories(stores):
    context = await builder(stores).build(GENERAL, reply(GENERAL, THREAD))

    text = PromptRenderer("en").render("response", "query", context)

    for fact in ("ws-long fact", "general-long fact", "general-short news", "thread-short news"):
        assert fact in text
    assert "#random: - [2025-01-02] random-short news" in text  # what happens elsewhere
    assert "ws-short news" not in text  # the workspace's short-term memory is the job's, not the prompt's


@pytest.mark.parametrize("language", ["ja", "en"])
@pytest.mark.parametrize("kind", ["response", "judgment"])
async def test_a_public_channel_prompt_holds_nothing_of_private_memories(stores, language, kind):
    context = await builder(stores).build(RANDOM, reply(RANDOM))

    text = PromptRenderer(language).render(kind, "query", context, elapsed="1 minute")

    assert "canary" not in text
    assert "general-short news" in text


async def test_a_channel_the_bot_has_left_is_no_news_elsewhere_until_it_joins_again(stores):
    conversations = stores[4]
    conversations.save_channel(GENERAL)
    conversations.save_channel(RANDOM)

    async def news() -> tuple[str, ...]:
        return (await builder(stores).build(GENERAL, reply(GENERAL))).memory.elsewhere.lines

    assert await news() == ("#random: - [2025-01-02] random-short news",)
    conversations.leave_channel(RANDOM.id)
    assert await news() == ()
    conversations.save_channel(RANDOM)  # invited back
    assert await news() == ("#random: - [2025-01-02] random-short news",)


async def test_a_channel_never_stored_is_no_news_elsewhere(stores):
    # What was said in a conversation never stored counts as not public (the safe side), as search treats its
    # messages; its memory kept for the workspace was judged by its audience alone and shown in every public channel.
    memories = stores[1]
    memories.save([memory(Scope("C9"), Term.SHORT, WORKSPACE, "canary-unknown news", label="#unknown")])

    news = (await builder(stores).build(GENERAL, reply(GENERAL))).memory.elsewhere.lines

    assert news == ("#random: - [2025-01-02] random-short news",)


async def test_a_prompt_in_a_channel_the_bot_has_left_shows_nothing_it_remembers_of_it_as_memory_show_does(stores):
    # The prompt read its own memories with `can_read` alone, `seen_in` (`myao2 memory show --channel`, the
    # playground) with `can_read_from`: for a channel stored as left the prompt showed what was said there, which
    # the rule keeps from every conversation, its own included, until the bot joins it again.
    # Its digests likewise: the prompt asked `can_read`, `myao2 memory show --channel` `can_read_from`.
    _, memories, _, _, conversations = stores
    memories.save_digest(Digest(GENERAL.id, DAY, Stage.DIGEST, WORKSPACE, ("general digest",), "1.0", "2.0"))
    conversations.save_channel(GENERAL)
    conversations.leave_channel(GENERAL.id)
    left = conversations.get_channel(GENERAL.id)
    assert left is not None and not left.is_member

    async def own(channel: Channel) -> tuple[tuple[str, ...], ...]:
        shown = (await builder(stores).build(channel, reply(channel, THREAD))).memory
        return shown.channel_long.lines, shown.channel_short.lines, shown.thread.lines, shown.digests.lines

    assert await own(left) == ((), (), (), ())
    assert {m.scope for m in seen_in(memories.all(), GENERAL.id, THREAD, frozenset(), left)} == {WORKSPACE_SCOPE}
    assert (await builder(stores).build(left, reply(left))).memory.workspace.lines == ("- [2025-01-02] ws-long fact",)
    conversations.save_channel(GENERAL)  # invited back
    assert await own(GENERAL) == (
        ("- [2025-01-02] general-long fact",),
        ("- [2025-01-02] general-short news",),
        ("- [2025-01-02] thread-short news",),
        ("- [2025-01-02] general digest",),
    )


async def test_a_channel_converted_to_private_is_no_news_elsewhere_from_the_next_prompt_on(stores):
    memos, memories, profiles, _, conversations = stores
    conversations.save_channel(GENERAL)
    conversations.save_channel(RANDOM)

    async def refresh(_channel_id: str) -> None:
        raise AssertionError("the channel is stored")

    lifecycle = ChannelLifecycle(conversations, memos, memories, refresh, profiles=profiles)

    async def news() -> tuple[str, ...]:
        return (await builder(stores).build(GENERAL, reply(GENERAL))).memory.elsewhere.lines

    assert await news() == ("#random: - [2025-01-02] random-short news",)
    await lifecycle.became_private(RANDOM.id)
    assert await news() == ()
    random = await builder(stores).build(replace(RANDOM, kind=ChannelKind.PRIVATE), reply(RANDOM))
    assert random.memory.channel_short.lines == ("- [2025-01-02] random-short news",)  # its own still


async def test_a_channel_stored_as_private_is_no_news_elsewhere_while_its_memories_are_not_narrowed_yet(stores):
    # A conversion stores the channel's new kind first and narrows its memories last: a prompt built in between
    # (the memory still kept for the workspace) showed what was said there in #general.
    _, _, _, _, conversations = stores
    conversations.save_channel(GENERAL)
    conversations.save_channel(RANDOM)

    async def news() -> tuple[str, ...]:
        return (await builder(stores).build(GENERAL, reply(GENERAL))).memory.elsewhere.lines

    assert await news() == ("#random: - [2025-01-02] random-short news",)
    conversations.set_channel_kind(RANDOM.id, ChannelKind.PRIVATE)
    assert await news() == ()


async def test_what_was_heard_in_a_channel_stored_as_private_leaves_other_prompts_while_not_narrowed_yet(stores):
    # The workspace memory and profiles keep, for every conversation, what was heard in #random until the
    # narrowing reaches them: a prompt built after its kind is stored as private and before that showed it.
    _, memories, profiles, _, conversations = stores
    conversations.save_channel(GENERAL)
    conversations.save_channel(RANDOM)
    dev = Channel("C3", "dev")
    conversations.save_channel(dev)
    heard = (Bullet(2, "canary heard in random", DAY, ("1735786800.000200",), heard_in=(GENERAL.id, RANDOM.id)),)
    workspace = memories.get(WORKSPACE_SCOPE, Term.LONG)
    news = memory(Scope(dev.id), Term.SHORT, WORKSPACE, "dev news", label="#dev")
    memories.save([replace(workspace, bullets=workspace.bullets + heard), replace(news, bullets=news.bullets + heard)])
    learnt = Fact(1, "canary learnt in random", 0.8, 0, RANDOM.id, WORKSPACE, DAY, ("1735786800.000200",))
    told = replace(learnt, id=2, text="canary told in general", conversation_id=GENERAL.id, heard_in=(RANDOM.id,))
    profiles.save([Profile("U1", (learnt, told, replace(learnt, id=3, text="likes tea", conversation_id=GENERAL.id)))])

    async def shown(channel: Channel) -> str:
        return PromptRenderer("en").render("response", "query", await builder(stores).build(channel, reply(channel)))

    assert "canary heard in random" in await shown(GENERAL) and "canary learnt in random" in await shown(GENERAL)
    conversations.set_channel_kind(RANDOM.id, ChannelKind.PRIVATE)
    general = await shown(GENERAL)
    assert "canary" not in general
    for kept in ("ws-long fact", "#dev: - [2025-01-02] dev news", "likes tea"):
        assert kept in general  # what was heard in public channels only stays
    random = await shown(replace(RANDOM, kind=ChannelKind.PRIVATE))
    for canary in ("canary heard in random", "canary learnt in random", "canary told in general"):
        assert canary in random  # the channel itself still sees what was heard there


async def test_a_private_conversation_sees_its_own_memory_and_nothing_of_other_channels(stores):
    secret = await builder(stores).build(SECRET, reply(SECRET))
    dm = await builder(stores).build(DM, reply(DM))

    secret_text = PromptRenderer("en").render("response", "query", secret)
    dm_text = PromptRenderer("en").render("response", "query", dm)

    assert "canary-secret-long" in secret_text and "canary-secret-short" in secret_text
    assert "canary-dm" not in secret_text
    assert "canary-dm-short" in dm_text and "canary-secret" not in dm_text
    assert "random-short news" not in secret_text and "random-short news" not in dm_text
    assert "ws-long fact" in secret_text  # the workspace memory is public


async def test_sections_are_trimmed_at_whole_bullets_oldest_first_with_a_marker(stores):
    _, memories, _, _, _ = stores
    texts = [f"fact number {i} " + "x" * 40 for i in range(20)]
    memories.save([memory(WORKSPACE_SCOPE, Term.LONG, WORKSPACE, *texts)])

    context = await builder(stores, replace(DEFAULT_BUDGETS, workspace=100)).build(GENERAL, reply(GENERAL))
    text = PromptRenderer("en").render("response", "query", context)

    section = context.memory.workspace
    assert 0 < len(section.lines) < 20
    assert section.omitted == 20 - len(section.lines)
    assert section.lines[-1].endswith(texts[-1])  # the newest stay
    assert all(any(line.endswith(t) for t in texts) for line in section.lines)  # whole bullets only
    assert f"({section.omitted} older notes left out)" in text
    assert sum(len(line) for line in section.lines) / 4 <= 100


async def test_without_a_memory_store_the_prompt_has_no_memory_sections(stores):
    context = await builder(stores, with_memories=False).build(GENERAL, reply(GENERAL))

    assert "remember about" not in PromptRenderer("en").render("response", "query", context)


@pytest.mark.parametrize("language", ["ja", "en"])
async def test_a_conversation_s_digests_reach_its_prompt_within_their_budget_oldest_left_out(stores, language):
    from datetime import timedelta

    _, memories, _, _, _ = stores
    for day in range(6):
        memories.save_digest(
            Digest(GENERAL.id, DAY + timedelta(days=day), Stage.DIGEST, WORKSPACE, (f"digest of day {day} " * 8,), "1.0", "2.0")
        )
    memories.save_digest(Digest(SECRET.id, DAY, Stage.DIGEST, Audience(SECRET.id), ("canary-secret-digest",), "1.0", "2.0"))
    budgets = replace(DEFAULT_BUDGETS, digest=150)

    general = PromptRenderer(language).render("response", "query", await builder(stores, budgets).build(GENERAL, reply(GENERAL)))
    random = PromptRenderer(language).render("response", "query", await builder(stores, budgets).build(RANDOM, reply(RANDOM)))
    secret = PromptRenderer(language).render("response", "query", await builder(stores, budgets).build(SECRET, reply(SECRET)))

    assert "digest of day 5" in general and "digest of day 0" not in general
    assert ("older note" in general) if language == "en" else ("古いメモ" in general)
    assert "digest of day" not in random and "canary" not in random and "canary" not in general
    assert "canary-secret-digest" in secret


def test_a_prompt_read_together_takes_one_connection_and_each_read_sees_what_was_committed(database_url):
    engine = open_database(database_url)
    clock = ManualClock()
    conversations, memories = SqlConversationStore(engine, clock), SqlMemoryStore(engine, clock)
    contexts = builder((SqlMemoStore(engine, clock), memories, SqlProfileStore(engine, clock), clock, conversations))
    checkouts: list[object] = []
    event.listen(engine, "checkout", lambda *_: checkouts.append(None))
    try:
        with conversations.one_connection():
            messages = [*conversations.channel_messages(GENERAL.id, 30), *reply(GENERAL)]
            before = contexts.read(GENERAL, messages)
            reads = len(checkouts)
            # written over a connection of its own meanwhile (the memory job), and seen by the next read
            memories.save([memory(Scope(GENERAL.id), Term.LONG, WORKSPACE, "learnt meanwhile")])
            after = contexts.read(GENERAL, messages)
    finally:
        engine.dispose()
    assert reads == 1  # messages, memos, memories, digests and profiles: one connection (8 before)
    assert len(checkouts) == 2  # and the save's own
    assert before[1].channel_long.lines == ()
    assert any("learnt meanwhile" in line for line in after[1].channel_long.lines)



def test_a_prompt_s_reads_are_sent_as_compiled_once_never_rendered_again_at_a_read(database_url):
    """SQLAlchemy renders a statement with an expanding IN (a list bound as one parameter) or a literal rendered at
    each run anew at every read: more CPU than the read itself. A prompt's statements (in a thread, with two
    speakers, and in the channel) are sent as they were compiled, whatever the number of keys or people."""
    engine = open_database(database_url)
    clock = ManualClock()
    conversations, memories, profiles = SqlConversationStore(engine, clock), SqlMemoryStore(engine, clock), SqlProfileStore(engine, clock)
    conversations.save_channel(GENERAL)
    memories.save([memory(Scope(GENERAL.id), Term.LONG, WORKSPACE, "general-long fact")])
    contexts = builder((SqlMemoStore(engine, clock), memories, profiles, clock, conversations))
    rendered: list[str] = []

    def sent(_conn, _cursor, statement, _parameters, context, _many) -> None:
        if context.compiled.post_compile_params or context.compiled.literal_execute_params:
            rendered.append(statement.split(" FROM ", 1)[1].split()[0])  # the table read

    event.listen(engine, "before_cursor_execute", sent)
    try:
        together = [*reply(GENERAL, THREAD), Message(GENERAL.id, "1735786950.000100", "U2", "yes", "Bob", thread_ts=THREAD)]
        read = [contexts.read(GENERAL, messages) for messages in (together, reply(GENERAL))]
    finally:
        engine.dispose()
    assert all("general-long fact" in stored[1].channel_long.lines[0] for stored in read)
    assert rendered == []
