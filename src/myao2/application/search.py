"""Searching memos, past messages, digests and long-term memories for one reader, never past a time cutoff.

What a reader may see is asked of `myao2.domain.visibility`; the index only ranks.
Every call first brings the index up to date, so nothing changed since is missed and
nothing removed or deleted is returned. Synchronous: call it from a worker thread.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone, tzinfo
from typing import Protocol, TypeVar

from myao2.application import tracing
from myao2.domain.conversation import Channel, Message, clean_text, ts_to_datetime
from myao2.domain.memo import Memo, memo_visible_in
from myao2.domain.memory import Bullet, Digest, Memory
from myao2.domain.visibility import (
    WORKSPACE,
    WORKSPACE_VIEW,
    Audience,
    Reader,
    can_read_conversation,
    can_read_from,
    heard_now,
    not_public,
    readable_audiences,
)

MAX_QUERY_LENGTH = 500
MAX_LIMIT = 20
CONTEXT_BEFORE = 2
CONTEXT_AFTER = 2
NOTE_BULLETS = 3
"""The most bullets a long-term memory found shows: those holding most of the query."""


class SearchError(Exception):
    """A search request was refused; `code` and `params` let each caller word it."""

    def __init__(self, code: str, **params: object) -> None:
        super().__init__(code)
        self.code = code
        self.params = params


@dataclass(frozen=True)
class Reads:
    """What a reader may read of the documents the index keeps, by what the index knows of each: its kind, its scope
    (the conversation of its audience, None: the workspace; a message's is its channel) and its channel (the
    conversation a memo was written in, or a digest or memory made of; None: in no one conversation, and for a
    message, whose scope tells it). It may read a document when it may read both: the domain's rule, split in two
    (`of`) so that the index can list the scopes and channels a search may read. `heard` tells whether it may read
    all that was said in some conversations (those a memory's bullets were heard in, `Memory.shown_in`): whether it is
    shown the whole of a memory it may read, or only part."""

    scope: Callable[[str, str | None], bool]
    channel: Callable[[str, str | None], bool]
    heard: Callable[[tuple[str, ...]], bool]

    def __call__(self, kind: str, scope: str | None, channel: str | None) -> bool:
        return self.scope(kind, scope) and self.channel(kind, channel)

    @classmethod
    def of(cls, reader: Reader | None, channels: dict[str, Channel]) -> Reads:
        """What `reader` may read, `channels` the conversations stored, by id: a message as its channel's
        (`can_read_conversation`), a memo as `memo_visible_in` tells, a digest or memory as `can_read_from` does (each
        predicate answers the rule for the part it is given, the other part read as open to the reader)."""
        hidden = not_public(channels.values())
        # the other part read as the reader's own audience, which every reader reads (not so the workspace: `Reader`)
        own = WORKSPACE if reader is None else readable_audiences(reader)[0]

        @functools.cache
        def scope(kind: str, scope: str | None) -> bool:
            if kind == "message":
                return scope is not None and can_read_conversation(reader, scope, channels.get(scope))
            if kind == "memo":
                return memo_visible_in(reader, Audience(scope), None, hidden)
            return can_read_from(reader, Audience(scope), None)

        @functools.cache
        def channel(kind: str, channel: str | None) -> bool:
            if kind == "memo":
                return memo_visible_in(reader, own, channel, hidden)
            return can_read_from(reader, own, channel, None if channel is None else channels.get(channel))

        @functools.cache
        def heard(conversations: tuple[str, ...]) -> bool:
            return can_read_from(reader, own, None, heard=heard_now(conversations, hidden))

        return cls(scope, channel, heard)


class RankingIndex(Protocol):
    """Ranks documents of a kind ("memo", "message", "digest" or "summary") by relevance, as (id, score) pairs, by
    what the reader may read alone (`Reads`)."""

    def catch_up(self) -> int: ...

    def search(
        self, kind: str, query: str, reads: Reads, before: float | None, limit: int, conversation: str | None = None
    ) -> list: ...

    def line_scores(self, query: str, lines: list[str], reads: Reads) -> list[float]: ...

    def memory_score(self, query: str, memory: Memory, reads: Reads) -> float | None: ...


class MemoSource(Protocol):
    def by_ids(self, ids: list[int]) -> dict[int, Memo]: ...

    def as_of(self, ids: list[int], moment: datetime) -> dict[int, Memo]: ...


class MessageSource(Protocol):
    def messages_by_ids(self, ids: list[int]) -> dict[int, Message]: ...

    def around(self, message: Message, before: int, after: int, until: datetime | None) -> list[Message]: ...

    def channels(self) -> list[Channel]: ...


class NoteSource(Protocol):
    def digests_by_ids(self, ids: list[int]) -> dict[int, Digest]: ...

    def memories_by_ids(self, ids: list[int]) -> dict[int, Memory]: ...


@dataclass(frozen=True)
class NoteHit:
    """A digest of a past day, or bullets of a long-term memory, that matched; `label` names its conversation."""

    label: str
    digest: Digest | None
    bullets: tuple[Bullet, ...]
    score: float


@dataclass(frozen=True)
class MemoHit:
    memo: Memo
    score: float


@dataclass(frozen=True)
class MessageHit:
    """A message found, its channel (None when unknown) and the messages around it, oldest first."""

    message: Message
    channel: Channel | None
    context: list[Message]
    score: float


Hits = TypeVar("Hits", bound=list)
Hit = TypeVar("Hit", MemoHit, NoteHit)


def _traced(name: str) -> Callable[[Callable[..., Hits]], Callable[..., Hits]]:
    """Run a search in a span named `name`: the reader, the channel asked about and the hit count, never the query."""

    def wrap(method: Callable[..., Hits]) -> Callable[..., Hits]:
        signature = inspect.signature(method)

        @functools.wraps(method)
        def traced(*args: object, **kwargs: object) -> Hits:
            given = signature.bind(*args, **kwargs).arguments
            attributes = {"myao2.search.reader": given["reader"] or "person", "slack.channel_id": given.get("channel")}
            with tracing.span(name, attributes) as span:
                found = method(*args, **kwargs)
                span.set_attribute("myao2.search.hits", len(found))
                return found

        return traced

    return wrap


class Search:
    """Memo and message search on behalf of a reader: a conversation's id, or None for a person's own view. What the
    reader may read is asked of the domain with the conversation as the conversation store keeps it (`Reader.of`)."""

    def __init__(
        self,
        index: RankingIndex,
        memos: MemoSource,
        conversations: MessageSource,
        notes: NoteSource | None = None,
    ) -> None:
        self._index = index
        self._memos = memos
        self._conversations = conversations
        self._notes = notes
        """Digests and memories; without them `notes` finds nothing."""

    @_traced("search.memos")
    def memos(self, query: object, reader: str | None, before: datetime | None, limit: object = 5) -> list[MemoHit]:
        """The memos best matching `query` that `reader` may see, as they were at `before`.

        Nothing written after `before` is shown: a memo changed since is shown as it was then
        (from its revisions); one not added yet, or removed, then is left out. Its rank still
        comes from its newest text.
        """
        text, count = validate(query, limit)
        self._index.catch_up()

        channels = {c.id: c for c in self._conversations.channels()}
        hidden = not_public(channels.values())
        who = _reader(reader, channels)

        def memo_hits(found: list) -> tuple[list[MemoHit], bool]:
            ids = [hit.ref_id for hit in found]
            memos = self._memos.by_ids(ids)
            then = memos if before is None else self._memos.as_of(ids, before)
            hits, hid = [], False
            for hit in found:
                memo, shown = memos.get(hit.ref_id), then.get(hit.ref_id)
                if memo is None or shown is None or memo.removed:
                    continue
                # Checked now and then: a memo's audience only ever narrows, and the narrower holds.
                if memo.visible_in(who, hidden) and shown.visible_in(who, hidden):
                    hits.append(MemoHit(shown, hit.score))
                else:
                    hid = True
            return hits, hid

        return self._best("memo", text, Reads.of(who, channels), _seconds(before), None, count, memo_hits)[:count]

    @_traced("search.messages")
    def messages(
        self,
        query: object,
        reader: str | None,
        before: datetime | None,
        channel: str | None = None,
        limit: object = 5,
    ) -> list[MessageHit]:
        """The messages best matching `query` that `reader` may see, posted at or before `before`
        (in `channel` only, when given), each with the messages around it up to `before`."""
        text, count = validate(query, limit)
        self._index.catch_up()
        channels = {c.id: c for c in self._conversations.channels()}
        reads = Reads.of(_reader(reader, channels), channels)
        hits = self._index.search("message", text, reads, _seconds(before), count, channel)
        messages = self._conversations.messages_by_ids([hit.ref_id for hit in hits])
        found = []
        for hit in hits:
            message = messages.get(hit.ref_id)
            if message is None or not reads("message", message.channel_id, None) or channel not in (None, message.channel_id):
                continue
            if before is not None and message.posted_at > before:
                continue
            context = self._conversations.around(message, CONTEXT_BEFORE, CONTEXT_AFTER, before)
            found.append(MessageHit(message, channels.get(message.channel_id), context, hit.score))
        return found

    @_traced("search.notes")
    def notes(
        self,
        query: object,
        reader: str | None,
        before: datetime | None,
        channel: str | None = None,
        limit: object = 5,
    ) -> list[NoteHit]:
        """The digests and long-term memories best matching `query` that `reader` may see, made only
        from what was posted at or before `before` (of `channel` only, when given), best first."""
        text, count = validate(query, limit)
        notes = self._notes
        if notes is None:
            return []
        self._index.catch_up()

        seconds = _seconds(before)
        channels = {c.id: c for c in self._conversations.channels()}
        who = _reader(reader, channels)
        reads = Reads.of(who, channels)
        hidden = not_public(channels.values())

        def digest_hits(found: list) -> tuple[list[NoteHit], bool]:
            digests = notes.digests_by_ids([hit.ref_id for hit in found])
            hits, hid = [], False
            for hit in found:
                digest = digests.get(hit.ref_id)
                if digest is None or not can_read_from(
                    who, digest.audience, digest.channel_id, channels.get(digest.channel_id)
                ):
                    hid = True
                    continue
                if (channel is not None and digest.channel_id != channel) or (
                    seconds is not None and float(digest.last_ts) > seconds
                ):
                    continue
                hits.append(NoteHit(digest.label, digest, (), hit.score))
            return hits, hid

        rescored: dict[int, float | None] = {}

        def memory_hits(found: list) -> tuple[list[NoteHit], bool]:
            memories = notes.memories_by_ids([hit.ref_id for hit in found])
            hits, hid = [], False
            for hit in found:
                memory = memories.get(hit.ref_id)
                shown = memory and memory.shown_in(who, channels.get(memory.scope.channel_id or ""), hidden)
                if memory is None or shown is None:
                    hid = True
                    continue
                if channel is not None and memory.scope.channel_id != channel:
                    continue
                score = hit.score
                if len(shown.bullets) < len(memory.bullets):
                    # Ranked by what the reader may read alone: the index holds the words of the bullets left out
                    # too, and a rank they lifted would tell that they matched.
                    if hit.ref_id not in rescored:
                        rescored[hit.ref_id] = self._index.memory_score(text, shown, reads)
                    score, hid = rescored[hit.ref_id], True
                bullets = [b for b in shown.active if b.source_ts and (before is None or _newest(b) <= before)]
                if bullets and score is not None:
                    hits.append(NoteHit(memory.label, None, self._closest(text, bullets, reads), score))
            return hits, hid

        hits = [
            *self._best("digest", text, reads, seconds, channel, count, digest_hits),
            *self._best("summary", text, reads, seconds, channel, count, memory_hits),
        ]
        hits.sort(key=lambda hit: -hit.score)
        return hits[:count]

    def _best(
        self,
        kind: str,
        query: str,
        reads: Reads,
        seconds: float | None,
        conversation: str | None,
        count: int,
        judged: Callable[[list], tuple[list[Hit], bool]],
    ) -> list[Hit]:
        """The hits of `kind` (of `conversation` alone, when given) that `judged` keeps, scored by what the reader may
        read (and whether it left one out or scored one again for what the reader may not read). When it did, at least
        the best `count` when there are so many: the index is asked for more while fewer than `count` kept score at
        least as high as the last it ranked. A hit hidden makes room for the next ones: a result short of them, or a
        note ranked by words the reader may not read, would tell that those matched."""
        limit = count
        while True:
            found = self._index.search(kind, query, reads, seconds, limit, conversation)
            hits, hid = judged(found)
            if not hid or len(found) < limit:
                return hits
            sure = [hit for hit in hits if hit.score >= found[-1].score]
            if len(sure) >= count:
                return sure
            limit *= 2

    def _closest(self, query: str, bullets: list[Bullet], reads: Reads) -> tuple[Bullet, ...]:
        """The bullets holding most of the query (the newest first among equals), oldest first; the query's words
        weighed by what the reader `reads`."""
        scores = self._index.line_scores(query, [b.text for b in bullets], reads)
        ranked = sorted(range(len(bullets)), key=lambda i: (-scores[i], -i))[:NOTE_BULLETS]
        return tuple(bullets[i] for i in sorted(ranked))

    def channel_named(self, name: str, reader: str | None) -> str:
        """The id of the channel called `name` (or with that id) that `reader` may read, or a `SearchError`.

        A channel the reader may not read is unknown to it, exactly like one that does not exist. A name Slack gave
        again after a deletion means the channel bearing it now, an id before any name.
        """
        wanted = name.strip().lstrip("#")
        channels = {c.id: c for c in self._conversations.channels()}
        who = _reader(reader, channels)
        named = (
            channel
            for channel in channels.values()
            if wanted in (channel.id, channel.name) and can_read_conversation(who, channel.id, channel)
        )
        found = min(named, key=lambda c: (c.id != wanted, c.deleted), default=None)
        if found is None:
            raise SearchError("unknown_channel")
        return found.id


def validate(query: object, limit: object) -> tuple[str, int]:
    """A query of 1-500 characters and a limit of 1-20, or a `SearchError`; the query cleaned as text from Slack is
    (a model's or a client's lone surrogate, which neither the database nor the embedder takes)."""
    if not isinstance(query, str) or not query.strip():
        raise SearchError("blank_query")
    query = clean_text(query)
    if len(query) > MAX_QUERY_LENGTH:
        raise SearchError("query_too_long", limit=MAX_QUERY_LENGTH)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise SearchError("bad_limit", limit=MAX_LIMIT)
    return query.strip(), limit


def parse_before(value: str, zone: tzinfo) -> datetime:
    """An ISO 8601 date or time (one without a time zone is read in `zone`) in UTC, or `SearchError("bad_before")`
    for anything else, a moment UTC cannot hold (year 1 east of Greenwich, 9999-12-31 west of it) included."""
    try:
        moment = datetime.fromisoformat(value.strip())
        return (moment if moment.tzinfo else moment.replace(tzinfo=zone)).astimezone(timezone.utc)
    except (ValueError, OverflowError):
        raise SearchError("bad_before") from None


def _reader(reader: str | None, channels: dict[str, Channel]) -> Reader | None:
    """Conversation `reader` (None: a person's own view; `WORKSPACE_VIEW`'s id: that view) as the visibility rule
    reads it, `channels` the conversations stored, by id (`Reader.of`)."""
    if reader is None:
        return None
    if reader == WORKSPACE_VIEW.conversation_id:
        return WORKSPACE_VIEW
    return Reader.of(reader, channels.get(reader))


def _seconds(moment: datetime | None) -> float | None:
    return None if moment is None else moment.timestamp()


def _newest(bullet: Bullet) -> datetime:
    """When the newest message a bullet came from was posted."""
    return ts_to_datetime(max(bullet.source_ts))
