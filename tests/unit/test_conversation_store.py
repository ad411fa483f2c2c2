"""SqlConversationStore against a real database: an SQLite file, and PostgreSQL."""

from __future__ import annotations

import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, event, text

from myao2.domain.answers import Unfinished
from myao2.domain.conversation import BotIdentity, Channel, ChannelKind, History, Message, Person, ts_to_datetime
from myao2.infrastructure.db.conversation_store import SqlConversationStore
from tests.clocks import ManualClock
from tests.stored import stored_message
from tests.unit.test_migrations import head_revision

BOT = "UBOT"
T0 = 1_700_000_000


def ts(seconds: int, micros: int = 0) -> str:
    return f"{T0 + seconds}.{micros:06d}"


def msg(seconds: int, text: str = "hi", channel: str = "C1", **kwargs: object) -> Message:
    fields: dict = {"user_id": "U1", "user_name": "alice", **kwargs}
    return Message(channel_id=channel, ts=ts(seconds), text=text, **fields)


@pytest.fixture
def db_path(engine: Engine) -> Path:
    """The SQLite file (tests of the file itself run on SQLite only)."""
    if engine.dialect.name != "sqlite":
        pytest.skip("about SQLite's file")
    return Path(str(engine.url.database))


def rows(engine: Engine, query: str) -> list[tuple[object, ...]]:
    with engine.connect() as connection:
        return [tuple(row) for row in connection.execute(text(query))]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc))


@pytest.fixture
def store(engine: Engine, clock: ManualClock) -> SqlConversationStore:
    return SqlConversationStore(engine, clock)


def texts(messages: list[Message]) -> list[str]:
    return [m.text for m in messages]


# -- schema ------------------------------------------------------------------


def test_migrates_an_empty_database_to_head(engine: Engine, db_path: Path) -> None:
    with sqlite3.connect(db_path) as plain:
        assert plain.execute("SELECT version_num FROM alembic_version").fetchall() == [(head_revision(),)]
        tables = {r[0] for r in plain.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"channels", "people", "messages", "claims", "memos"} <= tables


def test_rows_are_readable_with_plain_sqlite(store: SqlConversationStore, db_path: Path) -> None:
    store.save_message(msg(0, "こんにちは", user_name="ありす", mentions=(BOT, "U2")))
    store.save_channel(Channel("C1", "雑談", ChannelKind.PRIVATE))
    store.claim("C1", ts(0))

    with sqlite3.connect(db_path) as plain:
        rows = plain.execute("SELECT channel_id, ts, user_name, text, posted_at FROM messages").fetchall()
        mentions = plain.execute("SELECT mentions FROM messages").fetchone()[0]
        channel = plain.execute("SELECT name, kind, updated_at FROM channels").fetchone()
        claimed_at = plain.execute("SELECT claimed_at FROM claims").fetchone()[0]

    assert rows == [("C1", ts(0), "ありす", "こんにちは", "2023-11-14T22:13:20.000000+00:00")]
    assert mentions == '["UBOT", "U2"]'
    assert channel == ("雑談", "private", "2026-01-02T03:04:05.000000+00:00")
    assert claimed_at == "2026-01-02T03:04:05.000000+00:00"


# -- messages ----------------------------------------------------------------


def test_save_message_keeps_the_stored_message(store: SqlConversationStore) -> None:
    original = msg(0, "first", mentions=(BOT,))

    assert store.save_message(original) is True
    assert store.save_message(original) is False
    store.edit_message("C1", ts(0), "edited")
    assert store.save_message(msg(0, "first")) is False  # e.g. a history fetched before the edit

    assert stored_message(store, "C1", ts(0)).text == "edited"
    assert texts(store.channel_messages("C1", 10)) == ["edited"]


def test_save_messages_stores_a_group_but_what_is_stored_or_was_deleted(store: SqlConversationStore) -> None:
    store.save_message(msg(1, "stored before"))
    store.delete_message("C1", ts(2))

    store.save_messages([msg(0, "new"), msg(1, "again"), msg(2, "deleted"), msg(3, "new too"), msg(0, "twice")])

    assert texts(store.channel_messages("C1", 10)) == ["new", "stored before", "new too"]


def test_same_ts_in_other_channels_are_other_messages(store: SqlConversationStore) -> None:
    assert store.save_message(msg(0, "one", channel="C1")) is True
    assert store.save_message(msg(0, "two", channel="C2")) is True

    assert stored_message(store, "C1", ts(0)).text == "one"
    assert stored_message(store, "C2", ts(0)).text == "two"


