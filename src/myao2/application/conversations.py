"""Reading a stored conversation for a prompt, and posting the bot's reply into it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from contextlib import nullcontext
from datetime import datetime

from myao2.application.activity import Activity
from myao2.application.outgoing import safe_stream, safe_text
from myao2.application.reply_stream import (
    AboutToShow,
    LeftOpen,
    NotShown,
    ReplyPublisher,
    ReplyStream,
    Started,
    TasksRunning,
    Unheard,
)
from myao2.domain.activity import ReplyKind
from myao2.domain.conversation import (
    MENTION,
    BotIdentity,
    Channel,
    Message,
    Person,
)
from myao2.domain.ports import ChatPlatform, ConversationStore

logger = logging.getLogger(__name__)


class Conversations:
    """The bot's view of conversations: the channel, the messages, people's names; its own posts."""

    def __init__(
        self,
        store: ConversationStore,
        chat: ChatPlatform | None,
        bot: BotIdentity,
        bot_name: str,
        publisher: ReplyPublisher | None = None,
        *,
        allow_broadcasts: bool = False,
        activity: Activity | None = None,
    ) -> None:
        """`publisher` shows replies while they are written (`publish`); without it only `post` works.

        `activity` records each post of the bot's.
        Without a `chat` platform (a preview) only what is stored is known, and nothing can be posted.
        """
        self._store = store
        self._chat = chat
        self._bot = bot
        self._bot_name = bot_name
        self._allow_broadcasts = allow_broadcasts
        self._publisher = publisher
        self._activity = activity

    async def channel(self, channel_id: str) -> Channel:
        """The channel as stored, fetched from the chat platform the first time."""
        channel = await asyncio.to_thread(self._store.get_channel, channel_id)
        if channel is None:
            if self._chat is None:
                raise LookupError(f"no channel {channel_id} is stored")
            channel = await self._chat.channel(channel_id)
            await asyncio.to_thread(self._store.save_channel, channel)
        return channel

    async def messages(self, channel_id: str, thread_ts: str | None, limit: int, since: datetime) -> list[Message]:
        """A thread's newest messages, or for `thread_ts` None the channel's top-level flow since `since`."""
        return await asyncio.to_thread(self.read_messages, channel_id, thread_ts, limit, since)

    def read_messages(self, channel_id: str, thread_ts: str | None, limit: int, since: datetime) -> list[Message]:
        """`messages`, synchronous: for a worker thread that reads more in the same trip."""
        if thread_ts:
            return self._store.thread_messages(channel_id, thread_ts, limit)
        return self._store.channel_messages(channel_id, limit, since)

    async def names(self, messages: Iterable[Message], stored: dict[str, Person] | None = None) -> dict[str, str]:
        """Display names of the people the messages' texts mention (all a prompt shows), the bot's own included.

        Someone not stored yet is looked up on the chat platform (which caches) and
        stored; one whose lookup fails stays unnamed. `stored`: those of them `stored_people` read, in a trip to a
        worker thread of the caller's (else they are read in one of their own).
        """
        wanted = self._mentioned(messages)
        if stored is None:
            stored = await asyncio.to_thread(self._store.people, wanted) if wanted else {}
        people = dict(stored)
        unknown = sorted(wanted - people.keys())
        if unknown and self._chat is not None:
            found = await asyncio.gather(*map(self._look_up, unknown))
            people.update((person.user_id, person) for person in found if person is not None)
        names = {user_id: person.display_name for user_id, person in people.items()}
        names[self._bot.user_id] = self._bot_name
        return names

    def stored_people(self, messages: Iterable[Message]) -> dict[str, Person]:
        """The stored people the messages' texts mention, for `names`; synchronous, for a worker thread."""
        wanted = self._mentioned(messages)
        return self._store.people(wanted) if wanted else {}

    def _mentioned(self, messages: Iterable[Message]) -> set[str]:
        return {user_id for m in messages for user_id in MENTION.findall(m.text)} - {self._bot.user_id}

    async def _look_up(self, user_id: str) -> Person | None:
        assert self._chat is not None
        try:
            person = await self._chat.person(user_id)
        except Exception as exc:  # noqa: BLE001 - a name is a courtesy: the answer goes on without it
            logger.warning("could not look up mentioned user %s: %s", user_id, exc)
            return None
        if person.display_name == user_id:  # not found: nothing worth storing
            return None
        await asyncio.to_thread(self._store.save_person, person)
        return person

    async def post(
        self, channel_id: str, text: str, thread_ts: str | None, answering: str | None = None
    ) -> Message:
        """Post as the bot (as the answer to message `answering`, if given); store the post with its ts.

        Unless broadcasts are allowed, @channel, @here, @everyone and user groups
        in `text` are made to notify nobody (see `safe_text`).
        """
        if self._chat is None:
            raise RuntimeError("Conversations was built without a chat platform")
        text = safe_text(text, self._allow_broadcasts)
        ts = await self._chat.post(channel_id, text, thread_ts, answering)
        return await self._remember(channel_id, ts, text, thread_ts, answering)

    async def publish(
        self,
        channel: Channel,
        thread_ts: str | None,
        recipient_user_id: str | None,
        reply: ReplyStream,
        apology: str,
        *,
        answering: str | None = None,
        started: Started | None = None,
        unheard: Unheard | None = None,
        left_open: LeftOpen | None = None,
        tasks_running: TasksRunning | None = None,
        about_to_show: AboutToShow | None = None,
        not_shown: NotShown | None = None,
        stored: Callable[[str], None] | None = None,
    ) -> Message:
        """Show `reply` as it is written, answering `recipient_user_id`; store its final text once, with its ts.

        Its text is made safe as `post` makes it, also where a broadcast is split across
        deltas. `answering` marks it as the answer to that message; `started` is told
        its ts as soon as it shows (`unheard`, `left_open`, `tasks_running`, `about_to_show`, `not_shown`: see
        `ReplyPublisher.publish`); `stored` is
        called with it once the reply is stored, in the same worker thread and transaction (its writes to the
        conversation store are committed with the reply's, or none of them is). The model calls made while it is
        written are recorded in that trip too.
        """
        if self._publisher is None:
            raise RuntimeError("Conversations was built without a reply publisher")
        async with self._activity.held_for_reply() if self._activity is not None else nullcontext():
            published = await self._publisher.publish(
                channel,
                thread_ts,
                recipient_user_id,
                safe_stream(reply, self._allow_broadcasts),
                safe_text(apology, self._allow_broadcasts),
                answering=answering,
                started=started,
                unheard=unheard,
                left_open=left_open,
                tasks_running=tasks_running,
                about_to_show=about_to_show,
                not_shown=not_shown,
            )
            return await self._remember(channel.id, published.ts, published.text, thread_ts, answering, stored)

    async def finish(
        self,
        channel_id: str,
        ts: str,
        thread_ts: str | None,
        apology: str,
        answering: str | None = None,
        *,
        ending: str | None = None,
        tasks: dict[str, str] | None = None,
        left_open: LeftOpen | None = None,
    ) -> bool:
        """End a reply in `thread_ts` left half-written (the bot stopped while it streamed, or its end failed) with
        `ending` (what it lacks), else with `apology`, its `tasks` still running marked failed, and store its whole
        text; False when message `ts` was none (see `ReplyPublisher.finish`)."""
        if self._publisher is None:
            raise RuntimeError("Conversations was built without a reply publisher")
        text = await self._publisher.finish(
            channel_id,
            ts,
            safe_text(apology, self._allow_broadcasts),
            answering=answering,
            ending=ending,
            tasks=tasks,
            left_open=left_open,
        )
        if text:
            await self._remember(channel_id, ts, text, thread_ts, answering)
        return text is not None

    async def _remember(
        self,
        channel_id: str,
        ts: str,
        text: str,
        thread_ts: str | None,
        answering: str | None,
        stored: Callable[[str], None] | None = None,
    ) -> Message:
        """Record the post in the activity log, then store the bot's message and call `stored`, in one trip to a
        worker thread; the message and what `stored` writes in one transaction (a failure to record activity is
        never theirs: it has its own). A copy a history sync stored meanwhile (half-written) gets this text."""
        reply = Message(
            channel_id=channel_id,
            ts=ts,
            user_id=self._bot.user_id,
            text=text,
            user_name=self._bot_name,
            is_bot=True,
            thread_ts=thread_ts,
        )

        def store() -> None:
            with self._store.one_connection():  # the activity's transaction, then the reply's, on one connection
                if self._activity is not None:
                    self._activity.reply(channel_id, ReplyKind.ANSWER if answering else ReplyKind.UNASKED)
                with self._store.writes_together():
                    if not self._store.save_message(reply):
                        self._store.edit_message(channel_id, ts, text)
                    if stored is not None:
                        stored(ts)

        await asyncio.to_thread(store)
        return reply
