"""What Slack reports, kept in the store; messages addressed to the bot handed on for an answer."""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import suppress
from dataclasses import replace
from typing import Any, Protocol

from myao2.application.mention import ClaimAhead, Claimed
from myao2.domain.conversation import BotIdentity, ChannelKind, Message, mentions_in
from myao2.domain.ports import ChatPlatform, Clock, ConversationStore

logger = logging.getLogger(__name__)

Spawn = Callable[[Coroutine[Any, Any, None]], None]
Then = Callable[[], object]


class Answering(Protocol):
    """Answers messages addressed to the bot (`AnswerMention`)."""

    def __call__(self, message: Message) -> Awaitable[None]: ...

    def claim_ahead(self, message: Message) -> ClaimAhead | None: ...

    def take_up(self, message: Message, claimed: Claimed) -> Awaitable[None]: ...

RECENTLY_STORED = 256
"""Messages remembered as stored: Slack sends a mention twice (message and app_mention), one right after the other."""


PACE_SECONDS = 0.05
"""At most one group of messages is written in this time, unless one of them is wanted at once."""


class GroupedSaves:
    """Stores messages in a worker thread, in groups: one trip to the thread and one transaction for all the
    messages that arrived since the last group, so a burst costs a few commits instead of one each.

    A group is written at most every `PACE_SECONDS`: a message arriving when none was written for that long is
    written at once, those arriving sooner wait for the rest of that time (and those arriving during a write,
    for its end). A message wanted at once (`at_once`: one for the bot, or whose answer waits for it) is written
    at once with all that waits before it, in arrival order; after `close`, every message is.

    `save` returns a future that ends once its message is committed (or failed), as a save of its own would.
    A failed group is saved again one message at a time, so one message's failure is never another's.
    """

    def __init__(self, store: ConversationStore) -> None:
        self._store = store
        self._waiting: list[tuple[Message, Then | None, asyncio.Future[object]]] = []
        self._writer: asyncio.Future[None] | None = None
        self._at_once = False
        """A message waiting is wanted at once."""
        self._closed = False
        self._wake: asyncio.Future[None] | None = None
        """Set while the writer waits for its pace: ending it starts the write."""
        self._last_write = float("-inf")

    def save(self, message: Message, then: Then | None = None, *, at_once: bool = False) -> asyncio.Future[object]:
        """Store `message`; `then`, if given, is called in the same trip once it is committed, and its result is the
        future's (which is None otherwise). A message with a `then` is wanted at once, as is one `at_once`."""
        saved: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        self._waiting.append((message, then, saved))
        if at_once or then is not None:
            self._hurry()
        if self._writer is None:
            self._writer = asyncio.ensure_future(self._write())
        return saved

    async def close(self) -> None:
        """Write what waits at once, and from now on every message as it comes; return once what waited is written."""
        self._closed = True
        self._hurry()
        if self._writer is not None:
            with suppress(BaseException):
                await asyncio.shield(self._writer)

    def _hurry(self) -> None:
        self._at_once = True
        if self._wake is not None:
            _settle(self._wake, None)

    async def _paced(self) -> None:
        """Wait, unless a message waiting is wanted at once, until `PACE_SECONDS` after the last write began."""
        loop = asyncio.get_running_loop()
        pause = self._last_write + PACE_SECONDS - loop.time()
        if pause <= 0 or self._at_once or self._closed:
            return
        self._wake = loop.create_future()
        timer = loop.call_later(pause, _settle, self._wake, None)
        try:
            await self._wake
        finally:
            timer.cancel()
            self._wake = None

    async def _write(self) -> None:
        """Store the waiting messages, group after group, until none are left."""
        try:
            while self._waiting:
                group: list[tuple[Message, Then | None, asyncio.Future[object]]] = []
                try:
                    await self._paced()
                    group, self._waiting = self._waiting, []
                    self._at_once = False
                    self._last_write = asyncio.get_running_loop().time()
                    outcomes = await asyncio.to_thread(self._save, [(message, then) for message, then, _ in group])
                except BaseException as exc:  # cancelled (shutdown), or no worker thread to be had
                    for *_, saved in (*group, *self._waiting):
                        _fail(saved, exc)
                    self._waiting = []
                    raise
                for (*_, saved), (result, failure) in zip(group, outcomes):
                    if failure is None:
                        _settle(saved, result)
                    else:
                        _fail(saved, failure)
        finally:
            self._writer = None

    def _save(self, group: list[tuple[Message, Then | None]]) -> list[tuple[object, Exception | None]]:
        """What became of each message's save: its `then`'s result, or the failure; in the worker thread. The
        group's save and the `then`s share one connection; one message at a time, each takes its own."""
        try:
            with self._store.one_connection():
                self._store.save_messages([message for message, _ in group])
                return [_then(then) for _, then in group]
        except Exception as exc:  # noqa: BLE001 - handed to the message's save
            if len(group) == 1:
                return [(None, exc)]
        outcomes: list[tuple[object, Exception | None]] = []
        for message, then in group:
            try:
                self._store.save_messages([message])
            except Exception as exc:  # noqa: BLE001 - handed to the message's save
                outcomes.append((None, exc))
            else:
                outcomes.append(_then(then))
        return outcomes


