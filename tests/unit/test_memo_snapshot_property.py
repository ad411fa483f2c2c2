"""Property: a Markdown export is deterministic and lossless: importing it back plans no change,
and into an empty notebook it recreates the same memos.

Notebooks are drawn at random (names, content and details with YAML- and Markdown-significant
text, the detail heading among them; up to three tags; the workspace, a DM and a private
channel; pins), written through the notebook as a person would.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator

import pytest

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, text

from myao2.application.memo_snapshot import Outcome, Scope, apply_import, export_snapshot, plan_import
from myao2.application.notebook import Actor, Notebook
from myao2.domain.memo import MemoError
from myao2.domain.visibility import WORKSPACE, Audience
from myao2.infrastructure.db.engine import open_database
from myao2.infrastructure.db.memo_store import SqlMemoStore
from tests.clocks import ManualClock

TRICKY = ["## Detail", "\\## Detail ", "---", "...", "- item", "key: value", "# title", "  indented", "", "ボブ"]
AUDIENCES = [WORKSPACE, WORKSPACE, Audience("D1"), Audience("G1")]
STORED_STATE = re.compile(r"^(created|updated|revision): .*\n", re.MULTILINE)

characters = st.characters(blacklist_categories=("Cs",))
lines = st.one_of(st.text(characters, max_size=30), st.sampled_from(TRICKY))
contents = st.lists(lines, min_size=1, max_size=5).map("\n".join)
names = st.one_of(
    st.text(st.characters(blacklist_categories=("Cc", "Cs")), min_size=1, max_size=32),
    st.sampled_from(["CON", "con", "Lunch", "lunch", "a/b", "a:b", ".hidden", "yes", "null", "123"]),
)
tags = st.lists(st.one_of(st.sampled_from(["food", "Food", "team", "x.md", "CON"]), st.text(characters, max_size=8)), max_size=3)
memos = st.fixed_dictionaries(
    {
        "name": names,
        "content": contents,
        "priority": st.integers(1, 5),
        "tags": tags,
        "detail": st.one_of(st.none(), contents),
        "audience": st.sampled_from(AUDIENCES),
        "pinned": st.booleans(),
    }
)
notebooks = st.lists(memos, max_size=12)


@pytest.fixture(scope="module")
def engines() -> Iterator[tuple[Engine, Engine]]:
    """Two migrated databases (an original and a copy), emptied of memos before each example."""
    pair = (open_database("sqlite://"), open_database("sqlite://"))
    yield pair
    for engine in pair:
        engine.dispose()


def new_store(engine: Engine) -> SqlMemoStore:
    with engine.begin() as connection:
        for table in ("memo_pins", "memo_revisions", "memos"):
            connection.execute(text(f"DELETE FROM {table}"))
    return SqlMemoStore(engine, ManualClock())


def write(store: SqlMemoStore, specs: list[dict]) -> None:
    """Write each memo a person would be allowed to; the rules refuse the rest."""
    book = Notebook(store, Actor.CLI)
    for spec in specs:
        try:
            memo = book.add(
                spec["name"], spec["content"], spec["priority"], spec["tags"], spec["detail"], audience=spec["audience"]
            )
            if spec["pinned"]:
                book.pin(memo.name, audience=spec["audience"])
        except MemoError:
            pass


def encoded(files: dict[str, str]) -> dict[str, bytes]:
    return {path: text.encode() for path, text in files.items()}


def fold(path: str) -> str:
    return unicodedata.normalize("NFC", path).casefold()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(notebooks, st.sampled_from(list(Scope)))
def test_an_export_is_deterministic_and_imports_back_without_a_change(engines, specs, scope):
    store = new_store(engines[0])
    write(store, specs)

    files = export_snapshot(store, scope)

    assert export_snapshot(store, scope) == files
    assert len({fold(path) for path in files}) == len(files)
    live = [m for m in store.list(None).memos if scope is Scope.ALL or m.audience.is_workspace]
    assert len(files) == len(live)
    plan = plan_import(store, encoded(files), scope, prune=True)
    assert [step.outcome for step in plan.steps] == [Outcome.UNCHANGED] * len(files)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(notebooks)
def test_importing_an_export_into_an_empty_notebook_recreates_its_memos(engines, specs):
    store = new_store(engines[0])
    write(store, specs)
    files = export_snapshot(store, Scope.WORKSPACE)

    copy = new_store(engines[1])
    plan = apply_import(copy, plan_import(copy, encoded(files), Scope.WORKSPACE))

    assert plan.complete
    recreated = export_snapshot(copy, Scope.WORKSPACE)
    assert list(recreated) == list(files)
    assert {p: STORED_STATE.sub("", t) for p, t in recreated.items()} == {
        p: STORED_STATE.sub("", t) for p, t in files.items()
    }


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(notebooks, st.sampled_from(list(Scope)), st.integers(0, 11))
def test_a_new_name_in_an_exported_file_plans_exactly_that_rename(engines, specs, scope, which):
    store = new_store(engines[0])
    write(store, specs)
    files = encoded(export_snapshot(store, scope))
    if not files:
        return
    path = sorted(files)[which % len(files)]
    old = re.search(rb"^name: (.*)$", files[path], re.MULTILINE)
    assert old is not None
    files[path] = files[path].replace(old.group(0), b"name: renamed-by-a-person", 1)

    plan = plan_import(store, files, scope, prune=True)

    assert [(step.path, step.changed) for step in plan.steps if step.outcome is not Outcome.UNCHANGED] == [
        (path, ("name",))
    ]
