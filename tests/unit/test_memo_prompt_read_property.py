"""A prompt's memo read (`SqlMemoStore.for_prompt`) picks exactly what a plain model of the rule picks, on random
notebooks (SQLite and PostgreSQL), for every kind of reader: a public channel, a private one, a DM, a group DM, a
channel shared outside, a DM with people of another organisation, a conversation never stored, the workspace view and
a person's own view.

The model: the live memos the domain lets the reader see (`Memo.visible_in`), one a name (the nearest audience's,
`readable_audiences`); the pinned ones by pin time; the first `important` of at least `min_priority` by priority then
newest, the pinned ones left out; the newest `recent` of the others. Notebooks hold memos kept for the workspace and
for conversations (written in channels public then, stored as not public since), same names in several audiences,
removed and pinned memos, and equal times (the id decides).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, delete, insert

from myao2.domain.conversation import Channel, ChannelKind
from myao2.domain.memo import Memo, Visibility
from myao2.domain.visibility import WORKSPACE_VIEW, Reader, not_public, readable_audiences
from myao2.infrastructure.db.conversation_store import SqlConversationStore
from myao2.infrastructure.db.memo_store import SqlMemoStore
from myao2.infrastructure.db.tables import ChannelRow, MemoPinRow, MemoRow
from tests.clocks import ManualClock

START = datetime(2026, 1, 1, tzinfo=timezone.utc)
CONVERSATIONS = ["C1", "C2", "G1", "D1", "M1", "X1"]
NEVER_STORED = "N1"
WRITTEN_IN = [*CONVERSATIONS, NEVER_STORED]
NAMES = ["lunch", "plans", "rules", "cats"]
CROWDED = ["C1", "D1"]
"""Where half the memos are written: a conversation with more memos of its own than the limits."""

kinds = st.lists(st.tuples(st.sampled_from(ChannelKind), st.booleans()), min_size=len(CONVERSATIONS), max_size=len(CONVERSATIONS))
memo_rows = st.lists(
    st.fixed_dictionaries(
        {
            "name": st.sampled_from(NAMES),
            "channel_id": st.sampled_from([None, *WRITTEN_IN]) | st.sampled_from(CROWDED),
            "own": st.booleans(),  # kept for the conversation it was written in (for the workspace if none)
            "priority": st.integers(1, 5),
            "minute": st.integers(0, 3),
            "removed": st.booleans(),
            "pinned": st.none() | st.integers(0, 2),
        }
    ),
    max_size=40,
)


def notebook(engine: Engine, drawn: list[dict]) -> tuple[list[Memo], dict[int, datetime]]:
    """Write the memos `drawn`, a later live memo of a name its audience keeps live already written as removed (names
    are unique per audience); the memos and the pin times by memo id."""
    memos: list[Memo] = []
    pins: dict[int, datetime] = {}
    live: set[tuple[str | None, str]] = set()
    with engine.begin() as connection:
        for number, row in enumerate(drawn, start=1):
            own = row["own"] and row["channel_id"] is not None
            key = (row["channel_id"] if own else None, row["name"])
            removed = row["removed"] or key in live
            if not removed:
                live.add(key)
            at = START + timedelta(minutes=row["minute"])
            memo = Memo(
                name=row["name"],
                content=f"memo {number}",
                priority=row["priority"],
                tags=(),
                created_at=at,
                updated_at=at,
                channel_id=row["channel_id"],
                visibility=Visibility.CONVERSATION if own else Visibility.WORKSPACE,
                removed_at=at if removed else None,
                id=number,
            )
            values = {**memo.snapshot(), "tags": [], "created_at": at, "updated_at": at, "removed_at": memo.removed_at}
            connection.execute(insert(MemoRow.__table__).values(values))  # type: ignore[attr-defined]
            memos.append(memo)
            if row["pinned"] is not None:
                pins[number] = START + timedelta(minutes=row["pinned"])
                connection.execute(
                    insert(MemoPinRow.__table__).values(memo_id=number, pinned_by="cli", pinned_at=pins[number])  # type: ignore[attr-defined]
                )
    return memos, pins


def modelled(
    memos: list[Memo], pins: dict[int, datetime], reader: Reader | None, hidden: frozenset[str], limits: tuple[int, int, int]
) -> list[list[int]]:
    """The ids of the pinned, important and recent memos the rule gives `reader`."""
    min_priority, important, recent = limits
    seen = [m for m in memos if not m.removed and m.visible_in(reader, hidden)]
    if reader is not None:
        nearness = {audience: i for i, audience in enumerate(readable_audiences(reader))}
        nearest = {m.name: min(nearness[s.audience] for s in seen if s.name == m.name) for m in seen}
        seen = [m for m in seen if nearness[m.audience] == nearest[m.name]]
    pinned = sorted((m for m in seen if m.id in pins), key=lambda m: (pins[m.id], m.id))
    ranked = sorted((m for m in seen if m.priority >= min_priority), key=lambda m: (m.priority, m.updated_at, m.id))
    first = ranked[::-1][:important]
    others = sorted((m for m in seen if m.id not in pins and m not in first), key=lambda m: (m.updated_at, m.id))
    return [[m.id for m in part] for part in (pinned, [m for m in first if m.id not in pins], others[::-1][:recent])]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    drawn_kinds=kinds,
    drawn=memo_rows,
    limits=st.tuples(st.integers(1, 5), st.integers(0, 5), st.integers(0, 5)),
)
def test_a_prompt_reads_the_memos_the_rule_picks_for_every_reader(
    engine: Engine, drawn_kinds: list[tuple[ChannelKind, bool]], drawn: list[dict], limits: tuple[int, int, int]
) -> None:
    with engine.begin() as connection:
        for table in (MemoPinRow, MemoRow, ChannelRow):
            connection.execute(delete(table.__table__))  # type: ignore[attr-defined]
    clock = ManualClock()
    conversations, store = SqlConversationStore(engine, clock), SqlMemoStore(engine, clock)
    channels = [
        Channel(c, c.lower(), kind, ext_shared=ext and kind in (ChannelKind.IM, ChannelKind.MPIM))
        for c, (kind, ext) in zip(CONVERSATIONS, drawn_kinds, strict=True)
    ]
    for channel in channels:
        conversations.save_channel(channel)
    memos, pins = notebook(engine, drawn)
    hidden = not_public(channels)
    stored = {c.id: c for c in channels}
    readers = [*(Reader.of(c, stored.get(c)) for c in WRITTEN_IN), WORKSPACE_VIEW, None]
    min_priority, important, recent = limits
    for reader in readers:
        read = store.for_prompt(reader, min_priority=min_priority, important=important, recent=recent)
        assert [[m.id for m in part] for part in read] == modelled(memos, pins, reader, hidden, limits), reader