def test_a_stored_message_round_trips_every_field(store: SqlConversationStore) -> None:
    message = Message(
        channel_id="C1",
        ts=ts(5, 123),
        user_id=None,
        text="<@UBOT> ✨",
        user_name="a bot",
        is_bot=True,
        thread_ts=ts(1),
        mentions=(BOT, "U2"),
    )
    store.save_message(message)

    assert stored_message(store, "C1", ts(5, 123)) == message
    assert stored_message(store, "C1", ts(6)) is None
    assert stored_message(store, "C9", ts(5, 123)) is None


def test_edit_message_updates_text_and_edited_at(
    store: SqlConversationStore, clock: ManualClock, engine: Engine
) -> None:
    store.save_message(msg(0, "typo"))
    clock.advance()

    assert store.edit_message("C1", ts(0), "fixed")
    assert not store.edit_message("C1", ts(9), "nobody")  # not stored: nothing changed

    assert stored_message(store, "C1", ts(0)).text == "fixed"
    assert stored_message(store, "C1", ts(9)) is None
    assert rows(engine, "SELECT edited_at FROM messages") == [("2026-01-02T03:05:05.000000+00:00",)]


def test_an_edit_that_leaves_the_text_as_it_was_changes_nothing(store: SqlConversationStore, engine: Engine) -> None:
    store.save_message(msg(0, "see https://example.com"))  # Slack reports a link preview added as an edit

    assert store.edit_message("C1", ts(0), "see https://example.com")  # stored
    assert rows(engine, "SELECT edited_at FROM messages") == [(None,)]


def test_delete_message_removes_only_that_row(store: SqlConversationStore) -> None:
    store.save_message(msg(0, "keep"))
    store.save_message(msg(1, "drop"))

    store.delete_message("C1", ts(1))
    store.delete_message("C1", ts(9))

    assert stored_message(store, "C1", ts(1)) is None
    assert texts(store.channel_messages("C1", 10)) == ["keep"]


def test_a_deleted_message_is_never_stored_again(store: SqlConversationStore) -> None:
    store.save_message(msg(0, "secret"))
    store.delete_message("C1", ts(0))
    store.delete_message("C1", ts(1))  # deleted before it was ever stored

    assert store.save_message(msg(0, "secret")) is False
    assert store.save_message(msg(1, "also secret")) is False
    assert store.save_message(msg(0, "same ts elsewhere", channel="C2")) is True
    assert stored_message(store, "C1", ts(0)) is None and stored_message(store, "C1", ts(1)) is None


def test_thread_and_channel_messages_are_kept_apart(store: SqlConversationStore) -> None:
    store.save_message(msg(0, "top"))
    store.save_message(msg(1, "parent", thread_ts=ts(1)))
    store.save_message(msg(2, "reply 1", thread_ts=ts(1)))
    store.save_message(msg(3, "later top"))
    store.save_message(msg(4, "reply 2", thread_ts=ts(1)))
    store.save_message(msg(5, "other thread", thread_ts=ts(0)))
    store.save_message(msg(6, "elsewhere", channel="C2"))

    assert texts(store.channel_messages("C1", 10)) == ["top", "parent", "later top"]
    assert texts(store.thread_messages("C1", ts(1), 10)) == ["parent", "reply 1", "reply 2"]
    assert texts(store.thread_messages("C1", ts(0), 10)) == ["top", "other thread"]
    assert store.thread_messages("C2", ts(1), 10) == []


def test_a_threads_read_steps_through_its_own_messages_not_the_channels(
    store: SqlConversationStore, engine: Engine, db_path: Path
) -> None:
    # A thread shorter than the limit was read by walking the whole channel newest first for more of its messages:
    # a mention in a thread of a busy channel read every message kept there (CPU growing with the channel).
    store.save_message(msg(500, "parent", thread_ts=ts(500)))
    store.save_messages([msg(501 + i, f"reply {i}", thread_ts=ts(500)) for i in range(3)])

    def steps() -> int:
        counted = [0]

        def count() -> int:
            counted[0] += 1
            return 0

        def counting(dbapi_connection: sqlite3.Connection, *_: object) -> None:
            dbapi_connection.set_progress_handler(count, 1)

        event.listen(engine, "checkout", counting)
        try:
            assert texts(store.thread_messages("C1", ts(500), 30)) == ["parent", "reply 0", "reply 1", "reply 2"]
        finally:
            event.remove(engine, "checkout", counting)
        return counted[0]

    alone = steps()
    store.save_messages([msg(second, f"top {second}") for second in (*range(300), *range(600, 900))])
    assert steps() == alone


