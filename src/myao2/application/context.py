"""The prompt context: everything the model should know about a conversation, gathered once.

This module is also the one place that formats a message (and a time) for a prompt.
"""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, tzinfo
from operator import itemgetter
from typing import Literal

from myao2.domain.budget import cut_text, fit_items
from myao2.domain.conversation import MENTION, Channel, Message, ts_to_datetime
from myao2.domain.memo import IMPORTANT_PRIORITY, Memo
from myao2.domain.memory import WORKSPACE_SCOPE, Memory, Scope, Term, bullet_line, digest_line
from myao2.domain.ports import Clock, MemoryStore, MemoStore, ProfileStore
from myao2.domain.profile import Fact, Profile
from myao2.domain.tokens import estimate_tokens
from myao2.domain.visibility import Reader, audience_of, can_read_from, shows_elsewhere

IMPORTANT_MEMO_LIMIT = 20
RECENT_MEMO_LIMIT = 5
TIME_FORMAT = "%Y-%m-%d %H:%M"
OWN_MARK = "★ "
"""Begins each of the bot's own messages in a prompt; no text can begin a line, so nobody can forge it."""
CONTINUATION_INDENT = "  "
"""Begins each further line of a message, so a line break cannot start a line that looks like another message."""
MARKER_TOKENS = 16
"""Room kept in a budget for the line saying how many notes were left out."""
REMEMBERED_TIMES = 4096
"""How many formatted times of messages, and of other moments, are remembered (the least recently used go first)."""
REMEMBERED_LINES = 1024
"""How many messages' lines a `ContextBuilder` remembers (the least recently used go first)."""
REMEMBERED_LENGTH = 2000
"""The longest message text whose line is remembered; a longer one is formatted each time."""
_NO_NAMES: frozenset[tuple[str, str]] = frozenset()
"""The known names of a message that mentions nobody, in the key of its remembered line: none."""


@dataclass(frozen=True)
class Persona:
    """Who the bot is: its name, extra persona text, language and time zone."""

    name: str
    system_prompt: str
    language: Literal["ja", "en"]
    timezone: tzinfo


@dataclass(frozen=True)
class MemoryBudgets:
    """Most tokens each memory section of a prompt may take (the `memory.*_max_tokens` config keys)."""

    workspace: int
    channel: int
    """The channel's long- and short-term memories together; the short-term one is kept first."""
    thread: int
    elsewhere: int
    digest: int
    """The conversation's digests of past days; the oldest are left out first."""
    people: int
    """The profile facts of the people in the conversation together."""


@dataclass(frozen=True)
class Absorbed:
    """What the bot absorbed by listening that prompts show, and the budgets of its sections."""

    memories: MemoryStore
    profiles: ProfileStore
    budgets: MemoryBudgets


@dataclass(frozen=True)
class MemorySection:
    """Bullet lines of one memory section, ready to show, and how many older ones the budget left out."""

    lines: tuple[str, ...] = ()
    omitted: int = 0


@dataclass(frozen=True)
class MemorySections:
    """What the bot remembers that this conversation may see."""

    workspace: MemorySection = MemorySection()
    """The workspace's long-term memory."""
    channel_long: MemorySection = MemorySection()
    channel_short: MemorySection = MemorySection()
    thread: MemorySection = MemorySection()
    elsewhere: MemorySection = MemorySection()
    """Other channels' short-term memories, each line naming its channel (public channels only)."""
    digests: MemorySection = MemorySection()
    """The conversation's digests of past days, oldest first."""
    people: MemorySection = MemorySection()
    """Facts learnt about the people in the conversation, each line naming its person; the budget leaves out
    the least sure of the people who spoke longest ago."""


@dataclass(frozen=True)
class PromptContext:
    """What a prompt template receives, ready to show; templates never query anything."""

    persona: Persona
    now: datetime
    """The current time in the persona's time zone."""
    channel: Channel
    conversation: tuple[str, ...]
    """The conversation's messages, oldest first, each formatted by `format_message`."""
    important_memos: tuple[Memo, ...]
    """Memos of priority >= 4 that this conversation may see: priority, then last update, descending."""
    recent_memos: tuple[Memo, ...]
    """The memos updated most recently, other than the important ones."""
    memory: MemorySections = MemorySections()
    rules: tuple[Memo, ...] = ()
    """Memos people pinned that this conversation may see: rules above everything learnt."""

    def local_time(self, moment: datetime) -> str:
        """`moment` as prompts show it, in the persona's time zone."""
        return _shown_time(moment, self.persona.timezone)


