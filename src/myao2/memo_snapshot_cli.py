"""``myao2 memo export|import``: the notebook as a folder of Markdown files, to review and keep in git.

The folder's memo files are the ``.md`` files that start with front matter, outside hidden
folders such as ``.git``. Export makes them exactly the live memos (a file whose memo is gone
is deleted; other files stay); import prints its plan and writes only with ``--apply``.
Exit status: 0 when every file is (or would be) applied, 2 when a file was refused or invalid.
"""

from __future__ import annotations

import argparse
import os
import sys
import unicodedata
from collections.abc import Iterator, Mapping
from pathlib import Path

from myao2.application.memo_markdown import has_front_matter
from myao2.application.memo_snapshot import (
    MEMO_SUFFIX,
    ImportPlan,
    Outcome,
    Scope,
    Step,
    apply_import,
    export_snapshot,
    plan_import,
)
from myao2.config import Config
from myao2.domain.memo import MemoError
from myao2.domain.ports import MemoStore
from myao2.memo_cli import EXIT_REFUSED, describe_error, open_memo_store

_SUMMARY_ORDER = (
    Outcome.ADDED,
    Outcome.CHANGED,
    Outcome.UNCHANGED,
    Outcome.REMOVED,
    Outcome.KEPT,
    Outcome.REFUSED,
    Outcome.INVALID,
)


def run_snapshot_command(config: Config, args: argparse.Namespace) -> int:
    """Run ``memo export`` or ``memo import``; 0, or 2 when something was refused or the folder is unusable."""
    scope = Scope(args.visibility)
    try:
        with open_memo_store(config) as store:
            if args.memo_command == "export":
                return _export(store, scope, args.output)
            return _import(store, scope, args.dir, apply=args.apply, prune=args.prune)
    except OSError as error:
        print(f"myao2 memo: {error.strerror or error}: {error.filename or ''}".rstrip(": "), file=sys.stderr)
        return EXIT_REFUSED


def _export(store: MemoStore, scope: Scope, folder: Path) -> int:
    files = export_snapshot(store, scope)
    write_snapshot(folder, files)
    which = "" if scope is Scope.ALL else " the whole workspace may see (--visibility all adds private ones)"
    print(f"Exported {len(files)} memo{'s' if len(files) != 1 else ''}{which} to {folder}.")
    return 0


def _import(store: MemoStore, scope: Scope, folder: Path, *, apply: bool, prune: bool) -> int:
    if not folder.is_dir():
        print(f"myao2 memo: no folder {folder}", file=sys.stderr)
        return EXIT_REFUSED
    plan = plan_import(store, read_snapshot(folder), scope, prune=prune)
    if apply:
        plan = apply_import(store, plan)
    for step in plan.steps:
        line = _describe(step)
        if line:
            print(line)
    if plan.prune_withheld:
        print("Not pruning: a file could not be read, and it may be one of the memos without a file.")
    counts = ", ".join(f"{plan.count(o)} {o.value}" for o in _SUMMARY_ORDER if plan.count(o)) or "no memo files"
    print(f"Applied: {counts}." if apply else f"Plan: {counts}. Nothing written: --apply applies it.")
    return 0 if plan.complete else EXIT_REFUSED


def write_snapshot(folder: Path, files: Mapping[str, str]) -> None:
    """Make the memo files of `folder` exactly `files` (text by relative path); leave other files alone."""
    folder.mkdir(parents=True, exist_ok=True)
    wanted = {unicodedata.normalize("NFC", path) for path in files}
    # Stale files go first: on a case-insensitive file system `Lunch.md` and `lunch.md` are one file.
    for path in _memo_file_paths(folder):
        target = folder / path
        if unicodedata.normalize("NFC", path) not in wanted and has_front_matter(_head(target)):
            target.unlink()
            if target.parent != folder and not any(target.parent.iterdir()):
                target.parent.rmdir()
    for path, text in files.items():
        target = folder / path
        data = text.encode()
        if not target.is_file() or target.read_bytes() != data:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)


def read_snapshot(folder: Path) -> dict[str, bytes]:
    """The bytes of every `.md` file under `folder` outside hidden folders, by relative path."""
    return {path: (folder / path).read_bytes() for path in _memo_file_paths(folder)}


def _memo_file_paths(folder: Path) -> Iterator[str]:
    for parent, folders, names in os.walk(folder):
        folders[:] = sorted(name for name in folders if not name.startswith("."))
        for name in sorted(names):
            if name.lower().endswith(MEMO_SUFFIX) and not name.startswith("."):
                yield (Path(parent) / name).relative_to(folder).as_posix()


def _head(path: Path) -> str:
    with path.open("rb") as file:
        return file.read(8).decode("utf-8", errors="replace")


def _describe(step: Step) -> str | None:
    """One line of the plan; None for an unchanged file."""
    where = step.path or _label(step)
    outcome = f"{step.outcome.value:<9}"
    if step.outcome is Outcome.CHANGED:
        assert step.memo is not None and step.file is not None
        since = f"; the memo changed since revision {step.file.revision}, now {step.memo.revision}" if step.overwrites else ""
        return f"{outcome} {where} ({', '.join(step.changed)}{since})"
    if step.outcome in (Outcome.ADDED, Outcome.REMOVED):
        return f"{outcome} {where}" + ("" if step.path else " (no file)")
    if step.outcome is Outcome.KEPT:
        return f"{outcome} {where} (no file; --prune removes it)"
    if step.outcome in (Outcome.REFUSED, Outcome.INVALID):
        reason = describe_error(step.reason) if isinstance(step.reason, MemoError) else step.reason
        return f"{outcome} {where}: {reason}"
    return None


def _label(step: Step) -> str:
    assert step.key is not None
    audience, name = step.key
    return name if audience.is_workspace else f"{name} (conversation {audience.conversation_id})"
