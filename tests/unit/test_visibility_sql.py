"""The SQL statements of the visibility rule say what the domain says, for every kind of conversation."""

from __future__ import annotations

import math
from datetime import date

from sqlalchemy import text
from sqlmodel import Session

from myao2.application.search import Reads
from myao2.domain.conversation import Channel, ChannelKind, Message
from myao2.domain.memo import MemoDraft, Origin
from myao2.domain.memory import WORKSPACE_SCOPE, Bullet, Digest, Memory, Scope, Stage, Term
from myao2.domain.visibility import WORKSPACE, WORKSPACE_VIEW, Audience, Reader, can_read_conversation, can_read_from, not_public
from myao2.infrastructure.db.conversation_store import SqlConversationStore
from myao2.infrastructure.db.memo_store import SqlMemoStore
from myao2.infrastructure.db.memory_store import NOT_PUBLIC_IDS, SqlMemoryStore, not_public_among
from myao2.infrastructure.search.index import SearchIndex
from myao2.infrastructure.search.keywords import keyword_table
from tests.clocks import ManualClock
from tests.fakes.embedder import HashEmbedder

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


def test_the_search_index_weighs_the_documents_of_exactly_those_the_domain_shows_each_reader(engine):
    # The index's keyword statistics (`Reach`: the scopes, channels and conversations heard listed in SQL) and its
    # loaded vectors count, for each reader, exactly the memos, messages, digests and long-term memories the domain lets
    # it see, a memory only where it is shown whole.
    clock = ManualClock()
    conversations, memos, memories = SqlConversationStore(engine, clock), SqlMemoStore(engine, clock), SqlMemoryStore(engine, clock)
    left = [Channel("L1", "left", ChannelKind.PUBLIC), Channel("L2", "left-private", ChannelKind.PRIVATE)]
    ids = [c.id for c in [*CHANNELS, *left]] + ["CX"]  # CX: never stored
    day = date(2026, 1, 1)
    public = next(c.id for c in CHANNELS if c.kind is ChannelKind.PUBLIC)
    for number, channel_id in enumerate(ids):  # heard while every conversation was public (none stored yet)
        heard = (Bullet(1, "canary", day, ("1.0",), heard_in=(public,)), Bullet(2, "canary", day, ("1.0",), heard_in=(public, channel_id)))
        memories.save([Memory(Scope(public, f"9.{number}"), Term.LONG, WORKSPACE, heard)])
    for channel in [*CHANNELS, *left]:
        conversations.save_channel(channel)
    memos.add(MemoDraft.create("m-nowhere", "canary", 3), Origin(), "test")
    memories.save([Memory(WORKSPACE_SCOPE, Term.LONG, WORKSPACE, (Bullet(1, "canary", day, ("1.0",)),))])
    for number, channel_id in enumerate(ids):
        conversations.save_message(Message(channel_id, f"{number}.0", "U1", "canary", "Alice"))
        for own in (False, True):  # kept for the workspace (written while public) or for the conversation alone
            audience = Audience.of(channel_id, own)
            memos.add(MemoDraft.create(f"m-{channel_id}-{own}".lower(), "canary", 3), Origin(channel_id, own, "U1"), "test")
            memories.save_digest(
                Digest(channel_id, day.replace(day=1 + own), Stage.DIGEST, audience, ("canary",), "1.0", "2.0")
            )
        memories.save([Memory(Scope(channel_id), Term.LONG, Audience(channel_id), (Bullet(1, "canary", day, ("1.0",)),))])
        memories.save([Memory(Scope(channel_id, "1.0"), Term.LONG, WORKSPACE, (Bullet(1, "canary", day, ("1.0",)),))])
    for channel in left:
        conversations.leave_channel(channel.id)
    index = SearchIndex(engine, HashEmbedder(), memos, conversations, memories)
    index.sync()
    index.warm()

    stored = {c.id: c for c in conversations.channels()}
    hidden = not_public(stored.values())
    every_memo = memos.by_ids(list(range(1, 100)))
    with engine.connect() as connection:
        documents = connection.execute(text("SELECT id, kind, ref_id FROM search_docs")).all()
    digests = memories.digests_by_ids([ref for _, kind, ref in documents if kind == "digest"])
    summaries = memories.memories_by_ids([ref for _, kind, ref in documents if kind == "summary"])
    messages = conversations.messages_by_ids([ref for _, kind, ref in documents if kind == "message"])

    def shown(reader: Reader | None, kind: str, ref: int) -> bool:
        if kind == "memo":
            return every_memo[ref].visible_in(reader, hidden)
        if kind == "message":
            channel_id = messages[ref].channel_id
            return can_read_conversation(reader, channel_id, stored.get(channel_id))
        if kind == "digest":
            digest = digests[ref]
            return can_read_from(reader, digest.audience, digest.channel_id, stored.get(digest.channel_id))
        memory = summaries[ref]
        shown_as = memory.shown_in(reader, stored.get(memory.scope.channel_id or ""), hidden)
        return shown_as is not None and shown_as.active == memory.active

    keywords = keyword_table(engine)
    for reader in (None, WORKSPACE_VIEW, *(Reader.of(c, stored.get(c)) for c in ids)):
        reads = Reads.of(reader, stored)
        reach = index._reach(reads)
        with engine.connect() as connection:
            weighed = set(keywords.top(connection, reach, {"canary": 1.0}, math.inf, 1000))
        expected = {doc_id for doc_id, kind, ref in documents if shown(reader, kind, ref)}
        assert weighed == expected, reader
        assert index._loaded(reach) == len(expected), reader