@dataclass(frozen=True)
class Budget:
    """How many tokens (see `estimate_tokens`) the conversation may take in a prompt, and each message in it."""

    conversation_tokens: int
    message_tokens: int


@dataclass(frozen=True)
class Marks:
    """What the context writes where it left something out, in the persona's language."""

    cut: Callable[[int], str]
    """Ends a message cut short, given how many characters were left out."""
    dropped: Callable[[int], str]
    """Stands in place of the older messages left out, given how many."""


StoredContext = tuple[tuple[tuple[Memo, ...], tuple[Memo, ...], tuple[Memo, ...]], MemorySections]
"""What `ContextBuilder.read` reads from the store for a prompt: the pinned, important and recent memos, and the
memories."""


class ContextBuilder:
    """Builds the `PromptContext` for a conversation from the memo store (and, when given, what the bot
    absorbed), within the prompt budget."""

    def __init__(
        self,
        memo_store: MemoStore,
        clock: Clock,
        persona: Persona,
        *,
        bot_user_id: str,
        budget: Budget,
        marks: Marks,
        absorbed: Absorbed | None = None,
    ) -> None:
        self._memos = memo_store
        self._clock = clock
        self._persona = persona
        self._bot_user_id = bot_user_id
        self._budget = budget
        self._marks = marks
        self._absorbed = absorbed
        self._remembered_line = functools.lru_cache(maxsize=REMEMBERED_LINES)(self._line)

    async def build(
        self,
        channel: Channel,
        messages: Sequence[Message],
        user_names: Mapping[str, str] | None = None,
        answering: Message | None = None,
    ) -> PromptContext:
        """The context for `messages` (chosen by the caller, oldest first) in `channel`.

        `user_names` maps user ids to display names for mentions in message text.
        Each message is cut to the message budget; the oldest are left out until
        the conversation fits its budget, except `answering`, the message being
        answered, which is always shown. Memos are always shown.
        The store is read in a worker thread, so this may be awaited on the event loop.
        """
        stored = await asyncio.to_thread(self.read, channel, messages)
        return self.assemble(channel, messages, stored, user_names, answering)

    def read(self, channel: Channel, messages: Sequence[Message]) -> StoredContext:
        """What the store adds to `messages` in a prompt in `channel` (memos, memories); synchronous, for a worker
        thread: a caller that reads the messages there too reads both in one trip, then calls `assemble`."""
        thread_ts = next((m.thread_ts for m in messages if m.thread_ts), None)
        return self._read(channel, thread_ts, _speakers(messages, self._bot_user_id))

    def assemble(
        self,
        channel: Channel,
        messages: Sequence[Message],
        stored: StoredContext,
        user_names: Mapping[str, str] | None = None,
        answering: Message | None = None,
    ) -> PromptContext:
        """The context `build` makes, from what `read` read for these `messages`."""
        (rules, important, recent), memory = stored
        return PromptContext(
            persona=self._persona,
            now=self._clock.now().astimezone(self._persona.timezone),
            channel=channel,
            conversation=self._conversation(messages, user_names or {}, answering),
            important_memos=important,
            recent_memos=recent,
            memory=memory,
            rules=rules,
        )

    def _conversation(
        self, messages: Sequence[Message], names: Mapping[str, str], answering: Message | None
    ) -> tuple[str, ...]:
        known, bot, remembered = frozenset(names.items()), self._bot_user_id, self._remembered_line
        # Each message's line, remembered but for long texts: each prompt shows mostly the messages the one before
        # it showed. The key is all a line is made of: the message's time, author and text, whether it is the
        # bot's, and the known names unless it mentions nobody.
        lines = [
            (remembered if len(m.text) <= REMEMBERED_LENGTH else self._line)(
                m.ts, m.user_name, m.text, m.user_id == bot, known if "<@" in m.text else _NO_NAMES
            )
            for m in messages
        ]
        fitted = fit_items(
            lines,
            self._budget.conversation_tokens,
            itemgetter(2),
            keep=lambda item: answering is not None and item[0] == answering.ts,
            marker=lambda count: (None, *_costed(self._marks.dropped(count))),
        )
        return tuple([line for _, line, _ in fitted])

    def _line(
        self, ts: str, user_name: str, text: str, own: bool, names: frozenset[tuple[str, str]]
    ) -> tuple[str, str, int]:
        """The message posted at `ts`, its line (`format_message`) cut to the message budget, and the line's cost
        (`line_tokens`)."""
        line = _format_line(ts, user_name, text, self._persona.timezone, dict(names), own)
        return ts, *_costed(cut_text(line, self._budget.message_tokens, self._marks.cut))

    def _read(self, channel: Channel, thread_ts: str | None, speakers: Sequence[tuple[str, str]]) -> StoredContext:
        """The memos and the memories a prompt in `channel` shows."""
        reader = Reader.of(channel.id, channel)
        return self._read_memos(reader), self._read_memories(channel, thread_ts, speakers, (reader,))

    async def memory_also_shown_to(self, channel: Channel, messages: Sequence[Message], reader: Reader) -> MemorySections:
        """The memory sections of `build`'s context, of what conversation `reader` may read too (the same rules,
        asked for both): those of `build` exactly when `reader` may read all they show."""
        thread_ts = next((m.thread_ts for m in messages if m.thread_ts), None)
        speakers = _speakers(messages, self._bot_user_id)
        readers = (Reader.of(channel.id, channel), reader)
        return await asyncio.to_thread(self._read_memories, channel, thread_ts, speakers, readers)

    def _read_memos(self, reader: Reader) -> tuple[tuple[Memo, ...], tuple[Memo, ...], tuple[Memo, ...]]:
        """The pinned memos, then the important and the recent ones other than those."""
        return self._memos.for_prompt(
            reader, min_priority=IMPORTANT_PRIORITY, important=IMPORTANT_MEMO_LIMIT, recent=RECENT_MEMO_LIMIT
        )

    def _read_memories(
        self, channel: Channel, thread_ts: str | None, speakers: Sequence[tuple[str, str]], readers: Sequence[Reader]
    ) -> MemorySections:
        """The memories and profile facts of `speakers` (user id, name) that every one of `readers` (conversations;
        a prompt's: its own) may read, each section within its budget."""
        if self._absorbed is None:
            return MemorySections()
        memories, budgets = self._absorbed.memories, self._absorbed.budgets

        keys = [(WORKSPACE_SCOPE, Term.LONG), (Scope(channel.id), Term.SHORT), (Scope(channel.id), Term.LONG)]
        if thread_ts:
            keys.append((Scope(channel.id, thread_ts), Term.SHORT))
        shows_news = shows_elsewhere(audience_of(channel))
        read = memories.for_prompt(keys, Term.SHORT if shows_news else None)
        stored = read.stored

        def shown_to_all(memory: Memory | None, source: Channel | None) -> Memory | None:
            for reader in readers:
                memory = None if memory is None else memory.shown_in(reader, source, read.not_public)
            return memory

        def shown(scope: Scope, term: Term) -> Memory | None:
            return shown_to_all(stored.get((scope, term)), channel)

        workspace = shown(WORKSPACE_SCOPE, Term.LONG)
        short = shown(Scope(channel.id), Term.SHORT)
        short_section = _section(short, budgets.channel)
        long_section = _section(shown(Scope(channel.id), Term.LONG), budgets.channel - section_tokens(short_section))
        thread = shown(Scope(channel.id, thread_ts), Term.SHORT) if thread_ts else None
        elsewhere = MemorySection()
        if shows_news:
            news = (
                shown_to_all(memory, source)
                for memory, source in read.news
                if memory.scope.channel_id != channel.id
            )
            lines = [f"{memory.label}: {bullet_line(b)}" for memory in news if memory is not None for b in memory.active]
            elsewhere = _fit_lines(lines, budgets.elsewhere)
        digests = [
            digest_line(d)
            for d in memories.digests(channel.id)
            if d.lines and all(can_read_from(reader, d.audience, d.channel_id, channel) for reader in readers)
        ]
        profiles = self._absorbed.profiles.many(user_id for user_id, _ in speakers)
        facts = [
            f"- {one_line(name)}: {fact.text}"
            for user_id, name in speakers
            if user_id in profiles
            for fact in sorted(_readable_by_all(profiles[user_id], readers, read.not_public), key=lambda f: (-f.confidence, f.id))
        ]
        return MemorySections(
            workspace=_section(workspace, budgets.workspace),
            channel_long=long_section,
            channel_short=short_section,
            thread=_section(thread, budgets.thread),
            elsewhere=elsewhere,
            digests=_fit_lines(digests, budgets.digest),
            people=_fit_lines(facts, budgets.people, drop="last"),
        )


