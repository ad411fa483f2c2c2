"""Memo rules per audience: who may change a memo, how names resolve, and racing writers."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import text

from myao2.domain.memo import MemoChanges, MemoDraft, MemoError, Origin
from myao2.domain.visibility import WORKSPACE, Audience, Reader
from myao2.infrastructure.db.engine import open_database
from myao2.infrastructure.db.memo_store import SqlMemoStore
from tests.memo_log import assert_log_replays

PUBLIC = Origin("C1", channel_private=False, user_id="U1", message_ts="1.1")
OTHER_PUBLIC = Origin("C2", channel_private=False, user_id="U2", message_ts="2.2")
DM = Origin("D1", channel_private=True, user_id="U3", message_ts="3.3")
PRIVATE_CHANNEL = Origin("G1", channel_private=True, user_id="U4", message_ts="4.4")
GROUP_DM = Origin("G2", channel_private=True, user_id="U5", message_ts="5.5")
PRIVATE_ONES = [DM, PRIVATE_CHANNEL, GROUP_DM]

EVERY_FIELD = [
    {"content": "the secret said in private"},
    {"detail": "the secret said in private"},
    {"tags": ["the secret said in private"[:32]]},
    {"new_name": "secret-said-in-private"},
    {"priority": 1},
]


class Clock:
    """One second further on at every reading; `on_read` runs before a reading."""

    def __init__(self) -> None:
        self.current = datetime(2026, 1, 2, 3, 4, tzinfo=timezone.utc)
        self.on_read: Callable[[], None] | None = None

    def now(self) -> datetime:
        if self.on_read is not None:
            hook, self.on_read = self.on_read, None
            hook()
        self.current += timedelta(seconds=1)
        return self.current


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(database_url: str, clock: Clock) -> SqlMemoStore:
    return SqlMemoStore(open_database(database_url), clock)


def add(store: SqlMemoStore, name: str, origin: Origin, content: str = "c", tags: tuple[str, ...] = ()) -> None:
    store.add(MemoDraft.create(name, content, 3, list(tags)), origin, "test")


def dump(database_url: str) -> list[tuple[Any, ...]]:
    engine = open_database(database_url)
    with engine.connect() as plain:
        rows = [
            tuple(row)
            for table in ("memos", "memo_revisions")
            for row in plain.execute(text(f"SELECT * FROM {table} ORDER BY id"))
        ]
    engine.dispose()
    return rows


def refused(code: str) -> Any:
    return pytest.raises(MemoError, match=rf"^{code}\b")


class TestWhoMayChange:
    @pytest.mark.parametrize("origin", PRIVATE_ONES, ids=["dm", "private-channel", "group-dm"])
    @pytest.mark.parametrize("change", EVERY_FIELD, ids=lambda c: next(iter(c)))
    def test_a_private_conversation_cannot_edit_a_workspace_memo(
        self, store: SqlMemoStore, database_url: str, origin: Origin, change: dict[str, Any]
    ) -> None:
        add(store, "team-lunch", PUBLIC, "lunch on fridays", ("food",))
        before = dump(database_url)
        with refused("wider_audience"):
            store.edit("team-lunch", MemoChanges.create(**change), origin, "test")
        assert dump(database_url) == before

    def test_a_public_channel_edits_a_workspace_memo(self, store: SqlMemoStore) -> None:
        add(store, "team-lunch", PUBLIC)
        assert store.edit("team-lunch", MemoChanges.create(content="new"), OTHER_PUBLIC, "t").content == "new"

    def test_a_private_conversation_edits_its_own_memo(self, store: SqlMemoStore) -> None:
        add(store, "mine", DM)
        assert store.edit("mine", MemoChanges.create(detail="more"), DM, "t").detail == "more"

    def test_a_person_edits_any_memo(self, store: SqlMemoStore) -> None:
        add(store, "mine", DM)
        add(store, "team-lunch", PUBLIC)
        store.edit("mine", MemoChanges.create(priority=5), None, "t")
        store.edit("team-lunch", MemoChanges.create(priority=5), None, "t")

    @pytest.mark.parametrize("origin", PRIVATE_ONES, ids=["dm", "private-channel", "group-dm"])
    def test_a_private_conversation_cannot_remove_a_workspace_memo(
        self, store: SqlMemoStore, database_url: str, origin: Origin
    ) -> None:
        # its disappearing from every channel would carry what was said there to them all
        add(store, "team-lunch", PUBLIC, "lunch on fridays")
        before = dump(database_url)
        with refused("wider_audience"):
            store.remove("team-lunch", origin, "test")
        assert dump(database_url) == before

    def test_a_public_channel_and_a_conversation_of_its_own_memo_remove_it_reversibly(self, store: SqlMemoStore) -> None:
        add(store, "team-lunch", PUBLIC, "lunch on fridays")
        add(store, "mine", DM)
        store.remove("team-lunch", OTHER_PUBLIC, "t")
        store.remove("mine", DM, "t")
        with refused("unknown_name"):
            store.get("team-lunch", Reader("C1"))
        restored = store.restore("team-lunch", "cli")
        assert restored.content == "lunch on fridays" and store.get("team-lunch", Reader("C2")).id == restored.id
        assert_log_replays(store)


class TestNamesPerAudience:
    def test_a_public_channel_may_take_a_name_only_a_dm_uses(self, store: SqlMemoStore) -> None:
        add(store, "surprise", DM, "the party is on friday")
        add(store, "surprise", PUBLIC, "we like surprises")
        assert store.get("surprise", Reader("C1")).content == "we like surprises"
        assert store.get("surprise", Reader("C2")).content == "we like surprises"
        # in the DM the name means the DM's own memo, and is listed once
        assert store.get("surprise", Reader("D1")).content == "the party is on friday"
        assert [m.content for m in store.list(Reader("D1")).memos] == ["the party is on friday"]
        assert [m.content for m in store.for_prompt(Reader("D1"), min_priority=1, important=0, recent=10)[2]] == [
            "the party is on friday"
        ]
        assert [m.content for m in store.list(Reader("C1")).memos] == ["we like surprises"]

    def test_a_dm_cannot_take_a_name_it_already_sees(self, store: SqlMemoStore) -> None:
        add(store, "team-lunch", PUBLIC)
        with refused("name_taken"):
            add(store, "team-lunch", DM)

    def test_renaming_onto_a_name_only_a_dm_uses_is_fine(self, store: SqlMemoStore) -> None:
        add(store, "surprise", DM)
        add(store, "plans", PUBLIC)
        store.edit("plans", MemoChanges.create(new_name="surprise"), PUBLIC, "t")
        assert store.get("surprise", Reader("C1")).channel_id == "C1"
        assert store.get("surprise", Reader("D1")).channel_id == "D1"

    def test_the_own_memo_is_the_one_edited_and_removed(self, store: SqlMemoStore) -> None:
        add(store, "surprise", DM, "dm")
        add(store, "surprise", PUBLIC, "public")
        store.edit("surprise", MemoChanges.create(content="dm, edited"), DM, "t")
        store.remove("surprise", DM, "t")
        assert store.get("surprise", Reader("C1")).content == "public"
        assert store.get("surprise", Reader("D1")).content == "public"
        assert_log_replays(store)

    def test_a_person_names_the_audience_when_two_memos_share_a_name(self, store: SqlMemoStore) -> None:
        add(store, "surprise", DM, "dm")
        add(store, "surprise", PUBLIC, "public")
        with refused("ambiguous_name") as caught:
            store.get("surprise", None)
        assert caught.value.params["audiences"] == "D1, workspace"
        assert store.get("surprise", None, audience=WORKSPACE).content == "public"
        assert store.get("surprise", None, audience=Audience("D1")).content == "dm"
        assert {r.after["content"] for r in store.history("surprise", audience=Audience("D1"))} == {"dm"}

    def test_a_person_restores_by_audience(self, store: SqlMemoStore) -> None:
        add(store, "surprise", DM, "dm")
        add(store, "surprise", PUBLIC, "public")
        store.remove("surprise", DM, "t")
        store.remove("surprise", PUBLIC, "t")
        with refused("ambiguous_name"):
            store.restore("surprise", "cli")
        assert store.restore("surprise", "cli", audience=Audience("D1")).content == "dm"
        # the workspace memo may come back: in the DM the name still means the DM's memo
        assert store.restore("surprise", "cli", audience=WORKSPACE).content == "public"
        assert store.get("surprise", Reader("D1")).content == "dm"

    def test_a_restore_from_a_conversation_resolves_like_its_reads(self, store: SqlMemoStore) -> None:
        add(store, "secret", DM)
        store.remove("secret", DM, "t")
        with refused("not_removed"):
            store.restore("secret", "t", origin=PUBLIC)
        assert store.restore("secret", "t", origin=DM).channel_id == "D1"

    @pytest.mark.parametrize("private", PRIVATE_ONES)
    def test_a_restore_from_a_conversation_of_a_memo_kept_more_widely_is_refused(
        self, store: SqlMemoStore, private: Origin
    ) -> None:
        add(store, "lunch", PUBLIC)
        store.remove("lunch", PUBLIC, "t")
        with refused("wider_audience"):  # its coming back in every channel would tell what was said here
            store.restore("lunch", "t", origin=private)
        assert store.list(Reader("C1"), removed=True).total == 1 and len(store.history("lunch")) == 2
        assert store.restore("lunch", "t", origin=OTHER_PUBLIC).channel_id == "C1"  # a public channel writes for all


class TestRacingWriters:
    """Two stores on one file stand for two processes (the bot and the CLI)."""

    def test_an_edit_that_lost_the_race_is_refused_and_the_log_still_replays(
        self, store: SqlMemoStore, database_url: str, clock: Clock
    ) -> None:
        add(store, "tanaka", PUBLIC, "likes tea")
        other = SqlMemoStore(open_database(database_url), Clock())
        # the edit has read the memo when it reads the clock; the other process writes then
        clock.on_read = lambda: other.edit("tanaka", MemoChanges.create(content="likes coffee"), None, "cli")
        with refused("changed_meanwhile") as caught:
            store.edit("tanaka", MemoChanges.create(priority=5), PUBLIC, "tool:edit_memo")
        assert caught.value.params["name"] == "tanaka"
        memo = store.get("tanaka", None)
        assert (memo.content, memo.priority, memo.revision) == ("likes coffee", 3, 2)
        assert_log_replays(store)

    def test_a_removal_that_lost_the_race_is_refused(self, store: SqlMemoStore, database_url: str, clock: Clock) -> None:
        add(store, "tanaka", PUBLIC)
        other = SqlMemoStore(open_database(database_url), Clock())
        clock.on_read = lambda: other.edit("tanaka", MemoChanges.create(priority=1), None, "cli")
        with refused("changed_meanwhile"):
            store.remove("tanaka", PUBLIC, "tool:remove_memo")
        assert not store.get("tanaka", None).removed
        assert_log_replays(store)
