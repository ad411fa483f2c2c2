"""Memory: what the bot absorbs by listening, kept as dated bullet lists per scope.

A scope is the workspace, a channel or a thread. Long-term memory only grows: a
run adds bullets and marks the ones it contradicts as superseded (kept, hidden
from prompts), and never rewrites the list, so facts are not worn away run after
run. Short-term memory covers a recent window and is made afresh each time.
Every bullet keeps the `ts` of the messages it came from, and the conversations whose
words were in sight when it was written (a model call may read several channels at
once, and may mix them up): a bullet stays only where all of those may be read.
"""

from __future__ import annotations

from collections.abc import Collection, Container, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import date, datetime
from enum import Enum

from myao2.domain.conversation import Channel
from myao2.domain.visibility import Audience, Reader, can_read_from, heard_now, may_hold


class Term(str, Enum):
    LONG = "long"
    SHORT = "short"


@dataclass(frozen=True)
class Scope:
    """Where a memory is about: the workspace (no channel), a channel, or a thread of a channel."""

    channel_id: str | None = None
    thread_ts: str | None = None

    @property
    def key(self) -> str:
        """A stable text key: "workspace", "channel:C1" or "thread:C1:1700000000.000100"."""
        if self.channel_id is None:
            return "workspace"
        if self.thread_ts is None:
            return f"channel:{self.channel_id}"
        return f"thread:{self.channel_id}:{self.thread_ts}"

    @classmethod
    def from_key(cls, key: str) -> Scope:
        parts = key.split(":")
        if parts == ["workspace"]:
            return cls()
        if parts[0] == "channel" and len(parts) == 2:
            return cls(parts[1])
        if parts[0] == "thread" and len(parts) == 3:
            return cls(parts[1], parts[2])
        raise ValueError(f"not a memory scope key: {key!r}")


WORKSPACE_SCOPE = Scope()


@dataclass(frozen=True)
class Bullet:
    """One remembered point: its text, the day it is about and the messages it came from."""

    id: int
    text: str
    day: date
    source_ts: tuple[str, ...]
    superseded_by: int | None = None
    heard_in: tuple[str, ...] = ()
    """The conversations whose words the model had in sight when it wrote this bullet."""

    @property
    def active(self) -> bool:
        return self.superseded_by is None


@dataclass(frozen=True)
class Draft:
    """A bullet the model proposes: its text, the ts of its source messages and the ids it contradicts,
    and the conversations whose words were in sight (set by the job, not the model)."""

    text: str
    source_ts: tuple[str, ...]
    supersedes: tuple[int, ...] = ()
    heard_in: tuple[str, ...] = ()


@dataclass(frozen=True)
class Memory:
    """The long- or short-term memory of one scope, with the audience of its source.

    `covered` records what it was made from: for a channel, the newest message ts it
    saw (and the highest note id it gave out); for the workspace, each source channel's mark.
    """

    scope: Scope
    term: Term
    audience: Audience
    bullets: tuple[Bullet, ...] = ()
    label: str = ""
    """Where it is from, as people name it ("#general"); empty for the workspace."""
    covered: str = ""
    updated_at: datetime | None = None

    @property
    def active(self) -> tuple[Bullet, ...]:
        """The bullets prompts show: those nothing superseded, oldest first."""
        return tuple(b for b in self.bullets if b.active)

    def grow(self, drafts: Sequence[tuple[Draft, date]], after: int = 0) -> Memory:
        """This memory with `drafts` added, each marking the active bullets it supersedes.

        Nothing is ever removed or rewritten. Ids that are unknown or already
        superseded are ignored. New bullets take ids above every bullet's and above
        `after` (the highest given out before, to bullets dropped since).
        """
        next_id = max((after, *(b.id for b in self.bullets))) + 1
        active = {b.id for b in self.active}
        superseded: dict[int, int] = {}
        added = []
        for offset, (draft, day) in enumerate(drafts):
            added.append(Bullet(next_id + offset, draft.text, day, draft.source_ts, heard_in=draft.heard_in))
            for old in draft.supersedes:
                if old in active:
                    superseded.setdefault(old, next_id + offset)
        kept = tuple(
            replace(b, superseded_by=superseded[b.id]) if b.id in superseded else b for b in self.bullets
        )
        return replace(self, bullets=kept + tuple(added))

    def renewed(self, drafts: Sequence[tuple[Draft, date]]) -> Memory:
        """A short-term memory made afresh from `drafts`."""
        return replace(
            self,
            bullets=tuple(Bullet(i + 1, d.text, day, d.source_ts, heard_in=d.heard_in) for i, (d, day) in enumerate(drafts)),
        )

    def heard_by_readers(self, not_public: Container[str]) -> Memory:
        """This memory without the bullets written with words in sight that its readers may not all read.

        `not_public` holds the ids of the conversations that keep to themselves (the others are the workspace's).
        A bullet superseded only by one dropped is active again.
        """
        return self._without(
            {b.id for b in self.bullets if not may_hold(self.audience, heard_now(b.heard_in, not_public))}
        )

    def shown_in(self, reader: Reader | None, source: Channel | None, not_public: Container[str]) -> Memory | None:
        """This memory as conversation `reader` (None: a person's own view) may be shown it, or None when it may not
        be shown there at all: the one statement of which memory a reader sees, and how much of it.

        None unless `reader` may read what was said in the channel it is of (`can_read_from`, `source` that channel
        as stored, None: never stored, which counts as not public; the workspace memory is of no one conversation, and its `source` is not
        asked). Of the rest, without the bullets written with the words in sight of a conversation `reader` may not
        read (`not_public` the ids of the conversations that keep to themselves now, the others the workspace's),
        which a channel turned private leaves in memories kept for the workspace until its narrowing reaches them.
        A bullet superseded only by one left out is active again, as the narrowing leaves it."""
        if not can_read_from(reader, self.audience, self.scope.channel_id, source):
            return None
        shown: dict[tuple[str, ...], bool] = {}  # by what was heard: the bullets of one call heard the same
        for heard in {b.heard_in for b in self.bullets}:
            shown[heard] = can_read_from(reader, self.audience, None, heard=heard_now(heard, not_public))
        return self._without({b.id for b in self.bullets if not shown[b.heard_in]})

    def without_sources(self, ts: Collection[str]) -> Memory:
        """This memory without the bullets made from any of the messages `ts` (deleted or edited in Slack, or of
        a person forgotten): they may hold its words. A bullet superseded only by one dropped is active again."""
        return self._without({b.id for b in self.bullets if any(t in ts for t in b.source_ts)})

    def _without(self, dropped: set[int]) -> Memory:
        if not dropped:
            return self
        return replace(
            self,
            bullets=tuple(
                replace(b, superseded_by=None) if b.superseded_by in dropped else b
                for b in self.bullets
                if b.id not in dropped
            ),
        )


