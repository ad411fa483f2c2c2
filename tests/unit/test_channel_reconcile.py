"""A channel found private with things of it still kept for the workspace (turned private while the bot was away,
or a narrowing cut short) is narrowed by `ChannelLifecycle.reconcile`, once."""

from __future__ import annotations

from datetime import date

from myao2.application.channels import ChannelLifecycle
from myao2.application.memory_job import MemoryJob
from myao2.domain.conversation import Channel, ChannelKind
from myao2.domain.memo import MemoDraft, Origin
from myao2.domain.memory import WORKSPACE_SCOPE, Term
from myao2.domain.profile import NewFact, Profile
from myao2.domain.visibility import WORKSPACE, Audience, Reader
from myao2.infrastructure.db.memo_store import SqlMemoStore
from myao2.infrastructure.db.profile_store import SqlProfileStore
from tests.unit.test_memory_job import PERSONA as MEMORY_PERSONA, SETTINGS, FakeWriter
from tests.unit.test_retention import (  # noqa: F401 (fixtures)
    DAY,
    GENERAL,
    clock,
    conversations,
    job,
    memories,
    say,
    writer,
)


async def refresh(channel_id: str) -> None:
    return None


async def test_a_channel_found_private_is_narrowed_everywhere_and_a_second_pass_changes_nothing(
    job, conversations, memories, clock, engine
):
    memos, profiles = SqlMemoStore(engine, clock), SqlProfileStore(engine, clock)
    lifecycle = ChannelLifecycle(conversations, memos, memories, refresh, profiles=profiles)
    random = Channel("C2", "random")
    conversations.save_channel(random)
    memory_job = MemoryJob(
        conversations=conversations, memories=memories, writer=FakeWriter(), clock=clock,
        persona=MEMORY_PERSONA, settings=SETTINGS,
    )
    said = say(conversations, clock, GENERAL, "canary-general plans")
    say(conversations, clock, random, "cats are great")
    memos.add(MemoDraft.create("plans", "canary-general plans", 5), Origin(GENERAL.id), "tool:add_memo")
    learnt = NewFact("plans canary-general", 0.8, (said.ts,))
    profiles.save([Profile("U1").learn(WORKSPACE, [(learnt, GENERAL.id, date(2025, 1, 2))], [])])
    clock.advance(3 * DAY)
    await memory_job.run()
    await job.run()

    # What the history sync does when Slack lists the channel as private: the kind alone changes.
    conversations.save_channel(Channel(GENERAL.id, GENERAL.name, ChannelKind.PRIVATE))
    await lifecycle.reconcile()

    own = Audience(GENERAL.id)
    assert {m.audience for m in memories.all() if m.scope.channel_id == GENERAL.id} == {own}
    assert [d.audience for d in memories.digests(GENERAL.id)] == [own]
    assert memories.get(WORKSPACE_SCOPE, Term.LONG) is None
    assert [m.name for m in memos.list(Reader(random.id)).memos] == []
    assert [f.audience for f in profiles.get("U1").facts] == [own]

    await memory_job.run()  # the workspace memory made again, from #random alone
    rebuilt = memories.get(WORKSPACE_SCOPE, Term.LONG)
    revisions = len(memos.history("plans"))
    await lifecycle.reconcile()
    assert memories.get(WORKSPACE_SCOPE, Term.LONG) == rebuilt
    assert len(memos.history("plans")) == revisions
