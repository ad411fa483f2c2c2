"""A prompt's memos (`SqlMemoStore.for_prompt`) are exactly those the domain lets its conversation see (SQLite and
PostgreSQL): no DM's or private channel's memo reaches another conversation's prompt, no workspace memo a channel shared
outside the workspace's, pinned memos come first."""

from __future__ import annotations

from sqlalchemy import Engine

from myao2.domain.conversation import Channel, ChannelKind
from myao2.domain.memo import Memo, MemoDraft, Origin
from myao2.domain.visibility import Reader
from myao2.infrastructure.db.conversation_store import SqlConversationStore
from myao2.infrastructure.db.memo_store import SqlMemoStore
from tests.clocks import ManualClock

CHANNELS = [
    Channel("C1", "general"),
    Channel("C2", "random"),
    Channel("C3", "turned-private"),  # public when its memos were written, stored as private since (not narrowed yet)
    Channel("G1", "secret", ChannelKind.PRIVATE),
    Channel("D1", "alice", ChannelKind.IM),
    Channel("L1", "left-secret", ChannelKind.PRIVATE),  # the bot has left it
    Channel("X1", "partners", ChannelKind.SHARED),  # shared with another organisation
]
READERS = ["C1", "C2", "C3", "G1", "D1", "L1", "X1", None]


def reader_of(channel_id: str | None) -> Reader | None:
    return None if channel_id is None else Reader.of(channel_id, next(c for c in CHANNELS if c.id == channel_id))


def prompt(memos: SqlMemoStore, reader: str | None) -> tuple[list[str], set[str]]:
    """The pinned memos' names in order, and the names of every memo the prompt of `reader` shows."""
    pinned, important, recent = memos.for_prompt(reader_of(reader), min_priority=4, important=50, recent=50)
    return [m.name for m in pinned], {m.name for part in (pinned, important, recent) for m in part}


def test_a_prompt_shows_exactly_the_memos_its_conversation_may_see_pinned_ones_first(engine: Engine) -> None:
    clock = ManualClock()
    conversations, memos = SqlConversationStore(engine, clock), SqlMemoStore(engine, clock)
    for channel in CHANNELS:
        conversations.save_channel(channel)
    written: list[Memo] = []
    for channel in CHANNELS:
        for number, priority in enumerate((5, 2, 4)):
            clock.advance()
            origin = Origin(channel.id, channel.is_private, "U1", f"{number}.1")
            written.append(memos.add(MemoDraft.create(f"canary-{channel.id}-{number}", f"canary said in {channel.id}", priority), origin, "test"))
    written.append(memos.add(MemoDraft.create("canary-nowhere", "kept by a person", 3), Origin(), "cli"))
    memos.remove("canary-C1-1", None, "test")
    for name in ("canary-D1-0", "canary-C2-2", "canary-G1-1", "canary-C3-0", "canary-nowhere", "canary-C1-0", "canary-L1-0", "canary-X1-0"):
        clock.advance()
        memos.pin(name, "cli")
    conversations.set_channel_kind("C3", ChannelKind.PRIVATE)
    conversations.leave_channel("L1")
    not_public = {"C3", "G1", "D1", "L1", "X1"}
    live = [m for m in written if m.name != "canary-C1-1"]
    pin_order = [
        "canary-D1-0", "canary-C2-2", "canary-G1-1", "canary-C3-0", "canary-nowhere", "canary-C1-0", "canary-L1-0", "canary-X1-0"
    ]

    for reader in READERS:
        seen = {m.name for m in live if m.visible_in(reader_of(reader), not_public)}
        assert prompt(memos, reader) == ([name for name in pin_order if name in seen], seen), reader

    pinned, shown = prompt(memos, "C1")
    assert pinned == ["canary-C2-2", "canary-nowhere", "canary-C1-0"]
    assert not {name for name in shown if name.split("-")[1] in not_public}  # no DM's, private or left channel's memo
    assert prompt(memos, "D1")[1] == {"canary-D1-0", "canary-D1-1", "canary-D1-2", *shown}  # its own, and the public ones
    # shared outside the workspace: its own alone, no rule people set for the workspace either
    assert prompt(memos, "X1") == (["canary-X1-0"], {"canary-X1-0", "canary-X1-1", "canary-X1-2"})