def _readable_by_all(profile: Profile, readers: Sequence[Reader], not_public: Container[str]) -> tuple[Fact, ...]:
    """The active facts of `profile` every one of `readers` may see (`Profile.readable`)."""
    facts = profile.readable(readers[0], not_public)
    for reader in readers[1:]:
        also = set(profile.readable(reader, not_public))
        facts = tuple(fact for fact in facts if fact in also)
    return facts


def _speakers(messages: Sequence[Message], bot_user_id: str) -> list[tuple[str, str]]:
    """The people (user id, name) who wrote `messages`, the latest to speak first; bots left out."""
    speakers: dict[str, str] = {}
    for message in reversed(messages):
        if message.user_id and not message.is_bot and message.user_id != bot_user_id:
            speakers.setdefault(message.user_id, message.user_name)
    return list(speakers.items())


def _section(memory: Memory | None, max_tokens: int) -> MemorySection:
    """A memory's active bullets, oldest dropped first to fit `max_tokens`."""
    return _fit_lines([bullet_line(b) for b in memory.active] if memory else [], max_tokens)


def _fit_lines(lines: Sequence[str], max_tokens: int, drop: Literal["first", "last"] = "first") -> MemorySection:
    kept = fit_items(lines, max_tokens, line_tokens, drop=drop)
    if len(kept) < len(lines):  # room for the marker that says so
        kept = fit_items(lines, max(0, max_tokens - MARKER_TOKENS), line_tokens, drop=drop)
    return MemorySection(tuple(kept), len(lines) - len(kept))


