"""A channel whose memories were narrowed to it (shared outside, then unshared; private, then public again) keeps
them its own, as a save does (never wider than stored): the memory job reads them in no model call with another
channel's, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import date

import pytest
from sqlalchemy import Engine

from myao2.application.memory_job import MemoryJob
from myao2.domain.conversation import Channel, ChannelKind
from myao2.domain.memory import Bullet, Memory, Scope, Term
from myao2.domain.visibility import WORKSPACE, Audience
from myao2.infrastructure.db.conversation_store import SqlConversationStore
from myao2.infrastructure.db.memory_store import SqlMemoryStore
from tests.clocks import ManualClock
from tests.unit.test_batched_memory_privacy import MixingWriter, everything_but
from tests.unit.test_memory_job import GENERAL, PERSONA, SETTINGS, FakeWriter, Say

PLANS = Channel("CPLANS", "plans")


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def conversations(engine: Engine, clock: ManualClock) -> SqlConversationStore:
    store = SqlConversationStore(engine, clock)
    for channel in (GENERAL, PLANS):
        store.save_channel(channel)
    return store


@pytest.fixture
def memories(engine: Engine, clock: ManualClock) -> SqlMemoryStore:
    return SqlMemoryStore(engine, clock)


def narrowed_then_public(conversations: SqlConversationStore, memories: SqlMemoryStore, kind: ChannelKind) -> None:
    """#plans' notes narrowed to it while it was `kind` (what `ChannelLifecycle` does), then #plans public again (what
    the refresh of an unsharing, or the history sync, stores)."""
    day = date(2023, 11, 14)
    heard = (PLANS.id,)
    memories.save(
        [
            Memory(Scope(PLANS.id), Term.LONG, WORKSPACE, (Bullet(1, "canary-long: plans merge", day, ("1.0",), heard_in=heard),)),
            Memory(Scope(PLANS.id), Term.SHORT, WORKSPACE, (Bullet(1, "canary-short: plans", day, ("1.0",), heard_in=heard),)),
        ]
    )
    conversations.set_channel_kind(PLANS.id, kind)
    memories.narrow(PLANS.id)
    conversations.set_channel_kind(PLANS.id, ChannelKind.PUBLIC)


@pytest.mark.parametrize("kind", [ChannelKind.SHARED, ChannelKind.PRIVATE])
async def test_notes_kept_for_a_channel_public_again_are_read_with_no_other_channel_and_stay_its_own(
    conversations: SqlConversationStore, memories: SqlMemoryStore, clock: ManualClock, kind: ChannelKind
) -> None:
    # #plans public again: the job read its notes (kept for it alone) in #general's call, as a public channel's, and
    # the model could write them into #general's memory, from there into the workspace's.
    narrowed_then_public(conversations, memories, kind)
    say = Say(conversations, clock)
    say(GENERAL, "lunch at noon")
    say(PLANS, "the offsite is in May")
    writer = MixingWriter()
    job = MemoryJob(
        conversations=conversations, memories=memories, writer=writer, clock=clock, persona=PERSONA, settings=SETTINGS
    )

    await job.run()

    assert "canary" not in everything_but(memories, PLANS.id)
    assert [PLANS.id] in writer.calls and all(call == [PLANS.id] or PLANS.id not in call for call in writer.calls)
    own = Audience(PLANS.id)
    assert {m.audience for m in memories.all() if m.scope.channel_id == PLANS.id} == {own}
    assert "canary-long" in " ".join(b.text for b in memories.get(Scope(PLANS.id), Term.LONG).active)


async def test_the_workspace_memory_reads_nothing_heard_in_a_channel_stored_as_private_before_its_narrowing(
    conversations: SqlConversationStore, memories: SqlMemoryStore, clock: ManualClock
) -> None:
    # #plans stored as private (the history sync, say), its narrowing not there yet: the workspace memory's call read
    # its notes, and #general's heard there, as a public channel's, from the stored rows as they were. The save drops
    # what it wrote of them, but the call had shown them (and the narrowing may come after).
    day = date(2023, 11, 14)
    MADE = '{"ts": "3.0", "edited": null, "last_id": 2}'  # the channels' memories made, the workspace's not yet
    memories.save(
        [
            Memory(
                Scope(PLANS.id),
                Term.LONG,
                WORKSPACE,
                (Bullet(1, "canary-plans: merge", day, ("1.0",), heard_in=(PLANS.id,)),),
                label="#plans",
                covered=MADE,
            ),
            Memory(
                Scope(GENERAL.id),
                Term.LONG,
                WORKSPACE,
                (
                    Bullet(1, "canary-heard: merge too", day, ("2.0",), heard_in=(GENERAL.id, PLANS.id)),
                    Bullet(2, "lunch at noon", day, ("3.0",), heard_in=(GENERAL.id,)),
                ),
                label="#general",
                covered=MADE,
            ),
        ]
    )
    conversations.set_channel_kind(PLANS.id, ChannelKind.PRIVATE)
    writer = FakeWriter()
    job = MemoryJob(
        conversations=conversations, memories=memories, writer=writer, clock=clock, persona=PERSONA, settings=SETTINGS
    )

    await job.run()

    (workspace,) = [p for p in writer.prompts if p.channel is None]
    assert any("lunch at noon" in line for line in workspace.material)
    assert not any("canary" in line for line in workspace.material), workspace.material
