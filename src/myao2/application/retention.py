"""Retention: raw message text is personal data, kept only as long as the policy says.

A day's messages in a conversation (threads included, days in the persona's time
zone) become a dated digest after `digest_after_days`; after `condense_after_days` a
shorter digest replaces it, made again from the raw messages, never from the digest;
after `delete_after_days` the raw messages are deleted, once the day's last digest is
made and the memory job has read them (into channel memories and profiles). Messages of a thread the bot still takes part in are kept until it has been
quiet for a day. Each digest and each deletion is its own transaction, and what is
done is read back from the store, so a crash resumes where it stopped; a failed model
call keeps the raw messages and ends the round, to be tried again next round, which
begins with the conversations after it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from itertools import groupby
from typing import Protocol

from myao2.application import tracing
from myao2.application.agents import DigestPrompt, DigestWriter, ModelUnavailable
from myao2.application.context import Persona, format_message
from myao2.application.memory_job import still_public
from myao2.application.suspects import LastFailure
from myao2.domain.budget import fit_items
from myao2.domain.conversation import Channel, ChannelKind, Message, ts_to_datetime
from myao2.domain.memory import Digest, RetentionPolicy, Stage
from myao2.domain.ports import Clock, ConversationStore, MemoryStore
from myao2.domain.tokens import estimate_tokens
from myao2.domain.visibility import audience_of

logger = logging.getLogger(__name__)

QUIET_THREAD = timedelta(days=1)
"""How long a thread the bot takes part in must be quiet before its raw messages may go."""


@dataclass(frozen=True)
class RetentionReport:
    """What one round did."""

    digests: int = 0
    failures: int = 0
    deleted: int = 0


class ReadByMemory(Protocol):
    """What the memory job has read (`MemoryJob`): raw text it has not read yet stays."""

    def absorbed(self, channel: Channel, messages: Sequence[Message]) -> set[str]:
        """The ts of those of the channel's `messages` the memory job has read. Blocking."""
        ...


