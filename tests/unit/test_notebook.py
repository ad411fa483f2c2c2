"""People's writes (`myao2.application.notebook`): the tools' rules, per-audience names and history."""

from __future__ import annotations

import pytest

from myao2.application.notebook import Actor, Notebook
from myao2.domain.memo import MemoDraft, MemoError, Origin, Visibility
from myao2.domain.visibility import WORKSPACE, Audience, Reader
from myao2.infrastructure.db.engine import open_database
from myao2.infrastructure.db.memo_store import SqlMemoStore
from tests.clocks import ManualClock

DM = Audience("D1")


@pytest.fixture
def store(database_url):
    engine = open_database(database_url)
    yield SqlMemoStore(engine, ManualClock())
    engine.dispose()


def test_an_add_goes_to_the_workspace_and_records_the_actor(store):
    memo = Notebook(store, Actor.CLI).add("lunch", "Lunch on Fridays", 4, ["food"], "at noon")

    assert (memo.visibility, memo.channel_id, memo.priority, memo.tags, memo.detail) == (
        Visibility.WORKSPACE, None, 4, ("food",), "at noon"
    )
    assert store.get("lunch", Reader("C9")).content == "Lunch on Fridays"
    [revision] = store.history("lunch")
    assert (revision.action.value, revision.actor) == ("add", "user:cli")


def test_a_conversation_memo_is_seen_only_there(store):
    Notebook(store, Actor.IMPORT).add("secret", "A surprise party", audience=DM)

    assert store.get("secret", Reader("D1")).audience == DM
    with pytest.raises(MemoError) as refused:
        store.get("secret", Reader("C1"))
    assert refused.value.code == "unknown_name"


@pytest.mark.parametrize(
    ("call", "code"),
    [
        (lambda nb: nb.add("x", "content", 6), "bad_priority"),
        (lambda nb: nb.add("x", "content", 3, ["a", "b", "c", "d"]), "too_many_tags"),
        (lambda nb: nb.add("x" * 33, "content"), "name_too_long"),
        (lambda nb: nb.add("x", "  "), "blank_content"),
        (lambda nb: nb.add("lunch", "again"), "name_taken"),
        (lambda nb: nb.edit("lunch"), "nothing_to_change"),
        (lambda nb: nb.edit("nope", content="x"), "unknown_name"),
        (lambda nb: nb.edit("lunch", tags=["a", "b", "c", "d"]), "too_many_tags"),
        (lambda nb: nb.remove("nope"), "unknown_name"),
    ],
)
def test_invalid_writes_are_refused_with_the_rule_and_change_nothing(store, call, code):
    notebook = Notebook(store, Actor.CLI)
    notebook.add("lunch", "Lunch on Fridays")
    before = store.history("lunch")

    with pytest.raises(MemoError) as refused:
        call(notebook)

    assert refused.value.code == code
    assert store.history("lunch") == before
    assert [m.name for m in store.list(None).memos] == ["lunch"]


def test_the_tag_kind_limit_holds_per_audience(store):
    notebook = Notebook(store, Actor.CLI)
    for i in range(10):
        notebook.add(f"m{i}", "x", tags=[f"t{2 * i}", f"t{2 * i + 1}"])

    with pytest.raises(MemoError) as refused:
        notebook.add("one-more", "x", tags=["new"])
    assert refused.value.code == "too_many_tag_kinds"
    with pytest.raises(MemoError):
        notebook.add("one-more", "x", tags=["new"], audience=DM)  # a DM sees the workspace's tags too


def test_names_are_per_audience_and_edits_pick_one(store):
    notebook = Notebook(store, Actor.CLI)
    notebook.add("lunch", "DM lunch", audience=DM)
    notebook.add("lunch", "Workspace lunch")  # the DM's memo hides it there
    with pytest.raises(MemoError) as taken:
        notebook.add("lunch", "Another", audience=DM)
    assert taken.value.code == "name_taken"

    with pytest.raises(MemoError) as refused:
        notebook.edit("lunch", content="?")
    assert refused.value.code == "ambiguous_name"

    notebook.edit("lunch", content="DM lunch, moved", audience=DM)
    notebook.remove("lunch", audience=WORKSPACE)

    assert store.get("lunch", Reader("D1")).content == "DM lunch, moved"
    assert [m.name for m in store.list(Reader("C1")).memos] == []
    assert [r.action.value for r in store.history("lunch", audience=WORKSPACE)] == ["add", "remove"]
    notebook.restore("lunch", audience=WORKSPACE)
    notebook.pin("lunch", audience=DM)
    assert [m.content for m in store.pinned(None)] == ["DM lunch, moved"]
    notebook.unpin("lunch", audience=DM)
    assert store.pinned(None) == []


def test_pinned_memos_are_editable_only_when_allowed(store):
    store.add(MemoDraft.create("rule", "No spoilers", 5), Origin("C1"), "model:U1")
    store.pin("rule", "user:cli")

    with pytest.raises(MemoError) as refused:
        Notebook(store, Actor.MCP, allow_pinned=False).edit("rule", content="Spoilers are fine")
    assert refused.value.code == "pinned"
    with pytest.raises(MemoError):
        Notebook(store, Actor.MCP, allow_pinned=False).remove("rule")

    edited = Notebook(store, Actor.MCP).edit("rule", content="Spoilers after a week")
    assert edited.content == "Spoilers after a week"
    assert store.history("rule")[-1].actor == "user:mcp"
