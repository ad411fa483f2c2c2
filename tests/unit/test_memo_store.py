"""SqlMemoStore against a real database: an SQLite file, and PostgreSQL."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlmodel import Session, select

from myao2.domain.memo import (
    Action,
    Memo,
    MemoChanges,
    MemoDraft,
    MemoError,
    Origin,
    Visibility,
)
from myao2.domain.visibility import Reader
from myao2.infrastructure.db.engine import open_database
from myao2.infrastructure.db.memo_store import SqlMemoStore
from myao2.infrastructure.db.tables import MemoRow

START = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
PUBLIC = Origin("C1", channel_private=False, user_id="U1", message_ts="1.1")
PRIVATE = Origin("D1", channel_private=True, user_id="U2", message_ts="2.2")
ELSEWHERE = Origin("C2", channel_private=False, user_id="U3", message_ts="3.3")


class StepClock:
    """A clock one second further on at every reading; `on_read` runs before a reading."""

    def __init__(self) -> None:
        self.current = START
        self.on_read: Callable[[], None] | None = None

    def now(self) -> datetime:
        if self.on_read is not None:
            self.on_read()
        self.current += timedelta(seconds=1)
        return self.current


@pytest.fixture
def db_path(engine: Engine) -> Path:
    """The SQLite file (tests of the file itself run on SQLite only)."""
    if engine.dialect.name != "sqlite":
        pytest.skip("about SQLite's file")
    return Path(str(engine.url.database))


@pytest.fixture
def clock() -> StepClock:
    return StepClock()


@pytest.fixture
def store(engine: Engine, clock: StepClock) -> SqlMemoStore:
    return SqlMemoStore(engine, clock)


def add(
    store: SqlMemoStore,
    name: str,
    *,
    priority: int = 3,
    tags: tuple[str, ...] = (),
    origin: Origin = PUBLIC,
    content: str = "something to remember",
) -> Memo:
    return store.add(MemoDraft.create(name, content, priority, list(tags)), origin, "test")


def names(memos: list[Memo]) -> list[str]:
    return [m.name for m in memos]


def refused(code: str) -> pytest.RaisesExc[MemoError]:
    return pytest.raises(MemoError, match=rf"^{code}\b")


class TestChanges:
    def test_add_keeps_every_field_and_the_origin(self, store: SqlMemoStore) -> None:
        draft = MemoDraft.create("tanaka", "likes coffee", 4, ["田中", "好み"], "black, no sugar")
        memo = store.add(draft, PUBLIC, "tool:add_memo")
        assert memo == store.get("tanaka", None)
        assert (memo.content, memo.priority, memo.tags, memo.detail) == (
            "likes coffee",
            4,
            ("田中", "好み"),
            "black, no sugar",
        )
        assert (memo.user_id, memo.channel_id, memo.message_ts) == ("U1", "C1", "1.1")
        assert memo.visibility is Visibility.WORKSPACE
        assert memo.created_at == memo.updated_at and memo.created_at.tzinfo is not None

    def test_edit_changes_only_what_is_given(self, store: SqlMemoStore) -> None:
        before = add(store, "tanaka", priority=2, tags=("a",))
        after = store.edit("tanaka", MemoChanges.create(priority=5), PUBLIC, "test")
        assert after.priority == 5
        assert (after.content, after.tags, after.created_at) == (
            before.content,
            before.tags,
            before.created_at,
        )
        assert after.updated_at > before.updated_at
        assert store.get("tanaka", None) == after

    def test_edit_can_rename(self, store: SqlMemoStore) -> None:
        add(store, "old")
        store.edit("old", MemoChanges.create(new_name="new"), None, "test")
        assert store.get("new", None).name == "new"
        with refused("unknown_name"):
            store.get("old", None)

    def test_remove_hides_and_restore_brings_back(self, store: SqlMemoStore) -> None:
        add(store, "tanaka")
        removed = store.remove("tanaka", None, "test")
        assert removed.removed
        with refused("unknown_name"):
            store.get("tanaka", None)
        assert store.list(None).total == 0
        assert names(store.list(None, removed=True).memos) == ["tanaka"]
        restored = store.restore("tanaka", "test")
        assert not restored.removed and store.get("tanaka", None).id == removed.id
        assert store.list(None, removed=True).total == 0

    def test_unknown_names_are_refused(self, store: SqlMemoStore) -> None:
        for change in (
            lambda: store.edit("nope", MemoChanges.create(priority=1), None, "test"),
            lambda: store.remove("nope", None, "test"),
            lambda: store.get("nope", None),
        ):
            with refused("unknown_name"):
                change()
        with refused("not_removed"):
            store.restore("nope", "test")


class TestNames:
    def test_live_names_are_unique(self, store: SqlMemoStore) -> None:
        add(store, "tanaka")
        with refused("name_taken"):
            add(store, "tanaka")

    def test_renaming_onto_a_live_name_is_refused(self, store: SqlMemoStore) -> None:
        add(store, "a")
        add(store, "b")
        with refused("name_taken"):
            store.edit("a", MemoChanges.create(new_name="b"), None, "test")
        store.edit("a", MemoChanges.create(new_name="a", priority=1), None, "test")

    def test_a_removed_name_can_be_reused(self, store: SqlMemoStore) -> None:
        first = add(store, "tanaka", content="first")
        store.remove("tanaka", None, "test")
        second = add(store, "tanaka", content="second")
        assert second.id != first.id
        assert store.get("tanaka", None).content == "second"

    def test_restore_is_refused_while_the_name_is_live(self, store: SqlMemoStore) -> None:
        add(store, "tanaka")
        store.remove("tanaka", None, "test")
        add(store, "tanaka")
        with refused("name_taken"):
            store.restore("tanaka", "test")

    def test_a_name_taken_meanwhile_by_another_process_is_refused_cleanly(
        self, store: SqlMemoStore, clock: StepClock, engine: Engine
    ) -> None:
        add(store, "tanaka")
        store.remove("tanaka", None, "test")

        def other_process_adds_tanaka() -> None:
            clock.on_read = None
            other = create_engine(engine.url)
            with other.begin() as connection:
                connection.execute(
                    text(
                        "INSERT INTO memos (name, content, priority, tags, visibility, created_at,"
                        " updated_at) VALUES ('tanaka', 'c', 1, '[]', 'workspace', 'x', 'x')"
                    )
                )
            other.dispose()

        # restore has checked the name when it reads the clock, then writes
        clock.on_read = other_process_adds_tanaka
        with refused("name_taken"):
            store.restore("tanaka", "test")
        assert store.list(None, removed=True).total == 1

    def test_a_memo_pinned_meanwhile_by_another_process_is_pinned_once(
        self, store: SqlMemoStore, clock: StepClock, database_url: str
    ) -> None:
        add(store, "rule")

        def other_process_pins_it() -> None:
            clock.on_read = None
            other = open_database(database_url)
            SqlMemoStore(other, StepClock()).pin("rule", "user:other")
            other.dispose()

        # pin has found the memo, and no pin of it, when it reads the clock, then writes
        clock.on_read = other_process_pins_it
        assert store.pin("rule", "user:cli").name == "rule"
        assert names(store.pinned(None)) == ["rule"]


class TestTagKinds:
    @pytest.fixture
    def full(self, store: SqlMemoStore) -> SqlMemoStore:
        for i in range(20):
            add(store, f"m{i}", tags=(f"t{i}",))
        return store

    def test_a_21st_kind_is_refused_on_add(self, full: SqlMemoStore) -> None:
        with refused("too_many_tag_kinds") as caught:
            add(full, "new", tags=("t0", "t21"))
        assert "t0, t1, t10" in caught.value.params["existing"]
        add(full, "known", tags=("t0", "t1", "t2"))

    def test_the_limit_counts_and_names_only_what_the_conversation_sees(self, store: SqlMemoStore) -> None:
        add(store, "secret", tags=("surprise-party",), origin=PRIVATE)
        for i in range(19):
            add(store, f"m{i}", tags=(f"t{i}",))
        # the DM's tag does not use up a kind of the workspace's
        add(store, "new", tags=("t21",))
        with refused("too_many_tag_kinds") as caught:
            add(store, "newer", tags=("t22",))
        assert "surprise-party" not in caught.value.params["existing"]
        assert "t0" in caught.value.params["existing"]
        with refused("too_many_tag_kinds") as inside:
            add(store, "inside", tags=("t23",), origin=PRIVATE)
        assert "surprise-party" in inside.value.params["existing"]

    def test_a_21st_kind_is_refused_on_edit(self, full: SqlMemoStore) -> None:
        with refused("too_many_tag_kinds"):
            full.edit("m0", MemoChanges.create(tags=["t0", "t21"]), None, "test")

    def test_editing_a_memo_that_keeps_its_tags_is_fine(self, full: SqlMemoStore) -> None:
        full.edit("m0", MemoChanges.create(content="new content"), None, "test")
        full.edit("m0", MemoChanges.create(tags=["t0"]), None, "test")

    def test_replacing_a_memos_only_use_of_a_tag_is_fine(self, full: SqlMemoStore) -> None:
        full.edit("m0", MemoChanges.create(tags=["t21"]), None, "test")
        assert len(full.tags(None)) == 20

    def test_removed_memos_free_their_tags(self, full: SqlMemoStore) -> None:
        full.remove("m0", None, "test")
        add(full, "new", tags=("t21",))
        with refused("too_many_tag_kinds"):
            full.restore("m0", "test")

    def test_concurrent_adds_cannot_pass_the_limit(self, store: SqlMemoStore) -> None:
        for i in range(18):
            add(store, f"m{i}", tags=(f"t{i}",))
        start = threading.Barrier(8)
        unexpected: list[Exception] = []

        def add_new_kind(i: int) -> None:
            start.wait()
            try:
                add(store, f"n{i}", tags=(f"u{i}",))
            except MemoError:
                pass
            except Exception as error:  # noqa: BLE001 - collected for the assertion
                unexpected.append(error)

        threads = [threading.Thread(target=add_new_kind, args=(i,)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert unexpected == []
        assert len(store.tags(None)) == 20


class TestVisibility:
    @pytest.fixture
    def both(self, store: SqlMemoStore) -> SqlMemoStore:
        add(store, "public", tags=("shared",), origin=PUBLIC)
        add(store, "secret", tags=("hidden",), origin=PRIVATE)
        return store

    def test_private_memo_stays_in_its_conversation(self, both: SqlMemoStore) -> None:
        assert both.get("secret", None).visibility is Visibility.CONVERSATION
        assert names(both.list(Reader("C2")).memos) == ["public"]
        assert both.list(Reader("C2")).total == 1
        assert [t.tag for t in both.tags(Reader("C2"))] == ["shared"]
        assert names(both.for_prompt(Reader("C2"), min_priority=1, important=0, recent=10)[2]) == ["public"]
        with refused("unknown_name"):
            both.get("secret", Reader("C2"))
        with refused("unknown_name"):
            both.edit("secret", MemoChanges.create(priority=1), ELSEWHERE, "test")
        with refused("unknown_name"):
            both.remove("secret", ELSEWHERE, "test")
        assert not both.get("secret", None).removed

    def test_its_own_conversation_and_a_persons_view_see_everything(
        self, both: SqlMemoStore
    ) -> None:
        for channel in (Reader("D1"), None):
            assert sorted(names(both.list(channel).memos)) == ["public", "secret"]
            assert both.get("secret", channel).name == "secret"
            assert {t.tag for t in both.tags(channel)} == {"shared", "hidden"}
        both.edit("secret", MemoChanges.create(priority=5), PRIVATE, "test")

    def test_public_memos_are_seen_everywhere(self, both: SqlMemoStore) -> None:
        for channel in (Reader("C1"), Reader("C2"), Reader("D1"), Reader("D9"), None):
            assert both.get("public", channel).name == "public"


class TestHistory:
    def test_one_revision_per_change_with_full_states_and_actor(self, store: SqlMemoStore) -> None:
        added = add(store, "tanaka", priority=2, tags=("a",))
        edited = store.edit("tanaka", MemoChanges.create(content="new"), None, "tool:edit_memo")
        removed = store.remove("tanaka", None, "cli")
        restored = store.restore("tanaka", "cli")
        history = store.history("tanaka")
        assert [(r.action, r.actor) for r in history] == [
            (Action.ADD, "test"),
            (Action.EDIT, "tool:edit_memo"),
            (Action.REMOVE, "cli"),
            (Action.RESTORE, "cli"),
        ]
        assert history[0].before is None and history[0].after == added.snapshot()
        assert history[1].before == added.snapshot() and history[1].after == edited.snapshot()
        assert history[2].before == edited.snapshot() and history[2].after == removed.snapshot()
        assert history[3].before == removed.snapshot() and history[3].after == restored.snapshot()
        assert history[1].before["content"] == "something to remember"

    def test_each_revision_is_dated_like_the_change_it_logs(self, store: SqlMemoStore) -> None:
        added = add(store, "tanaka")
        edited = store.edit("tanaka", MemoChanges.create(content="new"), None, "test")
        removed = store.remove("tanaka", None, "test")
        restored = store.restore("tanaka", "test")
        assert [r.at for r in store.history("tanaka")] == [
            added.created_at,
            edited.updated_at,
            removed.removed_at,
            restored.updated_at,
        ]

    def test_as_of_is_each_memo_as_its_last_change_by_then_left_it(self, store: SqlMemoStore) -> None:
        added = add(store, "tanaka", content="likes ramen")
        edited = store.edit("tanaka", MemoChanges.create(content="likes soba", new_name="tanaka-food"), None, "test")
        removed = store.remove("tanaka-food", None, "test")
        restored = store.restore("tanaka-food", "test")
        assert added.id is not None
        ids = [added.id, 999]
        assert store.as_of(ids, added.created_at - timedelta(seconds=1)) == {}
        assert store.as_of(ids, added.created_at) == {added.id: added}
        assert store.as_of(ids, edited.updated_at - timedelta(microseconds=1)) == {added.id: added}
        assert store.as_of(ids, edited.updated_at) == {added.id: edited}
        assert removed.removed_at is not None
        assert store.as_of(ids, removed.removed_at) == {}
        assert store.as_of(ids, restored.updated_at + timedelta(days=1)) == {added.id: restored}

    def test_refusals_write_nothing(self, store: SqlMemoStore) -> None:
        add(store, "tanaka")
        with refused("name_taken"):
            add(store, "tanaka")
        with refused("unknown_name"):
            store.remove("nope", None, "test")
        assert len(store.history("tanaka")) == 1

    def test_history_follows_renames(self, store: SqlMemoStore) -> None:
        add(store, "old")
        store.edit("old", MemoChanges.create(new_name="new"), None, "test")
        assert len(store.history("old")) == len(store.history("new")) == 2
        with refused("unknown_name"):
            store.history("never")


class TestListing:
    def test_priority_then_most_recently_updated_first(self, store: SqlMemoStore) -> None:
        add(store, "low-old", priority=1)
        add(store, "high-old", priority=5)
        add(store, "low-new", priority=1)
        add(store, "high-new", priority=5)
        assert names(store.list(None).memos) == ["high-new", "high-old", "low-new", "low-old"]
        store.edit("low-old", MemoChanges.create(content="touched"), None, "test")
        assert names(store.list(None).memos) == ["high-new", "high-old", "low-old", "low-new"]

    def test_pages_report_the_whole_total(self, store: SqlMemoStore) -> None:
        for i in range(25):
            add(store, f"m{i:02}", tags=("even",) if i % 2 == 0 else ())
        page = store.list(None, offset=20, limit=10)
        assert (page.offset, page.total, len(page.memos)) == (20, 25, 5)
        assert names(page.memos) == ["m04", "m03", "m02", "m01", "m00"]
        tagged = store.list(None, tag=" even ", offset=0, limit=5)
        assert (tagged.total, len(tagged.memos)) == (13, 5)
        assert store.list(None, offset=30, limit=10).memos == []

    def test_a_page_is_the_readers_whole_list_cut_at_its_offset(self, store: SqlMemoStore) -> None:
        for i in range(12):
            add(store, f"m{i:02}", priority=1 + i % 5, origin=(PUBLIC, PRIVATE, ELSEWHERE)[i % 3])
        store.remove("m03", None, "test")
        for reader in (None, Reader("C1"), Reader("D1"), Reader("C2")):
            for min_priority in (1, 3):
                whole = store.list(reader, min_priority=min_priority)
                for offset in (0, 2, len(whole.memos), 20):
                    for limit in (1, 3, 50):
                        page = store.list(reader, min_priority=min_priority, offset=offset, limit=limit)
                        assert page.memos == whole.memos[offset : offset + limit], (reader, min_priority, offset, limit)
                        assert page.total == whole.total
        assert names(store.list(None, removed=True, limit=5).memos) == ["m03"]

    def test_min_priority(self, store: SqlMemoStore) -> None:
        add(store, "low", priority=2)
        add(store, "high", priority=4)
        assert names(store.list(None, min_priority=4).memos) == ["high"]

    def test_tags_most_used_first_with_last_update(self, store: SqlMemoStore) -> None:
        add(store, "a", tags=("x", "y"))
        add(store, "b", tags=("y",))
        last = add(store, "c", tags=("z", "y"))
        usages = store.tags(None)
        assert [(u.tag, u.count) for u in usages] == [("y", 3), ("z", 1), ("x", 1)]
        assert usages[0].last_updated == last.updated_at

    def test_a_prompt_reads_the_pinned_the_first_important_and_the_newest_others(self, store: SqlMemoStore) -> None:
        for name in ("a", "b", "c", "d", "e"):
            add(store, name, priority=4 if name in ("a", "c") else 2)
        store.pin("d", "cli")
        store.pin("a", "cli")
        rules, important, recent = store.for_prompt(None, min_priority=4, important=20, recent=2)
        assert (names(rules), names(important), names(recent)) == (["d", "a"], ["c"], ["e", "b"])
        add(store, "f", priority=5)
        store.pin("f", "cli")  # the first important one, and pinned: a rule, and shown once
        rules, important, recent = store.for_prompt(None, min_priority=4, important=1, recent=3)
        assert (names(rules), names(important), names(recent)) == (["d", "a", "f"], [], ["e", "c", "b"])


class TestSqliteFile:
    def test_wal_mode(self, engine: Engine, db_path: Path) -> None:
        with engine.connect() as connection:
            assert connection.execute(text("PRAGMA journal_mode")).scalar() == "wal"
            assert connection.execute(text("PRAGMA synchronous")).scalar() == 1  # NORMAL: no flush per commit
        with sqlite3.connect(db_path) as plain:
            assert plain.execute("PRAGMA journal_mode").fetchone() == ("wal",)

    def test_a_connection_is_taken_from_those_returned_the_last_returned_first(
        self, engine: Engine, db_path: Path
    ) -> None:
        """SQLite empties a connection's page cache when another connection committed since its last transaction:
        the one returned last (most likely the last to commit) is the one whose cache is still good."""
        first, second = engine.connect(), engine.connect()
        first_dbapi, second_dbapi = first.connection.dbapi_connection, second.connection.dbapi_connection
        first.close()
        second.close()
        with engine.connect() as again:
            assert again.connection.dbapi_connection is second_dbapi
            assert again.connection.dbapi_connection is not first_dbapi

    def test_readable_by_plain_sqlite3_while_a_session_writes(
        self, store: SqlMemoStore, engine: Engine, db_path: Path
    ) -> None:
        add(store, "tanaka", content="likes coffee")
        with Session(engine) as session, session.begin():
            row = session.exec(select(MemoRow)).one()
            row.content = "uncommitted"
            session.flush()
            reader = sqlite3.connect(db_path, timeout=0.1)
            assert reader.execute("SELECT content FROM memos").fetchall() == [("likes coffee",)]
            reader.close()
        assert store.get("tanaka", None).content == "uncommitted"

    def test_rows_read_as_plain_text(self, store: SqlMemoStore, db_path: Path) -> None:
        add(store, "tanaka", priority=4, tags=("田中", "好み"), content="コーヒーが好き")
        with sqlite3.connect(db_path) as plain:
            row = plain.execute(
                "SELECT name, priority, tags, content, updated_at FROM memos"
            ).fetchone()
        assert row == ("tanaka", 4, '["田中", "好み"]', "コーヒーが好き", "2026-01-02T03:04:06.000000+00:00")


class TestNarrowing:
    def test_memos_taken_in_a_channel_become_its_own_with_a_revision(self, store: SqlMemoStore) -> None:
        add(store, "party", content="surprise party for Bob")
        add(store, "old-plan")
        store.remove("old-plan", None, "test")
        add(store, "elsewhere", origin=Origin("C2", channel_private=False))

        narrowed = store.narrow("C1", "slack")

        assert sorted(names(narrowed)) == ["old-plan", "party"]
        assert all(m.visibility is Visibility.CONVERSATION and m.channel_id == "C1" for m in narrowed)
        assert names(store.list(Reader("C2")).memos) == ["elsewhere"]
        with refused("unknown_name"):
            store.get("party", Reader("C2"))
        assert store.get("party", Reader("C1")).content == "surprise party for Bob"
        assert names(store.list(Reader("C1")).memos) == ["party", "elsewhere"] or names(store.list(Reader("C1")).memos) == [
            "elsewhere",
            "party",
        ]
        last = store.history("party")[-1]
        assert last.action is Action.NARROW and last.actor == "slack"
        assert (last.before["visibility"], last.after["visibility"]) == ("workspace", "conversation")
        assert store.narrow("C1", "slack") == []  # nothing left to narrow

    def test_a_narrowed_removed_memo_is_restored_into_its_channel_only(self, store: SqlMemoStore) -> None:
        add(store, "plan")
        store.remove("plan", None, "test")
        store.narrow("C1", "slack")

        store.restore("plan", "test")

        assert names(store.list(Reader("C1")).memos) == ["plan"]
        assert store.list(Reader("C2")).total == 0
