"""The memo tools through strands' own tool interface (argument validation included)."""

from __future__ import annotations

import asyncio
import inspect
import re
import sqlite3
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from strands.tools.decorator import DecoratedFunctionTool
from strands.types.events import ToolResultEvent
from strands.types.tools import ToolResult

import myao2.domain.memo as memo_rules
import myao2.infrastructure.db.memo_store as memo_store
from myao2.domain.memo import ChangeBudget, MemoDraft, MemoError, Origin
from myao2.infrastructure.db.engine import open_database
from myao2.infrastructure.db.memo_store import SqlMemoStore
from myao2.infrastructure.llm.memo_messages import error_message
from myao2.infrastructure.llm.memo_tools import (
    MEMO_TOOLS,
    SCOPE_KEY,
    MemoToolScope,
    add_memo,
    edit_memo,
    get_memo,
    list_memo,
    list_memo_tags,
    remove_memo,
)

PUBLIC = Origin("C1", channel_private=False, user_id="U1", message_ts="1.1")
PRIVATE = Origin("D1", channel_private=True, user_id="U2", message_ts="2.2")
ELSEWHERE = Origin("C2", channel_private=False, user_id="U3", message_ts="3.3")


class StepClock:
    """Starts at 2026-01-02 03:04 UTC and moves one minute on at every reading."""

    def __init__(self) -> None:
        self.current = datetime(2026, 1, 2, 3, 3, tzinfo=timezone.utc)

    def now(self) -> datetime:
        self.current += timedelta(minutes=1)
        return self.current


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "m.db"


@pytest.fixture
def store(db_path: Path) -> SqlMemoStore:
    return SqlMemoStore(open_database(f"sqlite:///{db_path}"), StepClock())


def dump(db_path: Path) -> list[tuple[Any, ...]]:
    """Every row of both tables, to show that a refusal changed nothing."""
    with sqlite3.connect(db_path) as plain:
        memos = plain.execute("SELECT * FROM memos ORDER BY id").fetchall()
        revisions = plain.execute("SELECT * FROM memo_revisions ORDER BY id").fetchall()
    return [("memos", *row) for row in memos] + [("revisions", *row) for row in revisions]


async def call(
    memo_tool: DecoratedFunctionTool[Any, Any],
    store: SqlMemoStore,
    origin: Origin = PUBLIC,
    language: str = "en",
    **tool_input: Any,
) -> ToolResult:
    """Run a tool the way the agent's executor does and return its final result."""
    tool_use = {"toolUseId": "call-1", "name": memo_tool.tool_name, "input": tool_input}
    # The agent puts itself and the caller's state in invocation_state; no agent is needed here.
    state = {"agent": None, SCOPE_KEY: MemoToolScope(store, origin, language)}
    events = [event async for event in memo_tool.stream(tool_use, state)]
    assert isinstance(events[-1], ToolResultEvent)
    return events[-1].tool_result


def text_of(result: ToolResult) -> str:
    return result["content"][0]["text"]


def ok(result: ToolResult) -> str:
    assert result["status"] == "success", text_of(result)
    return text_of(result)


def seed(store: SqlMemoStore, name: str, origin: Origin = PUBLIC, **fields: Any) -> None:
    draft = MemoDraft.create(
        name,
        fields.get("content", f"about {name}"),
        fields.get("priority", 3),
        fields.get("tags"),
        fields.get("detail"),
    )
    store.add(draft, origin, "test")


