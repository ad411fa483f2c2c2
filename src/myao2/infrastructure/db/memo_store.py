"""The memo store on SQLModel: each change is one transaction that checks the rules and writes a revision.

Names and the tag-kind limit hold per audience: among the memos one conversation sees
(see `myao2.domain.visibility.readable_audiences`). A change writes the memo only if
its revision is still the one read (compare-and-set), so the revision log always
replays to the stored rows, even with another process writing too.
"""

from __future__ import annotations

import threading
from collections import namedtuple
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from functools import lru_cache
from typing import Any

from sqlalchemy import ColumnElement, Engine, Table, and_, bindparam, cast, exists, false, func, literal, null, or_, true, union_all
from sqlalchemy import select as core_select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import aliased
from sqlalchemy.orm.exc import StaleDataError
from sqlmodel import Session, col, select

from myao2.domain.memo import (
    MAX_NAME_LENGTH,
    NARROWED_BY,
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
    check_tag_kinds,
    numbered_name,
)
from myao2.domain.ports import Clock
from myao2.domain.visibility import WORKSPACE, Audience, Reader, can_write, readable_audiences, view_of
from myao2.infrastructure.db.engine import INSERT_IGNORING, reading
from myao2.infrastructure.db.memory_store import NOT_PUBLIC_IDS
from myao2.infrastructure.db.tables import MemoPinRow, MemoRevisionRow, MemoRow

Audiences = Sequence[Audience] | None
"""Audiences a reader sees, nearest first; None: a person's own view of every memo."""


