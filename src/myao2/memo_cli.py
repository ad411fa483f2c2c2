"""``myao2 memo ...``: a person's own view of every memo, and their writes to it.

``list|show|history`` read; ``add|edit|remove|restore|pin|unpin`` write through
`myao2.application.notebook` (actor ``cli``), so the tools' rules and history hold.
Times are shown in the persona's time zone; ``--json`` prints data for scripts.
"""

from __future__ import annotations

import argparse
import json
import sys
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, tzinfo
from typing import Any

from myao2.application.notebook import DEFAULT_PRIORITY, Actor, Notebook
from myao2.config import Config
from myao2.domain.memo import Memo, MemoError, MemoRevision, validate_priority
from myao2.domain.ports import MemoStore
from myao2.domain.visibility import WORKSPACE, Audience, named_audience
from myao2.infrastructure.clock import SystemClock
from myao2.infrastructure.db.engine import open_database
from myao2.infrastructure.db.memo_store import SqlMemoStore
from myao2.infrastructure.llm.memo_messages import error_message

EXIT_REFUSED = 2
CONTENT_WIDTH = 50
TIME_FORMAT = "%Y-%m-%d %H:%M"
HISTORY_FIELDS = ("name", "content", "priority", "tags", "detail")

_ERRORS = {
    "unknown_name": "no memo named {name!r}",
    "not_pinned": "the memo {name!r} is not pinned",
    "not_removed": "no removed memo named {name!r}",
    "name_taken": "a memo named {name!r} already exists; rename or remove it first",
    "too_many_tag_kinds": "that would make more than {limit} kinds of tags (new: {new})",
    "bad_priority": "priority must be a whole number from 1 to 5, not {value}",
    "ambiguous_name": "several memos are named {name!r} (kept for {audiences}); choose one with --conversation",
    "nothing_to_change": "nothing to change: give --content, --priority, --tags, --detail or --new-name",
    "content_too_long": "the content is too long ({length} characters; the limit is {limit}); put longer notes in --detail",
    "changed_meanwhile": "the memo {name!r} was changed meanwhile; read it again and retry",
}

Command = Callable[[MemoStore, tzinfo, argparse.Namespace], None]


def run_memo_command(config: Config, args: argparse.Namespace) -> int:
    """Run the memo subcommand `args.memo_command`; 0 on success, 2 when a memo operation is refused."""
    try:
        with open_memo_store(config) as store:
            _COMMANDS[args.memo_command](store, config.persona.tzinfo, args)
    except MemoError as exc:
        print(f"myao2 memo: {describe_error(exc)}", file=sys.stderr)
        return EXIT_REFUSED
    return 0


@contextmanager
def open_memo_store(config: Config) -> Iterator[SqlMemoStore]:
    """The configured database's memo store, its engine disposed of afterwards."""
    engine = open_database(config.memory.sqlalchemy_url)
    try:
        yield SqlMemoStore(engine, SystemClock())
    finally:
        engine.dispose()


def describe_error(error: MemoError) -> str:
    """A one-line explanation of a refused memo operation, for people: the tools' wording where
    it does not name a tool."""
    template = _ERRORS.get(error.code)
    return template.format(**error.params) if template else error_message(error, "en")


# -- commands ----------------------------------------------------------------


def _list(store: MemoStore, tz: tzinfo, args: argparse.Namespace) -> None:
    min_priority = 1 if args.min_priority is None else validate_priority(args.min_priority)
    memos = store.list(None, tag=args.tag, min_priority=min_priority, removed=args.removed).memos
    if args.json:
        _print_json([memo.snapshot() for memo in memos])
        return
    if not memos:
        print("No removed memos." if args.removed else "No memos.")
        return
    headers = ["NAME", "PRIORITY", "TAGS", "UPDATED"] + (["REMOVED"] if args.removed else []) + ["CONTENT"]
    rows = []
    for memo in memos:
        removed = [_local(memo.removed_at, tz)] if args.removed else []
        updated = _local(memo.updated_at, tz)
        content = _truncate(_one_line(memo.content), CONTENT_WIDTH)
        rows.append([memo.name, str(memo.priority), ", ".join(memo.tags), updated, *removed, content])
    print(_table(headers, rows))
    print(f"{len(memos)} memo{'s' if len(memos) != 1 else ''}")


def _show(store: MemoStore, tz: tzinfo, args: argparse.Namespace) -> None:
    memo = store.get(args.name, None, audience=_audience(args))
    if args.json:
        _print_json(memo.snapshot())
        return
    for label, value in _describe_memo(memo, tz):
        print(f"{label + ':':<12} {value}")


def _history(store: MemoStore, tz: tzinfo, args: argparse.Namespace) -> None:
    revisions = store.history(args.name, audience=_audience(args))
    if args.json:
        _print_json([_revision_data(revision) for revision in revisions])
        return
    for revision in revisions:
        print(f"{_local(revision.at, tz)}  {revision.action.value:<8} by {revision.actor}")
        for line in _changes(revision):
            print(f"    {line}")