class RetentionJob:
    """Runs rounds of digesting, condensing and deleting raw messages; one round at a time."""

    def __init__(
        self,
        *,
        conversations: ConversationStore,
        memories: MemoryStore,
        writer: DigestWriter,
        clock: Clock,
        persona: Persona,
        policy: RetentionPolicy,
        bot_user_id: str,
        max_tokens: int,
        memory: ReadByMemory,
    ) -> None:
        self._conversations = conversations
        self._memories = memories
        self._writer = writer
        self._clock = clock
        self._persona = persona
        self._policy = policy
        self._bot_user_id = bot_user_id
        self._max_tokens = max_tokens
        """The most message text one digest call reads; the day's oldest messages are left out beyond it."""
        self._memory = memory
        self._lock = asyncio.Lock()
        self._last_failure = LastFailure()
        """The conversation whose digest the model failed last."""

    async def run(self) -> RetentionReport:
        """One round over every conversation's days old enough for a step."""
        horizon = self._policy.horizon_days
        if horizon is None:
            return RetentionReport()
        async with self._lock:
            with tracing.span("memory.retention") as span:
                today = self._clock.now().astimezone(self._persona.timezone).date()
                before = self._day_start(today - timedelta(days=horizon - 1))
                keys = await asyncio.to_thread(self._conversations.message_keys_before, before)
                channels = [(channel_id, list(of)) for channel_id, of in groupby(keys, key=lambda key: key[0])]
                # those after the one whose model call failed last first: a day the model refuses for good
                # holds back no other conversation
                channels = self._last_failure.rotated(channels, lambda channel: channel[0])
                report = RetentionReport()
                for channel_id, in_channel in channels:
                    with tracing.span("memory.retention.channel", {"slack.channel_id": channel_id}):
                        report, going_on = await self._channel(channel_id, in_channel, today, report)
                    if not going_on:
                        self._last_failure.failed([channel_id])
                        break
                span.set_attribute("myao2.retention.digests", report.digests)
                span.set_attribute("myao2.retention.failures", report.failures)
                span.set_attribute("myao2.retention.deleted", report.deleted)
                if report.digests or report.deleted or report.failures:
                    logger.info(
                        "retention: %d digest(s) made, %d failed, %d raw message(s) deleted",
                        report.digests,
                        report.failures,
                        report.deleted,
                    )
                return report

    async def _channel(
        self, channel_id: str, keys: list[tuple[str, str, str | None]], today: date, report: RetentionReport
    ) -> tuple[RetentionReport, bool]:
        """Digest and delete what is due in one channel; False once the model failed (the round ends).

        Only the text of days due for a digest is read.
        """
        channel = await asyncio.to_thread(self._conversations.get_channel, channel_id)
        if channel is None:
            channel = Channel(channel_id, channel_id, ChannelKind.PRIVATE, is_member=False)  # unknown: kept to itself
        made = {d.day: d.stage for d in await asyncio.to_thread(self._memories.digests, channel_id)}
        days: dict[date, list[tuple[str, str | None]]] = {}
        for _, ts, thread_ts in keys:
            days.setdefault(ts_to_datetime(ts).astimezone(self._persona.timezone).date(), []).append((ts, thread_ts))
        kept_threads: set[str] | None = None
        for day, of_day in sorted(days.items()):
            due = self._policy.stage_due(day, today)
            if due is not None and (made.get(day) is None or made[day].rank < due.rank):
                messages = await asyncio.to_thread(
                    self._conversations.messages_between,
                    channel.id,
                    self._day_start(day),
                    self._day_start(day + timedelta(days=1)),
                )
                if not messages:  # deleted meanwhile (a person forgotten)
                    continue
                try:
                    digest = await self._digest(channel, day, due, messages)
                except ModelUnavailable as exc:
                    logger.warning("retention: digest skipped this round, raw messages kept: %s", exc)
                    return RetentionReport(report.digests, report.failures + 1, report.deleted), False
                await asyncio.to_thread(self._memories.save_digest, digest)
                if digest.audience.is_workspace:
                    await asyncio.to_thread(still_public, self._conversations, self._memories, [channel.id])
                if not await self._still_as_read(channel.id, day, messages):
                    continue
                made[day] = due
                report = RetentionReport(report.digests + 1, report.failures, report.deleted)
            if self._policy.deletable(day, today, made.get(day)):
                if kept_threads is None:
                    since = self._clock.now() - QUIET_THREAD
                    kept_threads = await asyncio.to_thread(
                        self._conversations.active_threads, channel.id, since, self._bot_user_id
                    )
                read = await asyncio.to_thread(self._read_by_memory, channel, day)
                going = [ts for ts, thread_ts in of_day if (thread_ts or ts) not in kept_threads and ts in read]
                await asyncio.to_thread(self._conversations.expire_messages, channel.id, going)
                report = RetentionReport(report.digests, report.failures, report.deleted + len(going))
        return report, True

    def _read_by_memory(self, channel: Channel, day: date) -> set[str]:
        """The ts of the day's messages the memory job has read (the rest waits for it, e.g. after its model
        failed while digests did not)."""
        messages = self._conversations.messages_between(
            channel.id, self._day_start(day), self._day_start(day + timedelta(days=1))
        )
        return self._memory.absorbed(channel, messages)

    async def _still_as_read(self, channel_id: str, day: date, messages: Sequence[Message]) -> bool:
        """Whether the day's messages are still those the digest was made from; if one was deleted or edited
        meanwhile (in Slack, or by forgetting a person), the digest just saved is dropped, to be made again."""
        now = await asyncio.to_thread(
            self._conversations.messages_between,
            channel_id,
            self._day_start(day),
            self._day_start(day + timedelta(days=1)),
        )
        if [(m.ts, m.text) for m in now] == [(m.ts, m.text) for m in messages]:
            return True
        await asyncio.to_thread(self._memories.delete_digest, channel_id, day)
        return False

    async def _digest(self, channel: Channel, day: date, stage: Stage, messages: Sequence[Message]) -> Digest:
        """The day's digest at `stage`, made by the model from its raw messages; raises ModelUnavailable."""
        lines = await self._writer.digest(self._prompt(channel, day, stage, messages))
        return Digest(
            channel_id=channel.id,
            day=day,
            stage=stage,
            audience=audience_of(channel),
            lines=lines,
            first_ts=messages[0].ts,
            last_ts=messages[-1].ts,
            authors=tuple(dict.fromkeys(m.user_id for m in messages if m.user_id)),
            label=_label(channel),
        )

    def _prompt(self, channel: Channel, day: date, stage: Stage, messages: Sequence[Message]) -> DigestPrompt:
        zone = self._persona.timezone
        lines = [format_message(m, zone, {}) for m in messages]
        kept = fit_items(lines, self._max_tokens, lambda line: estimate_tokens(line) + 1)
        return DigestPrompt(self._persona, channel, day, stage, tuple(kept), omitted=len(lines) - len(kept))

    def _day_start(self, day: date) -> datetime:
        return datetime.combine(day, time(), tzinfo=self._persona.timezone)


def _label(channel: Channel) -> str:
    return f"#{channel.name}"