class SqlMemoStore:
    """`MemoStore` over a SQLAlchemy engine (SQLite or PostgreSQL)."""

    def __init__(self, engine: Engine, clock: Clock) -> None:
        self._engine = engine
        self._clock = clock
        # A change reads the rules' inputs (names, tag kinds) and then writes. Threads of one
        # process (tool calls run in worker threads) take turns; across processes the unique
        # index on live names per audience and the revision check still hold.
        self._changes = threading.Lock()

    # -- changes -------------------------------------------------------------

    def add(self, draft: MemoDraft, origin: Origin, actor: str) -> Memo:
        now = self._clock.now()
        view = _view(origin, origin.audience)
        with self._change() as session:
            self._claim(session, draft.name, view)
            check_tag_kinds(draft.tags, self._tag_kinds(session, view))
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
            self._revise(session, memo, Action.ADD, actor, None, now)
            return memo

    def edit(
        self,
        name: str,
        changes: MemoChanges,
        origin: Origin | None,
        actor: str,
        *,
        audience: Audience | None = None,
        keep_pins: bool = False,
        revision: int | None = None,
        reader: Reader | None = None,
    ) -> Memo:
        with self._change() as session:
            row = self._resolve(session, name, _reader(origin), audience)
            if revision is not None and row.revision != revision:
                raise MemoError("changed_meanwhile", name=row.name)
            _refuse_pinned(session, row, origin, keep_pins)
            before = _to_memo(row)
            _refuse_wider(origin, before)
            now = self._clock.now()
            after = changes.apply(before, now)
            view = _view(origin, before.audience, reader)
            if after.name != before.name:
                self._claim(session, after.name, view, exclude_id=row.id)
            if after.tags != before.tags:
                check_tag_kinds(after.tags, self._tag_kinds(session, view, exclude_id=row.id))
            _copy_into(row, after)
            _flush(session, after.name, before.name)
            after = _to_memo(row)
            self._revise(session, after, Action.EDIT, actor, before, now)
            return after

    def remove(
        self,
        name: str,
        origin: Origin | None,
        actor: str,
        *,
        audience: Audience | None = None,
        keep_pins: bool = False,
    ) -> Memo:
        with self._change() as session:
            row = self._resolve(session, name, _reader(origin), audience)
            _refuse_pinned(session, row, origin, keep_pins)
            before = _to_memo(row)
            _refuse_wider(origin, before)
            now = self._clock.now()
            row.removed_at = now
            _flush(session, name, name)
            after = _to_memo(row)
            self._revise(session, after, Action.REMOVE, actor, before, now)
            return after

    def restore(
        self,
        name: str,
        actor: str,
        *,
        origin: Origin | None = None,
        audience: Audience | None = None,
        reader: Reader | None = None,
    ) -> Memo:
        with self._change() as session:
            readers = _reader(origin) if origin is not None else _readable(reader)
            row = self._resolve(session, name, readers, audience, removed=True)
            before = _to_memo(row)
            _refuse_wider(origin, before)
            view = _view(origin, before.audience)
            self._claim(session, name, view)
            check_tag_kinds(before.tags, self._tag_kinds(session, view))
            row.removed_at = None
            now = row.updated_at = self._clock.now()
            _flush(session, name, name)
            after = _to_memo(row)
            self._revise(session, after, Action.RESTORE, actor, before, now)
            return after

    def pin(self, name: str, actor: str, *, audience: Audience | None = None) -> Memo:
        """Pin a memo; pinning a pinned one (by another process meanwhile too) leaves its one pin as it is."""
        with self._change() as session:
            row = self._resolve(session, name, None, audience)
            pin = {"memo_id": row.id, "pinned_by": actor, "pinned_at": self._clock.now()}
            session.execute(INSERT_IGNORING[self._engine.dialect.name](_PINS).values(pin).on_conflict_do_nothing())
            return _to_memo(row)

    def unpin(self, name: str, actor: str, *, audience: Audience | None = None) -> Memo:
        with self._change() as session:
            row = self._resolve(session, name, None, audience)
            pin = session.get(MemoPinRow, row.id)
            if pin is None:
                raise MemoError("not_pinned", name=name)
            session.delete(pin)
            return _to_memo(row)

    def narrow(self, channel_id: str, actor: str) -> list[Memo]:
        with self._change() as session:
            now = self._clock.now()
            rows = session.exec(
                select(MemoRow)
                .where(MemoRow.channel_id == channel_id, MemoRow.visibility == Visibility.WORKSPACE.value)
                .order_by(col(MemoRow.id))
            ).all()
            return [self._narrowed(session, row, actor, now) for row in rows]

    # -- reads ---------------------------------------------------------------

    def pinned(self, reader: Reader | None) -> list[Memo]:
        return [_to_memo(r) for r in self._rows(_pinned_query(_audiences(reader)))]

    def get(self, name: str, reader: Reader | None, *, audience: Audience | None = None) -> Memo:
        with Session(self._engine) as session:
            return _to_memo(self._resolve(session, name, _readable(reader), audience))

    def list(
        self,
        reader: Reader | None,
        *,
        tag: str | None = None,
        min_priority: int = 1,
        offset: int = 0,
        limit: int | None = None,
        removed: bool = False,
    ) -> MemoPage:
        audiences = _audiences(reader)
        if tag is None and limit is not None:  # a page read as a page: a large notebook is not read whole
            rows = self._rows(_page_query(audiences, removed), min_priority=min_priority, offset=offset, limit=limit)
            if offset == 0 and len(rows) < limit:
                total = len(rows)
            else:
                total = self._rows(_count_query(audiences, removed), min_priority=min_priority)[0][0]
            return MemoPage(memos=[_to_memo(r) for r in rows], offset=offset, total=total)
        memos = [_to_memo(r) for r in self._rows(_list_query(audiences, removed), min_priority=min_priority)]
        if tag is not None:  # tags are a JSON list in the row: matched here
            memos = [m for m in memos if tag.strip() in m.tags]
        end = None if limit is None else offset + limit
        return MemoPage(memos=memos[offset:end], offset=offset, total=len(memos))

    def tags(self, reader: Reader | None) -> list[TagUsage]:
        with Session(self._engine) as session:
            rows = session.exec(_seen(select(MemoRow), _readable(reader))).all()
        counts: dict[str, int] = {}
        latest: dict[str, datetime] = {}
        for row in rows:
            for tag in row.tags:
                counts[tag] = counts.get(tag, 0) + 1
                latest[tag] = max(latest.get(tag, row.updated_at), row.updated_at)
        usages = [TagUsage(tag=t, count=n, last_updated=latest[t]) for t, n in counts.items()]
        usages.sort(key=lambda u: (-u.count, -u.last_updated.timestamp(), u.tag))
        return usages

    def for_prompt(
        self, reader: Reader | None, *, min_priority: int, important: int, recent: int
    ) -> tuple[tuple[Memo, ...], tuple[Memo, ...], tuple[Memo, ...]]:
        rows = self._rows(_prompt_query(_audiences(reader)), min_priority=min_priority, important=important, recent=recent)
        parts: dict[int, list[tuple[Any, Memo]]] = {_PINNED: [], _IMPORTANT: [], _RECENT: []}
        # each row read by position (a memo's columns, its part, its pinned_at): reading a Row's column by its name
        # cost more than making the memo (an AttributeError formatted at each, then caught)
        for *columns, part, pinned_at in rows:
            parts[part].append((pinned_at, _to_memo(_MemoColumns._make(columns))))
        pins = sorted(parts[_PINNED], key=lambda pin: (pin[0], pin[1].id))
        pinned = {memo.id for _, memo in pins}
        important_memos = [memo for _, memo in parts[_IMPORTANT] if memo.id not in pinned]
        important_memos.sort(key=lambda memo: (memo.priority, memo.updated_at, memo.id), reverse=True)
        recent_memos = [memo for _, memo in parts[_RECENT]]
        recent_memos.sort(key=lambda memo: (memo.updated_at, memo.id), reverse=True)
        return tuple(memo for _, memo in pins), tuple(important_memos), tuple(recent_memos)

    def _rows(self, query: Any, **params: object) -> Sequence[Any]:
        """The Core rows of a read: no ORM session, whose unit of work cost most of a prompt's memo reads."""
        with reading(self._engine) as connection:
            return connection.execute(query, params).all()

    def by_ids(self, ids: list[int]) -> dict[int, Memo]:
        """The memos with these ids, live or removed, by id; a person's own view (no scoping)."""
        return {row.id: _to_memo(row) for row in self._rows(_BY_IDS, ids=ids)}

    def as_of(self, ids: list[int], moment: datetime) -> dict[int, Memo]:
        """The memos with these ids as they were at `moment`, by id, from their revision log: each
        as its last change at or before `moment` left it. A memo not added yet, or removed, then is absent."""
        with Session(self._engine) as session:
            rows = session.exec(
                select(MemoRevisionRow.memo_id, MemoRevisionRow.after)
                .where(col(MemoRevisionRow.memo_id).in_(ids), col(MemoRevisionRow.at) <= moment)
                .order_by(col(MemoRevisionRow.id))
            ).all()
        latest = {memo_id: after for memo_id, after in rows}  # the last change wins
        memos = {memo_id: Memo.from_snapshot(after) for memo_id, after in latest.items() if after is not None}
        return {memo_id: memo for memo_id, memo in memos.items() if not memo.removed}

    def history(
        self, name: str, *, audience: Audience | None = None, reader: Reader | None = None
    ) -> list[MemoRevision]:
        """Every revision of every memo that has borne `name` (kept for `audience`, if given, and that conversation
        `reader` may read now, if given), oldest first."""
        with Session(self._engine) as session:
            ids = session.exec(select(MemoRow.id).where(MemoRow.name == name)).all()
            named = session.exec(
                select(MemoRevisionRow.memo_id).where(MemoRevisionRow.memo_name == name)
            ).all()
            memo_ids = set(ids) | set(named)
            if audience is not None:
                kept = session.exec(
                    select(MemoRow.id).where(col(MemoRow.id).in_(memo_ids), _in(MemoRow, audience))
                ).all()
                memo_ids = set(kept)
            if reader is not None:
                readers = _audiences(reader)
                seen = or_(_seen_clause(readers, False, False), _seen_clause(readers, True, False))
                memo_ids = set(session.exec(select(MemoRow.id).where(col(MemoRow.id).in_(memo_ids), seen)).all())
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
        """A session in one transaction, taking its turn among this store's changes."""
        with self._changes, Session(self._engine) as session, session.begin():
            yield session

    @staticmethod
    def _free_name(session: Session, name: str, channel_id: str, memo_id: int | None) -> str:
        """`name`, or the first numbered variant of it no other live memo seen in `channel_id` bears."""
        taken = set(
            session.exec(
                _seen(select(MemoRow.name), view_of(Audience(channel_id)), shadow=False).where(
                    col(MemoRow.name).startswith(name[: MAX_NAME_LENGTH - 4], autoescape=True), MemoRow.id != memo_id
                )
            ).all()
        )
        candidate, number = name, 1
        while candidate in taken:
            number += 1
            candidate = numbered_name(name, number)
        return candidate

    @staticmethod
    def _resolve(
        session: Session,
        name: str,
        audiences: Audiences,
        audience: Audience | None = None,
        *,
        removed: bool = False,
    ) -> MemoRow:
        """The one memo `name` means to a reader: the nearest audience's (the most recently
        removed one, for `removed`). A person's view must name an `audience` when several
        audiences each keep a memo of that name."""
        query = _seen(select(MemoRow).where(MemoRow.name == name), audiences, removed=removed, shadow=False)
        if audience is not None:
            query = query.where(_in(MemoRow, audience))
        rows = session.exec(query.order_by(col(MemoRow.removed_at).desc(), col(MemoRow.id).desc())).all()
        if not rows:
            raise MemoError("not_removed" if removed else "unknown_name", name=name)
        kept = {_to_memo(r).audience for r in rows}
        if audiences is not None:
            nearest = next(a for a in audiences if a in kept)
            return next(r for r in rows if _to_memo(r).audience == nearest)
        if len(kept) > 1:
            labels = sorted(a.conversation_id or "workspace" for a in kept)
            raise MemoError("ambiguous_name", name=name, audiences=", ".join(labels))
        return rows[0]

    def _narrowed(self, session: Session, row: MemoRow, actor: str, now: datetime) -> Memo:
        """Make a memo kept for the workspace its channel's own (renamed if a live memo seen there bears its
        name), with its revision."""
        assert row.channel_id is not None
        before = _to_memo(row)
        row.visibility = Visibility.CONVERSATION.value
        if row.removed_at is None:
            row.name = self._free_name(session, row.name, row.channel_id, row.id)
        _flush(session, row.name)
        after = _to_memo(row)
        self._revise(session, after, Action.NARROW, actor, before, now)
        return after

    def _claim(self, session: Session, name: str, view: Sequence[Audience], exclude_id: int | None = None) -> None:
        """Refuse `name` when a live memo of `view` bears it. One kept for the workspace that the writer may not
        read (written in a channel stored as not public since, the narrowing not there yet) is narrowed first,
        as the narrowing would: refusing would tell the writer that it exists."""
        hidden = session.exec(
            select(MemoRow).where(
                MemoRow.name == name,
                col(MemoRow.removed_at).is_(None),
                _in(MemoRow, WORKSPACE),
                ~_not_hidden(MemoRow, _own(view)),
            )
        ).all()
        for row in hidden:
            self._narrowed(session, row, NARROWED_BY, self._clock.now())
        query = select(MemoRow.id).where(
            MemoRow.name == name, col(MemoRow.removed_at).is_(None), or_(*(_in(MemoRow, a) for a in view))
        )
        if exclude_id is not None:
            query = query.where(MemoRow.id != exclude_id)
        if session.exec(query).first() is not None:
            raise MemoError("name_taken", name=name)

    @staticmethod
    def _tag_kinds(session: Session, view: Sequence[Audience], exclude_id: int | None = None) -> set[str]:
        """The tag kinds of the live memos seen in `view`."""
        query = _seen(select(MemoRow), view)
        if exclude_id is not None:
            query = query.where(MemoRow.id != exclude_id)
        kinds: set[str] = set()
        for row in session.exec(query).all():
            kinds.update(row.tags)
        return kinds

    @staticmethod
    def _revise(session: Session, memo: Memo, action: Action, actor: str, before: Memo | None, at: datetime) -> None:
        """Log a change, dated by the same clock reading as the memo's own times (so a cutoff sees both alike)."""
        assert memo.id is not None
        session.add(
            MemoRevisionRow(
                memo_id=memo.id,
                memo_name=memo.name,
                action=action.value,
                actor=actor,
                at=at,
                before=before.snapshot() if before else None,
                after=memo.snapshot(),
            )
        )