class TestSchema:
    def schema(self, memo_tool: DecoratedFunctionTool[Any, Any]) -> dict[str, Any]:
        return memo_tool.tool_spec["inputSchema"]["json"]

    def test_the_six_tools(self) -> None:
        assert [t.tool_name for t in MEMO_TOOLS] == [
            "add_memo",
            "edit_memo",
            "remove_memo",
            "list_memo",
            "get_memo",
            "list_memo_tags",
        ]

    def test_only_what_is_needed_is_required(self) -> None:
        required = {t.tool_name: self.schema(t).get("required", []) for t in MEMO_TOOLS}
        assert required == {
            "add_memo": ["name", "content", "priority"],
            "edit_memo": ["memo_name"],
            "remove_memo": ["memo_name"],
            "list_memo": [],
            "get_memo": ["memo_name"],
            "list_memo_tags": [],
        }

    def test_no_parameter_is_nullable_and_context_is_hidden(self) -> None:
        for memo_tool in MEMO_TOOLS:
            for name, prop in self.schema(memo_tool)["properties"].items():
                assert "anyOf" not in prop and prop.get("type") not in (None, "null"), name
                assert name != "tool_context"

    def test_bounds_are_published(self) -> None:
        for memo_tool in (add_memo, edit_memo):
            properties = self.schema(memo_tool)["properties"]
            assert properties["priority"]["type"] == "integer"
            assert (properties["priority"]["minimum"], properties["priority"]["maximum"]) == (1, 5)
            assert properties["tags"]["type"] == "array"
            assert properties["tags"]["maxItems"] == 3
            assert properties["tags"]["items"]["type"] == "string"
        listing = self.schema(list_memo)["properties"]
        assert (listing["limit"]["minimum"], listing["limit"]["maximum"]) == (1, 50)
        assert (listing["offset"]["minimum"], listing["offset"]["maximum"]) == (0, 1_000_000)
        assert (listing["offset"]["default"], listing["limit"]["default"]) == (0, 10)

    def test_descriptions_say_when_to_use_each_tool(self) -> None:
        descriptions = {t.tool_name: t.tool_spec["description"] for t in MEMO_TOOLS}
        assert "list_memo_tags" in descriptions["add_memo"]
        assert "edit_memo" in descriptions["add_memo"]
        assert "instead of adding" in descriptions["add_memo"]
        assert "rather than adding" in descriptions["edit_memo"]
        assert "wrong" in descriptions["remove_memo"]
        assert "before" in descriptions["list_memo"]
        assert "Args" not in "".join(descriptions.values())


class TestAdd:
    async def test_saves_the_memo_with_its_origin(self, store: SqlMemoStore, db_path: Path) -> None:
        result = await call(
            add_memo, store, name="tanaka", content="likes coffee", priority=4, tags=["田中", "好み"]
        )
        assert ok(result) == 'Added memo "tanaka" (priority 4, tags: 田中, 好み).'
        with sqlite3.connect(db_path) as plain:
            row = plain.execute(
                "SELECT name, content, priority, tags, channel_id, user_id, message_ts FROM memos"
            ).fetchone()
            actor = plain.execute("SELECT action, actor FROM memo_revisions").fetchone()
        assert row == ("tanaka", "likes coffee", 4, '["田中", "好み"]', "C1", "U1", "1.1")
        assert actor == ("add", "tool:add_memo")

    async def test_answers_in_japanese(self, store: SqlMemoStore) -> None:
        result = await call(add_memo, store, language="ja", name="t", content="c", priority=1)
        assert ok(result) == "メモ「t」を追加しました（優先度1、タグ: なし）。"

    async def test_lenient_json_numbers_are_accepted(self, store: SqlMemoStore) -> None:
        ok(await call(add_memo, store, name="t", content="c", priority="2"))
        assert store.get("t", None).priority == 2


class TestEdit:
    async def test_changes_only_what_is_given(self, store: SqlMemoStore) -> None:
        seed(store, "tanaka", content="likes coffee", priority=2, tags=["a"])
        result = await call(edit_memo, store, memo_name="tanaka", priority=5, detail="long notes")
        assert ok(result) == 'Updated memo "tanaka".'
        memo = store.get("tanaka", None)
        assert (memo.content, memo.priority, memo.tags, memo.detail) == (
            "likes coffee",
            5,
            ("a",),
            "long notes",
        )
        assert store.history("tanaka")[-1].actor == "tool:edit_memo"

    async def test_renames_clears_tags_and_detail(self, store: SqlMemoStore) -> None:
        seed(store, "tanaka", tags=["a"], detail="old")
        result = await call(
            edit_memo, store, language="ja", memo_name=" tanaka ", new_name="tanaka-san", tags=[], detail=""
        )
        assert ok(result) == "メモ「tanaka-san」を更新しました。"
        memo = store.get("tanaka-san", None)
        assert (memo.tags, memo.detail) == ((), None)


class TestRemove:
    async def test_removes(self, store: SqlMemoStore) -> None:
        seed(store, "tanaka")
        assert ok(await call(remove_memo, store, memo_name="tanaka")) == 'Removed memo "tanaka".'
        assert ok(await call(list_memo, store)) == "No memos yet."
        assert store.history("tanaka")[-1].actor == "tool:remove_memo"
        result = await call(remove_memo, store, language="ja", memo_name="tanaka")
        assert result["status"] == "error"