def seen_in(
    memories: Sequence[Memory],
    channel: str,
    thread: str | None,
    not_public: Container[str],
    stored: Channel | None,
) -> list[Memory]:
    """The memories a conversation's prompts may draw on: the workspace's, the channel's and the thread's, as they
    are shown there (`Memory.shown_in`, the channel as `stored`, None: never stored)."""
    wanted = {Scope().key, Scope(channel).key} | ({Scope(channel, thread).key} if thread else set())
    reader = Reader.of(channel, stored)
    shown = (m.shown_in(reader, stored, not_public) for m in memories if m.scope.key in wanted)
    return [m for m in shown if m is not None]


@dataclass(frozen=True)
class PromptMemories:
    """What a prompt shows of the memories, read at once (`MemoryStore.for_prompt`)."""

    stored: Mapping[tuple[Scope, Term], Memory]
    """The memories asked for by key."""
    news: Sequence[tuple[Memory, Channel | None]] = ()
    """Every channel's memory of the term asked for, by scope, with the channel it is about as stored (None: never
    stored): whether the bot is still in it is part of who may read it (`can_read_from`)."""
    not_public: frozenset[str] = frozenset()
    """The ids of the stored conversations that are not public (the others are the workspace's), read with the
    memories: who may be shown each bullet (`Memory.shown_in`)."""


def bullet_line(bullet: Bullet) -> str:
    """A bullet as prompts and the command line show it: "- [YYYY-MM-DD] text"."""
    return f"- [{bullet.day.isoformat()}] {bullet.text}"


class Stage(str, Enum):
    """How far a day's digest has gone: a digest, then a shorter condensed one."""

    DIGEST = "digest"
    CONDENSED = "condensed"

    @property
    def rank(self) -> int:
        return list(Stage).index(self)


@dataclass(frozen=True)
class Digest:
    """What one conversation said on one day, kept once its raw messages are gone.

    Made by the model from that day's messages (threads included), at `stage`;
    it belongs to the audience of its conversation. `first_ts`..`last_ts` span the
    messages it was made from and `authors` are who wrote them.
    """

    channel_id: str
    day: date
    stage: Stage
    audience: Audience
    lines: tuple[str, ...]
    first_ts: str
    last_ts: str
    authors: tuple[str, ...] = ()
    label: str = ""


def digest_line(digest: Digest) -> str:
    """A digest as prompts and search results show it: "- [YYYY-MM-DD] line; line"."""
    return f"- [{digest.day.isoformat()}] {' / '.join(digest.lines)}"


@dataclass(frozen=True)
class RetentionPolicy:
    """When a day's raw messages are digested, condensed and deleted, in whole days after that day; 0: never."""

    digest_after_days: int = 3
    condense_after_days: int = 7
    delete_after_days: int = 14

    @property
    def horizon_days(self) -> int | None:
        """The fewest days after which any step applies; None when every step is off."""
        days = [d for d in (self.digest_after_days, self.condense_after_days, self.delete_after_days) if d]
        return min(days) if days else None

    def stage_due(self, day: date, today: date) -> Stage | None:
        """The digest stage a day's messages should have by `today` (None: none yet, or digests are off)."""
        age = (today - day).days
        if self.condense_after_days and age >= self.condense_after_days:
            return Stage.CONDENSED
        if self.digest_after_days and age >= self.digest_after_days:
            return Stage.DIGEST
        return None

    def final_stage(self) -> Stage | None:
        """The last digest stage a day goes through before its raw text is deleted."""
        if self.condense_after_days:
            return Stage.CONDENSED
        return Stage.DIGEST if self.digest_after_days else None

    def deletable(self, day: date, today: date, made: Stage | None) -> bool:
        """Whether a day's raw text may go: old enough, and its last digest (if any) made from it first."""
        if not self.delete_after_days or (today - day).days < self.delete_after_days:
            return False
        final = self.final_stage()
        return final is None or (made is not None and made.rank >= final.rank)
