"""What happens to a channel itself: it turns private, is shared outside the workspace, or the bot leaves it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from myao2.domain.conversation import Channel, ChannelKind
from myao2.domain.memo import NARROWED_BY
from myao2.domain.ports import ConversationStore, MemoryStore, MemoStore, ProfileStore
from myao2.domain.visibility import Reader

logger = logging.getLogger(__name__)


async def reads_as_stored(store: ConversationStore, channel: Channel) -> bool:
    """Whether the conversation, as `store` keeps it now, still reads what it did as `channel` when a prompt was read
    from it (`Reader.of`): one shared outside since reads none of the workspace's text that prompt may hold."""
    stored = await asyncio.to_thread(store.get_channel, channel.id)
    return Reader.of(channel.id, stored) == Reader.of(channel.id, channel)


class ChannelLifecycle:
    """Keeps the stored channel, and the memos, memories, digests and profile facts taken there, in step with what
    Slack reports.

    `refresh` re-reads a channel from Slack (as the inbox does for a rename or a join).
    """

    def __init__(
        self,
        store: ConversationStore,
        memos: MemoStore,
        memories: MemoryStore,
        refresh: Callable[[str], Awaitable[object]],
        *,
        profiles: ProfileStore,
    ) -> None:
        self._store = store
        self._memos = memos
        self._memories = memories
        self._refresh = refresh
        self._profiles = profiles

    async def became_private(self, channel_id: str) -> None:
        """Converted to a private channel: what was said there is no longer the workspace's. One shared outside
        stays `SHARED`."""
        channel = await asyncio.to_thread(self._store.get_channel, channel_id)
        shared = channel is not None and channel.kind is ChannelKind.SHARED
        await self._narrow(channel_id, ChannelKind.SHARED if shared else ChannelKind.PRIVATE)

    async def shared_outside(self, channel_id: str) -> None:
        """Shared with another organisation (Slack Connect): it stops being the workspace's, and a public or a
        private channel becomes `SHARED` (people of another organisation read it)."""
        channel = await asyncio.to_thread(self._store.get_channel, channel_id)
        channels = (ChannelKind.PUBLIC, ChannelKind.PRIVATE)
        kind = ChannelKind.SHARED if channel is None or channel.kind in channels else channel.kind
        await self._narrow(channel_id, kind)

    async def reconcile(self) -> None:
        """Narrow what is still kept for the workspace of every channel stored as private or shared outside:
        a change made while the bot was away (the history sync stores the new kind, no event comes), or a
        narrowing cut short by a crash. A channel that has neither a memory nor a memo kept for the
        workspace is taken as narrowed already (a public channel spoken in has its memories)."""
        for channel in await asyncio.to_thread(self._store.channels):
            await self._still_narrow(channel)

    async def refreshed(self, channel_id: str) -> None:
        """The channel was just read again from Slack (a join, a rename): if it is no longer public, what it
        kept for the workspace is narrowed now, not at the next history sync."""
        channel = await asyncio.to_thread(self._store.get_channel, channel_id)
        if channel is not None:
            await self._still_narrow(channel)

    async def _still_narrow(self, channel: Channel) -> None:
        if channel.kind not in (ChannelKind.PRIVATE, ChannelKind.SHARED):
            return
        memories = await asyncio.to_thread(self._memories.narrow, channel.id)
        memos = await asyncio.to_thread(self._memos.narrow, channel.id, NARROWED_BY)
        if memories or memos:
            logger.info("channel %s is %s: what it kept for the workspace narrowed", channel.id, channel.kind.value)
            await asyncio.to_thread(self._profiles.narrow, channel.id)

    async def deleted(self, channel_id: str) -> None:
        """Slack deleted the channel: it counts as left, and what was learnt there is kept as it is (a public
        channel's, the workspace's: it was public when it was said), as for a channel the bot left."""
        await asyncio.to_thread(self._store.channel_deleted, channel_id)
        logger.info("channel %s deleted", channel_id)

    async def left(self, channel_id: str) -> None:
        """The bot left the channel or was removed: no more judging, catching up or answering there."""
        await asyncio.to_thread(self._store.leave_channel, channel_id)
        logger.info("left channel %s", channel_id)

    async def _narrow(self, channel_id: str, kind: ChannelKind) -> None:
        """Store the new kind at once, then make the memos, memories, digests and profile facts taken there the
        channel's own (the workspace memory is made again without it)."""
        await asyncio.to_thread(self._store.set_channel_kind, channel_id, kind)
        # The memories last: while one is still kept for the workspace, `reconcile` finishes the work.
        await asyncio.to_thread(self._profiles.narrow, channel_id)
        narrowed = await asyncio.to_thread(self._memos.narrow, channel_id, NARROWED_BY)
        await asyncio.to_thread(self._memories.narrow, channel_id)
        logger.info("channel %s is now %s: %d memo(s) narrowed to it", channel_id, kind.value, len(narrowed))
        if await asyncio.to_thread(self._store.get_channel, channel_id) is None:
            await self._refresh(channel_id)