class TestList:
    async def test_header_then_one_line_per_memo_in_store_order(self, store: SqlMemoStore) -> None:
        seed(store, "low", priority=1, content="a\nmulti-line  note")
        seed(store, "high", priority=5, tags=["x", "y"], detail="more")
        seed(store, "mid", priority=3)
        assert ok(await call(list_memo, store)) == "\n".join(
            [
                "memos 1-3 of 3",
                "- high (priority 5) [x, y] about high [+detail]",
                "- mid (priority 3) about mid",
                "- low (priority 1) a multi-line note",
            ]
        )
        assert ok(await call(list_memo, store, language="ja", limit=1, offset=1)) == "\n".join(
            ["メモ 2-2件目 / 全3件", "- mid（優先度3）about mid", "続きは offset=2 で見られます。"]
        )

    async def test_pages(self, store: SqlMemoStore) -> None:
        for i in range(25):
            seed(store, f"m{i:02}")
        first = ok(await call(list_memo, store))
        assert first.splitlines()[0] == "memos 1-10 of 25"
        assert first.splitlines()[1] == "- m24 (priority 3) about m24"
        assert first.splitlines()[-1] == "More with offset=10."
        last = ok(await call(list_memo, store, offset=20, limit=50))
        assert last.splitlines()[0] == "memos 21-25 of 25" and "More" not in last
        assert ok(await call(list_memo, store, offset=25)) == "No memos from offset 25 (there are 25)."
        past = ok(await call(list_memo, store, language="ja", offset=30))
        assert past == "31件目以降のメモはありません（全25件）。"

    async def test_by_tag(self, store: SqlMemoStore) -> None:
        seed(store, "a", tags=["x"])
        seed(store, "b", tags=["y"])
        listed = ok(await call(list_memo, store, tag="x"))
        assert listed.splitlines() == ['memos tagged "x" 1-1 of 1', "- a (priority 3) [x] about a"]
        assert ok(await call(list_memo, store, tag="z")) == 'No memos tagged "z".'
        assert ok(await call(list_memo, store, language="ja", tag="z")) == "タグ「z」のメモはありません。"
        assert ok(await call(list_memo, store, tag=" ")).startswith("memos 1-2 of 2")

    async def test_empty(self, store: SqlMemoStore) -> None:
        assert ok(await call(list_memo, store, language="ja")) == "メモはまだありません。"


class TestGet:
    async def test_every_field(self, store: SqlMemoStore) -> None:
        seed(store, "tanaka", content="likes coffee", priority=4, tags=["田中"], detail="black\nno sugar")
        await call(edit_memo, store, memo_name="tanaka", priority=5)
        assert ok(await call(get_memo, store, memo_name="tanaka")) == "\n".join(
            [
                "name: tanaka",
                "priority: 5",
                "tags: 田中",
                "content: likes coffee",
                "detail: black\nno sugar",
                "noted from: user U1, channel C1",
                "created: 2026-01-02 03:04 UTC",
                "updated: 2026-01-02 03:05 UTC",
            ]
        )

    async def test_in_japanese_without_tags_or_detail(self, store: SqlMemoStore) -> None:
        seed(store, "t")
        text = ok(await call(get_memo, store, language="ja", memo_name="t"))
        assert text.splitlines() == [
            "名前: t",
            "優先度: 3",
            "タグ: なし",
            "内容: about t",
            "詳細: なし",
            "記録元: ユーザー U1 / チャンネル C1",
            "作成: 2026-01-02 03:04 UTC",
            "更新: 2026-01-02 03:04 UTC",
        ]


class TestTags:
    async def test_most_used_first_with_counts_and_dates(self, store: SqlMemoStore) -> None:
        seed(store, "a", tags=["x", "y"])
        seed(store, "b", tags=["y"])
        assert ok(await call(list_memo_tags, store)) == "\n".join(
            [
                "tags with their memo counts, most used first:",
                "- y (2; last updated 2026-01-02 03:05 UTC)",
                "- x (1; last updated 2026-01-02 03:04 UTC)",
            ]
        )
        ja = ok(await call(list_memo_tags, store, language="ja"))
        assert ja.splitlines()[1] == "- y（2件、最終更新 2026-01-02 03:05 UTC）"

    async def test_none_yet(self, store: SqlMemoStore) -> None:
        assert ok(await call(list_memo_tags, store)) == "No tags yet."
        assert ok(await call(list_memo_tags, store, language="ja")) == "タグはまだありません。"


