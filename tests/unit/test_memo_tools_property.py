"""Random, hostile tool calls never break the notebook's rules.

A state machine drives the six tools through strands' tool interface with arguments
of every shape and checks the database after each call.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from sqlalchemy import text
from strands.tools.decorator import DecoratedFunctionTool
from strands.types.events import ToolResultEvent
from strands.types.tools import ToolResult

from myao2.domain.memo import (
    MAX_TAG_KINDS,
    MAX_TAGS_PER_MEMO,
    MemoDraft,
    MemoError,
    Origin,
    validate_name,
)
from myao2.infrastructure.clock import SystemClock
from myao2.infrastructure.db.memo_store import SqlMemoStore
from myao2.infrastructure.llm.memo_tools import (
    SCOPE_KEY,
    MemoToolScope,
    add_memo,
    edit_memo,
    get_memo,
    list_memo,
    list_memo_tags,
    remove_memo,
)
from tests.sqlite import MigratedCopy

ORIGINS = [
    Origin("C1", channel_private=False, user_id="U1"),
    Origin("C2", channel_private=False, user_id="U2"),
    Origin("D1", channel_private=True, user_id="U1"),
    Origin("G1", channel_private=True, user_id="U3"),
    Origin(),
]
NAMES = ["m0", "m1", "m2", "seed0", "seed1", "seed2", "田中", " m1 ", "M1", "n" * 32]
SEED_TAGS = [f"k{i}" for i in range(MAX_TAG_KINDS)]
TAGS = ["t0", "t1", "t2", "t3", "k0", "k1", "田中", " t1 ", "", "t1\n"]

huge = st.builds(lambda ch, n: ch * n, st.characters(codec=None), st.integers(33, 20_000))
control = st.text(st.characters(categories=["Cc", "Cs"], codec=None), max_size=6)
hostile = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=40),
    huge,
    control,
    st.lists(st.one_of(st.text(max_size=5), st.integers()), max_size=4),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


def mostly(plausible: st.SearchStrategy[Any], *odd: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Plausible values about three times in four, so that calls succeed often enough;
    otherwise odd or hostile ones."""
    odd_or_hostile = st.one_of(*odd, hostile)
    return st.integers(0, 3).flatmap(lambda i: odd_or_hostile if i == 3 else plausible)


name = mostly(st.sampled_from(NAMES))
new_name = mostly(st.one_of(st.sampled_from(NAMES), st.integers(0, 99).map(lambda i: f"x{i}")))
content = mostly(st.text(min_size=1, max_size=30))
priority = mostly(st.integers(1, 5), st.integers(-2, 8), st.sampled_from(["3", "high", 2.0, True]))
tags = mostly(
    st.one_of(st.lists(st.sampled_from(TAGS), min_size=1, max_size=3), st.none(), st.just([])),
    st.lists(st.sampled_from(TAGS), min_size=4, max_size=6),
    st.lists(st.one_of(st.text(max_size=40), control), max_size=5),
)
detail = mostly(st.one_of(st.none(), st.just(""), st.text(max_size=50)), huge)
window = mostly(st.integers(0, 50), st.integers(-5, 60))
tag = mostly(st.sampled_from(TAGS))
origins = st.sampled_from(ORIGINS)
languages = st.sampled_from(["ja", "en"])


_OMITTED = object()


def arguments(
    required: dict[str, st.SearchStrategy[Any]], optional: dict[str, st.SearchStrategy[Any]]
) -> st.SearchStrategy[Any]:
    """The required arguments and each optional one half the time; now and then any
    subset of them, or no dict at all."""
    maybe = {key: st.one_of(value, st.just(_OMITTED)) for key, value in optional.items()}
    plausible = st.fixed_dictionaries({**required, **maybe}).map(
        lambda args: {key: value for key, value in args.items() if value is not _OMITTED}
    )
    return mostly(plausible, st.fixed_dictionaries({}, optional={**required, **optional}))