def test_a_channels_newest_messages_are_read_in_the_order_its_index_keeps_them(
    store: SqlConversationStore, engine: Engine, db_path: Path
) -> None:
    # Kept by (channel, posting time) alone, the messages of one posting time were sorted by ts as they were read:
    # each row of the newest read took a sort of its own, and so did the search index's trigger at each insert.
    store.save_messages([msg(second, f"top {second}") for second in range(40)])
    with engine.connect() as connection:
        newest = connection.exec_driver_sql(
            "EXPLAIN QUERY PLAN SELECT ts, text FROM messages WHERE channel_id = 'C1' AND posted_at > '0'"
            " ORDER BY posted_at DESC, ts DESC LIMIT 30"
        ).fetchall()
    assert [step[-1] for step in newest] == [
        "SEARCH messages USING INDEX ix_messages_channel_posted_at (channel_id=? AND posted_at>?)"
    ]
    assert texts(store.channel_messages("C1", 3, ts_to_datetime(ts(0)))) == ["top 37", "top 38", "top 39"]


def test_limits_keep_the_newest_oldest_first(store: SqlConversationStore) -> None:
    for second in range(6):
        store.save_message(msg(second, f"top {second}"))
        store.save_message(msg(100 + second, f"reply {second}", thread_ts=ts(0)))

    assert texts(store.channel_messages("C1", 3)) == ["top 3", "top 4", "top 5"]
    assert texts(store.thread_messages("C1", ts(0), 3)) == ["reply 3", "reply 4", "reply 5"]


def test_channel_messages_since(store: SqlConversationStore) -> None:
    for second in range(4):
        store.save_message(msg(second, f"top {second}"))

    since = ts_to_datetime(ts(1))
    assert texts(store.channel_messages("C1", 10, since)) == ["top 2", "top 3"]
    assert texts(store.channel_messages("C1", 1, since)) == ["top 3"]


def test_order_is_numeric_not_textual(store: SqlConversationStore) -> None:
    store.save_message(Message("C1", "1000000000.000000", "U1", "new", "alice"))
    store.save_message(Message("C1", "999999999.000000", "U1", "old", "alice"))

    assert texts(store.channel_messages("C1", 10)) == ["old", "new"]


# -- channels and people -----------------------------------------------------


def test_a_channel_left_is_neither_active_nor_caught_up_until_joined_again(store: SqlConversationStore) -> None:
    store.save_channel(Channel("C1", "general"))
    store.save_channel(Channel("C2", "random"))
    store.save_message(msg(1, "hello <@UBOT>", mentions=(BOT,)))
    store.save_message(msg(2, "hi", channel="C2"))
    since = ts_to_datetime(ts(0))

    store.leave_channel("C1")

    assert store.get_channel("C1") == Channel("C1", "general", is_member=False)
    assert [c.id for c in store.active_channels(since)] == ["C2"]
    assert store.unclaimed_mentions(BOT, since, ts_to_datetime(ts(9))) == []
    assert list(store.changes()) == ["C2"]  # nothing more of C1 for the memory job either

    store.save_channel(Channel("C1", "general"))  # joined again
    assert store.get_channel("C1").is_member
    assert sorted(c.id for c in store.active_channels(since)) == ["C1", "C2"]
    assert texts(store.unclaimed_mentions(BOT, since, ts_to_datetime(ts(9)))) == ["hello <@UBOT>"]


def test_channels_not_listed_as_the_bots_count_as_left(store: SqlConversationStore, clock: ManualClock) -> None:
    for channel_id in ("C1", "C2", "C3"):
        store.save_channel(Channel(channel_id, channel_id.lower()))
    clock.advance()
    listed_at = clock.now()
    clock.advance()
    store.save_channel(Channel("C4", "just-joined"))  # joined after the listing was taken

    store.leave_channels_except(["C2"], listed_at)

    assert [store.get_channel(c).is_member for c in ("C1", "C2", "C3", "C4")] == [False, True, False, True]


def test_a_listing_older_than_a_leaving_does_not_undo_it(store: SqlConversationStore, clock: ManualClock) -> None:
    store.save_channel(Channel("C1", "general"))
    clock.advance()
    listed_at = clock.now()  # a history sync lists the bot's channels...
    clock.advance()
    store.leave_channel("C1")  # ...the bot is removed meanwhile...
    clock.advance()

    store.save_channel(Channel("C1", "general"), as_of=listed_at)  # ...and the sync stores what it listed

    assert not store.get_channel("C1").is_member


