"""Memos: the bot's notebook, its rules, revisions and visibility.

Plain Python only. Every entry point that changes memos (the model's tools, the
CLI, importers) goes through these rules, so they hold everywhere.
"""

from __future__ import annotations

import unicodedata
from dataclasses import asdict, dataclass, fields, replace
from datetime import datetime
from enum import Enum
from collections.abc import Container
from typing import Any

from myao2.domain.conversation import Channel, clean_text
from myao2.domain.visibility import Audience, Reader, can_read_from, heard_now

MAX_NAME_LENGTH = 32
MAX_CONTENT_LENGTH = 500
RECOMMENDED_CONTENT_LENGTH = 50
MAX_DETAIL_LENGTH = 4000
MAX_TAG_LENGTH = 32
MAX_TAGS_PER_MEMO = 3
MAX_TAG_KINDS = 20
MIN_PRIORITY = 1
MAX_PRIORITY = 5
IMPORTANT_PRIORITY = 4
MAX_LIST_LIMIT = 50
MAX_LIST_OFFSET = 1_000_000
MAX_CHANGES_PER_REPLY = 10
NARROWED_BY = "slack"
"""The actor recorded in the revision of a memo narrowed because its channel stopped being public (as Slack told)."""


class MemoError(Exception):
    """A memo operation was refused. `code` and `params` let each caller word it."""

    def __init__(self, code: str, **params: Any) -> None:
        super().__init__(code)
        self.code = code
        self.params = params

    def __str__(self) -> str:
        details = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"{self.code}({details})" if details else self.code


class Visibility(str, Enum):
    """Who may see a memo: everyone in the workspace, or only its own conversation."""

    WORKSPACE = "workspace"
    CONVERSATION = "conversation"


@dataclass(frozen=True)
class Origin:
    """The conversation a memo operation happens in: the tools' scope and a memo's provenance."""

    channel_id: str | None = None
    channel_private: bool = False
    user_id: str | None = None
    message_ts: str | None = None
    outside: bool = False
    """Whether people of another organisation hear the conversation (`Reader.outside`)."""

    @classmethod
    def of(cls, channel: Channel, user_id: str | None, message_ts: str | None) -> Origin:
        """A message of `user_id` at `message_ts` in `channel` (as the conversation store keeps it)."""
        outside = Reader.of(channel.id, channel).outside
        return cls(channel.id, channel.is_private, user_id, message_ts, outside)

    @property
    def reader(self) -> Reader | None:
        """What this conversation reads (None: a person's own view)."""
        return None if self.channel_id is None else Reader(self.channel_id, self.outside)

    @property
    def audience(self) -> Audience:
        """Who hears this conversation (see `myao2.domain.visibility`)."""
        return Audience.of(self.channel_id, self.channel_private)

    @property
    def visibility(self) -> Visibility:
        """Public channels share with the workspace; private channels, DMs and group DMs keep to themselves."""
        return Visibility.WORKSPACE if self.audience.is_workspace else Visibility.CONVERSATION


def memo_audience(visibility: Visibility, memo_channel_id: str | None) -> Audience:
    """The audience of a memo stored with `visibility` from `memo_channel_id`."""
    return Audience(memo_channel_id if visibility is Visibility.CONVERSATION else None)


def memo_visible_in(
    reader: Reader | None, audience: Audience, memo_channel_id: str | None, not_public: Container[str]
) -> bool:
    """Whether a memo kept for `audience`, written in conversation `memo_channel_id` (None: in none), may be shown
    in conversation `reader` (`Memo.visible_in`, of a memo known by these alone, as the search index knows it).

    Only when `reader` may read its audience and the audience now of the conversation it was written in (`heard_now`,
    `not_public` the ids of the stored conversations that keep to themselves), unless that is `reader` itself, which
    may read what was heard there: a memo is heard in its conversation, not said there, so it stays the workspace's
    when the bot leaves it.
    """
    elsewhere = memo_channel_id is not None and (reader is None or memo_channel_id != reader.conversation_id)
    heard = heard_now((memo_channel_id,) if elsewhere else (), not_public)
    return can_read_from(reader, audience, None, heard=heard)