class MemoToolsMachine(RuleBasedStateMachine):
    """One fresh migrated database per example; every step is checked against it."""

    def __init__(self) -> None:
        super().__init__()
        self.database = MigratedCopy()
        self.engine = self.database.engine
        self.store = SqlMemoStore(self.engine, SystemClock())
        self.loop = asyncio.new_event_loop()

    def teardown(self) -> None:
        self.loop.close()
        self.database.close()

    @initialize(kinds=st.one_of(st.integers(0, MAX_TAG_KINDS), st.integers(17, MAX_TAG_KINDS)))
    def tag_kinds_in_use(self, kinds: int) -> None:
        """Start with some tag kinds in use, often near the limit."""
        for i in range(kinds):
            draft = MemoDraft.create(f"seed{i}", "c", 3, [SEED_TAGS[i]])
            self.store.add(draft, ORIGINS[i % len(ORIGINS)], "seed")

    # -- the six tools ---------------------------------------------------------

    @rule(
        origin=origins,
        language=languages,
        args=arguments({"name": new_name, "content": content, "priority": priority}, {"tags": tags}),
    )
    def add(self, origin: Origin, language: str, args: Any) -> None:
        self.run(add_memo, origin, language, args, changes=True)

    @rule(
        origin=origins,
        language=languages,
        args=arguments(
            {"memo_name": name},
            {
                "content": content,
                "priority": priority,
                "tags": tags,
                "detail": detail,
                "new_name": new_name,
            },
        ),
    )
    def edit(self, origin: Origin, language: str, args: Any) -> None:
        self.run(edit_memo, origin, language, args, changes=True)

    @rule(origin=origins, language=languages, args=arguments({"memo_name": name}, {}))
    def remove(self, origin: Origin, language: str, args: Any) -> None:
        self.run(remove_memo, origin, language, args, changes=True)

    @rule(
        origin=origins,
        language=languages,
        args=arguments({}, {"tag": tag, "offset": window, "limit": window}),
    )
    def list_memos(self, origin: Origin, language: str, args: Any) -> None:
        self.run(list_memo, origin, language, args, changes=False)

    @rule(origin=origins, language=languages, args=arguments({"memo_name": name}, {}))
    def get(self, origin: Origin, language: str, args: Any) -> None:
        self.run(get_memo, origin, language, args, changes=False)

    @rule(origin=origins, language=languages, args=hostile)
    def list_tags(self, origin: Origin, language: str, args: Any) -> None:
        self.run(list_memo_tags, origin, language, {"unexpected": args}, changes=False)

    # -- checks ------------------------------------------------------------------

    def run(
        self,
        memo_tool: DecoratedFunctionTool[Any, Any],
        origin: Origin,
        language: str,
        args: Any,
        *,
        changes: bool,
    ) -> None:
        before = self.dump()
        result = self.loop.run_until_complete(self.call(memo_tool, origin, language, args))
        reply = result["content"][0]["text"]
        assert reply.strip()
        if reply.startswith("Error:"):
            # only strands' own argument validation may speak like this; no exception escaped
            assert reply.startswith("Error: Validation failed for input parameters"), reply
            assert result["status"] == "error"
        after = self.dump()
        if changes and result["status"] == "success":
            assert len(after["memo_revisions"]) == len(before["memo_revisions"]) + 1
            assert after["memo_revisions"][:-1] == before["memo_revisions"]
        else:
            assert after == before
        if result["status"] == "success" and "memo_name" in args:
            self.assert_was_visible(before, args["memo_name"], origin)

    async def call(
        self,
        memo_tool: DecoratedFunctionTool[Any, Any],
        origin: Origin,
        language: str,
        args: Any,
    ) -> ToolResult:
        tool_use = {"toolUseId": "t", "name": memo_tool.tool_name, "input": args}
        state = {"agent": None, SCOPE_KEY: MemoToolScope(self.store, origin, language)}
        events = [event async for event in memo_tool.stream(tool_use, state)]
        assert isinstance(events[-1], ToolResultEvent)
        return events[-1].tool_result

    def dump(self) -> dict[str, list[dict[str, Any]]]:
        with self.engine.connect() as connection:
            return {
                table: [
                    dict(row._mapping)
                    for row in connection.execute(text(f"SELECT * FROM {table} ORDER BY id"))
                ]
                for table in ("memos", "memo_revisions")
            }

    @staticmethod
    def assert_was_visible(
        before: dict[str, list[dict[str, Any]]], memo_name: str, origin: Origin
    ) -> None:
        """A tool found this memo: it must have been live and visible from `origin`."""
        try:
            wanted = validate_name(memo_name)
        except MemoError:
            raise AssertionError(f"an invalid name was found: {memo_name!r}") from None
        rows = [r for r in before["memos"] if r["name"] == wanted and r["removed_at"] is None]
        assert any(
            origin.channel_id is None
            or row["visibility"] == "workspace"
            or row["channel_id"] == origin.channel_id
            for row in rows
        )

    @invariant()
    def rules_hold(self) -> None:
        with self.engine.connect() as connection:
            rows = connection.execute(
                text("SELECT name, priority, tags, removed_at, visibility, channel_id FROM memos")
            ).all()
            unrevised = connection.execute(
                text("SELECT COUNT(*) FROM memos WHERE id NOT IN (SELECT memo_id FROM memo_revisions)")
            ).scalar_one()
        # names and tag kinds are limited per audience: '' is the workspace
        names: dict[str, list[str]] = {}
        kinds: dict[str, set[str]] = {}
        for row in rows:
            assert 1 <= row.priority <= 5
            row_tags = json.loads(row.tags)
            assert len(row_tags) <= MAX_TAGS_PER_MEMO
            assert len(set(row_tags)) == len(row_tags)
            if row.removed_at is None:
                audience = row.channel_id if row.visibility == "conversation" else ""
                kinds.setdefault(audience, set()).update(row_tags)
                names.setdefault(audience, []).append(row.name)
        assert all(len(k) <= MAX_TAG_KINDS for k in kinds.values())
        assert all(len(set(n)) == len(n) for n in names.values())
        assert unrevised == 0


TestMemoToolsMachine = MemoToolsMachine.TestCase
TestMemoToolsMachine.settings = settings(
    max_examples=100,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