def test_a_channel_kind_changes_in_place(store: SqlConversationStore) -> None:
    store.save_channel(Channel("C1", "plans"))
    store.set_channel_kind("C1", ChannelKind.SHARED)
    store.set_channel_kind("C9", ChannelKind.PRIVATE)  # not stored: nothing happens

    assert store.get_channel("C1") == Channel("C1", "plans", ChannelKind.SHARED)
    assert store.get_channel("C1").is_private
    assert store.get_channel("C9") is None


def test_channels_are_upserted(store: SqlConversationStore) -> None:
    assert store.get_channel("C1") is None

    store.save_channel(Channel("C1", "general"))
    store.save_channel(Channel("D1", "alice", ChannelKind.IM))
    store.save_channel(Channel("C1", "renamed", ChannelKind.PRIVATE))

    assert store.get_channel("C1") == Channel("C1", "renamed", ChannelKind.PRIVATE)
    assert store.get_channel("D1") == Channel("D1", "alice", ChannelKind.IM)


def test_a_dm_with_people_of_another_organisation_is_stored_so(store: SqlConversationStore) -> None:
    store.save_channel(Channel("D1", "alice", ChannelKind.IM, ext_shared=True))
    store.save_channel(Channel("G1", "mpdm-alice--bob", ChannelKind.MPIM, ext_shared=True))
    store.save_channel(Channel("D2", "bob", ChannelKind.IM))

    assert store.get_channel("D1") == Channel("D1", "alice", ChannelKind.IM, ext_shared=True)
    assert [c for c in store.channels() if c.ext_shared] == [
        Channel("D1", "alice", ChannelKind.IM, ext_shared=True),
        Channel("G1", "mpdm-alice--bob", ChannelKind.MPIM, ext_shared=True),
    ]
    assert store.get_channel("D2") == Channel("D2", "bob", ChannelKind.IM)


def test_a_dm_with_people_of_another_organisation_stays_so_when_a_listing_does_not_say_it(
    store: SqlConversationStore, clock: ManualClock
) -> None:
    """Its people never change: a users.conversations item without `is_ext_shared` (Slack lists a DM with few
    fields) clears nothing conversations.info said."""
    store.save_channel(Channel("D1", "alice", ChannelKind.IM, ext_shared=True))
    clock.advance(1)
    store.save_channel(Channel("D1", "Alice", ChannelKind.IM), as_of=clock.now())

    assert store.get_channel("D1") == Channel("D1", "Alice", ChannelKind.IM, ext_shared=True)


def test_people_are_upserted(store: SqlConversationStore) -> None:
    assert store.people() == {}

    store.save_person(Person("U1", "alice"))
    store.save_person(Person("U2", "helper", is_bot=True))
    store.save_person(Person("U1", "Alice"))

    assert store.people() == {"U1": Person("U1", "Alice"), "U2": Person("U2", "helper", True)}


# -- claims ------------------------------------------------------------------


def test_claim_is_first_come(store: SqlConversationStore) -> None:
    assert store.claim("C1", ts(0)) is True
    assert store.claim("C1", ts(0)) is False
    assert store.claim("C2", ts(0)) is True


def run_together(count: int, call) -> list:  # type: ignore[no-untyped-def]
    start = threading.Barrier(count)

    def racer(_: int):  # type: ignore[no-untyped-def]
        start.wait()
        return call()

    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(racer, range(count)))


def test_claim_from_racing_threads_has_one_winner(store: SqlConversationStore) -> None:
    results = run_together(8, lambda: store.claim("C1", ts(0)))
    assert sorted(results) == [False] * 7 + [True]


def test_save_message_from_racing_threads_stores_one_row(store: SqlConversationStore) -> None:
    results = run_together(8, lambda: store.save_message(msg(0)))
    assert sorted(results) == [False] * 7 + [True]
    assert len(store.channel_messages("C1", 10)) == 1


