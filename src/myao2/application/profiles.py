"""Keeping the profiles of people: what each person said, turned into facts by the memory model.

Part of each memory job round. A person's messages are read per audience (the
workspace, or one private conversation), so a model call about a DM sees and changes
only the facts learnt in that DM. In one round each person with new messages takes
part in one call at most: the audience read least recently goes first, the others
wait for the next round. People whose turn falls on the same audience share calls, as
many as fit the batch budget with their known facts.
Each call's profiles are saved in one transaction with how far they were read, so a
failed call keeps the old profiles and the messages are read again next round.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from myao2.application.agents import ModelUnavailable, PersonMaterial, PersonUpdate, ProfilePrompt, ProfileWriter
from myao2.application.context import Persona, format_message
from myao2.application.suspects import Suspects
from myao2.domain.budget import cut_text, fit_items
from myao2.domain.conversation import Channel, Message, ts_to_datetime
from myao2.domain.ports import Clock, ConversationStore, ProfileStore
from myao2.domain.profile import Confirmation, Fact, NewFact, Profile, audience_key
from myao2.domain.tokens import estimate_tokens
from myao2.domain.visibility import Audience, audience_of

logger = logging.getLogger(__name__)

MESSAGE_OVERHEAD_TOKENS = 16
"""About what a message line's prefix (ts, channel, time, name) costs."""
MIN_SHARE_TOKENS = 4 * MESSAGE_OVERHEAD_TOKENS
"""The least of the batch budget a person's messages get in a call (a longer message is cut to its share)."""


@dataclass(frozen=True)
class ProfileRound:
    """What one round of profile updates did."""

    calls: int = 0
    failures: int = 0
    people: tuple[str, ...] = ()
    """The user ids whose profiles were updated."""


