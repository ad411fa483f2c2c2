"""Deciding when to join a conversation nobody answered: the wait, the judgment and its reuse."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

LIVELINESS_WINDOW = timedelta(minutes=30)


@dataclass(frozen=True)
class Judgment:
    """The judgment agent's answer; an invalid answer counts as a confident-enough "no"."""

    should_respond: bool
    reason: str
    confidence: float
    valid: bool = True

    @classmethod
    def invalid(cls, why: str) -> Judgment:
        return cls(should_respond=False, reason=f"invalid judgment output: {why}", confidence=0.0, valid=False)


@dataclass(frozen=True)
class WaitPolicy:
    """How long a message stays unanswered before the bot considers it.

    `min_wait_seconds` with +/- `jitter_ratio` of random jitter, shortened in a lively
    channel by the multiplier of the first messages-per-minute threshold reached
    (thresholds descending). Shortening never goes below `floor_seconds`, but a
    configured wait already below the floor is used as it is.
    """

    min_wait_seconds: float
    jitter_ratio: float
    dynamic: bool
    thresholds: Sequence[tuple[float, float]]  # (messages per minute, multiplier)
    floor_seconds: float

    def multiplier(self, messages_per_minute: float) -> float:
        if not self.dynamic:
            return 1.0
        for rate, factor in sorted(self.thresholds, reverse=True):
            if messages_per_minute >= rate:
                return factor
        return 1.0

    def wait(self, messages_per_minute: float, seed: str) -> timedelta:
        """The wait for one conversation state; `seed` makes its jitter stable across checks."""
        base = self.min_wait_seconds
        shortened = base * self.multiplier(messages_per_minute)
        if shortened < base:
            shortened = max(shortened, min(self.floor_seconds, base))
        return timedelta(seconds=shortened * (1 + self.jitter_ratio * _unit_jitter(seed)))


def _unit_jitter(seed: str) -> float:
    """A number in [-1, 1) that depends only on `seed`."""
    digest = hashlib.blake2b(seed.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**63 - 1.0


def messages_per_minute(recent: int) -> float:
    """How lively a channel is: messages per minute, from the `recent` ones posted in the last 30 minutes."""
    return recent / (LIVELINESS_WINDOW.total_seconds() / 60)


@dataclass(frozen=True)
class SkipPolicy:
    """How long a judgment stands while nothing new is said: longer for surer judgments.

    `thresholds` maps a minimum confidence to how long the judgment holds;
    below all of them it holds for `default`.
    """

    thresholds: Sequence[tuple[float, timedelta]]
    default: timedelta

    def holds_for(self, confidence: float) -> timedelta:
        for minimum, duration in sorted(self.thresholds, reverse=True):
            if confidence >= minimum:
                return duration
        return self.default


@dataclass(frozen=True)
class ConversationKey:
    """A conversation: a thread (thread_ts) or a channel's top-level flow (thread_ts None)."""

    channel_id: str
    thread_ts: str | None