def _readable(reader: Reader | None) -> Audiences:
    """What conversation `reader` reads, nearest first; None: a person's own view."""
    return None if reader is None else readable_audiences(reader)


def _reader(origin: Origin | None) -> Audiences:
    return _readable(origin.reader if origin is not None else None)


def _view(origin: Origin | None, audience: Audience, reader: Reader | None = None) -> Sequence[Audience]:
    """Where names and tag kinds must stay within limits when a memo kept for `audience`
    is written from `origin`: what that conversation sees, else what the memo's readers see (its conversation
    `reader`, when given)."""
    if origin is not None and origin.reader is not None:
        return readable_audiences(origin.reader)
    if reader is not None and reader.conversation_id == audience.conversation_id:
        return readable_audiences(reader)
    return view_of(audience)


def _in(table: Any, audience: Audience) -> ColumnElement[bool]:
    """Rows of `table` (the memos, or an alias of them) kept for `audience`."""
    if audience.is_workspace:
        return table.visibility == Visibility.WORKSPACE.value
    return and_(table.visibility == Visibility.CONVERSATION.value, table.channel_id == audience.conversation_id)


def _own(audiences: Sequence[Audience]) -> tuple[str, ...]:
    """The conversations among `audiences` (the workspace aside)."""
    return tuple(a.conversation_id for a in audiences if a.conversation_id is not None)


