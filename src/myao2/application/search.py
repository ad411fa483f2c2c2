"""Searching memos and past messages for one reader, never past a time cutoff.

What a reader may see is asked of `myao2.domain.visibility`; the index only ranks.
Every call first brings the index up to date, so nothing changed since is missed and
nothing removed or deleted is returned. Synchronous: call it from a worker thread.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from myao2.domain.conversation import Channel, Message
from myao2.domain.memo import Memo
from myao2.domain.visibility import Audience, can_read

MAX_QUERY_LENGTH = 500
MAX_LIMIT = 20
CONTEXT_BEFORE = 2
CONTEXT_AFTER = 2


class SearchError(Exception):
    """A search request was refused; `code` and `params` let each caller word it."""

    def __init__(self, code: str, **params: object) -> None:
        super().__init__(code)
        self.code = code
        self.params = params


class RankingIndex(Protocol):
    """Ranks documents of a kind ("memo" or "message") by relevance, as (id, score) pairs."""

    def sync(self) -> int: ...

    def search(
        self, kind: str, query: str, readable: Callable[[str | None], bool], before: float | None, limit: int
    ) -> list: ...


class MemoSource(Protocol):
    def by_ids(self, ids: list[int]) -> dict[int, Memo]: ...


class MessageSource(Protocol):
    def messages_by_ids(self, ids: list[int]) -> dict[int, Message]: ...

    def around(self, message: Message, before: int, after: int, until: datetime | None) -> list[Message]: ...

    def channels(self) -> list[Channel]: ...


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


class Search:
    """Memo and message search on behalf of a reader: a conversation's id, or None for a person's own view."""

    def __init__(self, index: RankingIndex, memos: MemoSource, conversations: MessageSource) -> None:
        self._index = index
        self._memos = memos
        self._conversations = conversations

    def memos(self, query: object, reader: str | None, before: datetime | None, limit: object = 5) -> list[MemoHit]:
        """The memos best matching `query` that `reader` may see, created at or before `before`."""
        text, count = validate(query, limit)
        self._index.sync()

        def readable(scope: str | None) -> bool:
            return can_read(reader, Audience(scope))

        hits = self._index.search("memo", text, readable, _seconds(before), count)
        memos = self._memos.by_ids([hit.ref_id for hit in hits])
        found = []
        for hit in hits:
            memo = memos.get(hit.ref_id)
            if memo is None or memo.removed or not memo.visible_in(reader):
                continue
            if before is not None and memo.created_at > before:
                continue
            found.append(MemoHit(memo, hit.score))
        return found

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
        self._index.sync()
        channels = {c.id: c for c in self._conversations.channels()}

        def readable(scope: str | None) -> bool:
            if scope is None or (channel is not None and scope != channel):
                return False
            known = channels.get(scope)
            # A channel the bot has not stored is taken as private: it is never shown elsewhere.
            return can_read(reader, Audience.of(scope, known.is_private if known else True))

        hits = self._index.search("message", text, readable, _seconds(before), count)
        messages = self._conversations.messages_by_ids([hit.ref_id for hit in hits])
        found = []
        for hit in hits:
            message = messages.get(hit.ref_id)
            if message is None or not readable(message.channel_id):
                continue
            if before is not None and message.posted_at > before:
                continue
            context = self._conversations.around(message, CONTEXT_BEFORE, CONTEXT_AFTER, before)
            found.append(MessageHit(message, channels.get(message.channel_id), context, hit.score))
        return found


    def channel_named(self, name: str, reader: str | None) -> str:
        """The id of the channel called `name` (or with that id) that `reader` may read, or a `SearchError`.

        A channel the reader may not read is unknown to it, exactly like one that does not exist.
        """
        wanted = name.strip().lstrip("#")
        for channel in self._conversations.channels():
            if wanted in (channel.id, channel.name) and can_read(
                reader, Audience.of(channel.id, channel.is_private)
            ):
                return channel.id
        raise SearchError("unknown_channel")


def validate(query: object, limit: object) -> tuple[str, int]:
    """A query of 1-500 characters and a limit of 1-20, or a `SearchError`."""
    if not isinstance(query, str) or not query.strip():
        raise SearchError("blank_query")
    if len(query) > MAX_QUERY_LENGTH:
        raise SearchError("query_too_long", limit=MAX_QUERY_LENGTH)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise SearchError("bad_limit", limit=MAX_LIMIT)
    return query.strip(), limit


def _seconds(moment: datetime | None) -> float | None:
    return None if moment is None else moment.timestamp()
