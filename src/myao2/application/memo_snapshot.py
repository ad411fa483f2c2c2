"""Markdown snapshots of the notebook: export every live memo to a folder, and import a folder back.

A snapshot is a mapping of relative paths (`food/alice-ramen.md`, with `/`) to the text of
each memo file (`myao2.application.memo_markdown`); reading and writing the folder is the
caller's. Files are grouped in folders by their memo's first tag; names are safe on every
OS and distinct even where case and Unicode normalization do not count.

An import is planned first: each file is added, changed, unchanged, refused (a memo rule,
a clash with another file, or a memo outside the scope) or invalid (unreadable); memos the
folder lacks are removed only when pruning, and never while a file is unreadable (it may
be one of them). Applying writes through the notebook as actor `import`, so a file edited
by a person becomes an edit of its memo, with its history kept: a file matches the memo of
its name and audience, or else, renamed, the memo it was exported for.
"""

from __future__ import annotations

import unicodedata
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from enum import Enum

from myao2.application.memo_markdown import MemoFile, MemoFileError, parse_memo, render_memo
from myao2.application.notebook import Actor, Notebook
from myao2.domain.memo import Memo, MemoDraft, MemoError, check_tag_kinds
from myao2.domain.ports import MemoStore
from myao2.domain.visibility import WORKSPACE_VIEW, Audience, Reader, feeds_workspace, view_of

MEMO_SUFFIX = ".md"
_UNSAFE = frozenset('<>:"/\\|?*')
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
_DEVICE_NAMES = frozenset(
    {"CON", "PRN", "AUX", "NUL"} | {f"{port}{n}" for port in ("COM", "LPT") for n in "123456789¹²³"}
)
_FIELDS = ("name", "content", "priority", "tags", "detail")

Key = tuple[Audience, str]
"""A live memo's identity: its audience and name."""


class Scope(str, Enum):
    """Which memos a snapshot holds: what the whole workspace may see, or every memo."""

    WORKSPACE = "workspace"
    ALL = "all"

    def includes(self, audience: Audience) -> bool:
        return self is Scope.ALL or feeds_workspace(audience)

    @property
    def reader(self) -> Reader | None:
        """Who reads the memos in scope: the whole workspace (a memo it keeps from a channel stored as not public
        since is that channel's alone, see `Memo.visible_in`), or a person's own view, which reads every memo."""
        return None if self is Scope.ALL else WORKSPACE_VIEW


# -- export ------------------------------------------------------------------


def export_snapshot(store: MemoStore, scope: Scope) -> dict[str, str]:
    """The Markdown file of every live memo in `scope`, by relative path, in path order."""
    memos = [memo for memo in store.list(scope.reader).memos if scope.includes(memo.audience)]
    pinned = {memo.id for memo in store.pinned(None)}
    files = {path: render_memo(memo, pinned=memo.id in pinned) for path, memo in snapshot_paths(memos)}
    return dict(sorted(files.items()))


def snapshot_paths(memos: list[Memo]) -> list[tuple[str, Memo]]:
    """Where each memo goes: `<first tag>/<name>.md`, or `<name>.md` without tags.

    Each folder is one namespace, compared case-insensitively after NFC normalization; where
    names meet, the memo first in (name, audience) order keeps the plain one and the others
    get `~2`, `~3`... before the suffix. Only the memos' names, tags and audiences count.
    """
    ordered = sorted(memos, key=_order)
    root = _Folder()
    folders = {tag: root.take(safe_stem(tag)) for tag in sorted({m.tags[0] for m in ordered if m.tags})}
    contents: defaultdict[str | None, _Folder] = defaultdict(_Folder, {None: root})
    placed = []
    for memo in ordered:
        tag = memo.tags[0] if memo.tags else None
        name = contents[tag].take(safe_stem(memo.name), MEMO_SUFFIX)
        placed.append((name if tag is None else f"{folders[tag]}/{name}", memo))
    return placed


def safe_stem(text: str) -> str:
    """`text` as a file name without suffix that Windows, macOS and Linux all accept as it is."""
    stem = "".join(
        "_" if ch in _UNSAFE or unicodedata.category(ch) in _UNSAFE_CATEGORIES else ch
        for ch in unicodedata.normalize("NFC", text)
    )
    if stem.startswith("."):
        stem = "_" + stem[1:]
    kept = stem.rstrip(". ")
    stem = kept + "_" * (len(stem) - len(kept))
    if not stem or stem.split(".")[0].rstrip(" ").upper() in _DEVICE_NAMES:
        stem = "_" + stem
    return stem


class _Folder:
    """The names taken in one folder, as a case-insensitive file system compares them."""

    def __init__(self) -> None:
        self._taken: set[str] = set()

    def take(self, stem: str, suffix: str = "") -> str:
        name, number = stem + suffix, 1
        while _fold(name) in self._taken:
            number += 1
            name = f"{stem}~{number}{suffix}"
        self._taken.add(_fold(name))
        return name