def _then(then: Then | None) -> tuple[object, Exception | None]:
    try:
        return (None if then is None else then()), None
    except Exception as exc:  # noqa: BLE001 - handed to the message's save
        return None, exc


def _settle(future: asyncio.Future[object], result: object) -> None:
    if not future.done():
        future.set_result(result)


def _fail(future: asyncio.Future[object], exc: BaseException) -> None:
    if future.done():
        return
    if isinstance(exc, Exception):
        future.set_exception(exc)
    else:
        future.cancel()


class Inbox:
    """Ingests events as domain objects; never waits for an answer to be written."""

    def __init__(
        self,
        *,
        store: ConversationStore,
        chat: ChatPlatform,
        bot: BotIdentity,
        answer: Answering,
        spawn: Spawn,
        clock: Clock,
    ) -> None:
        self._store = store
        self._chat = chat
        self._clock = clock
        self._bot = bot
        self._answer = answer
        self._spawn = spawn
        self._known_channels: dict[str, ChannelKind] = {}
        self._saves = GroupedSaves(store)
        self._stored: OrderedDict[tuple[str, str], Message] = OrderedDict()
        self._storing: dict[tuple[str, str], tuple[asyncio.Future[object], Message]] = {}
        """Saves under way and what they store: the other event of a pair waits for the save instead of making its
        own."""
        self._early_edits: OrderedDict[tuple[str, str], str] = OrderedDict()
        """Edits of messages not stored yet (the edit's event came first): the text their save stores."""

    def addressed_to_bot(self, message: Message, kind: ChannelKind | None) -> bool:
        """A person's message that mentions the bot, or anything a person says to it in a DM."""
        if message.is_bot or message.user_id == self._bot.user_id:
            return False
        return self._bot.user_id in message.mentions or kind is ChannelKind.IM

    async def message_posted(self, message: Message, kind: ChannelKind | None) -> None:
        """Store a message (new or redelivered) and hand it on if it is for the bot.

        A message just stored (or being stored) as it is now is not written again.
        In a channel whose kind is known, a message for the bot is claimed in the trip that stores it; any other
        message may wait to be stored with the next ones (`GroupedSaves`), unless it may be for the bot (its
        channel's kind is not known yet).
        """
        known = self._known_channels.get(message.channel_id)
        for_bot = known is None or self.addressed_to_bot(message, known)
        ahead = self._answer.claim_ahead(message) if known and for_bot else None
        try:
            claimed = await self._save(message, None if ahead is None else ahead.claim, at_once=for_bot)
        except BaseException:
            if ahead is not None:
                ahead.drop()
            raise
        if isinstance(claimed, Claimed):
            self._spawn(self._answer.take_up(message, claimed))
            return
        if ahead is not None:  # stored already: claimed as it is otherwise
            ahead.drop()
        kind = known or await self._learn_channel(message.channel_id, kind)
        if self.addressed_to_bot(message, kind):
            self._spawn(self._answer(message))

    async def _save(self, message: Message, then: Then | None, *, at_once: bool) -> object:
        """Store `message` unless stored as it is (`at_once`: see `GroupedSaves`); what `then` returned, if it was
        called (once it was stored)."""
        key = (message.channel_id, message.ts)
        await self._settled(key)
        if (edited := self._early_edits.pop(key, None)) is not None:
            message = replace(message, text=edited, mentions=mentions_in(edited))
        if self._stored.get(key) == message:
            return None
        saving = self._saves.save(message, then, at_once=at_once)
        self._storing[key] = (saving, message)
        saving.add_done_callback(lambda _: self._saved(key, saving))  # the first: run before its awaiters go on
        return await asyncio.shield(saving)

    def _saved(self, key: tuple[str, str], saving: asyncio.Future[object]) -> None:
        """`saving`, the save of message `key` under way, ended: it is no longer under way, and the message is
        remembered as stored if it was. The first to see it end (its callback, or `_settled`) calls this."""
        storing = self._storing.get(key)
        if storing is None or storing[0] is not saving:
            return
        del self._storing[key]
        message = storing[1]
        if saving.cancelled() or saving.exception() is not None:
            return
        self._stored[key] = message
        if len(self._stored) > RECENTLY_STORED:
            self._stored.popitem(last=False)

    async def _settled(self, key: tuple[str, str]) -> None:
        """Wait for the save of message `key` under way, if any (failed or not)."""
        while (storing := self._storing.get(key)) is not None:
            if storing[0].done():  # its callback is yet to run
                self._saved(key, storing[0])
                break
            with suppress(Exception):  # a failed save is made again by whoever needs it
                await asyncio.shield(storing[0])

    async def close(self) -> None:
        """Store what waits to be stored at once, and from now on every message as it comes (shutting down)."""
        await self._saves.close()

    async def message_edited(self, channel_id: str, ts: str, text: str) -> None:
        """Change a stored message's text; an edit of one not stored yet is kept for its save."""
        key = (channel_id, ts)
        while True:
            self._stored.pop(key, None)
            await self._settled(key)
            if await asyncio.to_thread(self._store.edit_message, channel_id, ts, text):
                return
            if key not in self._storing and key not in self._stored:  # no save began meanwhile: it comes later
                self._early_edits[key] = text
                if len(self._early_edits) > RECENTLY_STORED:
                    self._early_edits.popitem(last=False)
                return

    async def message_deleted(self, channel_id: str, ts: str) -> None:
        self._stored.pop((channel_id, ts), None)
        await asyncio.to_thread(self._store.delete_message, channel_id, ts)

    async def channel_changed(self, channel_id: str) -> None:
        """The bot joined a channel, or a channel was renamed: refresh what is stored of it."""
        await self._learn_channel(channel_id)

    async def _learn_channel(self, channel_id: str, hint: ChannelKind | None = None) -> ChannelKind:
        """Fetch and store a channel; if Slack cannot tell, trust the event's hint, else assume private.

        A leaving recorded while the lookup was under way stands: the membership it read is older.
        """
        asked_at = self._clock.now()
        try:
            channel = await self._chat.channel(channel_id)
        except Exception as exc:  # noqa: BLE001 - any failure: fall back to the safe side
            logger.warning("could not look up channel %s: %s", channel_id, exc)
            return hint or ChannelKind.PRIVATE
        await asyncio.to_thread(self._store.save_channel, channel, asked_at)
        self._known_channels[channel.id] = channel.kind
        return channel.kind
