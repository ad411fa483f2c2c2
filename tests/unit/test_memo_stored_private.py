"""Memos written in a public channel since stored as private, before the narrowing reaches them (SQLite and PostgreSQL).

A conversion stores the channel's new kind first and narrows its memos later (after a crash, only `reconcile`
does). In between, a memo it kept for the workspace is that channel's alone: no other conversation's prompt,
listing, lookup, search or refusal may show it, nor tell that it exists.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from myao2.application.memo_snapshot import Outcome, Scope, apply_import, export_snapshot, plan_import
from myao2.domain.conversation import ChannelKind
from myao2.domain.memo import Action, MemoChanges, MemoDraft, MemoError, Origin, Visibility
from myao2.domain.visibility import WORKSPACE_VIEW, Audience, Reader
from tests.memo_log import assert_log_replays
from tests.unit.test_search_index import World

GENERAL = Origin("C1", channel_private=False, user_id="U1", message_ts="1.1")
PLANS = Origin("C2", channel_private=False, user_id="U2", message_ts="2.2")
DM = Origin("D1", channel_private=True, user_id="U3", message_ts="3.3")
OTHERS = (Reader("C1"), Reader("D1"), WORKSPACE_VIEW)
"""Readers other than #plans: a public channel, a DM, and a view of no conversation (the MCP server's)."""


@pytest.fixture
def world(database_url: str) -> Iterator[World]:
    world = World(database_url)  # C1 and C2 public, D1 a DM
    world.memos.add(MemoDraft.create("launch", "canary-launch moves to June", 5, ["canary-tag"], "canary-detail"), PLANS, "test")
    world.memos.add(MemoDraft.create("offsite", "canary-offsite in Hakone", 3), PLANS, "test")
    world.memos.pin("offsite", "user:cli")
    world.memos.add(MemoDraft.create("gone", "canary-gone", 3), PLANS, "test")
    world.memos.remove("gone", None, "test")
    world.memos.add(MemoDraft.create("lunch", "lunch is on Fridays", 3, ["food"]), GENERAL, "test")
    yield world
    world.close()


def stored_private(world: World) -> None:
    world.conversations.set_channel_kind("C2", ChannelKind.PRIVATE)


def prompt_names(world: World, reader: Reader | None) -> set[str]:
    parts = world.memos.for_prompt(reader, min_priority=1, important=10, recent=10)
    return {memo.name for part in parts for memo in part}


def refused(code: str) -> pytest.RaisesExc[MemoError]:
    return pytest.raises(MemoError, match=rf"^{code}\b")


def test_a_memo_of_a_channel_stored_as_private_leaves_every_other_prompt_while_not_narrowed_yet(world: World) -> None:
    assert prompt_names(world, Reader("C1")) == {"launch", "offsite", "lunch"}  # public: the workspace's
    stored_private(world)
    for reader in OTHERS:
        assert prompt_names(world, reader) == {"lunch"}, reader
        assert world.memos.pinned(reader) == [], reader
    assert prompt_names(world, Reader("C2")) == {"launch", "offsite", "lunch"}  # the channel itself still sees its own
    assert [m.name for m in world.memos.pinned(Reader("C2"))] == ["offsite"]
    assert prompt_names(world, None) == {"launch", "offsite", "lunch"}  # a person's own view sees everything


def test_a_memo_of_a_channel_stored_as_private_is_neither_listed_nor_found_by_name_elsewhere(world: World) -> None:
    stored_private(world)
    for reader in OTHERS:
        with refused("unknown_name"):
            world.memos.get("launch", reader)
        assert [m.name for m in world.memos.list(reader).memos] == ["lunch"], reader
        page = world.memos.list(reader, offset=0, limit=1)
        assert ([m.name for m in page.memos], page.total) == (["lunch"], 1), reader
        assert world.memos.list(reader, tag="canary-tag").memos == [], reader
        assert world.memos.list(reader, removed=True).memos == [], reader
        assert [t.tag for t in world.memos.tags(reader)] == ["food"], reader
    assert world.memos.get("launch", Reader("C2")).content == "canary-launch moves to June"
    assert [m.name for m in world.memos.list(Reader("C2"), removed=True).memos] == ["gone"]
    assert {t.tag for t in world.memos.tags(Reader("C2"))} == {"canary-tag", "food"}