def _fold(name: str) -> str:
    return unicodedata.normalize("NFC", unicodedata.normalize("NFC", name).casefold())


def _order(memo: Memo) -> tuple[str, str]:
    return memo.name, memo.audience.conversation_id or ""


# -- import ------------------------------------------------------------------


class Outcome(str, Enum):
    ADDED = "added"
    CHANGED = "changed"
    UNCHANGED = "unchanged"
    REMOVED = "removed"
    KEPT = "kept"
    """Not in the folder, and kept: removing it needs pruning."""
    REFUSED = "refused"
    INVALID = "invalid"


@dataclass(frozen=True)
class Step:
    """What happens (or happened) to one file, or to one memo the folder lacks."""

    outcome: Outcome
    path: str | None = None
    """The file; None for a memo the folder lacks."""
    key: Key | None = None
    changed: tuple[str, ...] = ()
    """The fields a change writes: name, content, priority, tags, detail, pinned."""
    reason: str | MemoError | None = None
    """Why the file was refused or is invalid."""
    file: MemoFile | None = None
    draft: MemoDraft | None = None
    memo: Memo | None = None
    """The stored memo the step concerns."""

    @property
    def overwrites(self) -> bool:
        """Whether a change replaces revisions made since its file was written (by the bot, say)."""
        written = self.file.revision if self.file is not None else None
        return self.outcome is Outcome.CHANGED and written is not None and self.memo is not None and (
            written < self.memo.revision
        )


@dataclass(frozen=True)
class ImportPlan:
    """The steps of an import, files in path order, then memos the folder lacks by name."""

    steps: tuple[Step, ...]
    prune_withheld: bool = False
    """Pruning was asked for but not done, because a file could not be read."""

    def count(self, outcome: Outcome) -> int:
        return sum(1 for step in self.steps if step.outcome is outcome)

    @property
    def complete(self) -> bool:
        """Whether every file can be (or was) applied: nothing refused or invalid."""
        return not any(step.outcome in (Outcome.REFUSED, Outcome.INVALID) for step in self.steps)


def plan_import(store: MemoStore, files: Mapping[str, bytes], scope: Scope, *, prune: bool = False) -> ImportPlan:
    """What importing `files` (their bytes by relative path) would do, the store unchanged.

    Memo rules that depend on other memos (names per audience, the tag-kind limit) are
    checked against the store as the import would leave it, in the order applying uses. Only the memos the
    scope's reader reads are the folder's to match, change or prune.
    """
    live = {_key(memo): memo for memo in store.list(scope.reader).memos}
    pinned = {memo.id for memo in store.pinned(None)}
    steps = [_read(path, data, scope, live, pinned) for path, data in sorted(files.items())]
    steps = _refuse_duplicates(steps)
    steps = _find_renames(steps, [memo for key, memo in live.items() if scope.includes(key[0])], pinned)
    named = {_key(step.memo) if step.memo else step.key for step in steps if step.key is not None}
    unreadable = any(step.outcome is Outcome.INVALID for step in steps)
    missing = Outcome.REMOVED if prune and not unreadable else Outcome.KEPT
    for key, memo in sorted(live.items(), key=lambda item: _order(item[1])):
        if key not in named and scope.includes(key[0]):
            steps.append(Step(missing, key=key, memo=memo))
    rehearsal = _Rehearsal(live.values())
    checked = {id(step): rehearsal.check(step) for step in _in_applying_order(steps)}
    return ImportPlan(
        tuple(checked.get(id(step), step) for step in steps),
        prune_withheld=prune and unreadable,
    )


def apply_import(store: MemoStore, plan: ImportPlan) -> ImportPlan:
    """Make the plan's writes as actor `import`; the plan with what actually happened."""
    notebook = Notebook(store, Actor.IMPORT)
    done = {id(step): _apply(notebook, step) for step in _in_applying_order(list(plan.steps))}
    return replace(plan, steps=tuple(done.get(id(step), step) for step in plan.steps))


def _read(path: str, data: bytes, scope: Scope, live: dict[Key, Memo], pinned: set[int | None]) -> Step:
    try:
        file = parse_memo(data.decode("utf-8"))
    except UnicodeDecodeError:
        return Step(Outcome.INVALID, path, reason="not UTF-8 text")
    except MemoFileError as error:
        return Step(Outcome.INVALID, path, reason=str(error))
    except MemoError as error:
        return Step(Outcome.INVALID, path, reason=error)
    key = (file.audience, file.name)
    if not scope.includes(file.audience):
        reason = f"kept for conversation {file.audience.conversation_id}: import it with --visibility all"
        return Step(Outcome.REFUSED, path, key, reason=reason, file=file)
    try:
        draft = file.draft()
    except MemoError as error:
        return Step(Outcome.REFUSED, path, key, reason=error, file=file)
    memo = live.get(key)
    if memo is None:
        return Step(Outcome.ADDED, path, key, file=file, draft=draft)
    return _compared(Step(Outcome.UNCHANGED, path, key, file=file, draft=draft), memo, pinned)


