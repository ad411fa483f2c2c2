"""SqlAutonomyStore against a real database (an SQLite file, and PostgreSQL): which conversations have something
new since their last judgment, how lively a channel is, and the bot's unasked posts."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import Connection, Engine, insert, select, text

from myao2.domain.activity import ReplyKind
from myao2.domain.conversation import History, Message, ts_to_datetime
from myao2.domain.judgment import ConversationKey
from myao2.infrastructure.db.activity_store import SqlActivityLog
from myao2.infrastructure.db.autonomy_store import SqlAutonomyStore
from myao2.infrastructure.db.conversation_store import SqlConversationStore
from myao2.infrastructure.db.tables import StandingJudgmentRow

T0 = 1_700_000_000
SINCE = ts_to_datetime(f"{T0}.000000")
NOW = SINCE + timedelta(hours=1)
TOP = ConversationKey("C1", None)
STANDING = StandingJudgmentRow.__table__  # type: ignore[attr-defined]


def ts(seconds: int) -> str:
    return f"{T0 + seconds}.000000"


@pytest.fixture
def stores(engine: Engine) -> tuple[SqlConversationStore, SqlAutonomyStore]:
    return SqlConversationStore(engine), SqlAutonomyStore(engine)


def say(
    conversations: SqlConversationStore, seconds: int, channel: str = "C1", thread: int | None = None, user: str = "U1"
) -> str:
    conversations.save_message(said(seconds, channel, thread, user))
    return ts(seconds)


def said(seconds: int, channel: str = "C1", thread: int | None = None, user: str = "U1") -> Message:
    """The message `say` stores, as a judgment reads it."""
    thread_ts = None if thread is None else ts(thread)
    return Message(channel, ts(seconds), user, f"said at {seconds}", user, thread_ts=thread_ts)


def newest(autonomy: SqlAutonomyStore, channels: tuple[str, ...] = ("C1", "C2")) -> list[tuple[str, str | None, str]]:
    return [(m.channel_id, m.thread_ts, m.ts) for m in autonomy.unjudged(channels, SINCE, NOW)]


def test_the_newest_message_of_each_conversation_in_the_window(
    stores: tuple[SqlConversationStore, SqlAutonomyStore],
) -> None:
    conversations, autonomy = stores
    say(conversations, -10)  # before the window
    say(conversations, 10)
    say(conversations, 20, thread=10)
    say(conversations, 30, thread=10)
    say(conversations, 40)
    say(conversations, -20, channel="C2")
    say(conversations, 50, channel="C3")  # not asked about
    assert newest(autonomy) == [("C1", ts(10), ts(30)), ("C1", None, ts(40))]


def test_a_top_level_flow_whose_newest_started_a_thread_is_answered_there(
    stores: tuple[SqlConversationStore, SqlAutonomyStore],
) -> None:
    conversations, autonomy = stores
    say(conversations, 10)
    say(conversations, 20, thread=10)
    assert newest(autonomy) == [("C1", ts(10), ts(20))]


# Each layout: the messages said (seconds, thread, user), those deleted, and the newest of each conversation.
LAYOUTS: dict[str, tuple[list[tuple[int, int | None, str]], list[int], dict[ConversationKey, int]]] = {
    "a lone question": ([(10, None, "U1")], [], {TOP: 10}),
    "a question answered in its thread": ([(10, None, "U1"), (20, 10, "U2")], [], {ConversationKey("C1", ts(10)): 20}),
    "a top-level message that started a thread the bot answered": (
        [(10, None, "U1"), (20, 10, "UBOT")],
        [],
        {ConversationKey("C1", ts(10)): 20},
    ),
    "a thread reply to an older message after a new top-level one": (
        [(10, None, "U1"), (20, None, "U2"), (30, 10, "U2")],
        [],
        {TOP: 20, ConversationKey("C1", ts(10)): 30},
    ),
    "the newest deleted": ([(10, None, "U1"), (20, None, "U2")], [20], {TOP: 10}),
    "the only reply of a thread deleted": ([(10, None, "U1"), (20, 10, "U2")], [20], {TOP: 10}),
}


@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=list(LAYOUTS))
def test_the_newest_of_a_conversation_is_the_one_unjudged_tells(
    stores: tuple[SqlConversationStore, SqlAutonomyStore],
    layout: tuple[list[tuple[int, int | None, str]], list[int], dict[ConversationKey, int]],
) -> None:
    # The check finds a conversation's newest message by `unjudged`, and the bot, before posting its reply,
    # makes sure by `is_newest` that it still is: both must tell the same.
    conversations, autonomy = stores
    said, deleted, expected = layout
    for seconds, thread, user in said:
        say(conversations, seconds, thread=thread, user=user)
    for seconds in deleted:
        conversations.delete_message("C1", ts(seconds))
    keys = {TOP, ConversationKey("C1", ts(10)), ConversationKey("C1", ts(20)), ConversationKey("C2", None)}
    told = {ConversationKey(m.channel_id, m.thread_ts): m.ts for m in autonomy.unjudged(["C1", "C2"], SINCE, NOW)}
    assert told == {key: ts(seconds) for key, seconds in expected.items()}
    asked = [(key, ts(seconds)) for key in keys for seconds, _, _ in said]
    assert {(key, at): autonomy.is_newest(key, at) for key, at in asked} == {(key, at): told.get(key) == at for key, at in asked}


def test_a_standing_judgment_hides_its_conversation_until_a_new_message_or_its_end(
    stores: tuple[SqlConversationStore, SqlAutonomyStore],
) -> None:
    conversations, autonomy = stores
    say(conversations, 10)
    autonomy.stand(TOP, said(10), NOW + timedelta(seconds=1), NOW)
    assert newest(autonomy) == []
    assert [m.ts for m in autonomy.unjudged(["C1"], SINCE, NOW + timedelta(seconds=1))] == [ts(10)], "it ended"

    say(conversations, 20)
    assert newest(autonomy) == [("C1", None, ts(20))]
    autonomy.stand(TOP, said(20), NOW + timedelta(hours=1), NOW)
    assert newest(autonomy) == []
    autonomy.drop(TOP)
    assert newest(autonomy) == [("C1", None, ts(20))]


@pytest.mark.parametrize(
    ("edited", "text", "stands"),
    [
        (20, "said better at 20", False),
        (20, "said at 20", True),  # Slack reports a link preview added as an edit of the same text
        (10, "said better at 10", True),  # an older message: the judgment was made on a newer one
    ],
)
def test_an_edit_of_the_text_a_judgment_was_made_on_has_it_judged_afresh(
    stores: tuple[SqlConversationStore, SqlAutonomyStore], edited: int, text: str, stands: bool
) -> None:
    conversations, autonomy = stores
    say(conversations, 10)
    say(conversations, 20)
    autonomy.stand(TOP, said(20), NOW + timedelta(hours=12), NOW)
    assert conversations.edit_message("C1", ts(edited), text)
    assert newest(autonomy) == ([] if stands else [("C1", None, ts(20))])


@pytest.mark.parametrize("meanwhile", ["edited", "deleted"])
def test_a_judgment_of_a_message_edited_or_deleted_while_it_was_judged_does_not_stand(
    stores: tuple[SqlConversationStore, SqlAutonomyStore], meanwhile: str
) -> None:
    conversations, autonomy = stores
    say(conversations, 10)
    if meanwhile == "edited":
        assert conversations.edit_message("C1", ts(10), "said better at 10")
    else:
        conversations.delete_message("C1", ts(10))
    assert not autonomy.stand(TOP, said(10), NOW + timedelta(hours=12), NOW)
    assert newest(autonomy) == ([("C1", None, ts(10))] if meanwhile == "edited" else [])
    assert autonomy.stand(TOP, replace(said(10), text="said better at 10"), NOW + timedelta(hours=12), NOW) == (
        meanwhile == "edited"
    )
    assert newest(autonomy) == []


def test_an_edit_a_history_fetch_finds_has_the_judgment_made_on_the_old_text_judged_afresh(
    stores: tuple[SqlConversationStore, SqlAutonomyStore],
) -> None:
    conversations, autonomy = stores
    say(conversations, 10)
    autonomy.stand(TOP, said(10), NOW + timedelta(hours=12), NOW)
    fetched = Message("C1", ts(10), "U1", "said better at 10", "U1")  # edited while the bot was away
    conversations.reconcile(History("C1", [fetched], complete_after=ts(0), threads=frozenset()), NOW)
    assert newest(autonomy) == [("C1", None, ts(10))]


def test_judgments_no_longer_standing_are_forgotten(
    stores: tuple[SqlConversationStore, SqlAutonomyStore], engine: Engine
) -> None:
    conversations, autonomy = stores
    for seconds, channel in ((1, "C1"), (2, "C2"), (3, "C3")):
        say(conversations, seconds, channel)
    autonomy.stand(ConversationKey("C1", ts(1)), said(1, "C1"), NOW, NOW - timedelta(seconds=1))
    autonomy.stand(ConversationKey("C2", None), said(2, "C2"), NOW + timedelta(hours=1), NOW)
    autonomy.stand(ConversationKey("C3", None), said(3, "C3"), NOW, NOW)  # holds for no time (judgment skip off)
    with engine.connect() as connection:
        kept = connection.exec_driver_sql("SELECT channel_id, thread_ts FROM standing_judgments").all()
    assert [tuple(row) for row in kept] == [("C2", "")]


def stand_blocked_by(engine: Engine, other: Connection, stand: Callable[[], bool], what: str) -> bool:
    """Run `stand` while `other` (PostgreSQL) holds its uncommitted change: it must wait on it; then commit it,
    and return what `stand` returned."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as watcher:
        holder = other.execute(text("SELECT pg_backend_pid()")).scalar()
        with ThreadPoolExecutor(max_workers=1) as pool:
            standing = pool.submit(stand)
            waiting = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND :holder = ANY(pg_blocking_pids(pid))"
            deadline = time.monotonic() + 30
            while not watcher.execute(text(waiting), {"holder": holder}).scalar():
                assert not standing.done() and time.monotonic() < deadline, f"stand did not wait on {what}"
                time.sleep(0.01)
            other.commit()
            return standing.result(timeout=30)


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_a_judgment_stood_while_another_replica_stands_one_on_the_same_conversation_replaces_it(
    engine: Engine, stores: tuple[SqlConversationStore, SqlAutonomyStore]
) -> None:
    # Two replicas may judge one conversation at once (a lease holder stalled past its lease): the second to
    # stand waits on the first's uncommitted row, then must replace it, not fail on its key.
    conversations, autonomy = stores
    say(conversations, 20)
    first, second = NOW + timedelta(hours=1), NOW + timedelta(hours=2)
    with engine.connect() as other:
        other.execute(insert(STANDING).values(channel_id="C1", thread_ts="", newest_ts=ts(10), until=first))
        stand_blocked_by(engine, other, lambda: autonomy.stand(TOP, said(20), second, NOW), "the other's row")
    with engine.connect() as connection:
        rows = connection.execute(select(STANDING)).all()
    assert [tuple(row) for row in rows] == [("C1", "", ts(20), second)]


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_a_judgment_stood_while_its_message_is_being_edited_waits_for_the_edit_and_does_not_stand(
    engine: Engine, stores: tuple[SqlConversationStore, SqlAutonomyStore]
) -> None:
    # The edit's transaction writes the new text, then drops what stands on the old; a judgment of the old text
    # stood between the two (read committed: its statement would not see the edit) would outlive the edit.
    conversations, autonomy = stores
    say(conversations, 10)
    with engine.connect() as other:
        other.execute(text("UPDATE messages SET text = 'said better at 10' WHERE ts = :ts"), {"ts": ts(10)})
        stood = stand_blocked_by(engine, other, lambda: autonomy.stand(TOP, said(10), NOW + timedelta(hours=12), NOW), "the edit")
    assert stood is False
    assert newest(autonomy) == [("C1", None, ts(10))]


def test_messages_counted_per_channel_since(stores: tuple[SqlConversationStore, SqlAutonomyStore]) -> None:
    conversations, autonomy = stores
    for seconds in (-5, 5, 6, 7):
        say(conversations, seconds)
    say(conversations, 8, channel="C2")
    assert autonomy.counts_since(["C1", "C2", "C3"], SINCE) == {"C1": 3, "C2": 1}
    assert autonomy.counts_since([], SINCE) == {}


def test_unasked_posts_per_channel_oldest_first(engine: Engine) -> None:
    log, autonomy = SqlActivityLog(engine), SqlAutonomyStore(engine)
    at = datetime(2026, 1, 2, 12, 0, tzinfo=timezone.utc)
    log.reply("C1", ReplyKind.UNASKED, at + timedelta(minutes=2))
    log.reply("C1", ReplyKind.UNASKED, at + timedelta(minutes=1))
    log.reply("C1", ReplyKind.ANSWER, at + timedelta(minutes=3))
    log.reply("C2", ReplyKind.UNASKED, at - timedelta(minutes=1))
    assert autonomy.unasked_posts(at) == {"C1": [at + timedelta(minutes=1), at + timedelta(minutes=2)]}