def test_a_memo_of_a_channel_stored_as_private_cannot_be_changed_from_elsewhere(world: World) -> None:
    stored_private(world)
    with refused("unknown_name"):
        world.memos.edit("launch", MemoChanges.create(priority=1), GENERAL, "tool:edit_memo")
    with refused("unknown_name"):
        world.memos.remove("launch", GENERAL, "tool:remove_memo")
    with refused("not_removed"):
        world.memos.restore("gone", "tool:restore_memo", origin=GENERAL)
    assert world.memos.get("launch", Reader("C2")).priority == 5 and world.memos.list(Reader("C2"), removed=True).total == 1


def test_a_memo_of_a_channel_stored_as_private_is_not_found_by_a_search_elsewhere(world: World) -> None:
    stored_private(world)
    for reader in OTHERS:
        assert world.memo_names("canary-launch June", reader.conversation_id) == ["lunch"], reader  # the one memo left to find
    assert world.memo_names("canary-launch June", "C2")[0] == "launch"
    assert "launch" in world.memo_names("canary-launch June", None)


def test_a_hidden_memo_takes_no_place_among_the_hits_of_a_search_elsewhere(world: World) -> None:
    world.memo("trip", "canary-launch party after the trip", GENERAL)
    stored_private(world)
    assert world.memo_names("canary-launch moves to June", "C2", limit=1) == ["launch"]  # it ranks first
    assert world.memo_names("canary-launch moves to June", "C1", limit=1) == ["trip"]


def test_a_narrower_memo_of_the_name_still_shadows_and_a_hidden_one_shadows_nothing(world: World) -> None:
    for name in ("plan", "agenda"):  # the DM's own first: a wider memo of the name may come after
        world.memos.add(MemoDraft.create(name, f"the dm's own {name}", 3), DM, "test")
    world.memos.add(MemoDraft.create("plan", "canary-plan", 3), PLANS, "test")
    world.memos.add(MemoDraft.create("agenda", "general's agenda", 3), GENERAL, "test")
    stored_private(world)
    listed = [(m.name, m.content) for m in world.memos.list(Reader("D1")).memos if m.name in ("plan", "agenda")]
    assert sorted(listed) == [("agenda", "the dm's own agenda"), ("plan", "the dm's own plan")]
    assert world.memos.get("plan", Reader("D1")).content == "the dm's own plan"
    assert {"plan", "agenda"} <= prompt_names(world, Reader("D1"))
    assert world.memos.get("agenda", Reader("C1")).content == "general's agenda"
    with refused("unknown_name"):
        world.memos.get("plan", Reader("C1"))
    assert world.memos.get("plan", Reader("C2")).content == "canary-plan"


def test_adding_a_name_a_hidden_memo_bears_is_not_refused_and_each_channel_keeps_its_own(world: World) -> None:
    stored_private(world)
    added = world.memos.add(MemoDraft.create("launch", "the general launch", 3), GENERAL, "tool:add_memo")
    assert added.visibility is Visibility.WORKSPACE
    assert world.memos.get("launch", Reader("C1")).content == "the general launch"
    kept = world.memos.get("launch", Reader("C2"))  # the narrowing reached it first: #plans' own, shadowing the new one
    assert (kept.content, kept.audience) == ("canary-launch moves to June", Audience("C2"))
    last = world.memos.history("launch", audience=Audience("C2"))[-1]
    assert (last.action, last.actor) == (Action.NARROW, "slack")
    assert world.memos.narrow("C2", "slack") != []  # the rest is still narrowed by the conversion
    assert world.memos.get("launch", Reader("C2")).content == "canary-launch moves to June"
    assert_log_replays(world.memos)