class ProfileKeeper:
    """Updates people's profiles from their new messages; one round at a time (run by the memory job)."""

    def __init__(
        self,
        *,
        conversations: ConversationStore,
        profiles: ProfileStore,
        writer: ProfileWriter,
        clock: Clock,
        persona: Persona,
        batch_max_tokens: int,
        cut: Callable[[int], str],
    ) -> None:
        """`cut` ends a message cut to `batch_max_tokens`, given how many characters were left out."""
        self._conversations = conversations
        self._profiles = profiles
        self._writer = writer
        self._clock = clock
        self._persona = persona
        self._batch_max_tokens = batch_max_tokens
        self._cut = cut
        self._suspects = Suspects()
        """The people of failed calls."""

    async def run(self) -> ProfileRound:
        """One round: the model calls of each audience whose turn it is for someone with new messages."""
        newest = await asyncio.to_thread(self._conversations.newest_by_author)
        channels = await asyncio.to_thread(self._channels, {channel_id for _, channel_id in newest})
        profiles = await asyncio.to_thread(self._profiles.many, {user_id for user_id, _ in newest})
        # user -> audience -> (newest ts, channel ids)
        unread: dict[str, dict[Audience, tuple[str, list[str]]]] = defaultdict(dict)
        for (user_id, channel_id), ts in sorted(newest.items()):
            channel = channels.get(channel_id)
            if channel is None:
                continue
            audience = audience_of(channel)
            known_ts, ids = unread[user_id].get(audience, ("", []))
            unread[user_id][audience] = (max(known_ts, ts), [*ids, channel_id])
        turns: dict[Audience, list[tuple[Profile, list[str]]]] = defaultdict(list)
        for user_id, audiences in sorted(unread.items()):
            profile = profiles.get(user_id) or Profile(user_id)
            behind = [
                (profile.read_up_to.get(audience_key(a), ""), audience_key(a), a, ids)
                for a, (ts, ids) in audiences.items()
                if ts > profile.read_up_to.get(audience_key(a), "")
            ]
            if behind:
                *_, audience, ids = min(behind, key=lambda item: item[:2])  # read least recently first
                turns[audience].append((profile, ids))
        report = ProfileRound()
        for audience, people in sorted(turns.items(), key=lambda item: audience_key(item[0])):
            for call in self._calls(audience, people):
                ids = [profile.user_id for profile, _ in call]
                if report.failures and any(user_id in self._suspects for user_id in ids):
                    continue  # a model that is down costs a round one call of theirs, not one each
                failures = report.failures
                report = await self._update(audience, call, channels, report)
                if report.failures > failures:
                    self._suspects.failed(ids)
                else:
                    self._suspects.read(ids)
        return report

    def _calls(
        self, audience: Audience, people: Sequence[tuple[Profile, list[str]]]
    ) -> list[list[tuple[Profile, list[str]]]]:
        """`people` in calls whose known facts fit half the batch budget together, each call with at most as many
        people as leave each a share of the budget for their messages of `MIN_SHARE_TOKENS` at least. Those of a
        failed call come last, each in a call of their own (one the model refuses for good, a content filter say,
        holds back no one else for ever), those after the first of the last failed call first."""

        def user_id(person: tuple[Profile, list[str]]) -> str:
            return person[0].user_id

        def cost(person: tuple[Profile, list[str]]) -> int:
            return sum(_fact_cost(f) for f in self._known(person[0].of(audience)))

        most = max(1, self._batch_max_tokens // MIN_SHARE_TOKENS)
        return self._suspects.calls(people, user_id, cost, self._batch_max_tokens // 2, most)

    def absorbed(self, channel: Channel, messages: Sequence[Message]) -> set[str]:
        """The ts of those of the channel's `messages` read into their authors' profiles (a bot's, which no
        profile reads, count as read). Blocking."""
        key = audience_key(audience_of(channel))
        people = {m.user_id for m in messages if m.user_id and not m.is_bot}
        profiles = self._profiles.many(people)
        return {
            m.ts
            for m in messages
            if m.user_id not in people or m.ts <= profiles.get(m.user_id, Profile(m.user_id)).read_up_to.get(key, "")
        }

    def _channels(self, channel_ids: set[str]) -> dict[str, Channel]:
        """The stored channels among `channel_ids` the bot is in: nothing more of one it has left is read (the
        memory job counts its messages as read)."""
        found = {channel_id: self._conversations.get_channel(channel_id) for channel_id in channel_ids}
        return {channel_id: channel for channel_id, channel in found.items() if channel is not None and channel.is_member}

    async def _update(
        self,
        audience: Audience,
        people: Sequence[tuple[Profile, list[str]]],
        channels: dict[str, Channel],
        report: ProfileRound,
    ) -> ProfileRound:
        """One model call for `people`'s new messages in `audience`; their profiles saved together."""
        share = max(1, self._batch_max_tokens // len(people))
        started = self._clock.now()
        # the profiles as they are now, not as the round began: an edit meanwhile dropped what it had learnt
        current = await asyncio.to_thread(self._profiles.many, [p.user_id for p, _ in people])
        people = [(current.get(profile.user_id, profile), channel_ids) for profile, channel_ids in people]
        names = await asyncio.to_thread(self._conversations.people, [p.user_id for p, _ in people])
        read: list[tuple[Profile, list[Message]]] = []
        for profile, channel_ids in people:
            after = profile.read_up_to.get(audience_key(audience), "")
            limit = max(1, share // MESSAGE_OVERHEAD_TOKENS)  # no message costs less than its prefix
            messages = await asyncio.to_thread(
                self._conversations.messages_by, profile.user_id, channel_ids, after, limit
            )
            if messages:  # none when deleted meanwhile
                read.append((profile, _within(messages, share)))
        if not read:
            return report
        prompt = ProfilePrompt(
            persona=self._persona,
            now=self._clock.now().astimezone(self._persona.timezone),
            conversation=None if audience.is_workspace else channels[audience.conversation_id or ""],
            people=tuple(
                PersonMaterial(
                    profile.user_id,
                    names[profile.user_id].display_name if profile.user_id in names else messages[-1].user_name,
                    self._known(profile.of(audience)),
                    tuple(self._line(m, channels, share) for m in messages if m.text.strip()),
                )
                for profile, messages in read
            ),
        )
        try:
            updates = {u.user_id: u for u in await self._writer.learn(prompt)}
        except ModelUnavailable as exc:
            logger.warning("profile update skipped this round: %s", exc)
            return ProfileRound(report.calls + 1, report.failures + 1, report.people)
        heard = {m.channel_id for _, messages in read for m in messages}
        heard.update(c for person in prompt.people for f in person.facts for c in f.heard_in)
        saved = [
            self._apply(profile, audience, messages, updates.get(profile.user_id), tuple(sorted(heard)))
            .read(audience, messages[-1].ts)
            for profile, messages in read
        ]
        # what was learnt from a message deleted or edited since `started` (as the model read it) is left out
        await asyncio.to_thread(self._profiles.save, saved, heard=True, read_at=started)
        return ProfileRound(report.calls + 1, report.failures, report.people + tuple(p.user_id for p in saved))

    def _apply(
        self,
        profile: Profile,
        audience: Audience,
        messages: Sequence[Message],
        update: PersonUpdate | None,
        heard: tuple[str, ...],
    ) -> Profile:
        """`profile` with the model's update applied (new facts record the conversations `heard` by the call);
        sources other than `messages` are dropped."""
        if update is None:
            return profile
        by_ts = {m.ts: m for m in messages}

        def sources(source_ts: Sequence[str]) -> tuple[str, ...]:
            return tuple(ts for ts in dict.fromkeys(source_ts) if ts in by_ts)

        new = []
        for draft in update.new:
            source_ts = sources(draft.source_ts)
            text = " ".join(draft.text.split())
            if source_ts and text:
                first = by_ts[source_ts[0]]
                day = ts_to_datetime(max(source_ts)).astimezone(self._persona.timezone).date()
                new.append((NewFact(text, draft.confidence, source_ts, draft.supersedes), first.channel_id, day))
        confirmed = [Confirmation(c.fact_id, c.confidence, sources(c.source_ts)) for c in update.confirmed]
        return profile.learn(audience, new, [c for c in confirmed if c.source_ts], heard)

    def _known(self, facts: Sequence[Fact]) -> tuple[Fact, ...]:
        """The most recent known facts that fit a quarter of the batch budget."""
        return tuple(fit_items(facts, self._batch_max_tokens // 4, _fact_cost))

    def _line(self, message: Message, channels: dict[str, Channel], max_tokens: int) -> str:
        channel = channels[message.channel_id]
        line = f"ts={message.ts} #{channel.name} {format_message(message, self._persona.timezone, {})}"
        return cut_text(line, max_tokens, self._cut)


def _fact_cost(fact: Fact) -> int:
    """About what a known fact costs in a profile prompt: its text and its line's id and figures."""
    return estimate_tokens(fact.text) + 12


def _within(messages: Sequence[Message], max_tokens: int) -> list[Message]:
    """The oldest of `messages` that fit `max_tokens` (one at least): the rest wait for the next round."""
    kept: list[Message] = []
    size = 0
    for message in messages:
        cost = estimate_tokens(message.text) + MESSAGE_OVERHEAD_TOKENS
        if kept and size + cost > max_tokens:
            break
        kept.append(message)
        size += cost
    return kept