class TestScope:
    async def test_a_private_memo_stays_in_its_conversation(self, store: SqlMemoStore) -> None:
        ok(await call(add_memo, store, PRIVATE, name="secret", content="c", priority=3, tags=["s"]))
        assert ok(await call(list_memo, store, ELSEWHERE)) == "No memos yet."
        assert ok(await call(list_memo_tags, store, ELSEWHERE)) == "No tags yet."
        for memo_tool, extra in ((get_memo, {}), (remove_memo, {}), (edit_memo, {"priority": 1})):
            result = await call(memo_tool, store, ELSEWHERE, memo_name="secret", **extra)
            assert text_of(result).startswith('There is no memo named "secret"')
        assert ok(await call(get_memo, store, PRIVATE, memo_name="secret")).startswith("name: secret")
        assert ok(await call(list_memo, store, Origin())).startswith("memos 1-1")

    async def test_concurrent_conversations_keep_their_own_scope(self, store: SqlMemoStore) -> None:
        origins = [Origin(f"C{i}", False, f"U{i}", f"{i}.0") for i in range(8)]
        await asyncio.gather(
            *(
                call(add_memo, store, origin, name=f"m{i}", content="c", priority=1)
                for i, origin in enumerate(origins)
            )
        )
        for i in range(8):
            memo = store.get(f"m{i}", None)
            assert (memo.channel_id, memo.user_id) == (f"C{i}", f"U{i}")

    async def test_store_calls_leave_the_event_loop_thread(self, store: SqlMemoStore) -> None:
        threads: list[int] = []
        original = store.add

        def recording_add(*args: Any) -> Any:
            threads.append(threading.get_ident())
            return original(*args)

        store.add = recording_add  # type: ignore[method-assign]
        ok(await call(add_memo, store, name="t", content="c", priority=1))
        assert threads and threads[0] != threading.get_ident()


class TestPrivateEdits:
    @pytest.mark.parametrize(
        "change",
        [{"content": "DM secret"}, {"detail": "DM secret"}, {"tags": ["DM secret"]}, {"new_name": "DM secret"}],
        ids=lambda c: next(iter(c)),
    )
    async def test_an_edit_from_a_dm_of_a_workspace_memo_is_refused(
        self, store: SqlMemoStore, db_path: Path, change: dict[str, Any]
    ) -> None:
        seed(store, "team-lunch")
        before = dump(db_path)
        english = text_of(await call(edit_memo, store, PRIVATE, memo_name="team-lunch", **change))
        assert english == (
            'The memo "team-lunch" is seen more widely than this conversation, so it cannot be changed '
            "from here (what was said here would reach other conversations). "
            "Add a memo for this conversation instead, under another name, with add_memo."
        )
        japanese = await call(edit_memo, store, PRIVATE, language="ja", memo_name="team-lunch", **change)
        assert japanese["status"] == "error"
        assert "この会話用のメモを別の名前で add_memo" in text_of(japanese)
        assert dump(db_path) == before
        assert "DM secret" not in ok(await call(get_memo, store, ELSEWHERE, memo_name="team-lunch"))

    async def test_a_removal_from_a_dm_of_a_workspace_memo_is_refused_as_an_edit_is(
        self, store: SqlMemoStore, db_path: Path
    ) -> None:
        seed(store, "team-lunch")
        before = dump(db_path)
        english = text_of(await call(remove_memo, store, PRIVATE, memo_name="team-lunch"))
        assert english.startswith('The memo "team-lunch" is seen more widely than this conversation')
        japanese = await call(remove_memo, store, PRIVATE, language="ja", memo_name="team-lunch")
        assert japanese["status"] == "error" and "この会話用のメモを別の名前で add_memo" in text_of(japanese)
        assert dump(db_path) == before

    async def test_a_dm_removes_its_own_memo(self, store: SqlMemoStore) -> None:
        seed(store, "mine", PRIVATE)
        ok(await call(remove_memo, store, PRIVATE, memo_name="mine"))
        assert store.restore("mine", "cli").name == "mine"