def test_renaming_or_restoring_into_a_name_a_hidden_memo_bears_is_not_refused(world: World) -> None:
    world.memos.add(MemoDraft.create("gone", "general's gone", 3), GENERAL, "test")
    world.memos.remove("gone", GENERAL, "test")
    stored_private(world)
    renamed = world.memos.edit("lunch", MemoChanges.create(new_name="launch"), GENERAL, "tool:edit_memo")
    assert renamed.name == "launch" and world.memos.get("launch", Reader("C1")).content == "lunch is on Fridays"
    world.memos.narrow("C2", "slack")
    world.memos.add(MemoDraft.create("gone", "plans' second gone", 3), Origin("C2", channel_private=True), "test")
    restored = world.memos.restore("gone", "tool:restore_memo", origin=GENERAL)
    assert restored.content == "general's gone"
    assert world.memos.get("gone", Reader("C2")).content == "plans' second gone"
    assert_log_replays(world.memos)


def test_a_refusal_for_too_many_tag_kinds_elsewhere_neither_counts_nor_names_a_hidden_memos_tags(world: World) -> None:
    for i in range(6):  # with "food": 19 kinds the workspace sees, and the hidden memo's one
        tags = [f"k{3 * i}", f"k{3 * i + 1}", f"k{3 * i + 2}"]
        world.memos.add(MemoDraft.create(f"m{i}", "c", 3, tags), GENERAL, "test")
    stored_private(world)
    world.memos.add(MemoDraft.create("twentieth", "c", 3, ["k18"]), GENERAL, "test")
    with refused("too_many_tag_kinds") as refusal:
        world.memos.add(MemoDraft.create("one-too-many", "c", 3, ["k19"]), GENERAL, "test")
    assert "canary" not in str(refusal.value)


def test_a_dm_memos_name_and_a_narrowed_memos_name_are_free_elsewhere(world: World) -> None:
    world.memos.add(MemoDraft.create("surprise", "canary-dm", 3), DM, "test")
    world.memos.narrow("C2", "slack")
    for name in ("surprise", "offsite"):
        world.memos.add(MemoDraft.create(name, "general's own", 3), GENERAL, "test")
        assert world.memos.get(name, Reader("C1")).content == "general's own"
    assert world.memos.get("surprise", Reader("D1")).content == "canary-dm"
    assert world.memos.get("offsite", Reader("C2")).content == "canary-offsite in Hakone"


def test_the_channel_itself_is_refused_a_name_its_own_hidden_memo_bears(world: World) -> None:
    stored_private(world)
    with refused("name_taken"):
        world.memos.add(MemoDraft.create("launch", "again", 3), Origin("C2", channel_private=True), "test")


def test_a_channel_never_stored_keeps_its_memos_the_workspaces(world: World) -> None:
    world.memos.add(MemoDraft.create("elsewhere", "from a channel never stored", 3), Origin("C9"), "test")
    stored_private(world)
    assert "elsewhere" in prompt_names(world, Reader("C1"))




def test_a_workspace_export_leaves_a_hidden_memo_out_and_its_import_neither_prunes_nor_edits_it(world: World) -> None:
    # the workspace export is the folder that "can be shared": what only #plans may read stays out of it
    stored_private(world)
    files = export_snapshot(world.memos, Scope.WORKSPACE)
    assert list(files) == ["food/lunch.md"]
    assert "canary" not in "".join(files.values())
    assert any("canary-launch" in text for text in export_snapshot(world.memos, Scope.ALL).values())
    # imported back with --prune, the memos it never held are not the folder's to remove
    plan = plan_import(world.memos, {path: text.encode() for path, text in files.items()}, Scope.WORKSPACE, prune=True)
    steps = [(step.outcome, step.memo.name if step.memo else None) for step in plan.steps]
    assert steps == [(Outcome.UNCHANGED, "lunch")]
    # a file of the folder bearing the hidden memo's name is a new workspace memo, not an edit of #plans' memo
    shared = {"launch.md": b"---\nname: launch\n---\nthe shared launch\n"}
    applied = apply_import(world.memos, plan_import(world.memos, shared, Scope.WORKSPACE))
    assert [step.outcome for step in applied.steps if step.path] == [Outcome.ADDED]
    assert world.memos.get("launch", Reader("C2")).content == "canary-launch moves to June"
    assert world.memos.get("launch", Reader("C1")).content == "the shared launch"
