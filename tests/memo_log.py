"""A check shared by memo tests: the revision log replays to the stored rows."""

from __future__ import annotations

from myao2.domain.memo import Action
from myao2.infrastructure.db.memo_store import SqlMemoStore


def assert_log_replays(store: SqlMemoStore) -> None:
    """Each memo's revisions chain (each `before` is the previous `after`, revisions count up
    from 1) and the last `after` is the memo as stored."""
    memos = store.list(None).memos + store.list(None, removed=True).memos
    for memo in memos:
        revisions = [r for r in store.history(memo.name) if r.memo_id == memo.id]
        assert revisions and revisions[0].action is Action.ADD and revisions[0].before is None
        for number, (previous, revision) in enumerate(zip([None, *revisions], revisions), start=1):
            assert revision.after is not None and revision.after["revision"] == number
            if previous is not None:
                assert revision.before == previous.after
        assert revisions[-1].after == memo.snapshot()