class TestChangesPerReply:
    async def run_reply(self, store: SqlMemoStore, budget: ChangeBudget, memo_tool: Any, **tool_input: Any) -> ToolResult:
        tool_use = {"toolUseId": "c", "name": memo_tool.tool_name, "input": tool_input}
        state = {"agent": None, SCOPE_KEY: MemoToolScope(store, PUBLIC, "en", budget)}
        events = [event async for event in memo_tool.stream(tool_use, state)]
        return events[-1].tool_result

    async def test_changes_past_the_limit_are_refused(self, store: SqlMemoStore, db_path: Path) -> None:
        budget = ChangeBudget(3)
        ok(await self.run_reply(store, budget, add_memo, name="a", content="c", priority=5))
        ok(await self.run_reply(store, budget, edit_memo, memo_name="a", priority=4))
        refused = await self.run_reply(store, budget, add_memo, name="a", content="c", priority=5)
        assert refused["status"] == "error"  # a refused change costs nothing
        ok(await self.run_reply(store, budget, remove_memo, memo_name="a"))
        before = dump(db_path)
        for memo_tool, tool_input in (
            (add_memo, {"name": "b", "content": "c", "priority": 5}),
            (edit_memo, {"memo_name": "a", "priority": 1}),
            (remove_memo, {"memo_name": "a"}),
        ):
            result = await self.run_reply(store, budget, memo_tool, **tool_input)
            assert text_of(result) == "At most 3 memo changes per reply: change no more memos now and write your reply."
        assert dump(db_path) == before
        ok(await self.run_reply(store, budget, list_memo))
        # a new reply has a budget of its own
        ok(await self.run_reply(store, ChangeBudget(3), add_memo, name="b", content="c", priority=5))

    async def test_concurrent_calls_cannot_pass_the_limit(self, store: SqlMemoStore) -> None:
        budget = ChangeBudget(10)
        results = await asyncio.gather(
            *(self.run_reply(store, budget, add_memo, name=f"m{i}", content="c", priority=5) for i in range(25))
        )
        assert sum(r["status"] == "success" for r in results) == 10
        assert store.list(None).total == 10

    def test_the_default_is_ten(self) -> None:
        assert MemoToolScope(None, PUBLIC).budget.limit == 10  # type: ignore[arg-type]


FAILURES = [
    # (tool, input, English, Japanese)
    (get_memo, {"memo_name": "nope"}, 'There is no memo named "nope".', "「nope」という名前のメモはありません"),
    (edit_memo, {"memo_name": "nope", "priority": 2}, 'no memo named "nope"', "「nope」"),
    (remove_memo, {"memo_name": "nope"}, 'no memo named "nope"', "「nope」"),
    (get_memo, {"memo_name": "two\nlines"}, 'no memo named "two lines"', "「two lines」"),
    (add_memo, {"name": "tanaka", "content": "c", "priority": 1}, 'A memo named "tanaka" already exists', "すでにあります"),
    (edit_memo, {"memo_name": "other", "new_name": "tanaka"}, "already exists", "すでにあります"),
    (add_memo, {"name": "n", "content": "c", "priority": 0}, "Priority must be a whole number from 1", "優先度は1"),
    (add_memo, {"name": "n", "content": "c", "priority": 6}, "got 6.", "受け取った値: 6"),
    (edit_memo, {"memo_name": "tanaka", "priority": -3}, "Priority must be", "優先度は"),
    (add_memo, {"name": "n", "content": "c", "priority": 1, "tags": ["a", "b", "c", "d"]}, "at most 3 tags (4 were given)", "3個まで"),
    (edit_memo, {"memo_name": "tanaka", "tags": ["a", "b", "c", "d"]}, "at most 3 tags", "3個まで"),
    (add_memo, {"name": "n", "content": "  \n ", "priority": 1}, "The content is empty", "内容が空です"),
    (add_memo, {"name": "n", "content": "x" * 501, "priority": 1}, "501 characters; the limit is 500", "501文字、上限500文字"),
    (add_memo, {"name": " ", "content": "c", "priority": 1}, "The memo name is empty", "名前が空です"),
    (add_memo, {"name": "a\tb", "content": "c", "priority": 1}, "single line", "1行"),
    (add_memo, {"name": "n" * 33, "content": "c", "priority": 1}, "too long (33 characters", "33文字"),
    (add_memo, {"name": "n", "content": "c", "priority": 1, "tags": ["t" * 33]}, "at most 32 characters", "32文字まで"),
    (edit_memo, {"memo_name": "tanaka", "detail": "d" * 4001}, "detail is too long", "詳細が長すぎます"),
    (edit_memo, {"memo_name": "tanaka"}, "Nothing to change", "変更する項目がありません"),
    (list_memo, {"limit": 0}, "limit must be a whole number from 1 to 50", "limit は1から50まで"),
    (list_memo, {"limit": 51}, "from 1 to 50", "1から50"),
    (list_memo, {"offset": -1}, "offset must be a whole number from 0 to 1000000", "offset は0から1000000まで"),
    (list_memo, {"offset": 10**33}, "offset must be a whole number from 0 to 1000000", "offset は0から1000000まで"),
]