def test_unclaimed_mentions(store: SqlConversationStore) -> None:
    store.save_channel(Channel("C1", "general"))
    store.save_channel(Channel("D1", "alice", ChannelKind.IM))
    store.save_channel(Channel("G1", "group", ChannelKind.MPIM))
    store.save_message(msg(0, "too old", mentions=(BOT,)))
    store.save_message(msg(1, "at the bound", mentions=(BOT,)))
    store.save_message(msg(5, "dm", channel="D1"))
    store.save_message(msg(2, "mention in thread", mentions=("U2", BOT), thread_ts=ts(0)))
    store.save_message(msg(3, "mentions someone else", mentions=("U2",)))
    store.save_message(msg(4, "mentions a prefix", mentions=(BOT + "2",)))
    store.save_message(msg(6, "group without mention", channel="G1"))
    store.save_message(msg(7, "from a bot", mentions=(BOT,), is_bot=True))
    store.save_message(msg(8, "bot in dm", channel="D1", is_bot=True))
    store.save_message(msg(9, "claimed", mentions=(BOT,)))
    store.save_message(msg(10, "unknown channel", channel="C9", mentions=(BOT,)))
    store.claim("C1", ts(9))

    store.save_message(msg(11, "after the bound", mentions=(BOT,)))

    found = store.unclaimed_mentions(BOT, ts_to_datetime(ts(1)), ts_to_datetime(ts(10)))

    assert texts(found) == ["mention in thread", "dm", "unknown channel"]
    assert found[0] == msg(2, "mention in thread", mentions=("U2", BOT), thread_ts=ts(0))

    store.claim("D1", ts(5))
    assert texts(store.unclaimed_mentions(BOT, ts_to_datetime(ts(1)), ts_to_datetime(ts(10)))) == [
        "mention in thread",
        "unknown channel",
    ]


# -- answer progress -------------------------------------------------------------


def test_an_answer_claim_is_due_from_its_retry_time_until_settled(store: SqlConversationStore, engine: Engine) -> None:
    store.save_message(msg(0, "question"))
    early, later = ts_to_datetime(ts(10)), ts_to_datetime(ts(20))
    assert store.claim("C1", ts(0), retry_at=later)

    assert store.due_answers(early, ts_to_datetime(ts(-1))) == []
    [pending] = store.due_answers(later, ts_to_datetime(ts(-1)))
    assert (pending.message.text, pending.attempts) == ("question", 1)
    assert store.due_answers(later, ts_to_datetime(ts(0))) == []  # older than the window

    store.settle("C1", ts(0), ts(1))
    assert store.due_answers(later, ts_to_datetime(ts(-1))) == []
    assert rows(engine, "SELECT attempts, answer_ts FROM claims") == [(1, ts(1))]


def test_an_answer_started_but_never_settled_is_unfinished(store: SqlConversationStore) -> None:
    store.save_message(msg(0, "question"))
    store.claim("C1", ts(0), retry_at=ts_to_datetime(ts(10)))
    assert store.unfinished_answer("C1", ts(0)) == Unfinished(None, showing=False)

    assert store.begin_showing("C1", ts(0))
    assert store.unfinished_answer("C1", ts(0)) == Unfinished(None, showing=True)  # Slack never told its ts
    store.start_answer("C1", ts(0), ts(1))
    assert store.unfinished_answer("C1", ts(0)) == Unfinished(ts(1), showing=True)
    assert store.due_answers(ts_to_datetime(ts(10)), ts_to_datetime(ts(-1)))  # still owed
    assert store.known_answers("C1", [ts(1), ts(2)]) == {ts(1)}

    store.settle("C1", ts(0), ts(1))
    store.start_answer("C1", ts(0), ts(2))  # a settled answer is not moved
    assert not store.begin_showing("C1", ts(0))
    assert store.unfinished_answer("C1", ts(0)) is None
    assert store.unfinished_answer("C9", ts(0)) is None
    assert store.known_answers("C1", [ts(1), ts(2)]) == {ts(1)}
    assert store.known_answers("C9", [ts(1)]) == set() and store.known_answers("C1", []) == set()


def test_an_answer_written_as_inside_the_workspace_does_not_begin_showing_once_its_channel_reads_from_outside(
    store: SqlConversationStore,
) -> None:
    store.save_channel(Channel("C1", "general"))
    store.save_channel(Channel("D1", "alice", ChannelKind.IM))
    for channel, seconds in (("C1", 0), ("D1", 0), ("D1", 1), ("C9", 0)):  # C9: never stored
        store.save_message(msg(seconds, "question", channel))
        store.claim(channel, ts(seconds))
    assert store.begin_showing("D1", ts(0), inside=True)
    assert not store.begin_showing("C9", ts(0), inside=True)
    store.set_channel_kind("C1", ChannelKind.SHARED)
    assert not store.begin_showing("C1", ts(0), inside=True)
    assert store.unfinished_answer("C1", ts(0)) == Unfinished(None, showing=False)
    assert store.begin_showing("C1", ts(0))  # written as read from outside: shown
    store.save_channel(Channel("D1", "alice", ChannelKind.IM, ext_shared=True))
    assert not store.begin_showing("D1", ts(1), inside=True)


