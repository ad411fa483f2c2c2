"""The memo store on SQLModel: each change is one transaction that checks the rules and writes a revision."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, or_
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from myao2.domain.memo import (
    Action,
    Memo,
    MemoChanges,
    MemoDraft,
    MemoError,
    MemoPage,
    MemoRevision,
    Origin,
    TagUsage,
    Visibility,
    MAX_NAME_LENGTH,
    check_tag_kinds,
    numbered_name,
    visible_in,
)
from myao2.domain.ports import Clock
from myao2.infrastructure.db.tables import MemoPinRow, MemoRevisionRow, MemoRow

# A change reads the rules' inputs (live names, tag kinds) and then writes. Threads of one
# process (tool calls run in worker threads) take turns so no two changes interleave; across
# processes the unique index on live names still holds.
_CHANGES = threading.Lock()


class SqlMemoStore:
    """`MemoStore` over a SQLAlchemy engine (SQLite or PostgreSQL)."""

    def __init__(self, engine: Engine, clock: Clock) -> None:
        self._engine = engine
        self._clock = clock

    # -- changes -------------------------------------------------------------

    def add(self, draft: MemoDraft, origin: Origin, actor: str) -> Memo:
        now = self._clock.now()
        with self._change() as session:
            if self._live_row(session, draft.name) is not None:
                raise MemoError("name_taken", name=draft.name)
            check_tag_kinds(draft.tags, *self._tag_kinds(session, origin.channel_id))
            row = MemoRow(
                name=draft.name,
                content=draft.content,
                priority=draft.priority,
                tags=list(draft.tags),
                detail=draft.detail,
                user_id=origin.user_id,
                channel_id=origin.channel_id,
                message_ts=origin.message_ts,
                visibility=origin.visibility.value,
                created_at=now,
                updated_at=now,
            )
            session.add(row)
            _flush(session, draft.name)
            memo = _to_memo(row)
            self._revise(session, memo, Action.ADD, actor, None)
            return memo

    def edit(self, name: str, changes: MemoChanges, channel_id: str | None, actor: str) -> Memo:
        with self._change() as session:
            row = self._visible_row(session, name, channel_id)
            _refuse_pinned(session, row, channel_id)
            before = _to_memo(row)
            after = changes.apply(before, self._clock.now())
            if after.name != before.name and self._live_row(session, after.name) is not None:
                raise MemoError("name_taken", name=after.name)
            if after.tags != before.tags:
                check_tag_kinds(after.tags, *self._tag_kinds(session, channel_id, exclude_id=row.id))
            _copy_into(row, after)
            _flush(session, after.name)
            self._revise(session, after, Action.EDIT, actor, before)
            return after

    def remove(self, name: str, channel_id: str | None, actor: str) -> Memo:
        with self._change() as session:
            row = self._visible_row(session, name, channel_id)
            _refuse_pinned(session, row, channel_id)
            before = _to_memo(row)
            row.removed_at = self._clock.now()
            after = _to_memo(row)
            self._revise(session, after, Action.REMOVE, actor, before)
            return after

    def restore(self, name: str, actor: str) -> Memo:
        with self._change() as session:
            if self._live_row(session, name) is not None:
                raise MemoError("name_taken", name=name)
            row = session.exec(
                select(MemoRow)
                .where(MemoRow.name == name, col(MemoRow.removed_at).is_not(None))
                .order_by(col(MemoRow.removed_at).desc())
            ).first()
            if row is None:
                raise MemoError("not_removed", name=name)
            before = _to_memo(row)
            check_tag_kinds(before.tags, *self._tag_kinds(session, None))
            row.removed_at = None
            row.updated_at = self._clock.now()
            _flush(session, name)
            after = _to_memo(row)
            self._revise(session, after, Action.RESTORE, actor, before)
            return after

    def pin(self, name: str, actor: str) -> Memo:
        with self._change() as session:
            row = self._visible_row(session, name, None)
            if session.get(MemoPinRow, row.id) is None:
                session.add(MemoPinRow(memo_id=row.id, pinned_by=actor, pinned_at=self._clock.now()))
            return _to_memo(row)

    def unpin(self, name: str, actor: str) -> Memo:
        with self._change() as session:
            row = self._visible_row(session, name, None)
            pin = session.get(MemoPinRow, row.id)
            if pin is None:
                raise MemoError("not_pinned", name=name)
            session.delete(pin)
            return _to_memo(row)

    def narrow(self, channel_id: str, actor: str) -> list[Memo]:
        with self._change() as session:
            rows = session.exec(
                select(MemoRow)
                .where(MemoRow.channel_id == channel_id, MemoRow.visibility == Visibility.WORKSPACE.value)
                .order_by(col(MemoRow.id))
            ).all()
            narrowed = []
            for row in rows:
                before = _to_memo(row)
                row.visibility = Visibility.CONVERSATION.value
                if row.removed_at is None:
                    row.name = self._free_name(session, row.name, channel_id, row.id)
                _flush(session, row.name)
                after = _to_memo(row)
                self._revise(session, after, Action.NARROW, actor, before)
                narrowed.append(after)
            return narrowed

    # -- reads ---------------------------------------------------------------

    def pinned(self, channel_id: str | None) -> list[Memo]:
        query = select(MemoRow).join(MemoPinRow, col(MemoPinRow.memo_id) == col(MemoRow.id))
        with Session(self._engine) as session:
            rows = session.exec(_scoped(query, channel_id).order_by(col(MemoPinRow.pinned_at))).all()
        return [_to_memo(r) for r in rows]

    def get(self, name: str, channel_id: str | None) -> Memo:
        with Session(self._engine) as session:
            return _to_memo(self._visible_row(session, name, channel_id))

    def list(
        self,
        channel_id: str | None,
        *,
        tag: str | None = None,
        min_priority: int = 1,
        offset: int = 0,
        limit: int | None = None,
        removed: bool = False,
    ) -> MemoPage:
        with Session(self._engine) as session:
            query = _scoped(select(MemoRow), channel_id, removed=removed)
            if min_priority > 1:
                query = query.where(MemoRow.priority >= min_priority)
            rows = session.exec(
                query.order_by(
                    col(MemoRow.priority).desc(),
                    col(MemoRow.updated_at).desc(),
                    col(MemoRow.id).desc(),
                )
            ).all()
        memos = [_to_memo(r) for r in rows]
        if tag is not None:
            memos = [m for m in memos if tag.strip() in m.tags]
        end = None if limit is None else offset + limit
        return MemoPage(memos=memos[offset:end], offset=offset, total=len(memos))

    def tags(self, channel_id: str | None) -> list[TagUsage]:
        with Session(self._engine) as session:
            rows = session.exec(_scoped(select(MemoRow), channel_id)).all()
        counts: dict[str, int] = {}
        latest: dict[str, datetime] = {}
        for row in rows:
            for tag in row.tags:
                counts[tag] = counts.get(tag, 0) + 1
                latest[tag] = max(latest.get(tag, row.updated_at), row.updated_at)
        usages = [TagUsage(tag=t, count=n, last_updated=latest[t]) for t, n in counts.items()]
        usages.sort(key=lambda u: (-u.count, -u.last_updated.timestamp(), u.tag))
        return usages

    def recent(self, channel_id: str | None, limit: int, exclude: set[str]) -> list[Memo]:
        with Session(self._engine) as session:
            query = _scoped(select(MemoRow), channel_id)
            if exclude:
                query = query.where(col(MemoRow.name).not_in(exclude))
            rows = session.exec(
                query.order_by(col(MemoRow.updated_at).desc(), col(MemoRow.id).desc()).limit(limit)
            ).all()
        return [_to_memo(r) for r in rows]

    def by_ids(self, ids: list[int]) -> dict[int, Memo]:
        """The memos with these ids, live or removed, by id; a person's own view (no scoping)."""
        with Session(self._engine) as session:
            rows = session.exec(select(MemoRow).where(col(MemoRow.id).in_(ids))).all()
        return {row.id: _to_memo(row) for row in rows if row.id is not None}

    def history(self, name: str) -> list[MemoRevision]:
        """Every revision of every memo that has borne `name`, oldest first."""
        with Session(self._engine) as session:
            ids = session.exec(select(MemoRow.id).where(MemoRow.name == name)).all()
            named = session.exec(
                select(MemoRevisionRow.memo_id).where(MemoRevisionRow.memo_name == name)
            ).all()
            memo_ids = set(ids) | set(named)
            if not memo_ids:
                raise MemoError("unknown_name", name=name)
            rows = session.exec(
                select(MemoRevisionRow)
                .where(col(MemoRevisionRow.memo_id).in_(memo_ids))
                .order_by(col(MemoRevisionRow.id))
            ).all()
        return [
            MemoRevision(
                memo_id=r.memo_id,
                memo_name=r.memo_name,
                action=Action(r.action),
                actor=r.actor,
                at=r.at,
                before=r.before,
                after=r.after,
            )
            for r in rows
        ]

    # -- helpers -------------------------------------------------------------

    @contextmanager
    def _change(self) -> Iterator[Session]:
        """A session in one transaction, taking its turn among this process's changes."""
        with _CHANGES, Session(self._engine) as session, session.begin():
            yield session

    @staticmethod
    def _live_row(session: Session, name: str) -> MemoRow | None:
        return session.exec(
            select(MemoRow).where(MemoRow.name == name, col(MemoRow.removed_at).is_(None))
        ).first()

    @staticmethod
    def _free_name(session: Session, name: str, channel_id: str, memo_id: int | None) -> str:
        """`name`, or the first numbered variant of it no other live memo seen in `channel_id` bears."""
        taken = set(
            session.exec(
                _scoped(select(MemoRow.name), channel_id).where(
                    col(MemoRow.name).startswith(name[: MAX_NAME_LENGTH - 4], autoescape=True), MemoRow.id != memo_id
                )
            ).all()
        )
        candidate, number = name, 1
        while candidate in taken:
            number += 1
            candidate = numbered_name(name, number)
        return candidate

    def _visible_row(self, session: Session, name: str, channel_id: str | None) -> MemoRow:
        row = self._live_row(session, name)
        if row is None or not _to_memo(row).visible_in(channel_id):
            raise MemoError("unknown_name", name=name)
        return row

    @staticmethod
    def _tag_kinds(
        session: Session, channel_id: str | None, exclude_id: int | None = None
    ) -> tuple[set[str], set[str]]:
        """The tag kinds of all live memos, and those of the memos `channel_id` may see."""
        query = select(MemoRow.tags, MemoRow.visibility, MemoRow.channel_id).where(col(MemoRow.removed_at).is_(None))
        if exclude_id is not None:
            query = query.where(MemoRow.id != exclude_id)
        every: set[str] = set()
        visible: set[str] = set()
        for tags, visibility, memo_channel in session.exec(query).all():
            every.update(tags)
            if visible_in(Visibility(visibility), memo_channel, channel_id):
                visible.update(tags)
        return every, visible

    def _revise(
        self, session: Session, memo: Memo, action: Action, actor: str, before: Memo | None
    ) -> None:
        assert memo.id is not None
        session.add(
            MemoRevisionRow(
                memo_id=memo.id,
                memo_name=memo.name,
                action=action.value,
                actor=actor,
                at=self._clock.now(),
                before=before.snapshot() if before else None,
                after=memo.snapshot(),
            )
        )


