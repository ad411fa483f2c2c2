"""The SQL statements of the visibility rule say what the domain says, for every kind of conversation."""

from __future__ import annotations

from sqlmodel import Session

from myao2.domain.conversation import Channel, ChannelKind
from myao2.domain.memory import WORKSPACE_SCOPE, Memory, Term
from myao2.domain.visibility import WORKSPACE, not_public
from myao2.infrastructure.db.conversation_store import SqlConversationStore
from myao2.infrastructure.db.memory_store import NOT_PUBLIC_IDS, SqlMemoryStore, not_public_among
from tests.clocks import ManualClock

CHANNELS = [Channel(f"C{i}", kind.value, kind) for i, kind in enumerate(ChannelKind)]


def test_every_statement_of_the_conversations_not_public_names_those_whose_kind_keeps_to_itself(engine):
    clock = ManualClock()
    for channel in CHANNELS:
        SqlConversationStore(engine, clock).save_channel(channel)
    memories = SqlMemoryStore(engine, clock)
    memories.save([Memory(WORKSPACE_SCOPE, Term.LONG, WORKSPACE)])
    keep_to_themselves = {c.id for c in CHANNELS if c.kind.keeps_to_itself}

    with engine.connect() as connection:
        assert set(connection.execute(NOT_PUBLIC_IDS).scalars()) == keep_to_themselves
    assert memories.for_prompt([(WORKSPACE_SCOPE, Term.LONG)], None).not_public == keep_to_themselves  # NOT_PUBLIC
    with Session(engine) as session:
        assert not_public_among(session, [c.id for c in CHANNELS]) == keep_to_themselves
    assert not_public(CHANNELS) == keep_to_themselves
