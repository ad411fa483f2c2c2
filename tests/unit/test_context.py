from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import pytest

from myao2.application.context import ContextBuilder, Persona, format_message
from myao2.domain.conversation import Channel, ChannelKind, Message
from myao2.domain.memo import MemoChanges, MemoDraft, Origin
from myao2.infrastructure.db.engine import open_database
from myao2.infrastructure.db.memo_store import SqlMemoStore
from tests.clocks import ManualClock

TOKYO = ZoneInfo("Asia/Tokyo")
PERSONA = Persona(name="myao", system_prompt="", language="en", timezone=TOKYO)
GENERAL = Channel("C1", "general")
RANDOM = Channel("C2", "random")
SECRET = Channel("G1", "secret", ChannelKind.PRIVATE)
DM = Channel("D1", "alice", ChannelKind.IM)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def store(tmp_path, clock) -> Iterator[SqlMemoStore]:
    engine = open_database(f"sqlite:///{tmp_path}/m.db")
    yield SqlMemoStore(engine, clock)
    engine.dispose()


def add(store: SqlMemoStore, clock: ManualClock, name: str, priority: int, channel: Channel = GENERAL) -> None:
    clock.advance()
    origin = Origin(channel_id=channel.id, channel_private=channel.is_private, user_id="U1")
    store.add(MemoDraft.create(name, f"about {name}", priority), origin, "test")


async def test_important_memos_are_priority_4_and_up_at_most_20_in_order(store, clock):
    for i in range(12):
        add(store, clock, f"five-{i}", 5)
        add(store, clock, f"four-{i}", 4)
        add(store, clock, f"three-{i}", 3)

    context = await ContextBuilder(store, clock, PERSONA).build(GENERAL, [])

    names = [m.name for m in context.important_memos]
    expected = [f"five-{i}" for i in reversed(range(12))] + [f"four-{i}" for i in reversed(range(12))]
    assert names == expected[:20]


async def test_recent_memos_are_the_five_latest_others(store, clock):
    add(store, clock, "important", 4)
    for i in range(8):
        add(store, clock, f"minor-{i}", 2)
    clock.advance()
    store.edit("minor-0", MemoChanges.create(content="fresh news"), None, "test")

    context = await ContextBuilder(store, clock, PERSONA).build(GENERAL, [])

    assert [m.name for m in context.important_memos] == ["important"]
    assert [m.name for m in context.recent_memos] == ["minor-0", "minor-7", "minor-6", "minor-5", "minor-4"]


async def test_recent_memos_do_not_repeat_important_ones(store, clock):
    for i in range(6):
        add(store, clock, f"important-{i}", 5)
    for i in range(5):
        add(store, clock, f"minor-{i}", 1)
    clock.advance()
    store.edit("important-0", MemoChanges.create(content="updated last"), None, "test")

    context = await ContextBuilder(store, clock, PERSONA).build(GENERAL, [])

    important = {m.name for m in context.important_memos}
    recent = [m.name for m in context.recent_memos]
    assert len(recent) == 5
    assert important.isdisjoint(recent)
    assert recent == [f"minor-{i}" for i in reversed(range(5))]


@pytest.mark.parametrize(
    ("channel", "expected"),
    [
        (GENERAL, {"public-important", "public-minor"}),
        (RANDOM, {"public-important", "public-minor"}),
        (SECRET, {"public-important", "public-minor", "secret-important", "secret-minor"}),
        (DM, {"public-important", "public-minor", "dm-important", "dm-minor"}),
    ],
)
async def test_memos_of_private_conversations_stay_in_them(store, clock, channel, expected):
    for origin, prefix in ((GENERAL, "public"), (SECRET, "secret"), (DM, "dm")):
        add(store, clock, f"{prefix}-important", 5, origin)
        add(store, clock, f"{prefix}-minor", 2, origin)

    context = await ContextBuilder(store, clock, PERSONA).build(channel, [])

    shown = {m.name for m in context.important_memos + context.recent_memos}
    assert shown == expected


async def test_context_carries_persona_time_and_formatted_conversation(store, clock):
    messages = [
        Message("C1", "1735786800.000100", "U1", "hi <@U2>", "Alice"),
        Message("C1", "1735786860.000200", "U2", "hello", "Bob"),
    ]

    context = await ContextBuilder(store, clock, PERSONA).build(GENERAL, messages, {"U2": "Bob"})

    assert context.persona is PERSONA
    assert context.channel is GENERAL
    assert context.now == clock.now()
    assert context.now.tzinfo is TOKYO
    assert context.conversation == (
        "[2025-01-02 12:00] Alice: hi @Bob",
        "[2025-01-02 12:01] Bob: hello",
    )
    assert context.local_time(datetime(2025, 1, 2, 15, 30, tzinfo=timezone.utc)) == "2025-01-03 00:30"


def test_format_message_uses_the_time_zone_and_known_names():
    message = Message("C1", "1735786800.0", "U1", "<@U2> and <@U3|carol> and <@U9>, lunch?", "Alice")

    line = format_message(message, TOKYO, {"U2": "Bob", "U3": "Carol"})

    assert line == "[2025-01-02 12:00] Alice: @Bob and @Carol and <@U9>, lunch?"
    assert format_message(message, timezone.utc, {}).startswith("[2025-01-02 03:00] Alice: <@U2>")
