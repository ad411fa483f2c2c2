"""Stores that read rows and then write them, racing another connection that changes those rows in between
(an SQLite file and PostgreSQL): what the other wrote is neither lost nor undone."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import date, datetime, timedelta, timezone

import pytest
from sqlalchemy import Engine, event

from myao2.domain.conversation import Channel, ChannelKind, History, Message
from myao2.domain.memory import Bullet, Digest, Memory, Scope, Stage, Term
from myao2.domain.profile import Fact, Profile
from myao2.domain.visibility import WORKSPACE, Audience
from myao2.infrastructure.db.conversation_store import SqlConversationStore
from myao2.infrastructure.db.engine import open_database
from myao2.infrastructure.db.forget import forget_person
from myao2.infrastructure.db.memory_store import SqlMemoryStore
from myao2.infrastructure.db.profile_store import SqlProfileStore
from tests.clocks import ManualClock
from tests.stored import stored_message

T0 = datetime(2026, 3, 1, 12, tzinfo=timezone.utc)
DAY = date(2026, 3, 1)
HELD_FOR = 1.0
"""How long the racing change is given to commit while the store is between its read and its write."""


@pytest.fixture
def other(database_url: str) -> Iterator[Engine]:
    """A second engine on the same database: the other process."""
    engine = open_database(database_url)
    yield engine
    engine.dispose()


@contextmanager
def meanwhile(engine: Engine, table: str, change: Callable[[], None]) -> Iterator[None]:
    """Run the block with `change` made (in another thread, on its own connections) right after the block's first
    read of `table`: the change commits before the block writes, unless the block holds what it read; then it
    waits for the block to end."""
    owner = threading.get_ident()
    failures: list[BaseException] = []

    def run() -> None:
        try:
            change()
        except BaseException as error:  # noqa: BLE001 - raised in the test's thread below
            failures.append(error)

    racer = threading.Thread(target=run)

    def read(conn, cursor, statement, parameters, context, executemany) -> None:  # type: ignore[no-untyped-def]
        select = statement.lstrip().upper().startswith("SELECT")
        if racer.ident is None and threading.get_ident() == owner and select and f"FROM {table}" in statement:
            racer.start()
            racer.join(HELD_FOR)

    event.listen(engine, "after_cursor_execute", read)
    try:
        yield
    finally:
        event.remove(engine, "after_cursor_execute", read)
    assert racer.ident is not None, f"the block never read {table}"
    racer.join(30)
    if failures:
        raise failures[0]


def message(ts: str, user: str, text: str, channel: str = "C1") -> Message:
    return Message(channel_id=channel, ts=ts, user_id=user, text=text, user_name=user)


def fact(fact_id: int, text: str, ts: str, audience: Audience = WORKSPACE, conversation: str = "C1") -> Fact:
    return Fact(fact_id, text, 0.8, 0, conversation, audience, DAY, (ts,))


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def conversations(engine: Engine, clock: ManualClock) -> SqlConversationStore:
    store = SqlConversationStore(engine, clock)
    store.save_channel(Channel("C1", "general", ChannelKind.PUBLIC))
    for ts, user, text in (("1.000001", "ualice", "I like tea"), ("1.000002", "ualice", "I ski"), ("1.000003", "ubob", "hi")):
        store.save_message(message(ts, user, text))
    return store


def test_a_fact_dropped_for_a_message_deleted_while_its_profile_is_saved_is_not_written_back(
    engine: Engine, other: Engine, clock: ManualClock, conversations: SqlConversationStore
) -> None:
    profiles = SqlProfileStore(engine, clock)
    profiles.save([Profile("ualice", (fact(1, "likes tea", "1.000001"),))])
    learnt = Profile("ualice", (fact(1, "likes tea", "1.000001"), fact(2, "skis", "1.000002")))
    deleting = SqlConversationStore(other, clock)
    with meanwhile(engine, "profiles", lambda: deleting.delete_message("C1", "1.000001")):
        profiles.save([learnt], heard=True)
    assert [f.text for f in profiles.get("ualice").facts] == ["skis"]


def test_a_profile_saved_while_its_channel_turns_private_keeps_the_fact_the_channels_own(
    engine: Engine, other: Engine, clock: ManualClock, conversations: SqlConversationStore
) -> None:
    profiles = SqlProfileStore(engine, clock)
    profiles.save([Profile("ualice", (fact(1, "likes tea", "1.000001"),))])
    learnt = Profile("ualice", (fact(1, "likes tea", "1.000001"), fact(2, "skis", "1.000002")))
    with meanwhile(engine, "profiles", lambda: SqlProfileStore(other, clock).narrow("C1")):
        profiles.save([learnt])
    assert {f.text: f.audience for f in profiles.get("ualice").facts} == {"likes tea": Audience("C1"), "skis": Audience("C1")}


def test_a_fact_saved_while_a_narrowing_reads_the_profiles_is_kept(
    engine: Engine, other: Engine, clock: ManualClock, conversations: SqlConversationStore
) -> None:
    profiles = SqlProfileStore(engine, clock)
    profiles.save([Profile("ualice", (fact(1, "likes tea", "1.000001"),))])
    learnt = Profile("ualice", (fact(1, "likes tea", "1.000001"), fact(2, "plays go", "9.000001", conversation="C9")))
    with meanwhile(engine, "profiles", lambda: SqlProfileStore(other, clock).save([learnt])):
        profiles.narrow("C1")
    assert {f.text: f.audience for f in profiles.get("ualice").facts} == {"likes tea": Audience("C1"), "plays go": WORKSPACE}


def test_a_note_saved_while_a_person_is_forgotten_is_kept_and_theirs_are_not(
    engine: Engine, other: Engine, clock: ManualClock, conversations: SqlConversationStore
) -> None:
    memories = SqlMemoryStore(engine, clock)
    workspace = Memory(Scope(), Term.SHORT, WORKSPACE, (Bullet(1, "alice likes tea", DAY, ("1.000001",)),))
    memories.save([workspace])
    learnt = Memory(
        Scope(), Term.SHORT, WORKSPACE, (*workspace.bullets, Bullet(2, "bob says hi", DAY, ("1.000003",)))
    )
    with meanwhile(engine, "memories", lambda: SqlMemoryStore(other, clock).save([learnt], heard=True)):
        forget_person(engine, "ualice")
    assert [b.text for b in memories.get(Scope(), Term.SHORT).bullets] == ["bob says hi"]


def test_a_note_saved_while_a_narrowing_drops_what_was_heard_there_is_kept(
    engine: Engine, other: Engine, clock: ManualClock, conversations: SqlConversationStore
) -> None:
    memories = SqlMemoryStore(engine, clock)
    heard = Bullet(1, "alice likes tea (heard in general)", DAY, ("1.000001",), heard_in=("C1",))
    plain = Bullet(2, "bob says hi", DAY, ("1.000003",))
    memories.save([Memory(Scope("C1"), Term.SHORT, WORKSPACE, (plain,)), Memory(Scope("C2"), Term.SHORT, WORKSPACE, (heard, plain))])
    learnt = Memory(Scope("C2"), Term.SHORT, WORKSPACE, (heard, plain, Bullet(3, "alice skis", DAY, ("1.000002",))))
    conversations.set_channel_kind("C1", ChannelKind.PRIVATE)
    with meanwhile(engine, "memories", lambda: SqlMemoryStore(other, clock).save([learnt])):
        memories.narrow("C1")
    assert [b.text for b in memories.get(Scope("C2"), Term.SHORT).bullets] == ["bob says hi", "alice skis"]


def test_an_edit_arriving_while_a_history_fetch_is_reconciled_is_kept(
    engine: Engine, other: Engine, clock: ManualClock, conversations: SqlConversationStore
) -> None:
    fetched_at = clock.now()
    clock.advance(1)  # the edit event is newer than the fetch
    fetched = History(
        "C1",
        [message("1.000001", "ualice", "I like green tea"), message("1.000002", "ualice", "I ski"), message("1.000003", "ubob", "hi")],
        "1.000000",
        frozenset(),
    )
    editing = SqlConversationStore(other, clock)
    with meanwhile(engine, "messages", lambda: editing.edit_message("C1", "1.000001", "I like black tea")):
        conversations.reconcile(fetched, fetched_at)
    assert stored_message(conversations, "C1", "1.000001").text == "I like black tea"


def test_a_message_deleted_while_its_author_is_forgotten_neither_deadlocks_nor_leaves_their_notes(
    engine: Engine, other: Engine, clock: ManualClock, conversations: SqlConversationStore
) -> None:
    memories, profiles = SqlMemoryStore(engine, clock), SqlProfileStore(engine, clock)
    bullets = (Bullet(1, "alice skis", DAY, ("1.000002",)), Bullet(2, "bob says hi", DAY, ("1.000003",)))
    memories.save([Memory(Scope(), Term.SHORT, WORKSPACE, bullets)])
    profiles.save([Profile("ualice", (fact(1, "skis", "1.000002"),))])
    deleting = SqlConversationStore(other, clock)
    # both drop the notes citing the message: the rows are taken in the same order, memories first
    with meanwhile(engine, "profiles", lambda: deleting.delete_message("C1", "1.000002")):
        forget_person(engine, "ualice")
    assert [b.text for b in memories.get(Scope(), Term.SHORT).bullets] == ["bob says hi"]
    assert profiles.get("ualice") is None


def test_profiles_saved_together_while_a_channel_is_narrowed_do_not_deadlock(
    engine: Engine, other: Engine, clock: ManualClock, conversations: SqlConversationStore
) -> None:
    profiles = SqlProfileStore(engine, clock)
    alice, bob = Profile("ualice", (fact(1, "likes tea", "1.000001"),)), Profile("ubob", (fact(1, "says hi", "1.000003"),))
    profiles.save([alice])
    profiles.save([bob])
    # the save holds its first profile when the narrowing starts: both take the rows in the same order
    with meanwhile(engine, "profiles", lambda: SqlProfileStore(other, clock).narrow("C1")):
        profiles.save([bob, alice])
    assert {p.user_id: [f.audience for f in p.facts] for p in profiles.all()} == {
        "ualice": [Audience("C1")],
        "ubob": [Audience("C1")],
    }


def test_memories_saved_together_while_a_message_is_deleted_do_not_deadlock(
    engine: Engine, other: Engine, clock: ManualClock, conversations: SqlConversationStore
) -> None:
    memories = SqlMemoryStore(engine, clock)
    bullets = (Bullet(1, "alice skis", DAY, ("1.000002",)), Bullet(2, "bob says hi", DAY, ("1.000003",)))
    memories.save([Memory(Scope(), Term.SHORT, WORKSPACE, bullets)])
    memories.save([Memory(Scope("C1"), Term.SHORT, WORKSPACE, bullets)])
    learnt = (*bullets, Bullet(3, "bob waves", DAY, ("1.000003",)))
    deleting = SqlConversationStore(other, clock)
    # the save holds its first memory when the deletion starts: both take the rows in the same order
    with meanwhile(engine, "memories", lambda: deleting.delete_message("C1", "1.000002")):
        memories.save([Memory(Scope("C1"), Term.SHORT, WORKSPACE, learnt), Memory(Scope(), Term.SHORT, WORKSPACE, learnt)])
    for scope in (Scope(), Scope("C1")):
        assert [b.text for b in memories.get(scope, Term.SHORT).bullets] == ["bob says hi", "bob waves"]


def test_a_new_profile_saved_by_two_writers_at_once_is_stored_as_narrow_as_either_left_it(
    engine: Engine, other: Engine, clock: ManualClock, conversations: SqlConversationStore
) -> None:
    narrowed = Profile("ualice", (fact(1, "likes tea", "1.000001", audience=Audience("C1")),))
    # both find no profile of alice: the second to write it finds the first's row and never widens it
    with meanwhile(engine, "profiles", lambda: SqlProfileStore(other, clock).save([narrowed])):
        SqlProfileStore(engine, clock).save([Profile("ualice", (fact(1, "likes tea", "1.000001"),))])
    assert [f.audience for f in SqlProfileStore(engine, clock).get("ualice").facts] == [Audience("C1")]


def test_a_new_memory_saved_by_two_writers_at_once_is_stored_as_narrow_as_either_left_it(
    engine: Engine, other: Engine, clock: ManualClock, conversations: SqlConversationStore
) -> None:
    bullets = (Bullet(1, "bob says hi", DAY, ("1.000003",)),)
    narrowed = Memory(Scope("C1"), Term.SHORT, Audience("C1"), bullets)
    # both find no memory of the channel: the second to write it finds the first's row and never widens it
    with meanwhile(engine, "memories", lambda: SqlMemoryStore(other, clock).save([narrowed])):
        SqlMemoryStore(engine, clock).save([Memory(Scope("C1"), Term.SHORT, WORKSPACE, bullets)])
    assert SqlMemoryStore(engine, clock).get(Scope("C1"), Term.SHORT).audience == Audience("C1")


def test_memories_saved_together_while_a_channel_is_narrowed_do_not_deadlock(
    engine: Engine, other: Engine, clock: ManualClock, conversations: SqlConversationStore
) -> None:
    memories = SqlMemoryStore(engine, clock)
    bullets = (Bullet(1, "bob says hi", DAY, ("1.000003",)),)
    memories.save([Memory(Scope(), Term.SHORT, WORKSPACE, bullets)])
    memories.save([Memory(Scope("C1"), Term.SHORT, WORKSPACE, bullets)])
    both = [Memory(Scope("C1"), Term.SHORT, WORKSPACE, bullets), Memory(Scope(), Term.SHORT, WORKSPACE, bullets)]
    # the narrowing holds the channel's memory when the save starts: both take the rows in the same order
    with meanwhile(engine, "memories", lambda: SqlMemoryStore(other, clock).save(both)):
        memories.narrow("C1")
    assert memories.get(Scope("C1"), Term.SHORT).audience == Audience("C1")


def test_a_message_deleted_while_a_day_it_shares_with_a_forgotten_author_is_forgotten_does_not_deadlock(
    engine: Engine, other: Engine, clock: ManualClock, conversations: SqlConversationStore
) -> None:
    memories = SqlMemoryStore(engine, clock)
    bullets = (Bullet(1, "alice likes tea", DAY, ("1.000001",)), Bullet(2, "bob says hi", DAY, ("1.000003",)))
    memories.save([Memory(Scope(), Term.SHORT, WORKSPACE, bullets)])
    memories.save_digest(Digest("C1", DAY, Stage.DIGEST, WORKSPACE, ("tea, skis, hi",), "1.000001", "1.000003", ("ualice", "ubob")))
    deleting = SqlConversationStore(other, clock)
    # both drop the day's digest and the notes: the rows are taken in the same order, the digest first
    with meanwhile(engine, "memories", lambda: deleting.delete_message("C1", "1.000003")):
        forget_person(engine, "ualice")
    assert memories.get(Scope(), Term.SHORT).bullets == ()
    assert memories.digests("C1") == []