def test_answers_showing_with_no_ts_yet_are_found_in_their_thread_only_with_their_holders(
    store: SqlConversationStore,
) -> None:
    store.save_message(msg(0, "question"))
    store.save_message(msg(1, "another", thread_ts=ts(0)))
    store.save_message(msg(2, "a third"))
    for n in (0, 1, 2):
        store.claim("C1", ts(n), holder="r2")
    assert store.showing_unheard_beside("C1", ts(1), ts(0)) == set()  # nothing shows yet

    assert store.begin_showing("C1", ts(0), holder="r2")
    assert store.showing_unheard_beside("C1", ts(1), ts(0)) == {"r2"}
    assert store.showing_unheard_beside("C1", ts(0), ts(0)) == set()  # its own
    assert store.showing_unheard_beside("C1", ts(1), ts(2)) == set()  # another thread
    assert store.showing_unheard_beside("C9", ts(1), ts(0)) == set()
    assert store.showing_unheard_beside("C1", ts(1), None) == {"r2"}  # top-level: the channel's
    store.save_message(msg(3, "one more", thread_ts=ts(0)))
    store.claim("C1", ts(3))  # one process: nobody's
    assert store.begin_showing("C1", ts(3))
    assert store.showing_unheard_beside("C1", ts(1), ts(0)) == {"r2", None}

    store.start_answer("C1", ts(0), ts(5), holder="r2")
    store.start_answer("C1", ts(3), ts(6))
    assert store.showing_unheard_beside("C1", ts(1), ts(0)) == set()  # their ts are known now


def test_the_digest_of_a_start_left_unanswered_is_kept_with_the_unfinished_answer(store: SqlConversationStore) -> None:
    store.save_message(msg(0, "question"))
    store.claim("C1", ts(0), holder="r1")
    assert store.begin_showing("C1", ts(0), holder="r1")
    assert not store.note_unheard_start("C1", ts(0), "d" * 32, holder="r2")  # not r2's
    assert store.unfinished_answer("C1", ts(0)) == Unfinished(None, True, None)

    assert store.note_unheard_start("C1", ts(0), "d" * 32, holder="r1")
    assert store.unfinished_answer("C1", ts(0)) == Unfinished(None, True, "d" * 32)


def test_the_end_a_stream_left_open_lacks_is_kept_with_its_claim_for_that_stream_alone_until_settled(
    store: SqlConversationStore, engine: Engine
) -> None:
    # Kept in the publisher's memory only, it was gone after a restart: the retry ended the stream with the apology.
    for channel in ("C1", "D1"):  # another conversation's message and stream with the same ts
        store.save_message(msg(0, "question", channel=channel))
        store.claim(channel, ts(0), holder="r1")
        store.start_answer(channel, ts(0), ts(1), holder="r1")
    assert not store.keep_ending("C1", ts(0), ts(1), " the rest", holder="r2")  # not r2's
    assert not store.keep_ending("C1", ts(0), ts(2), " the rest", holder="r1")  # not its stream
    assert store.unfinished_answer("C1", ts(0)) == Unfinished(ts(1), False)

    assert store.keep_ending("C1", ts(0), ts(1), " the rest", holder="r1")
    assert store.unfinished_answer("C1", ts(0)) == Unfinished(ts(1), False, ending=" the rest")
    assert store.unfinished_answer("D1", ts(0)) == Unfinished(ts(1), False)  # never another conversation's
    assert store.keep_ending("C1", ts(0), ts(1), " rest", holder="r1")  # what a later try left
    assert store.unfinished_answer("C1", ts(0)) == Unfinished(ts(1), False, ending=" rest")

    assert store.settle("C1", ts(0), ts(1), holder="r1")
    assert not store.keep_ending("C1", ts(0), ts(1), " rest", holder="r1")
    assert rows(engine, "SELECT channel_id, ending FROM claims ORDER BY channel_id") == [("C1", None), ("D1", None)]


def test_the_end_and_tasks_kept_with_an_unsettled_claim_go_with_the_text_of_its_mention(
    store: SqlConversationStore, engine: Engine
) -> None:
    # An answer never settled (its mention older than the catch-up window) kept its words for good, and its tasks'
    # titles, which quote the model's tool arguments.
    for n in (0, 1):
        store.save_message(msg(n, "question"))
        store.claim("C1", ts(n))
        assert store.begin_showing("C1", ts(n))
        assert store.keep_tasks("C1", ts(n), {f"call{n}": f"Reading the memo secret {n}"})
        store.start_answer("C1", ts(n), ts(n + 10))
        assert store.keep_ending("C1", ts(n), ts(n + 10), f" the rest {n}")

    store.expire_messages("C1", [ts(0)])
    assert store.unfinished_answer("C1", ts(0)) == Unfinished(ts(10), True)
    assert store.unfinished_answer("C1", ts(1)) == Unfinished(
        ts(11), True, ending=" the rest 1", tasks={"call1": "Reading the memo secret 1"}
    )


