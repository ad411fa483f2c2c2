"""Joining conversations nobody answered: after a human-like wait, and only when the judge says so."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from myao2.application import tracing
from myao2.application.activity import Activity
from myao2.application.agents import Judge, ModelUnavailable, ReplyWriter
from myao2.application.channels import reads_as_stored
from myao2.application.context import ContextBuilder
from myao2.application.conversations import Conversations
from myao2.application.inbox import Spawn
from myao2.application.locks import KeyedLocks
from myao2.application.mention import ANSWER_MAX_CHARS
from myao2.domain.activity import judgment_outcome
from myao2.domain.conversation import BotIdentity, Channel, ChannelKind, Message
from myao2.domain.judgment import LIVELINESS_WINDOW, ConversationKey, SkipPolicy, WaitPolicy, messages_per_minute
from myao2.domain.memo import Origin
from myao2.domain.ports import AutonomyStore, Clock, ConversationStore

logger = logging.getLogger(__name__)

HOUR = timedelta(hours=1)


@dataclass(frozen=True)
class AutonomySettings:
    """When and how often the bot speaks unasked (from the `response` config section)."""

    active_channel_days: float
    max_message_age_seconds: float
    context_message_limit: int
    wait: WaitPolicy
    skip: SkipPolicy | None
    interval_seconds: tuple[float, float]
    max_replies_per_hour: int
    judgments_at_once: int
    """Judgments made at once (prompt and model call); the other conversations due one wait their turn."""
    reply_to_bots: bool
    include: frozenset[str]
    exclude: frozenset[str]

    def allows(self, channel: Channel) -> bool:
        """DMs are answered as mentions; other channels by the include/exclude lists (id or name)."""
        if channel.kind is ChannelKind.IM:
            return False
        names = {channel.id, channel.name}
        if self.include and not names & self.include:
            return False
        return not names & self.exclude


class AutonomousResponder:
    """One `check()` per interval: finds quiet conversations and considers each in the background.

    What outlives a consideration is kept in the database (`AutonomyStore`): the judgments that stand, and the
    posts the hourly budget and the pause between posts count. A restart, or another replica taking over the
    check, judges only the conversations with something new since their last judgment.
    """

    def __init__(
        self,
        *,
        store: ConversationStore,
        autonomy: AutonomyStore,
        conversations: Conversations,
        contexts: ContextBuilder,
        judge: Judge,
        writer: ReplyWriter,
        bot: BotIdentity,
        clock: Clock,
        settings: AutonomySettings,
        spawn: Spawn,
        sleep: Callable[[float], object] = asyncio.sleep,
        rng: random.Random | None = None,
        activity: Activity | None = None,
    ) -> None:
        """`activity` records each judgment's outcome."""
        self._store = store
        self._autonomy = autonomy
        self._conversations = conversations
        self._contexts = contexts
        self._judge = judge
        self._writer = writer
        self._bot = bot
        self._clock = clock
        self._settings = settings
        self._spawn = spawn
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._activity = activity
        self._considering: set[ConversationKey] = set()
        self._channel_turns = KeyedLocks()
        self._judging = asyncio.Semaphore(settings.judgments_at_once)

    async def check(self) -> int:
        """Start considering every conversation that has waited long enough; returns how many."""
        now = self._clock.now()
        active_since = now - timedelta(days=self._settings.active_channel_days)
        channels = await asyncio.to_thread(self._store.active_channels, active_since)
        posts = await asyncio.to_thread(self._autonomy.unasked_posts, now - HOUR)
        allowed = {c.id: c for c in channels if self._settings.allows(c) and not self._out_of_budget(posts.get(c.id))}
        started = 0
        for key, newest, elapsed in await self._quiet_conversations(allowed, now):
            self._considering.add(key)
            self._spawn(self._consider(allowed[key.channel_id], key, newest, elapsed))
            started += 1
        return started

    async def _quiet_conversations(
        self, channels: dict[str, Channel], now: datetime
    ) -> list[tuple[ConversationKey, Message, timedelta]]:
        """The conversations of `channels` with something new since their last judgment, to someone to answer,
        unclaimed, that have waited long enough."""
        since = now - timedelta(seconds=self._settings.max_message_age_seconds)
        unjudged = await asyncio.to_thread(self._autonomy.unjudged, list(channels), since, now)
        waiting = [
            (key, m)
            for m in unjudged
            if (key := ConversationKey(m.channel_id, m.thread_ts)) not in self._considering
            and self._from_someone_to_answer(m)
        ]
        if not waiting:
            return []
        lively = {m.channel_id for _, m in waiting} if self._settings.wait.dynamic else set()
        recent = await asyncio.to_thread(self._autonomy.counts_since, lively, now - LIVELINESS_WINDOW)
        candidates = []
        for key, newest in waiting:
            elapsed = now - newest.posted_at
            seed = f"{key.channel_id}/{key.thread_ts}/{newest.ts}"
            if elapsed >= self._settings.wait.wait(messages_per_minute(recent.get(key.channel_id, 0)), seed):
                candidates.append((key, newest, elapsed))
        claimed: set[str] = set()
        for channel_id in {key.channel_id for key, _, _ in candidates}:
            ts = [m.ts for key, m, _ in candidates if key.channel_id == channel_id]
            claimed |= await asyncio.to_thread(self._store.claimed, channel_id, ts)
        return [c for c in candidates if c[1].ts not in claimed]

    def _from_someone_to_answer(self, message: Message) -> bool:
        """Not the bot's own, nor another bot's unless `reply_to_bots`, nor a person's mention of the bot: that
        is the mention path's to answer in its thread, also before it is claimed (stored by the history sync
        until the catch-up that follows claims it; stored from its event until the channel is looked up)."""
        if message.user_id == self._bot.user_id:
            return False
        if message.is_bot:
            return self._settings.reply_to_bots
        return self._bot.user_id not in message.mentions

    async def _consider(self, channel: Channel, key: ConversationKey, newest: Message, elapsed: timedelta) -> None:
        attributes = {"slack.channel_id": channel.id, "slack.thread_ts": key.thread_ts, "slack.message_ts": newest.ts}
        with tracing.span("judgment", attributes) as span:
            await self._judge_and_join(channel, key, newest, elapsed, span)

    async def _judge_and_join(
        self, channel: Channel, key: ConversationKey, newest: Message, elapsed: timedelta, span: tracing.Span
    ) -> None:
        try:
            async with self._judging:
                since = self._clock.now() - timedelta(seconds=self._settings.max_message_age_seconds)
                messages = await self._conversations.messages(
                    channel.id, key.thread_ts, self._settings.context_message_limit, since
                )
                context = await self._contexts.build(channel, messages, await self._conversations.names(messages))
                try:
                    judgment = await self._judge.judge(context, elapsed)
                except ModelUnavailable as exc:
                    logger.warning("no judgment for %s: %s", key, exc)
                    judgment = None
            span.set_attribute("myao2.judgment.outcome", judgment_outcome(judgment).value)
            if judgment is not None:
                span.set_attribute("myao2.judgment.confidence", judgment.confidence)
            if self._activity is not None:
                await self._activity.judgment(channel.id, judgment)
            judged = next((m for m in messages if m.ts == newest.ts), newest)
            if not await self._remember(key, judged, judgment.confidence if judgment else 0.0):
                logger.info("not joining %s: its newest message was edited while it was judged", key)
                return
            if judgment is None or not judgment.should_respond:
                return
            # The reason is the model's free text about the conversation: DEBUG only.
            logger.info("joining %s (confidence %.2f)", key, judgment.confidence)
            logger.debug("joining %s because: %s", key, judgment.reason)
            origin = Origin.of(channel, newest.user_id, newest.ts)
            async with self._channel_turns.hold(channel.id):
                if not await self._pace(channel.id) or not await reads_as_stored(self._store, channel):
                    # Unclaimed and not standing: judged afresh once the budget allows, or as the channel reads now.
                    await asyncio.to_thread(self._autonomy.drop, key)
                    return
                if not await asyncio.to_thread(self._store.claim, channel.id, newest.ts):
                    return
                text = await self._writer.write(context, origin)
                if len(text) > ANSWER_MAX_CHARS:  # Slack would cut it, unmarked; nobody asked for it
                    logger.warning("not joining %s: the reply ran to %d characters", key, len(text))
                    return
                # Still what the conversation waits on, by the rule that found it: nobody spoke there since, nor
                # answered it in its thread, nor deleted it.
                if not await asyncio.to_thread(self._autonomy.is_newest, key, newest.ts):
                    logger.info("not joining %s: someone spoke while the reply was written", key)
                    return
                await self._conversations.post(channel.id, text, key.thread_ts)  # recorded as an unasked post
        except ModelUnavailable as exc:
            logger.warning("gave up joining %s: %s", key, exc)
        finally:
            self._considering.discard(key)

    async def _remember(self, key: ConversationKey, judged: Message, confidence: float) -> bool:
        """Let the judgment of `judged` (as the judge read it) stand; False if it was edited (or deleted) since."""
        skip = self._settings.skip
        holds = skip.holds_for(confidence) if skip else timedelta(0)
        now = self._clock.now()
        return await asyncio.to_thread(self._autonomy.stand, key, judged, now + holds, now)

    async def _pace(self, channel_id: str) -> bool:
        """Wait out a pause (drawn from `interval_seconds`) after the bot's last unasked post in this channel;
        False, without waiting, when the channel is out of its hourly budget."""
        now = self._clock.now()
        posts = (await asyncio.to_thread(self._autonomy.unasked_posts, now - HOUR)).get(channel_id, [])
        if self._out_of_budget(posts):
            return False
        if posts:
            low, high = self._settings.interval_seconds
            delay = (posts[-1] - now).total_seconds() + self._rng.uniform(low, high)
            if delay > 0:
                await self._sleep(delay)
        return True

    def _out_of_budget(self, posts: Sequence[datetime] | None) -> bool:
        """Whether the unasked posts of a channel in the last hour use up its budget."""
        return len(posts or ()) >= self._settings.max_replies_per_hour

