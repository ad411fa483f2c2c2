"""Markdown snapshots (`myao2.application.memo_snapshot`): folder layout, export scope, import plans and their application."""

from __future__ import annotations

import unicodedata
from datetime import datetime, timezone

import pytest

from myao2.application.memo_snapshot import (
    Outcome,
    Scope,
    apply_import,
    export_snapshot,
    plan_import,
    safe_stem,
    snapshot_paths,
)
from myao2.application.notebook import Actor, Notebook
from myao2.cli import main
from myao2.domain.memo import MAX_TAG_KINDS, Memo, Visibility
from myao2.domain.visibility import WORKSPACE, Audience, Reader
from myao2.infrastructure.db.memo_store import SqlMemoStore
from tests.clocks import ManualClock
from tests.memo_log import assert_log_replays
from tests.sqlite import MigratedCopy

DM = Audience("D1")
WHEN = datetime(2025, 1, 2, tzinfo=timezone.utc)


@pytest.fixture
def store():
    database = MigratedCopy()
    yield SqlMemoStore(database.engine, ManualClock())
    database.close()


@pytest.fixture
def notebook(store):
    book = Notebook(store, Actor.CLI)
    book.add("alice-ramen", "Alice loves spicy ramen", 4, ["food", "alice"], "Likes Ichiran")
    book.add("standup", "Standup at 10:00", 3)
    book.add("surprise", "A party for Bob on Friday", 5, ["food"], audience=DM)
    book.pin("standup")
    return book


def files_of(store, scope=Scope.WORKSPACE) -> dict[str, bytes]:
    return {path: text.encode() for path, text in export_snapshot(store, scope).items()}


def outcomes(plan) -> list[tuple[str, str | None]]:
    return [(step.outcome.value, step.path or step.key[1]) for step in plan.steps]


def named(name: str, *tags: str, conversation: str | None = None) -> Memo:
    visibility = Visibility.CONVERSATION if conversation else Visibility.WORKSPACE
    return Memo(name, "x", 3, tags, WHEN, WHEN, channel_id=conversation, visibility=visibility)


# -- layout ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "stem"),
    [
        ("alice-ramen", "alice-ramen"),
        ("ボブの誕生日", "ボブの誕生日"),
        ('a/b\\c:d*e?f"g<h>i|j', "a_b_c_d_e_f_g_h_i_j"),
        ("tab\tand\u200bzero-width", "tab_and_zero-width"),
        (".hidden", "_hidden"),
        ("..", "__"),
        ("ends with dot.", "ends with dot_"),
        ("CON", "_CON"),
        ("nul.txt", "_nul.txt"),
        ("com1", "_com1"),
        ("Lpt9 ", "Lpt9_"),
        ("console", "console"),
        ("cafe\u0301", "café"),
    ],
)
def test_file_names_are_safe_on_every_os(text, stem):
    assert safe_stem(text) == stem


def test_memos_go_to_the_folder_of_their_first_tag_and_clashing_names_are_numbered_in_name_order():
    memos = [
        named("lunch", "food"),
        named("Lunch", "food", "team"),
        named("LUNCH", "food"),
        named("a/b", "food"),
        named("a:b", "food"),
        named("lunch", "food", conversation="D1"),
        named("notes"),
        named("notes.md"),
        named("x", "notes.md"),
        named("x", "Food", conversation="D2"),
    ]

    paths = sorted(path for path, _ in snapshot_paths(memos))

    assert paths == sorted(
        [
            "Food/x.md",
            "food~2/LUNCH.md",
            "food~2/Lunch~2.md",
            "food~2/a_b.md",
            "food~2/a_b~2.md",
            "food~2/lunch~3.md",
            "food~2/lunch~4.md",
            "notes.md/x.md",
            "notes~2.md",
            "notes.md.md",
        ]
    )
    by_memo = {(memo.name, memo.channel_id): path for path, memo in snapshot_paths(memos)}
    assert by_memo[("lunch", None)] == "food~2/lunch~3.md"
    assert by_memo[("lunch", "D1")] == "food~2/lunch~4.md"


# -- export ------------------------------------------------------------------