def _not_hidden(table: Any, own: Sequence[str]) -> ColumnElement[bool]:
    """Rows of `table` not written in a stored conversation that is not public, unless in one of `own`: a memo kept
    for the workspace from a channel since turned private is that channel's alone, though the narrowing may not
    have reached it yet (the rule of `Memo.visible_in`)."""
    channel = table.channel_id
    # correlated, one key lookup a row: a NOT IN built the set of every DM anew at each of a prompt's reads
    hidden = exists(NOT_PUBLIC_IDS.where(NOT_PUBLIC_IDS.selected_columns.id == channel))
    # one equality a conversation, not an IN: SQLAlchemy writes a list's values into the SQL anew at each run
    # (its "post-compile" step), which cost more than the rest of running a prompt's memo read
    return or_(channel.is_(None), *(channel == c for c in own), ~hidden)


def _seen(query: Any, audiences: Audiences, *, removed: bool = False, shadow: bool = True) -> Any:
    """Restrict a memo query to live (or removed) memos of `audiences` (None: all).

    With `shadow`, a live memo is left out where a nearer audience keeps a live memo of
    the same name: in each conversation a name means one memo.
    """
    return query.where(_seen_clause(None if audiences is None else tuple(audiences), removed, shadow))


def _audiences(reader: Reader | None) -> tuple[Audience, ...] | None:
    """`_readable` as a key of the cached queries below."""
    audiences = _readable(reader)
    return None if audiences is None else tuple(audiences)