def _compared(step: Step, memo: Memo, pinned: set[int | None]) -> Step:
    """`step` as a change of `memo` (or no change, where its file says what the memo holds)."""
    assert step.draft is not None and step.file is not None
    changed = tuple(field for field in _FIELDS if getattr(step.draft, field) != getattr(memo, field))
    if step.file.pinned != (memo.id in pinned):
        changed += ("pinned",)
    outcome = Outcome.CHANGED if changed else Outcome.UNCHANGED
    return replace(step, outcome=outcome, changed=changed, memo=memo)


def _find_renames(steps: list[Step], memos: list[Memo], pinned: set[int | None]) -> list[Step]:
    """A new name in the file an export wrote for a memo of the same audience that no file names
    any more is a rename of that memo: its history goes on under the new name."""
    homes = dict(snapshot_paths(memos))
    named = {step.key for step in steps}
    found = []
    for step in steps:
        memo = homes.get(step.path or "")
        if step.outcome is Outcome.ADDED and memo and _key(memo) not in named and memo.audience == step.key[0]:
            step = _compared(step, memo, pinned)
        found.append(step)
    return found


def _refuse_duplicates(steps: list[Step]) -> list[Step]:
    """Files naming the same memo are all refused: which one is meant is not for the import to guess."""
    paths: defaultdict[Key, list[str]] = defaultdict(list)
    for step in steps:
        if step.key is not None and step.path is not None:
            paths[step.key].append(step.path)
    refused = []
    for step in steps:
        others = [path for path in paths[step.key] if path != step.path] if step.key is not None else []
        if others:
            step = replace(step, outcome=Outcome.REFUSED, reason=f"the same memo is also in {', '.join(others)}")
        refused.append(step)
    return refused


def _in_applying_order(steps: list[Step]) -> list[Step]:
    """Removals first (they free names and tag kinds), then changes, then additions."""
    rank = {Outcome.REMOVED: 0, Outcome.CHANGED: 1, Outcome.ADDED: 2}
    return sorted((step for step in steps if step.outcome in rank), key=lambda step: rank[step.outcome])


def _apply(notebook: Notebook, step: Step) -> Step:
    assert step.key is not None
    audience, name = step.key
    try:
        if step.outcome is Outcome.REMOVED:
            notebook.remove(name, audience=audience)
            return step
        assert step.draft is not None and step.file is not None
        draft = step.draft
        if step.outcome is Outcome.ADDED:
            notebook.add(draft.name, draft.content, draft.priority, list(draft.tags), draft.detail, audience=audience)
            if step.file.pinned:
                notebook.pin(name, audience=audience)
            return step
        assert step.memo is not None
        edits = {field: getattr(draft, field) for field in _FIELDS if field in step.changed}
        if edits:
            if "name" in edits:
                edits["new_name"] = edits.pop("name")
            if "tags" in edits:
                edits["tags"] = list(draft.tags)
            if "detail" in edits:
                edits["detail"] = draft.detail or ""
            notebook.edit(step.memo.name, audience=audience, **edits)
        if "pinned" in step.changed:
            (notebook.pin if step.file.pinned else notebook.unpin)(name, audience=audience)
        return step
    except MemoError as error:
        return replace(step, outcome=Outcome.REFUSED, reason=error)


class _Rehearsal:
    """The live memos' tags by key, as the import changes them, to foresee the store's refusals."""

    def __init__(self, memos: Iterable[Memo]) -> None:
        self._tags: dict[Key, tuple[str, ...]] = {_key(memo): memo.tags for memo in memos}

    def check(self, step: Step) -> Step:
        """`step` as the store would take it: refused, or done (and remembered)."""
        assert step.key is not None
        if step.outcome is Outcome.REMOVED:
            del self._tags[step.key]
            return step
        assert step.draft is not None
        audience, name = step.key
        before = _key(step.memo) if step.memo is not None else None
        view = view_of(audience)
        others = {key: tags for key, tags in self._tags.items() if key[0] in view and key != before}
        try:
            if (step.outcome is Outcome.ADDED or "name" in step.changed) and any((a, name) in others for a in view):
                raise MemoError("name_taken", name=name)
            if step.outcome is Outcome.ADDED or "tags" in step.changed:
                check_tag_kinds(step.draft.tags, {tag for tags in others.values() for tag in tags})
        except MemoError as error:
            return replace(step, outcome=Outcome.REFUSED, reason=error)
        if before is not None:
            del self._tags[before]
        self._tags[step.key] = step.draft.tags
        return step


def _key(memo: Memo) -> Key:
    return memo.audience, memo.name