def test_writes_together_are_committed_once_or_not_at_all(store: SqlConversationStore, engine: Engine) -> None:
    store.save_message(msg(0, "question"))
    store.claim("C1", ts(0), holder="A")
    commits: list[object] = []
    event.listen(engine, "commit", commits.append)
    with pytest.raises(RuntimeError), store.writes_together():  # the process dies before the commit
        assert store.save_message(msg(1, "the answer", user_id="UBOT", is_bot=True))
        assert store.settle("C1", ts(0), ts(1), holder="A")
        raise RuntimeError("killed")
    assert commits == []
    assert stored_message(store, "C1", ts(1)) is None and store.unfinished_answer("C1", ts(0)) == Unfinished(None, False)

    with store.writes_together():
        assert store.save_message(msg(1, "the answer", user_id="UBOT", is_bot=True))
        assert not store.settle("C1", ts(0), ts(1), holder="B")  # another replica's: refused, writes nothing
        assert texts(store.channel_messages("C1", 10)) == ["question", "the answer"]  # its own writes, read within
    assert len(commits) == 1
    assert texts(store.channel_messages("C1", 10)) == ["question", "the answer"]  # stored all the same
    assert store.unfinished_answer("C1", ts(0)) == Unfinished(None, False)

    with store.writes_together():
        assert not store.save_message(msg(1, "the answer, complete", user_id="UBOT", is_bot=True))
        assert store.edit_message("C1", ts(1), "the answer, complete")
        assert store.settle("C1", ts(0), ts(1), holder="A")
    assert len(commits) == 2
    assert texts(store.channel_messages("C1", 10)) == ["question", "the answer, complete"]
    assert store.unfinished_answer("C1", ts(0)) is None


def test_a_claim_without_retry_time_is_never_due(store: SqlConversationStore) -> None:
    store.save_message(msg(0, "answered by the autonomous responder"))
    store.claim("C1", ts(0))
    assert store.due_answers(ts_to_datetime(ts(10_000)), ts_to_datetime(ts(-1))) == []


def test_next_attempt_is_taken_once_and_moves_the_retry_time(store: SqlConversationStore) -> None:
    store.save_message(msg(0))
    store.claim("C1", ts(0), retry_at=ts_to_datetime(ts(10)))
    results = run_together(6, lambda: store.next_attempt("C1", ts(0), 1, ts_to_datetime(ts(40))))
    assert sorted(results) == [False] * 5 + [True]
    assert store.due_answers(ts_to_datetime(ts(39)), ts_to_datetime(ts(-1))) == []
    [pending] = store.due_answers(ts_to_datetime(ts(40)), ts_to_datetime(ts(-1)))
    assert pending.attempts == 2
    store.settle("C1", ts(0), ts(41))
    assert store.next_attempt("C1", ts(0), 2, ts_to_datetime(ts(90))) is False


def test_the_next_due_answer_is_the_earliest_unsettled_one_after_now(store: SqlConversationStore) -> None:
    since = ts_to_datetime(ts(-1))
    assert store.next_due(ts_to_datetime(ts(0)), since) is None
    for i, due in ((0, 30), (1, 20), (2, 40), (3, 5)):
        store.save_message(msg(i))
        store.claim("C1", ts(i), retry_at=ts_to_datetime(ts(due)))
    store.save_message(msg(4))
    store.claim("C1", ts(4))  # no retry time: never due
    store.settle("C1", ts(1), ts(9))

    assert store.next_due(ts_to_datetime(ts(10)), since) == ts_to_datetime(ts(30))  # 5 is past, 20 settled
    assert store.next_due(ts_to_datetime(ts(30)), since) == ts_to_datetime(ts(40))
    assert store.next_due(ts_to_datetime(ts(10)), ts_to_datetime(ts(0))) == ts_to_datetime(ts(40))  # window
    assert store.next_due(ts_to_datetime(ts(40)), since) is None


def test_a_released_attempt_is_due_at_once_and_not_counted(store: SqlConversationStore) -> None:
    store.save_message(msg(0))
    store.claim("C1", ts(0), retry_at=ts_to_datetime(ts(100)))
    store.release("C1", ts(0), ts_to_datetime(ts(5)))
    [pending] = store.due_answers(ts_to_datetime(ts(5)), ts_to_datetime(ts(-1)))
    assert pending.attempts == 0


# -- the bot's identity ------------------------------------------------------