def _scoped(query: Any, channel_id: str | None, *, removed: bool = False) -> Any:
    """Restrict a memo query to live (or removed) memos that `channel_id` may see."""
    removed_col = col(MemoRow.removed_at)
    query = query.where(removed_col.is_not(None) if removed else removed_col.is_(None))
    if channel_id is not None:
        query = query.where(
            or_(MemoRow.visibility == Visibility.WORKSPACE.value, MemoRow.channel_id == channel_id)
        )
    return query


def _refuse_pinned(session: Session, row: MemoRow, channel_id: str | None) -> None:
    """A pinned memo is a person's rule: a conversation (the model's tools) may read it, never change it."""
    if channel_id is not None and session.get(MemoPinRow, row.id) is not None:
        raise MemoError("pinned", name=row.name)


def _flush(session: Session, name: str) -> None:
    """Write pending rows; a live name taken meanwhile by another process is refused as such."""
    try:
        session.flush()
    except IntegrityError as error:
        raise MemoError("name_taken", name=name) from error


def _to_memo(row: MemoRow) -> Memo:
    return Memo(
        id=row.id,
        name=row.name,
        content=row.content,
        priority=row.priority,
        tags=tuple(row.tags),
        detail=row.detail,
        user_id=row.user_id,
        channel_id=row.channel_id,
        message_ts=row.message_ts,
        visibility=Visibility(row.visibility),
        created_at=row.created_at,
        updated_at=row.updated_at,
        removed_at=row.removed_at,
    )


def _copy_into(row: MemoRow, memo: Memo) -> None:
    row.name = memo.name
    row.content = memo.content
    row.priority = memo.priority
    row.tags = list(memo.tags)
    row.detail = memo.detail
    row.updated_at = memo.updated_at