def _add(store: MemoStore, tz: tzinfo, args: argparse.Namespace) -> None:
    audience = _audience(args) or WORKSPACE
    priority = DEFAULT_PRIORITY if args.priority is None else args.priority
    memo = _notebook(store).add(args.name, args.content, priority, _tags(args.tags), args.detail, audience=audience)
    print(f"Added memo {memo.name!r} for {_audience_label(memo.audience)} (priority {memo.priority}).")


def _edit(store: MemoStore, tz: tzinfo, args: argparse.Namespace) -> None:
    memo = _notebook(store).edit(
        args.name,
        content=args.content,
        priority=args.priority,
        tags=_tags(args.tags),
        detail=args.detail,
        new_name=args.new_name,
        audience=_audience(args),
    )
    print(f"Edited memo {memo.name!r} (revision {memo.revision}).")


def _remove(store: MemoStore, tz: tzinfo, args: argparse.Namespace) -> None:
    memo = _notebook(store).remove(args.name, audience=_audience(args))
    print(f"Removed memo {memo.name!r}; `myao2 memo restore` brings it back.")


def _restore(store: MemoStore, tz: tzinfo, args: argparse.Namespace) -> None:
    memo = _notebook(store).restore(args.name, audience=_audience(args))
    print(f"Restored memo {memo.name!r} (priority {memo.priority}).")


def _pin(store: MemoStore, tz: tzinfo, args: argparse.Namespace) -> None:
    memo = _notebook(store).pin(args.name, audience=_audience(args))
    print(f"Pinned memo {memo.name!r}: it is now a rule in every prompt that may see it, and the bot cannot change it.")


def _unpin(store: MemoStore, tz: tzinfo, args: argparse.Namespace) -> None:
    memo = _notebook(store).unpin(args.name, audience=_audience(args))
    print(f"Unpinned memo {memo.name!r}.")


def _notebook(store: MemoStore) -> Notebook:
    return Notebook(store, Actor.CLI)


def _tags(value: str | None) -> list[str] | None:
    """`--tags a,b` as a list; an empty `--tags ""` removes them all."""
    return None if value is None else value.split(",")


def _audience_label(audience: Audience) -> str:
    return "the workspace" if audience.is_workspace else f"conversation {audience.conversation_id}"


def _audience(args: argparse.Namespace) -> Audience | None:
    """The audience `--conversation` names: a conversation id, or `workspace`."""
    return None if args.conversation is None else named_audience(args.conversation)


_COMMANDS: dict[str, Command] = {
    "list": _list,
    "show": _show,
    "history": _history,
    "add": _add,
    "edit": _edit,
    "remove": _remove,
    "restore": _restore,
    "pin": _pin,
    "unpin": _unpin,
}


# -- presentation ------------------------------------------------------------


def _describe_memo(memo: Memo, tz: tzinfo) -> list[tuple[str, str]]:
    detail = (memo.detail or "(none)").replace("\n", "\n" + " " * 13)
    return [
        ("Name", memo.name),
        ("Content", memo.content),
        ("Priority", str(memo.priority)),
        ("Tags", ", ".join(memo.tags) or "(none)"),
        ("Detail", detail),
        ("Visibility", memo.visibility.value),
        ("Revision", str(memo.revision)),
        ("User", memo.user_id or "(unknown)"),
        ("Channel", memo.channel_id or "(none)"),
        ("Message ts", memo.message_ts or "(none)"),
        ("Created", _local(memo.created_at, tz)),
        ("Updated", _local(memo.updated_at, tz)),
    ]


def _changes(revision: MemoRevision) -> list[str]:
    """What a revision changed: the new memo's fields for an add, else each changed field."""
    after = revision.after or {}
    if revision.before is None:
        return [f"{field}: {_value(after.get(field))}" for field in HISTORY_FIELDS if after.get(field)]
    before = revision.before
    return [
        f"{field}: {_value(before.get(field))} → {_value(after.get(field))}"
        for field in HISTORY_FIELDS
        if before.get(field) != after.get(field)
    ]


def _revision_data(revision: MemoRevision) -> dict[str, Any]:
    return {
        "memo_id": revision.memo_id,
        "memo_name": revision.memo_name,
        "action": revision.action.value,
        "actor": revision.actor,
        "at": revision.at.isoformat(),
        "before": revision.before,
        "after": revision.after,
    }


def _value(value: Any) -> str:
    if value is None or value == []:
        return "(none)"
    if isinstance(value, list):
        return ", ".join(str(item) for item in value)
    return _one_line(str(value))


def _local(moment: datetime | None, tz: tzinfo) -> str:
    return "" if moment is None else moment.astimezone(tz).strftime(TIME_FORMAT)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _print_json(data: Any) -> None:
    print(json.dumps(data, ensure_ascii=False, indent=2))


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell (wide characters count double); the last one unpadded."""
    widths = [max(_width(row[i]) for row in [headers, *rows]) for i in range(len(headers) - 1)]
    lines = []
    for row in [headers, *rows]:
        cells = [cell + " " * (width - _width(cell)) for cell, width in zip(row, widths)]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
    return "\n".join(lines)


def _width(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _truncate(text: str, width: int) -> str:
    if _width(text) <= width:
        return text
    kept, used = [], 0
    for ch in text:
        used += _width(ch)
        if used > width - 1:
            break
        kept.append(ch)
    return "".join(kept) + "…"