def test_export_by_default_holds_only_what_the_workspace_may_see(store, notebook):
    files = export_snapshot(store, Scope.WORKSPACE)

    assert list(files) == ["food/alice-ramen.md", "standup.md"]
    assert "pinned: true" in files["standup.md"]
    assert "Bob" not in "".join(files.values())


def test_export_of_all_adds_private_memos_with_their_conversation(store, notebook):
    files = export_snapshot(store, Scope.ALL)

    assert list(files) == ["food/alice-ramen.md", "food/surprise.md", "standup.md"]
    assert "visibility: conversation\nconversation: D1\n" in files["food/surprise.md"]


def test_export_is_deterministic_and_a_change_touches_only_its_file(store, notebook):
    before = export_snapshot(store, Scope.ALL)
    assert export_snapshot(store, Scope.ALL) == before

    notebook.edit("standup", content="Standup at 10:30")
    after = export_snapshot(store, Scope.ALL)

    assert [path for path in before if before[path] != after[path]] == ["standup.md"]
    assert "Standup at 10:30" in after["standup.md"] and "revision: 2" in after["standup.md"]


# -- import ------------------------------------------------------------------


def test_importing_an_export_changes_nothing(store, notebook):
    plan = plan_import(store, files_of(store, Scope.ALL), Scope.ALL, prune=True)

    assert outcomes(plan) == [
        ("unchanged", "food/alice-ramen.md"),
        ("unchanged", "food/surprise.md"),
        ("unchanged", "standup.md"),
    ]
    assert plan.complete


def test_a_plan_writes_nothing_and_apply_edits_in_place_keeping_history(store, notebook):
    files = files_of(store)
    files["food/alice-ramen.md"] = (
        files["food/alice-ramen.md"].replace(b"priority: 4", b"priority: 5").replace(b"\n## Detail\n\nLikes Ichiran\n", b"")
    )
    files["standup.md"] = files["standup.md"].replace(b"pinned: true", b"pinned: false")
    files["new/lunch.md"] = b"---\nname: lunch\ntags: [food]\n---\n\nLunch at noon\n"

    plan = plan_import(store, files, Scope.WORKSPACE)

    assert outcomes(plan) == [
        ("changed", "food/alice-ramen.md"),
        ("added", "new/lunch.md"),
        ("changed", "standup.md"),
    ]
    assert [step.changed for step in plan.steps if step.outcome is Outcome.CHANGED] == [
        ("priority", "detail"), ("pinned",)
    ]
    assert [memo.name for memo in store.list(None).memos] == ["surprise", "alice-ramen", "standup"]

    done = apply_import(store, plan)

    assert outcomes(done) == outcomes(plan) and done.complete
    alice = store.get("alice-ramen", None)
    assert (alice.priority, alice.detail, alice.revision) == (5, None, 2)
    assert [(r.action.value, r.actor) for r in store.history("alice-ramen")] == [
        ("add", "user:cli"), ("edit", "user:import")
    ]
    assert store.get("lunch", Reader("C1")).tags == ("food",)
    assert store.history("lunch")[0].actor == "user:import"
    assert [memo.name for memo in store.pinned(None)] == []
    assert plan_import(store, files, Scope.WORKSPACE).count(Outcome.UNCHANGED) == 3
    assert_log_replays(store)


def test_refusals_and_invalid_files_are_reported_and_the_rest_applies(store, notebook):
    files = files_of(store)
    files["a.md"] = b"---\nname: four-tags\ntags: [a, b, c, d]\n---\nhi\n"
    files["b.md"] = b"---\nname: [broken\n---\nhi\n"
    files["c.md"] = b"---\nname: secret\nvisibility: conversation\nconversation: D1\n---\nhi\n"
    files["d.md"] = b"\xff\xfe not text"
    files["e.md"] = b"---\nname: twice\n---\none\n"
    files["f.md"] = b"---\nname: twice\n---\ntwo\n"
    files["g.md"] = b"---\nname: fine\n---\nA fine memo\n"

    plan = apply_import(store, plan_import(store, files, Scope.WORKSPACE))

    assert [(o, p) for o, p in outcomes(plan) if o != "unchanged"] == [
        ("refused", "a.md"),
        ("invalid", "b.md"),
        ("refused", "c.md"),
        ("invalid", "d.md"),
        ("refused", "e.md"),
        ("refused", "f.md"),
        ("added", "g.md"),
    ]
    reasons = {step.path: step.reason for step in plan.steps}
    assert reasons["a.md"].code == "too_many_tags"
    assert reasons["b.md"] == "the front matter is not valid YAML (line 2)"
    assert reasons["c.md"] == "kept for conversation D1: import it with --visibility all"
    assert reasons["d.md"] == "not UTF-8 text"
    assert reasons["e.md"] == "the same memo is also in f.md"
    assert not plan.complete
    assert store.get("fine", None).content == "A fine memo"
    assert {memo.name for memo in store.list(None).memos} == {"alice-ramen", "standup", "surprise", "fine"}