@dataclass(frozen=True)
class Memo:
    """One memo as stored."""

    name: str
    content: str
    priority: int
    tags: tuple[str, ...]
    created_at: datetime
    updated_at: datetime
    detail: str | None = None
    user_id: str | None = None
    channel_id: str | None = None
    message_ts: str | None = None
    visibility: Visibility = Visibility.WORKSPACE
    removed_at: datetime | None = None
    id: int | None = None
    revision: int = 0
    """How many times the memo was written (its add included); each change checks it is unchanged."""

    @property
    def removed(self) -> bool:
        return self.removed_at is not None

    @property
    def audience(self) -> Audience:
        return memo_audience(self.visibility, self.channel_id)

    def visible_in(self, reader: Reader | None, not_public: Container[str]) -> bool:
        """Whether this memo may be shown in conversation `reader` (None: a person's own view).

        `not_public` holds the ids of the stored conversations that are not public: a memo written in one of
        them while it was public is its alone from then on, though still kept for the workspace until the
        narrowing reaches it (the store's reads apply the same rule in SQL).
        """
        return memo_visible_in(reader, self.audience, self.channel_id, not_public)

    def snapshot(self) -> dict[str, Any]:
        """The full state as JSON-ready data, for revisions and exports."""
        data = asdict(self)
        data["tags"] = list(self.tags)
        data["visibility"] = self.visibility.value
        for key in ("created_at", "updated_at", "removed_at"):
            value = data[key]
            data[key] = value.isoformat() if value else None
        return data

    @classmethod
    def from_snapshot(cls, data: dict[str, Any]) -> Memo:
        """The memo a `snapshot` was taken of (a field it lacks, from an older version, takes its default)."""
        known = {field.name for field in fields(cls)}
        values = {key: value for key, value in data.items() if key in known}
        values["tags"] = tuple(values["tags"])
        values["visibility"] = Visibility(values["visibility"])
        for key in ("created_at", "updated_at", "removed_at"):
            value = values.get(key)
            values[key] = datetime.fromisoformat(value) if value else None
        return cls(**values)


class Action(str, Enum):
    ADD = "add"
    EDIT = "edit"
    REMOVE = "remove"
    RESTORE = "restore"
    NARROW = "narrow"
    """The conversation it was taken in stopped being the workspace's: the memo became its own."""


@dataclass(frozen=True)
class MemoRevision:
    """A change to a memo: the full state before (None for an add) and after."""

    memo_id: int
    memo_name: str
    action: Action
    actor: str
    at: datetime
    before: dict[str, Any] | None
    after: dict[str, Any] | None


@dataclass(frozen=True)
class MemoDraft:
    """A validated new memo."""

    name: str
    content: str
    priority: int
    tags: tuple[str, ...] = ()
    detail: str | None = None

    @classmethod
    def create(
        cls,
        name: object,
        content: object,
        priority: object,
        tags: object = None,
        detail: object = None,
    ) -> MemoDraft:
        return cls(
            name=validate_name(name),
            content=validate_content(content),
            priority=validate_priority(priority),
            tags=normalize_tags(tags),
            detail=validate_detail(detail),
        )


@dataclass(frozen=True)
class MemoChanges:
    """Validated changes to a memo, by field name; a field not named stays as it is."""

    updates: dict[str, Any]

    @classmethod
    def create(
        cls,
        content: object = None,
        priority: object = None,
        tags: object = None,
        detail: object = None,
        new_name: object = None,
    ) -> MemoChanges:
        """Validate the given changes; None means unchanged. An empty detail clears it."""
        updates: dict[str, Any] = {}
        if new_name is not None:
            updates["name"] = validate_name(new_name)
        if content is not None:
            updates["content"] = validate_content(content)
        if priority is not None:
            updates["priority"] = validate_priority(priority)
        if tags is not None:
            updates["tags"] = normalize_tags(tags)
        if detail is not None:
            updates["detail"] = validate_detail(detail)
        if not updates:
            raise MemoError("nothing_to_change")
        return cls(updates)

    def apply(self, memo: Memo, now: datetime) -> Memo:
        """The memo with these changes made."""
        return replace(memo, **self.updates, updated_at=now)


def _clean_text(value: str) -> str:
    """Drop control characters other than newline and tab, and trim."""
    kept = (ch for ch in value if ch in "\n\t" or unicodedata.category(ch) not in ("Cc", "Cs"))
    return "".join(kept).strip()