def test_the_bot_identity_is_kept_for_what_runs_without_slack(store: SqlConversationStore) -> None:
    assert store.identity() is None
    store.save_identity(BotIdentity(BOT, "B1", "T1"))
    store.save_identity(BotIdentity("UBOT2", None, "T1"))  # a new app: the latest connection counts
    assert store.identity() == BotIdentity("UBOT2", None, "T1")


def test_reads_and_writes_over_one_connection_take_one_from_the_pool_and_each_write_commits_as_it_ends(
    store: SqlConversationStore, engine: Engine
) -> None:
    store.save_channel(Channel("C1", "general"))
    other = create_engine(engine.url)
    try:
        reads_and_writes_over_one_connection(store, engine, SqlConversationStore(other))
    finally:
        other.dispose()


def reads_and_writes_over_one_connection(store: SqlConversationStore, engine: Engine, elsewhere: SqlConversationStore) -> None:
    """The test above, `elsewhere` another process's view of the database."""
    checkouts: list[object] = []
    event.listen(engine, "checkout", lambda *_: checkouts.append(None))
    with store.one_connection():
        assert store.get_channel("C1") == Channel("C1", "general")  # a read first: its transaction ends
        assert store.save_message(msg(0, "question"))
        assert stored_message(elsewhere, "C1", ts(0)) is not None  # committed as its write ended
        assert store.claim("C1", ts(0), holder="A")
        with pytest.raises(RuntimeError), store.writes_together():
            assert store.save_message(msg(1, "the answer", user_id="UBOT", is_bot=True))
            assert store.settle("C1", ts(0), ts(1), holder="A")
            raise RuntimeError("killed")
        assert store.unfinished_answer("C1", ts(0)) == Unfinished(None, False)  # rolled back, the rest kept
        with store.writes_together():
            assert store.save_message(msg(1, "the answer", user_id="UBOT", is_bot=True))
            assert store.settle("C1", ts(0), ts(1), holder="A")
        assert elsewhere.unfinished_answer("C1", ts(0)) is None
    assert len(checkouts) == 1
    assert texts(elsewhere.channel_messages("C1", 10)) == ["question", "the answer"]


def test_replied_threads_are_those_with_a_reply_posted_since_the_latest_replied_first(
    store: SqlConversationStore,
) -> None:
    store.save_message(msg(0, "parent", thread_ts=ts(0)))
    store.save_message(msg(1, "a reply long ago", thread_ts=ts(0)))
    store.save_message(msg(2, "a parent replied to since", thread_ts=ts(2)))
    store.save_message(msg(3, "its old reply", thread_ts=ts(2)))
    store.save_message(msg(4, "another parent, quiet since"))
    store.save_message(msg(5, "an old reply", thread_ts=ts(4)))
    store.save_message(msg(10, "top, since"))
    store.save_message(msg(11, "a parent posted since", thread_ts=ts(11)))
    store.save_message(msg(12, "a reply since", thread_ts=ts(2)))
    store.save_message(msg(13, "a reply since", thread_ts=ts(0)))
    store.save_message(msg(14, "a reply since elsewhere", channel="C2", thread_ts=ts(4)))

    assert store.replied_threads(ts_to_datetime(ts(9))) == [("C2", ts(4)), ("C1", ts(0)), ("C1", ts(2))]


def test_a_history_of_one_thread_is_reconciled_against_that_threads_stored_replies_alone(
    store: SqlConversationStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A read of one thread tells nothing of the rest of its channel: the rest is neither read nor (on PostgreSQL)
    # held while it is reconciled, however many messages the channel had in the span.
    store.save_message(msg(10, "top, since"))
    store.save_message(msg(11, "another thread's reply", thread_ts=ts(5)))
    store.save_message(msg(12, "a reply", thread_ts=ts(0)))
    store.save_message(msg(13, "a reply deleted", thread_ts=ts(0)))
    considered: list[str] = []
    deleted = History.deleted

    def recording(history: History, stored, fetched_at: datetime) -> list[Message]:  # type: ignore[no-untyped-def]
        stored = list(stored)
        considered.extend(m.ts for m in stored)
        return deleted(history, stored, fetched_at)

    monkeypatch.setattr(History, "deleted", recording)
    fetched = History("C1", [msg(12, "a reply, edited", thread_ts=ts(0))], ts(9), frozenset({ts(0)}), top_level=False)

    store.reconcile(fetched, ts_to_datetime(ts(20)))

    assert sorted(considered) == [ts(12), ts(13)]
    assert texts(store.thread_messages("C1", ts(0), 10)) == ["a reply, edited"]
    assert texts(store.channel_messages("C1", 10)) == ["top, since"]
    assert stored_message(store, "C1", ts(11)) is not None
