"""What the application needs from the outside world, as Protocols."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from myao2.domain.memo import (
    Memo,
    MemoChanges,
    MemoDraft,
    MemoPage,
    MemoRevision,
    Origin,
    TagUsage,
)


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""
        ...


class MemoStore(Protocol):
    """Memos with their rules enforced atomically; every change writes one revision.

    `channel_id` scopes reads and writes to what a conversation may see; None is a
    person's own view of every memo. Refusals raise `MemoError`.
    """

    def add(self, draft: MemoDraft, origin: Origin, actor: str) -> Memo: ...

    def edit(self, name: str, changes: MemoChanges, channel_id: str | None, actor: str) -> Memo: ...

    def remove(self, name: str, channel_id: str | None, actor: str) -> Memo: ...

    def restore(self, name: str, actor: str) -> Memo: ...

    def get(self, name: str, channel_id: str | None) -> Memo: ...

    def list(
        self,
        channel_id: str | None,
        *,
        tag: str | None = None,
        min_priority: int = 1,
        offset: int = 0,
        limit: int | None = None,
        removed: bool = False,
    ) -> MemoPage: ...

    def tags(self, channel_id: str | None) -> list[TagUsage]: ...

    def recent(self, channel_id: str | None, limit: int, exclude: set[str]) -> list[Memo]: ...

    def history(self, name: str) -> list[MemoRevision]: ...
