"""A prompt's memo read (`SqlMemoStore.for_prompt`) costs what it shows, not the notebook: SQLite's virtual machine
steps through as many instructions for a notebook of a thousand memos as for one of fifty (counted by a progress
handler, not timed)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import event, insert

from myao2.domain.conversation import Channel, ChannelKind
from myao2.domain.visibility import Reader
from myao2.infrastructure.db.conversation_store import SqlConversationStore
from myao2.infrastructure.db.memo_store import SqlMemoStore
from myao2.infrastructure.db.tables import MemoPinRow, MemoRow
from tests.clocks import ManualClock
from tests.sqlite import MigratedCopy

START = datetime(2026, 1, 1, tzinfo=timezone.utc)
CHANNELS = [Channel("C1", "general"), Channel("D1", "alice", ChannelKind.IM), Channel("X1", "partners", ChannelKind.SHARED)]


def memo(number: int) -> dict:
    """Memo `number` of a notebook: taken in turn in C1 (for the workspace), D1 and X1, every other one removed."""
    at = START + timedelta(minutes=number)
    channel = CHANNELS[number % 3].id
    return {
        "name": f"memo-{number}",
        "content": "text",
        "priority": 1 + number % 5,
        "tags": [],
        "channel_id": channel,
        "visibility": "workspace" if channel == "C1" else "conversation",
        "created_at": at,
        "updated_at": at,
        "removed_at": at if number % 2 else None,
    }


@pytest.fixture
def steps() -> Iterator[dict[int, dict[str, int]]]:
    """The virtual machine's steps of one prompt's memo read in each of `CHANNELS`, by the notebook's size."""
    counted: dict[int, dict[str, int]] = {}
    for size in (400, 4000):  # half of them live
        database = MigratedCopy()
        clock = ManualClock()
        for channel in CHANNELS:
            SqlConversationStore(database.engine, clock).save_channel(channel)
        with database.engine.begin() as connection:
            connection.execute(insert(MemoRow.__table__), [memo(n) for n in range(size)])  # type: ignore[attr-defined]
            pins = [{"memo_id": i, "pinned_by": "cli", "pinned_at": START} for i in (1, 3, 5)]
            connection.execute(insert(MemoPinRow.__table__), pins)  # type: ignore[attr-defined]
        store, count = SqlMemoStore(database.engine, clock), [0]

        def counting(dbapi_connection, _record, _proxy) -> None:  # type: ignore[no-untyped-def]
            dbapi_connection.set_progress_handler(lambda: count.__setitem__(0, count[0] + 1) or 0, 1)

        event.listen(database.engine, "checkout", counting)
        counted[size] = {}
        for channel in CHANNELS:
            count[0] = 0
            store.for_prompt(Reader.of(channel.id, channel), min_priority=4, important=20, recent=5)
            counted[size][channel.id] = count[0]
        database.close()
    yield counted


def test_a_prompts_memo_read_steps_through_as_much_of_a_large_notebook_as_of_a_small_one(
    steps: dict[int, dict[str, int]],
) -> None:
    for channel in CHANNELS:
        assert steps[4000][channel.id] <= 1.2 * steps[400][channel.id], (channel.id, steps)