@lru_cache(maxsize=1024)
def _pinned_query(audiences: tuple[Audience, ...] | None) -> Any:
    """The pinned memos a reader sees, oldest pin first (built once per reader, like `_seen_clause`)."""
    query = select(MemoRow).join(MemoPinRow, col(MemoPinRow.memo_id) == col(MemoRow.id))
    return _seen(query, audiences).order_by(col(MemoPinRow.pinned_at))


@lru_cache(maxsize=1024)
def _list_query(audiences: tuple[Audience, ...] | None, removed: bool) -> Any:
    """The memos a reader sees of at least the `min_priority` parameter, by priority, then newest first."""
    query = _seen(select(MemoRow), audiences, removed=removed).where(MemoRow.priority >= bindparam("min_priority"))
    return query.order_by(col(MemoRow.priority).desc(), col(MemoRow.updated_at).desc(), col(MemoRow.id).desc())


@lru_cache(maxsize=1024)
def _page_query(audiences: tuple[Audience, ...] | None, removed: bool) -> Any:
    """`_list_query`'s page from the `offset` parameter, of at most `limit` memos."""
    return _list_query(audiences, removed).limit(bindparam("limit")).offset(bindparam("offset"))


@lru_cache(maxsize=1024)
def _count_query(audiences: tuple[Audience, ...] | None, removed: bool) -> Any:
    """How many memos `_list_query` finds."""
    return select(func.count()).select_from(_list_query(audiences, removed).order_by(None).subquery())