WRONG_TYPES = [
    (add_memo, {"name": 5, "content": "c", "priority": 1}, "name"),
    (add_memo, {"name": "n", "content": None, "priority": 1}, "content"),
    (add_memo, {"name": "n", "content": "c", "priority": "high"}, "priority"),
    (add_memo, {"name": "n", "content": "c", "priority": 2.5}, "priority"),
    (add_memo, {"name": "n", "content": "c", "priority": {}}, "priority"),
    (add_memo, {"name": "n", "content": "c", "priority": 1, "tags": "a,b"}, "tags"),
    (add_memo, {"name": "n", "content": "c", "priority": 1, "tags": ["a", 1]}, "tags"),
    (add_memo, {"name": "n", "priority": 1}, "content"),
    (edit_memo, {"memo_name": "tanaka", "content": ["x"]}, "content"),
    (edit_memo, {"memo_name": None, "priority": 1}, "memo_name"),
    (list_memo, {"offset": "x"}, "offset"),
    (list_memo, {"limit": None}, "limit"),
    (get_memo, {}, "memo_name"),
]


class TestFailures:
    @pytest.fixture
    def seeded(self, store: SqlMemoStore) -> SqlMemoStore:
        seed(store, "tanaka", tags=["a"])
        seed(store, "other")
        return store

    @pytest.mark.parametrize(("memo_tool", "tool_input", "english", "japanese"), FAILURES)
    async def test_refusals_are_explained_and_change_nothing(
        self,
        seeded: SqlMemoStore,
        db_path: Path,
        memo_tool: DecoratedFunctionTool[Any, Any],
        tool_input: dict[str, Any],
        english: str,
        japanese: str,
    ) -> None:
        before = dump(db_path)
        for language, expected in (("en", english), ("ja", japanese)):
            result = await call(memo_tool, seeded, language=language, **tool_input)
            assert result["status"] == "error"
            assert expected in text_of(result)
            assert "Error:" not in text_of(result)
        assert dump(db_path) == before

    @pytest.mark.parametrize(("memo_tool", "tool_input", "parameter"), WRONG_TYPES)
    async def test_wrong_types_are_rejected_by_strands_readably(
        self,
        seeded: SqlMemoStore,
        db_path: Path,
        memo_tool: DecoratedFunctionTool[Any, Any],
        tool_input: dict[str, Any],
        parameter: str,
    ) -> None:
        before = dump(db_path)
        result = await call(memo_tool, seeded, **tool_input)
        assert result["status"] == "error"
        assert text_of(result).startswith("Error: Validation failed for input parameters")
        assert re.search(rf"^{parameter}\b", text_of(result), re.MULTILINE)
        assert dump(db_path) == before

    async def test_a_21st_tag_kind_is_refused_listing_the_tags(
        self, store: SqlMemoStore, db_path: Path
    ) -> None:
        for i in range(20):
            seed(store, f"m{i}", tags=[f"t{i:02}"])
        before = dump(db_path)
        existing = ", ".join(f"t{i:02}" for i in range(20))
        result = await call(add_memo, store, name="n", content="c", priority=1, tags=["t00", "new"])
        assert result["status"] == "error"
        assert text_of(result) == (
            "There can be at most 20 different tags, so the new tags (new) cannot be added. "
            f"Choose from the existing tags: {existing}"
        )
        # m0 carries t00 alone: keeping it and adding one more kind needs 21
        result = await call(edit_memo, store, language="ja", memo_name="m0", tags=["t00", "new"])
        others = ", ".join(f"t{i:02}" for i in range(1, 20))
        assert text_of(result).endswith(f"既存のタグから選んでください: {others}")
        assert dump(db_path) == before

    async def test_a_huge_unknown_name_is_quoted_short(self, store: SqlMemoStore) -> None:
        result = await call(get_memo, store, memo_name="\x00huge\ud800" + "x" * 100_000)
        assert result["status"] == "error"
        assert len(text_of(result)) < 200 and "\n" not in text_of(result)


SOURCES = [memo_rules, memo_store]


@pytest.mark.parametrize("language", ["ja", "en"])
def test_every_refusal_code_has_wording(language: str) -> None:
    codes = {
        code
        for module in SOURCES
        for code in re.findall(r'MemoError\(\s*"(\w+)"', inspect.getsource(module))
    }
    assert len(codes) >= 15
    params = dict.fromkeys(
        ("field", "limit", "length", "value", "count", "new", "existing", "name", "audiences"), "x"
    )
    for code in codes:
        text = error_message(MemoError(code, **params), language)
        assert text and "{" not in text