def _require_str(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise MemoError("not_text", field=what)
    return value


def numbered_name(name: str, number: int) -> str:
    """`name` with a number appended ("lunch-2"), cut so it stays a valid name."""
    suffix = f"-{number}"
    return name[: MAX_NAME_LENGTH - len(suffix)] + suffix


def validate_name(value: object) -> str:
    """A name is 1-32 characters of one line, without control characters."""
    name = _require_str(value, "name").strip()
    if not name:
        raise MemoError("blank_name")
    if any(unicodedata.category(ch) in ("Cc", "Cs") for ch in name):
        raise MemoError("bad_name_characters")
    if len(name) > MAX_NAME_LENGTH:
        raise MemoError("name_too_long", limit=MAX_NAME_LENGTH, length=len(name))
    return name


def lookup_name(value: object) -> str:
    """A name asked for, as memos bear it; one that no memo could bear is simply unknown (and named so as text no
    store refuses: it may hold a lone surrogate, from JSON escaping half an emoji)."""
    try:
        return validate_name(value)
    except MemoError:
        raise MemoError("unknown_name", name=clean_text(value if isinstance(value, str) else str(value))) from None


def validate_content(value: object) -> str:
    content = _clean_text(_require_str(value, "content"))
    if not content:
        raise MemoError("blank_content")
    if len(content) > MAX_CONTENT_LENGTH:
        raise MemoError("content_too_long", limit=MAX_CONTENT_LENGTH, length=len(content))
    return content


def validate_detail(value: object) -> str | None:
    """An empty detail means no detail."""
    if value is None:
        return None
    detail = _clean_text(_require_str(value, "detail"))
    if len(detail) > MAX_DETAIL_LENGTH:
        raise MemoError("detail_too_long", limit=MAX_DETAIL_LENGTH, length=len(detail))
    return detail or None


def validate_priority(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise MemoError("bad_priority", value=str(value)[:20])
    if not MIN_PRIORITY <= value <= MAX_PRIORITY:
        raise MemoError("bad_priority", value=str(value)[:20])
    return value


def normalize_tags(value: object) -> tuple[str, ...]:
    """Trim, drop empty ones, de-duplicate (keeping order); at most 3."""
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise MemoError("tags_not_list")
    tags: list[str] = []
    for raw in value:
        tag = _clean_text(_require_str(raw, "tags")).replace("\n", " ").replace("\t", " ")
        if not tag or tag in tags:
            continue
        if len(tag) > MAX_TAG_LENGTH:
            raise MemoError("tag_too_long", limit=MAX_TAG_LENGTH)
        tags.append(tag)
    if len(tags) > MAX_TAGS_PER_MEMO:
        raise MemoError("too_many_tags", limit=MAX_TAGS_PER_MEMO, count=len(tags))
    return tuple(tags)


def check_tag_kinds(new_tags: tuple[str, ...], existing_kinds: set[str]) -> None:
    """Refuse tags that would bring the distinct tag kinds past 20.

    `existing_kinds` are those of the memos the writing conversation sees (its audience's
    view), so the limit and the tags the refusal lists never depend on memos kept elsewhere.
    """
    added = [t for t in new_tags if t not in existing_kinds]
    if added and len(existing_kinds) + len(added) > MAX_TAG_KINDS:
        raise MemoError(
            "too_many_tag_kinds",
            limit=MAX_TAG_KINDS,
            new=", ".join(added),
            existing=", ".join(sorted(existing_kinds)),
        )


def validate_page(offset: object, limit: object) -> tuple[int, int]:
    """A listing window: 0 <= offset <= 1,000,000 and 1 <= limit <= 50."""
    if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= MAX_LIST_OFFSET:
        raise MemoError("bad_offset", limit=MAX_LIST_OFFSET)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIST_LIMIT:
        raise MemoError("bad_limit", limit=MAX_LIST_LIMIT)
    return offset, limit


class ChangeBudget:
    """How many memo changes one reply may still make (adds, edits, removals that succeed)."""

    def __init__(self, limit: int = MAX_CHANGES_PER_REPLY) -> None:
        self.limit = limit
        self._used = 0

    def take(self) -> None:
        """Reserve one change, or refuse it once the reply has made `limit` of them."""
        if self._used >= self.limit:
            raise MemoError("too_many_changes", limit=self.limit)
        self._used += 1

    def give_back(self) -> None:
        """Release a reserved change that was not made."""
        self._used -= 1


@dataclass(frozen=True)
class TagUsage:
    """A tag with how many live memos carry it and when one of them last changed."""

    tag: str
    count: int
    last_updated: datetime


@dataclass(frozen=True)
class MemoPage:
    """A window of a memo listing and the size of the whole listing."""

    memos: list[Memo]
    offset: int
    total: int