_PINNED, _IMPORTANT, _RECENT = 0, 1, 2
"""The parts of `_prompt_query`."""


@lru_cache(maxsize=1024)
def _prompt_query(audiences: tuple[Audience, ...] | None) -> Any:
    """The statement of `for_prompt` (built once per reader, like `_seen_clause`): the memos a reader sees that are
    pinned (part `_PINNED`, with their `pinned_at`), among the first `important` of at least `min_priority`
    by priority then newest first (`_IMPORTANT`), and the newest `recent` of the others (`_RECENT`), each part
    unordered. A reader sees one memo of a name (see `_seen`), so leaving out memos is leaving out names.

    The first of each audience it sees are read apart (`_first`), in the order of an index of that audience's live
    memos (migration 0033), testing each memo read and stopping at the limit, then merged: deciding first what the
    reader sees tested every live memo of the notebook at each prompt."""
    memos: Table = MemoRow.__table__  # type: ignore[attr-defined]
    live = memos.c.removed_at.is_(None)
    each = [live] if audiences is None else [and_(live, c) for c in _seen_of_each(audiences, False, True)]
    newest = (memos.c.updated_at, memos.c.id)
    min_priority = memos.c.priority >= bindparam("min_priority")
    important = _first([and_(c, min_priority) for c in each], (memos.c.priority, *newest), "important").cte("important")
    others = and_(~exists().where(_PINS.c.memo_id == memos.c.id), memos.c.id.not_in(core_select(important.c.id)))
    recent = _first([and_(c, others) for c in each], newest, "recent")
    no_pin = cast(null(), _PINS.c.pinned_at.type).label("pinned_at")
    return union_all(
        # From the pins (few), each memo tested: SQLite, which keeps no statistics of the tables, read every live memo
        # of the audiences by the indexes above when the test was a plain OR, and every memo without the IN.
        core_select(memos, literal(_PINNED).label("part"), _PINS.c.pinned_at.label("pinned_at"))
        .select_from(memos.join(_PINS, _PINS.c.memo_id == memos.c.id))
        .where(memos.c.id.in_(core_select(_PINS.c.memo_id)), or_(*each).is_(true())),
        core_select(memos, literal(_IMPORTANT).label("part"), no_pin).where(memos.c.id.in_(core_select(important.c.id))),
        core_select(memos, literal(_RECENT).label("part"), no_pin).where(memos.c.id.in_(recent)),
    )