def _costed(line: str) -> tuple[str, int]:
    """`line` and its `line_tokens`."""
    return line, line_tokens(line)


def line_tokens(line: str) -> int:
    """What one line of a prompt section costs against its budget: its text and its line break."""
    return estimate_tokens(line) + 1


def section_tokens(section: MemorySection) -> int:
    """What a memory section costs against its budget, the marker of left-out notes included."""
    return sum(line_tokens(line) for line in section.lines) + (MARKER_TOKENS if section.omitted else 0)


def format_time(moment: datetime, timezone: tzinfo) -> str:
    """`moment` as "YYYY-MM-DD HH:MM" in `timezone`."""
    return moment.astimezone(timezone).strftime(TIME_FORMAT)


def format_message(
    message: Message, timezone: tzinfo, user_names: Mapping[str, str], *, own: bool = False
) -> str:
    """One message for a prompt: "[YYYY-MM-DD HH:MM] display name: text", further lines indented under it.

    The bot's own messages (`own`, decided by user id, never by name) begin with
    `OWN_MARK`. Names are shown on one line. Mentions of known users (`<@U123>`)
    become "@display name"; unknown ones stay as they are.
    """
    return _format_line(message.ts, message.user_name, message.text, timezone, user_names, own)


def _format_line(ts: str, user_name: str, text: str, timezone: tzinfo, user_names: Mapping[str, str], own: bool) -> str:
    """`format_message` of the message posted at `ts` by `user_name` saying `text`."""

    def mention(match: re.Match[str]) -> str:
        name = user_names.get(match.group(1))
        return f"@{one_line(name)}" if name else match.group(0)

    body = ("\n" + CONTINUATION_INDENT).join(MENTION.sub(mention, text).splitlines() or [""])
    mark = OWN_MARK if own else ""
    return f"{mark}[{_posted_time(ts, timezone)}] {one_line(user_name)}: {body}"


@functools.lru_cache(maxsize=REMEMBERED_TIMES)
def _posted_time(ts: str, timezone: tzinfo) -> str:
    """`format_time` of the moment Slack timestamp `ts` names, remembered: each prompt shows mostly the messages
    the one before it showed (their times were most of the cost of formatting them)."""
    return format_time(ts_to_datetime(ts), timezone)


@functools.lru_cache(maxsize=REMEMBERED_TIMES)
def _shown_time(moment: datetime, timezone: tzinfo) -> str:
    """`format_time`, remembered: each prompt shows mostly the memos the one before it showed, with their times."""
    return format_time(moment, timezone)


def one_line(name: str) -> str:
    """A name with every run of white space (line breaks included) made one space."""
    return " ".join(name.split())