def test_a_file_kept_for_conversation_workspace_is_imported_for_the_workspace(store, notebook):
    files = files_of(store)
    files["lunch.md"] = b"---\nname: lunch\nvisibility: conversation\nconversation: workspace\n---\nLunch at noon\n"

    plan = apply_import(store, plan_import(store, files, Scope.WORKSPACE))

    assert [(o, p) for o, p in outcomes(plan) if o != "unchanged"] == [("added", "lunch.md")]
    assert store.get("lunch", None).audience == WORKSPACE


def test_a_name_clash_and_the_tag_kind_limit_are_foreseen_in_the_plan(store, notebook):
    files = files_of(store, Scope.ALL)
    files["dm.md"] = b"---\nname: standup\nvisibility: conversation\nconversation: D1\n---\nhi\n"
    kinds = [f"t{n}" for n in range(MAX_TAG_KINDS)]
    for n in range(0, MAX_TAG_KINDS, 3):
        files[f"k{n:02}.md"] = f"---\nname: k{n}\ntags: [{', '.join(kinds[n:n + 3])}]\n---\nhi\n".encode()

    plan = plan_import(store, files, Scope.ALL)
    refused = {step.path: step.reason.code for step in plan.steps if step.outcome is Outcome.REFUSED}

    # with food and alice, the workspace would see 22 kinds after the last file
    assert refused == {"dm.md": "name_taken", "k18.md": "too_many_tag_kinds"}
    done = apply_import(store, plan)
    assert {step.path: step.outcome for step in done.steps} == {step.path: step.outcome for step in plan.steps}


def test_memos_without_a_file_are_removed_only_when_pruning_and_only_in_scope(store, notebook):
    files = files_of(store)
    del files["standup.md"]

    kept = plan_import(store, files, Scope.WORKSPACE)
    assert [(step.outcome, step.key) for step in kept.steps if step.path is None] == [
        (Outcome.KEPT, (WORKSPACE, "standup"))
    ]

    pruned = apply_import(store, plan_import(store, files, Scope.WORKSPACE, prune=True))
    assert [(step.outcome, step.key) for step in pruned.steps if step.path is None] == [
        (Outcome.REMOVED, (WORKSPACE, "standup"))
    ]
    assert {memo.name for memo in store.list(None).memos} == {"alice-ramen", "surprise"}
    assert store.history("standup")[-1].actor == "user:import"


def test_pruning_is_withheld_while_a_file_cannot_be_read(store, notebook):
    files = files_of(store)
    files["standup.md"] = b"---\nname: standup\n"

    plan = plan_import(store, files, Scope.WORKSPACE, prune=True)

    assert plan.prune_withheld
    assert [step.outcome for step in plan.steps if step.path is None] == [Outcome.KEPT]


def test_a_pruned_memo_frees_its_name_for_a_file_of_another_audience(store, notebook):
    files = files_of(store, Scope.ALL)
    del files["standup.md"]
    files["dm.md"] = b"---\nname: standup\nvisibility: conversation\nconversation: D1\n---\nhi\n"

    plan = apply_import(store, plan_import(store, files, Scope.ALL, prune=True))

    assert plan.complete
    assert store.get("standup", Reader("D1")).audience == DM


