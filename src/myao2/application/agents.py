"""What the use cases need from the language model, as Protocols."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Protocol

from myao2.application.context import Persona, PromptContext, format_time
from myao2.application.reply_stream import ReplyStream
from myao2.domain.conversation import Channel
from myao2.domain.judgment import Judgment
from myao2.domain.memo import Origin
from myao2.domain.memory import Bullet, Draft, Stage
from myao2.domain.profile import Confirmation, Fact, NewFact


class ModelUnavailable(Exception):
    """The model could not answer, even after the bounded retries."""


class ReplyWriter(Protocol):
    async def write(self, context: PromptContext, origin: Origin) -> str:
        """A reply for the conversation in `context`; memo tools act within `origin`.

        Raises ModelUnavailable when the model keeps failing.
        """
        ...

    def stream(self, context: PromptContext, origin: Origin) -> ReplyStream:
        """The same reply as it is written: text deltas, tool calls, then `ReplyDone` last.

        Raises ModelUnavailable (while iterating) when the model keeps failing, also
        after some text was yielded.
        """
        ...


class Judge(Protocol):
    async def judge(self, context: PromptContext, elapsed: timedelta) -> Judgment:
        """Whether to join the conversation in `context`, quiet for `elapsed`.

        Output that is not valid comes back as `Judgment.invalid`; raises
        ModelUnavailable when the model keeps failing.
        """
        ...


@dataclass(frozen=True)
class MemoryPrompt:
    """What the memory model reads for one update of a channel's memories (or, `channel` None, the workspace's).

    Lines are ready to show. Each line of `material` (new messages, or for the
    workspace the channels' memories) starts with the `ts=` of its sources.
    """

    persona: Persona
    now: datetime
    channel: Channel | None
    long_term: tuple[Bullet, ...]
    """The active long-term bullets, which the update may supersede by id."""
    short_term: tuple[Bullet, ...]
    """The short-term bullets still within the window."""
    earlier: tuple[str, ...]
    """Messages of the window already read, for context."""
    material: tuple[str, ...]
    threads: tuple[tuple[str, tuple[Bullet, ...]], ...]
    """The threads to summarise: each thread's ts and its current memory."""

    def local_time(self, moment: datetime) -> str:
        """`moment` as prompts show it, in the persona's time zone."""
        return format_time(moment, self.persona.timezone)


@dataclass(frozen=True)
class MemoryBatch:
    """The prompts of several channels of one audience, read in one model call."""

    prompts: tuple[MemoryPrompt, ...]

    @property
    def now(self) -> datetime:
        return self.prompts[0].now

    def local_time(self, moment: datetime) -> str:
        """`moment` as prompts show it, in the persona's time zone."""
        return self.prompts[0].local_time(moment)


@dataclass(frozen=True)
class MemoryUpdate:
    """The model's answer: long-term additions (with what they supersede), the new short-term
    memory, and the new memory of each thread it summarised."""

    long_term: tuple[Draft, ...] = ()
    short_term: tuple[Draft, ...] = ()
    threads: tuple[tuple[str, tuple[Draft, ...]], ...] = ()


class MemoryWriter(Protocol):
    async def update(self, prompts: Sequence[MemoryPrompt]) -> tuple[MemoryUpdate, ...]:
        """The memory updates for `prompts` (the workspace, or channels of one audience), in their order, from
        one model call; raises ModelUnavailable when the model fails or answers nothing usable."""
        ...


@dataclass(frozen=True)
class DigestPrompt:
    """What the memory model reads to digest one conversation's day: its messages, as prompt lines.

    At `Stage.CONDENSED` it is asked for a shorter digest, made from the same raw messages.
    """

    persona: Persona
    channel: Channel
    day: date
    stage: Stage
    messages: tuple[str, ...]
    omitted: int = 0
    """Messages of the day left out to fit the model's budget (the oldest)."""


class DigestWriter(Protocol):
    async def digest(self, prompt: DigestPrompt) -> tuple[str, ...]:
        """The digest's lines (none: nothing worth keeping); raises ModelUnavailable when the model fails."""
        ...


@dataclass(frozen=True)
class PersonMaterial:
    """One person in a profile update: who, the facts already known (of the update's audience), their new messages."""

    user_id: str
    name: str
    facts: tuple[Fact, ...]
    messages: tuple[str, ...]
    """Their new messages, oldest first, each line starting with its `ts=`."""


@dataclass(frozen=True)
class ProfilePrompt:
    """What the memory model reads to update the profiles of people who said something new in one audience."""

    persona: Persona
    now: datetime
    conversation: Channel | None
    """The one private conversation (a DM or private channel) the messages come from; None: the public channels."""
    people: tuple[PersonMaterial, ...]

    def local_time(self, moment: datetime) -> str:
        """`moment` as prompts show it, in the persona's time zone."""
        return format_time(moment, self.persona.timezone)


@dataclass(frozen=True)
class PersonUpdate:
    """The model's answer for one person: new facts, and known facts their messages confirm."""

    user_id: str
    new: tuple[NewFact, ...] = ()
    confirmed: tuple[Confirmation, ...] = ()


class ProfileWriter(Protocol):
    async def learn(self, prompt: ProfilePrompt) -> tuple[PersonUpdate, ...]:
        """The profile updates for `prompt`; raises ModelUnavailable when the model fails or answers nothing usable."""
        ...
