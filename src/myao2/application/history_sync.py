"""Catching up with Slack: recent history of every member channel into the conversation store."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from functools import partial

from myao2.domain.conversation import Channel, ChannelKind, History, Message, Person
from myao2.domain.ports import ChatPlatform, Clock, ConversationHidden, ConversationStore

logger = logging.getLogger(__name__)


LEFT_CHANNELS_ASKED_PER_SYNC = 20
"""The most public channels the bot is out of that one sync asks Slack about (in turn): a workspace may leave it in
hundreds of archived ones, and Slack limits conversations.info to about 50 calls a minute."""


THREADS_ASKED_PER_SYNC = 20
"""The most threads one sync asks Slack about (the latest replied first) beyond those the channels' history pages
list: threads replied to in the span whose parents are older than those pages. Slack limits conversations.replies to
about 50 calls a minute, and the channels' own threads take their share."""


class HistorySync:
    """Keeps the store in step with what was said in the bot's channels during the last `max_age_seconds`.

    Every run re-reads that whole span (at most `limit` messages per channel) and
    reconciles it with the store: new messages are stored (replies posted in it under
    threads started earlier, even before it, included), texts edited
    while the bot was away are updated, and messages deleted meanwhile are deleted.
    Slack lists a thread in a channel's history by its parent: of the threads whose
    parents the pages read do not list, those the store holds a reply in the span of
    are read too, at most `THREADS_ASKED_PER_SYNC` of them, the latest replied first.
    """

    def __init__(
        self,
        platform: ChatPlatform,
        store: ConversationStore,
        clock: Clock,
        bot_user_id: str,
        max_age_seconds: int,
        limit: int,
    ) -> None:
        self._platform = platform
        self._store = store
        self._clock = clock
        self._bot_user_id = bot_user_id
        self._max_age = timedelta(seconds=max_age_seconds)
        self._limit = limit
        self._last_asked = ""
        """The id of the left public channel asked about last: the next sync's turn goes on after it."""

    async def sync(self) -> list[Message]:
        """Fetch and store recent history; returns the messages by others that were not stored yet.

        A channel (or thread) that cannot be read or stored is logged and skipped; a stored
        channel the bot is no longer a member of counts as left.
        """
        start = self._clock.now() - self._max_age
        oldest = f"{start.timestamp():.6f}"
        new: list[Message] = []
        listed_at = self._clock.now()
        channels = await self._platform.member_channels()
        await asyncio.to_thread(self._store.leave_channels_except, [c.id for c in channels], listed_at)
        await self._recheck_left_public()
        read: dict[str, frozenset[str]] = {}
        """The channels read, each with the parents its history pages listed."""
        for channel in channels:
            done = await self._read(
                f"history of channel {channel.id} ({channel.name})",
                self._platform.fetch_history(channel.id, oldest, self._limit),
                partial(self._save, channel, listed_at),
            )
            if done is not None:
                read[channel.id] = done[0].threads
                new.extend(done[1])
            else:
                await self._keep(channel, listed_at)
        replied = await asyncio.to_thread(self._store.replied_threads, start)
        unlisted = [(c, ts) for c, ts in replied if c in read and ts not in read[c]]
        for channel_id, thread_ts in unlisted[:THREADS_ASKED_PER_SYNC]:
            done = await self._read(
                f"thread {thread_ts} of channel {channel_id}",
                self._platform.fetch_thread(channel_id, thread_ts, oldest, self._limit),
                self._reconcile,
            )
            if done is not None:
                new.extend(done[1])
        return [m for m in new if m.user_id != self._bot_user_id]

    async def _read(
        self,
        what: str,
        fetch: Awaitable[History],
        save: Callable[[History, datetime], list[Message]],
    ) -> tuple[History, list[Message]] | None:
        """What `fetch` returned and the messages `save` stored of it that were new; None (logged) when either
        failed."""
        fetched_at = self._clock.now()
        try:
            history = await fetch
        except Exception as exc:  # one unreadable channel must not stop the others
            logger.warning("%s skipped: %s", what, exc)
            return None
        try:
            return history, await asyncio.to_thread(save, history, fetched_at)
        except Exception as exc:  # nor one that cannot be stored; the error's text may quote messages
            logger.error("%s not stored: %s", what, type(exc).__name__)
            return None

    async def _recheck_left_public(self) -> None:
        """Ask again about each public channel the bot is out of: one turned private or shared outside meanwhile
        sends it no event, and what was said there while it was public must stop being the workspace's (the
        channel lifecycle narrows every channel stored as not public). Slack shows no private channel to a bot
        outside it: one hidden counts as private. So would a deleted one, which Slack hides alike: one Slack said
        it deleted (`channel_deleted`) is not asked about. At most `LEFT_CHANNELS_ASKED_PER_SYNC` of them, in
        turn."""
        stored = await asyncio.to_thread(self._store.channels)
        asked = (c for c in stored if not c.is_member and not c.deleted and c.kind is ChannelKind.PUBLIC)
        left = sorted(asked, key=lambda c: c.id)
        later = [c for c in left if c.id > self._last_asked]
        turn = (later + [c for c in left if c.id <= self._last_asked])[:LEFT_CHANNELS_ASKED_PER_SYNC]
        if turn:
            self._last_asked = turn[-1].id
        for channel in turn:
            try:
                kind = (await self._platform.channel(channel.id)).kind
            except ConversationHidden:
                kind = ChannelKind.PRIVATE
            except Exception as exc:  # noqa: BLE001 - asked again at the next sync
                logger.warning("channel %s (left) could not be looked up: %s", channel.id, exc)
                continue
            if kind is not ChannelKind.PUBLIC:
                await asyncio.to_thread(self._store.set_channel_kind, channel.id, kind)
                logger.info("channel %s, which the bot is out of, is %s now", channel.id, kind.value)

    async def _keep(self, channel: Channel, listed_at: datetime) -> None:
        """Store what the listing says of a channel whose history was not read: whether it is shared outside, or a DM
        with people of another organisation, says what may be read there before its messages do."""
        try:
            await asyncio.to_thread(self._store.save_channel, channel, as_of=listed_at)
        except Exception as exc:  # noqa: BLE001 - stored at the next sync
            logger.error("channel %s not stored: %s", channel.id, type(exc).__name__)

    def _save(self, channel: Channel, listed_at: datetime, history: History, fetched_at: datetime) -> list[Message]:
        """Store the channel, then `_reconcile`."""
        self._store.save_channel(channel, as_of=listed_at)
        return self._reconcile(history, fetched_at)

    def _reconcile(self, history: History, fetched_at: datetime) -> list[Message]:
        """Store the messages' authors, reconcile the messages; returns those that were new."""
        authors = {
            m.user_id: Person(user_id=m.user_id, display_name=m.user_name, is_bot=m.is_bot)
            for m in history.messages
            if m.user_id
        }
        for person in authors.values():
            self._store.save_person(person)
        return self._store.reconcile(history, fetched_at)