def test_unicode_names_are_compared_as_written(store):
    Notebook(store, Actor.CLI).add(unicodedata.normalize("NFD", "café"), "Coffee place", 3)
    files = files_of(store)

    assert list(files) == ["café.md"]
    assert plan_import(store, files, Scope.WORKSPACE).count(Outcome.UNCHANGED) == 1


def test_a_change_to_a_memo_edited_since_its_file_was_written_is_flagged(store, notebook):
    files = files_of(store)
    notebook.edit("alice-ramen", content="Alice loves very spicy ramen")
    edited = files["food/alice-ramen.md"].replace(b"priority: 4", b"priority: 5")

    stale = plan_import(store, {"food/alice-ramen.md": edited}, Scope.WORKSPACE)
    current = plan_import(store, files_of(store), Scope.WORKSPACE)
    by_hand = plan_import(store, {"a.md": b"---\nname: alice-ramen\n---\nhi\n"}, Scope.WORKSPACE)

    assert [(s.outcome, s.changed, s.overwrites) for s in stale.steps if s.path] == [
        (Outcome.CHANGED, ("content", "priority"), True)
    ]
    assert not any(step.overwrites for step in current.steps + by_hand.steps)


def test_the_plan_says_which_changes_overwrite_newer_revisions(tmp_path, capsys):
    config = tmp_path / "config.yaml"
    config.write_text(f"memory:\n  database_path: {tmp_path / 'memos.db'}\n")
    folder = tmp_path / "memos"
    assert main(["memo", "add", "lunch", "--content", "Lunch on Fridays", "--config", str(config)]) == 0
    assert main(["memo", "export", "--output", str(folder), "--config", str(config)]) == 0
    assert main(["memo", "edit", "lunch", "--priority", "5", "--config", str(config)]) == 0
    (folder / "lunch.md").write_text((folder / "lunch.md").read_text().replace("Fridays", "Thursdays"))
    capsys.readouterr()

    assert main(["memo", "import", "--dir", str(folder), "--config", str(config)]) == 0

    assert capsys.readouterr().out == (
        "changed   lunch.md (content, priority; the memo changed since revision 1, now 2)\n"
        "Plan: 1 changed. Nothing written: --apply applies it.\n"
    )


def test_a_name_changed_in_its_exported_file_renames_the_memo_keeping_its_history(store, notebook):
    files = files_of(store)
    files["food/alice-ramen.md"] = files["food/alice-ramen.md"].replace(b"name: alice-ramen", b"name: alice-noodles")

    plan = plan_import(store, files, Scope.WORKSPACE, prune=True)

    assert [(s.outcome, s.path, s.changed) for s in plan.steps if s.outcome is not Outcome.UNCHANGED] == [
        (Outcome.CHANGED, "food/alice-ramen.md", ("name",))
    ]
    apply_import(store, plan)
    assert [m.name for m in store.list(None).memos if m.audience.is_workspace] == ["alice-noodles", "standup"]
    assert [(r.action.value, r.actor) for r in store.history("alice-noodles")] == [
        ("add", "user:cli"), ("edit", "user:import")
    ]
    assert plan_import(store, files_of(store), Scope.WORKSPACE, prune=True).complete


def test_a_rename_onto_a_name_in_use_is_refused_and_a_file_moved_elsewhere_is_a_new_memo(store, notebook):
    files = files_of(store, Scope.ALL)
    taken = files["food/surprise.md"].replace(b"name: surprise", b"name: standup")

    clash = plan_import(store, {**files, "food/surprise.md": taken}, Scope.ALL, prune=True)
    assert [(s.outcome, s.path, s.reason.code) for s in clash.steps if s.outcome is not Outcome.UNCHANGED] == [
        (Outcome.REFUSED, "food/surprise.md", "name_taken")
    ]

    moved = files.pop("food/alice-ramen.md").replace(b"name: alice-ramen", b"name: alice-noodles")
    elsewhere = plan_import(store, {**files, "noodles.md": moved}, Scope.ALL)
    assert [(s.outcome, s.path or s.key[1]) for s in elsewhere.steps if s.outcome is not Outcome.UNCHANGED] == [
        (Outcome.ADDED, "noodles.md"), (Outcome.KEPT, "alice-ramen")
    ]
