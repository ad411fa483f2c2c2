"""Answering a message addressed to the bot: a mention, or anything said to it in a DM."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass
from datetime import timedelta

from myao2.application.agents import ReplyWriter
from myao2.application.context import ContextBuilder
from myao2.application.conversations import Conversations
from myao2.application.locks import KeyedLocks
from myao2.application.reply_stream import ReplyStream
from myao2.domain.conversation import Channel, ChannelKind, Message
from myao2.domain.memo import Origin
from myao2.domain.ports import ChatPlatform, Clock, ConversationStore

RECENT_CLAIMS = 1024
"""Claims remembered in memory; a claim is never undone, so a remembered one needs no query."""


@dataclass(frozen=True)
class MentionSettings:
    """How mentions are answered (from the `response` config section)."""

    reaction: str
    reply_in_thread: bool
    context_message_limit: int
    max_message_age_seconds: int
    apology: str


class AnswerMention:
    """Takes up a message addressed to the bot once, and answers it in its thread.

    The message is claimed in the store first, so Slack's redeliveries, the
    app_mention/message pair and restarts never produce a second answer.
    Answers in one thread are written one after another; other threads go on
    concurrently.
    """

    def __init__(
        self,
        *,
        store: ConversationStore,
        chat: ChatPlatform,
        contexts: ContextBuilder,
        writer: ReplyWriter,
        conversations: Conversations,
        clock: Clock,
        settings: MentionSettings,
    ) -> None:
        self._store = store
        self._chat = chat
        self._conversations = conversations
        self._contexts = contexts
        self._writer = writer
        self._clock = clock
        self._settings = settings
        self._threads = KeyedLocks()
        self._claimed: OrderedDict[tuple[str, str], None] = OrderedDict()

    async def __call__(self, message: Message) -> None:
        if not await self._claim(message):
            return
        # The reaction goes out while the answer is composed; it lands before the answer.
        reaction = asyncio.ensure_future(self._react(message))
        try:
            channel = await self._conversations.channel(message.channel_id)
            reply_thread = message.thread_ts or (message.ts if self._threads_replies(channel) else None)
            async with self._threads.hold((message.channel_id, reply_thread)):
                await self._answer(channel, message, reply_thread, reaction)
        finally:
            await reaction

    async def _claim(self, message: Message) -> bool:
        """Claim the message in the store; a message already claimed here is refused without asking it."""
        key = (message.channel_id, message.ts)
        if key in self._claimed:
            return False
        self._claimed[key] = None  # the other event of the pair, arriving meanwhile, is refused
        if len(self._claimed) > RECENT_CLAIMS:
            self._claimed.popitem(last=False)
        try:
            return await asyncio.to_thread(self._store.claim, message.channel_id, message.ts)
        except BaseException:
            self._claimed.pop(key, None)  # not claimed after all: a redelivery may try again
            raise

    async def _react(self, message: Message) -> None:
        if self._settings.reaction:
            await self._chat.react(message.channel_id, message.ts, self._settings.reaction)

    def _threads_replies(self, channel: Channel) -> bool:
        """Top-level messages get a threaded answer, except in a DM, which reads like a chat."""
        return self._settings.reply_in_thread and channel.kind is not ChannelKind.IM

    async def _answer(
        self, channel: Channel, message: Message, reply_thread: str | None, reaction: asyncio.Future[None]
    ) -> None:
        reply = self._reply(channel, message, reaction)
        await self._conversations.publish(channel, reply_thread, message.user_id, reply, self._settings.apology)

    async def _reply(self, channel: Channel, message: Message, reaction: asyncio.Future[None]) -> ReplyStream:
        """The answer as the model writes it; nothing of it is shown before the reaction has landed."""
        since = self._clock.now() - timedelta(seconds=self._settings.max_message_age_seconds)
        messages = await self._conversations.messages(
            message.channel_id, message.thread_ts, self._settings.context_message_limit, since
        )
        if message.ts not in {m.ts for m in messages}:
            messages.append(message)
        context = await self._contexts.build(channel, messages, await self._conversations.names(messages))
        origin = Origin(
            channel_id=channel.id,
            channel_private=channel.is_private,
            user_id=message.user_id,
            message_ts=message.ts,
        )
        async for event in self._writer.stream(context, origin):
            if not reaction.done():
                await reaction
            yield event