def _first(each: Sequence[ColumnElement[bool]], by: Sequence[Any], limit: str) -> Any:
    """The ids of the first memos by the columns `by` (the id last), each descending, of those meeting any of `each`,
    at most the `limit` parameter: the first of each condition, merged. Each is read apart, so that the database
    walks an index in that order and stops at the limit."""
    order = [column.desc() for column in by]
    firsts = [core_select(*by).where(c).order_by(*order).limit(bindparam(limit)) for c in each]
    if len(firsts) == 1:
        return firsts[0].with_only_columns(by[-1])
    merged = union_all(*(core_select(first.subquery()) for first in firsts)).subquery()
    return core_select(merged.c.id).order_by(*(merged.c[column.name].desc() for column in by)).limit(bindparam(limit))


@lru_cache(maxsize=1024)
def _seen_clause(audiences: tuple[Audience, ...] | None, removed: bool, shadow: bool) -> ColumnElement[bool]:
    """The condition of `_seen`, built once per reader: building it (its alias above all) took
    longer than running the query. SQL expressions are immutable, so one serves every thread."""
    removed_col = col(MemoRow.removed_at)
    live = removed_col.is_not(None) if removed else removed_col.is_(None)
    if audiences is None:
        return live
    return and_(live, or_(false(), *_seen_of_each(audiences, removed, shadow)))


def _seen_of_each(audiences: tuple[Audience, ...], removed: bool, shadow: bool) -> list[ColumnElement[bool]]:
    """`_seen_clause`'s condition of each audience, nearest first: the memos a reader sees of it (liveness aside)."""
    nearer = aliased(MemoRow)
    allowed: list[ColumnElement[bool]] = []
    for i, audience in enumerate(audiences):
        clause = _in(MemoRow, audience)
        if audience.is_workspace:
            clause = and_(clause, _not_hidden(MemoRow, _own(audiences)))
        if shadow and not removed and i:
            taken = (
                select(nearer.id)
                .where(
                    nearer.name == MemoRow.name,
                    col(nearer.removed_at).is_(None),
                    or_(*(_in(nearer, a) for a in audiences[:i])),
                )
            )
            clause = and_(clause, ~exists(taken))
        allowed.append(clause)
    return allowed


def _refuse_pinned(session: Session, row: MemoRow, origin: Origin | None, keep_pins: bool) -> None:
    """A pinned memo is a person's rule: a conversation (the model's tools) may read it, never change it;
    nor may a person's own view that was asked to `keep_pins` (an agent acting for a person)."""
    if (origin is not None or keep_pins) and session.get(MemoPinRow, row.id) is not None:
        raise MemoError("pinned", name=row.name)


def _refuse_wider(origin: Origin | None, memo: Memo) -> None:
    """A conversation changes (edits, removes, restores) only memos kept for exactly its audience (`can_write`)."""
    if origin is not None and not can_write(origin.audience, memo.audience):
        raise MemoError("wider_audience", name=memo.name)


def _flush(session: Session, name: str, read_as: str | None = None) -> None:
    """Write pending rows; a name taken, or a memo changed, meanwhile by another process is refused as such."""
    try:
        session.flush()
    except IntegrityError as error:
        raise MemoError("name_taken", name=name) from error
    except StaleDataError as error:
        raise MemoError("changed_meanwhile", name=read_as or name) from error


_PINS = MemoPinRow.__table__  # type: ignore[attr-defined]
_BY_IDS = select(MemoRow).where(col(MemoRow.id).in_(bindparam("ids", expanding=True)))
"""The statement of `by_ids`, built once (every memo search runs it)."""


_MemoColumns = namedtuple("_MemoColumns", [column.name for column in MemoRow.__table__.c])  # type: ignore[attr-defined, misc]
"""A memo row's columns by name, from its values in the table's order: read like a `MemoRow` by `_to_memo`."""


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
        revision=row.revision,
    )


def _copy_into(row: MemoRow, memo: Memo) -> None:
    row.name = memo.name
    row.content = memo.content
    row.priority = memo.priority
    row.tags = list(memo.tags)
    row.detail = memo.detail
    row.updated_at = memo.updated_at
