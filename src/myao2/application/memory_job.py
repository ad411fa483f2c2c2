"""The memory job: keeps the workspace's, channels' and threads' memories up to date.

One round looks at which channels have new or edited messages since their memory
was made (by message ts and edit time) and reads them in batches, the channels of
one audience together (all public channels share calls; a private conversation has
its own): each model call reads the next batch of as many channels as fit the batch
budget, adds long-term bullets (superseding the ones they contradict), remakes the
short-term memories and those of the active threads it touched. Each call is saved
in one transaction with the marks of what it covered, so a crash resumes where it
stopped and a failed call keeps the old memories for the next round. Then the workspace memory is updated from the public channels' memories,
only when one of them changed, and the profiles of people who said something new
(`myao2.application.profiles`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar
from datetime import date, datetime, timedelta, timezone

from myao2.application import tracing
from myao2.application.agents import MemoryPrompt, MemoryUpdate, MemoryWriter, ModelUnavailable
from myao2.application.context import Persona, format_message
from myao2.application.profiles import ProfileKeeper
from myao2.application.suspects import Suspects
from myao2.domain.budget import cut_text, fit_items
from myao2.domain.conversation import Channel, ChannelChanges, Message, ts_to_datetime
from myao2.domain.memory import WORKSPACE_SCOPE, Bullet, Draft, Memory, PromptMemories, Scope, Term
from myao2.domain.ports import Clock, ConversationStore, MemoryStore
from myao2.domain.tokens import estimate_tokens
from myao2.domain.visibility import WORKSPACE, WORKSPACE_VIEW, Audience, audience_of, narrowest

logger = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class MemorySettings:
    """How the memory job reads (from the `memory` config section)."""

    short_term_window: timedelta
    thread_memory_days: float
    batch_max_tokens: int
    """The most message text one model call reads; a longer backlog takes several calls, a longer message is cut."""
    cut: Callable[[int], str]
    """Ends a message cut to the batch budget, given how many characters were left out (the persona's language)."""


@dataclass(frozen=True)
class NextCall:
    """A round's next model call that reads a channel (`MemoryJob.next_call`)."""

    audience: Audience
    """Whom what it reads is kept for: every channel it reads is of this audience (`MemoryJob._backlog`), and everyone
    of this audience may read every note it shows."""
    prompts: tuple[MemoryPrompt, ...]


@dataclass(frozen=True)
class RoundReport:
    """What one round did: model calls made and failed, scopes updated."""

    calls: int = 0
    failures: int = 0
    updated: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Mark:
    """What a channel memory was made from: messages up to `ts`, edits up to `edited`; `last_id` the highest
    long-term bullet id given out, which a note dropped since (its message edited or deleted) does not free: the
    workspace memory reads a channel's notes by id, those after the last it read."""

    ts: str = ""
    edited: datetime | None = None
    last_id: int = 0

    @classmethod
    def parse(cls, covered: str) -> _Mark:
        if not covered:
            return cls()
        data = json.loads(covered)
        edited = datetime.fromisoformat(data["edited"]) if data.get("edited") else None
        return cls(data["ts"], edited, data.get("last_id", 0))

    def dump(self) -> str:
        return json.dumps(
            {"ts": self.ts, "edited": self.edited.isoformat() if self.edited else None, "last_id": self.last_id}
        )

    def behind(self, changes: ChannelChanges) -> bool:
        """Whether the channel has messages or edits this mark has not seen."""
        if changes.newest_ts > self.ts:
            return True
        return changes.newest_edit is not None and (self.edited is None or changes.newest_edit > self.edited)


@dataclass(frozen=True)
class _Backlog:
    """A channel's messages its memory has not read, in batches, and the memories they update."""

    audience: Audience
    label: str
    long_term: Memory
    short_term: Memory
    mark: _Mark
    window_start: datetime
    earlier: list[Message]
    batches: list[list[Message]]


@dataclass(frozen=True)
class _Note:
    """A channel's note the workspace memory reads, as its prompt shows it, and the channel's mark once read."""

    channel_key: str
    line: str
    source_ts: tuple[str, ...]
    heard: tuple[str, ...]
    """The conversations whose words the note may hold: its channel's and those it was written with in sight."""
    mark: list[Any]
    """The channel's entry in the workspace memory's `covered` once this note is read: the channel memory's
    `covered` (the old one until its last note) and the id of its last long-term note read."""


@dataclass
class _Unread:
    """A channel whose backlog is read this round, batch by batch."""

    channel: Channel
    newest_edit: datetime | None
    backlog: _Backlog

    def advance(self, applied: tuple[Memory, Memory, list[Memory]]) -> list[Memory]:
        """Take the memories made from the backlog's next batch (marked as covering it) and drop that batch;
        returns what to save."""
        long_term, short_term, threads = applied
        batch, *rest = self.backlog.batches
        mark = _Mark(
            ts=max(self.backlog.mark.ts, *(m.ts for m in batch)),
            edited=self.newest_edit if not rest else self.backlog.mark.edited,
            last_id=max(self.backlog.mark.last_id, _last_id(long_term)),
        )
        long_term = replace(long_term, covered=mark.dump())
        self.backlog = replace(self.backlog, long_term=long_term, short_term=short_term, mark=mark, earlier=[], batches=rest)
        return [long_term, short_term, *threads]


class MemoryJob:
    """Runs rounds of the memory job; one round at a time."""

    def __init__(
        self,
        *,
        conversations: ConversationStore,
        memories: MemoryStore,
        writer: MemoryWriter,
        clock: Clock,
        persona: Persona,
        settings: MemorySettings,
        profiles: ProfileKeeper | None = None,
    ) -> None:
        self._conversations = conversations
        self._memories = memories
        self._writer = writer
        self._clock = clock
        self._persona = persona
        self._settings = settings
        self._profiles = profiles
        self._lock = asyncio.Lock()
        self._suspects = Suspects()
        """The channels of failed calls, of their memories or of the workspace's from their notes."""

    async def run(self) -> RoundReport:
        """One round over every channel with changes, then the workspace, then people's profiles."""
        async with self._lock:
            with tracing.span("memory.round") as span:
                changes = await asyncio.to_thread(self._conversations.changes)
                started = self._clock.now()  # after `changes`: an edit since is read again next round
                unread = []
                for channel_id, channel_changes in sorted(changes.items()):
                    with tracing.span("memory.channel", {"slack.channel_id": channel_id}):
                        item = await self._unread(channel_id, channel_changes)
                    if item is not None:
                        unread.append(item)
                report = await self._read(unread, RoundReport(), started)
                await asyncio.to_thread(self._expire_short_terms)
                report = await self._workspace(report)
                if self._profiles is not None:
                    people = await self._profiles.run()
                    report = replace(
                        report,
                        calls=report.calls + people.calls,
                        failures=report.failures + people.failures,
                        updated=report.updated + tuple(f"person:{user_id}" for user_id in people.people),
                    )
                span.set_attribute("myao2.memory.calls", report.calls)
                span.set_attribute("myao2.memory.failures", report.failures)
                span.set_attribute("myao2.memory.updated", len(report.updated))
                return report

    # -- channels ------------------------------------------------------------

    async def next_call(self, channel_id: str) -> NextCall | None:
        """The round's first model call that reads the channel: its prompt, with those of the channels of its
        audience read together with it; None when nothing is new there.

        Nothing is written. Exact for the audience's first call; a later one is shown as if the calls before
        it changed no memory.
        """
        changes = await asyncio.to_thread(self._conversations.changes)
        target = await asyncio.to_thread(self._conversations.get_channel, channel_id)
        if channel_id not in changes or target is None:
            return None
        first = await self._backlog(target, changes[channel_id])
        if first is None or not first.batches:
            return None
        audience = first.audience
        pending = []
        for other_id, other_changes in sorted(changes.items()):
            if other_id == channel_id:
                pending.append(_Unread(target, other_changes.newest_edit, first))
                continue
            channel = await asyncio.to_thread(self._conversations.get_channel, other_id)
            if channel is None or audience_of(channel) != audience:
                continue
            backlog = await self._backlog(channel, other_changes)
            if backlog is not None and backlog.batches and backlog.audience == audience:
                pending.append(_Unread(channel, other_changes.newest_edit, backlog))
        while any(item.channel.id == channel_id for item in pending):
            together = self._together(pending)
            if any(item.channel.id == channel_id for item in together):
                prompts, _ = await self._prompts(together)
                return NextCall(audience, tuple(prompts))
            for item in together:
                item.backlog = replace(item.backlog, batches=item.backlog.batches[1:])
            pending = [item for item in pending if item.backlog.batches]
        return None

    async def _unread(self, channel_id: str, changes: ChannelChanges) -> _Unread | None:
        """The channel's backlog to read this round; None when there is none (an edit since deleted is
        marked as seen here)."""
        channel = await asyncio.to_thread(self._conversations.get_channel, channel_id)
        if channel is None:
            return None
        backlog = await self._backlog(channel, changes)
        if backlog is None:
            return None
        if not backlog.batches:  # nothing new to read (edited, then deleted): seen all the same
            seen = replace(backlog.long_term, covered=replace(backlog.mark, edited=changes.newest_edit).dump())
            await asyncio.to_thread(self._memories.save, [seen])
            return None
        return _Unread(channel, changes.newest_edit, backlog)

    async def _read(self, unread: Sequence[_Unread], report: RoundReport, started: datetime) -> RoundReport:
        """Read the channels' backlogs, those of one audience together: each model call reads the next batch
        of as many of them as fit the batch budget. A call's memories are saved in one transaction with the
        marks of what they covered; after a failed call the audience's channels wait for the next round, which
        reads the channels of that call last, each alone, those after its first channel first.
        What was made from a message edited since `started` (the round read it and the memories before) is
        left out: the notes may hold its old words, and the next round reads its new ones."""
        def channel_id(item: _Unread) -> str:
            return item.channel.id

        audiences: dict[str, list[_Unread]] = {}
        # a call the model refuses for good (a content filter, say) must hold back no other channel for ever: the
        # channels of failed calls come last, each read alone, those after the first of the last failed call first
        for item in self._suspects.order(self._suspects.rotated(unread, channel_id), channel_id):
            audiences.setdefault(item.backlog.audience.conversation_id or "", []).append(item)
        for _, pending in sorted(audiences.items()):
            while pending:
                together = self._together(pending)
                prompts, threads = await self._prompts(together)
                updates = await self._ask(prompts)
                report = replace(report, calls=report.calls + 1, failures=report.failures + (updates is None))
                read = [item.channel.id for item in together]
                if updates is None:
                    self._suspects.failed(read)
                    break
                self._suspects.read(read)
                saved: list[Memory] = []
                heard = _heard(prompts)
                for item, item_threads, update in zip(together, threads, updates):
                    saved += item.advance(self._apply(item.backlog, item_threads, update, heard))
                await asyncio.to_thread(self._memories.save, saved, heard=True, read_at=started)
                if together[0].backlog.audience.is_workspace:
                    channel_ids = [item.channel.id for item in together]
                    await asyncio.to_thread(still_public, self._conversations, self._memories, channel_ids)
                done = tuple(Scope(item.channel.id).key for item in together if not item.backlog.batches)
                report = replace(report, updated=report.updated + done)
                pending = [item for item in pending if item.backlog.batches]
        return report

    async def _prompts(self, together: Sequence[_Unread]) -> tuple[list[MemoryPrompt], list[list[Memory]]]:
        """The prompts of the channels' next batches read in one call, and the thread memories they update."""
        threads = [
            [await self._thread(item.backlog, ts) for ts in self._active_threads(item.backlog.batches[0])]
            for item in together
        ]
        prompts = [
            self._channel_prompt(
                item.channel,
                item.backlog.long_term,
                item.backlog.short_term,
                item_threads,
                item.backlog.earlier,
                item.backlog.batches[0],
                item.backlog.window_start,
            )
            for item, item_threads in zip(together, threads)
        ]
        return prompts, threads

    def _together(self, pending: Sequence[_Unread]) -> list[_Unread]:
        """The channels whose next batches one call reads: the first, and the others that still fit, but for a
        channel of a failed call, which is read alone."""
        together: list[_Unread] = []
        size = 0
        for item in pending:
            cost = sum(_cost(m) for m in item.backlog.batches[0])
            if together and (
                size + cost > self._settings.batch_max_tokens
                or self._suspects.apart(together[0].channel.id, item.channel.id)
            ):
                continue
            together.append(item)
            size += cost
        return together

    async def _backlog(self, channel: Channel, changes: ChannelChanges) -> _Backlog | None:
        """What the channel's memory has not read yet, and what it is read with; None when up to date.

        Its audience is the channel's, or its own where its memories were narrowed to it (a channel shared outside,
        then unshared): a save keeps them so (never wider than stored), and a call shows only what everyone of its
        audience may read, so they are read with no other channel's."""
        scope = Scope(channel.id)
        label = f"#{channel.name}"
        read = await asyncio.to_thread(self._memories.for_prompt, [(scope, Term.LONG), (scope, Term.SHORT)], None)
        audience = narrowest((audience_of(channel), *(m.audience for m in read.stored.values())))
        audience = Audience(channel.id) if audience is None else audience
        long_term = _loaded(read, scope, Term.LONG, audience, label)
        mark = _Mark.parse(long_term.covered)
        if not mark.behind(changes):
            return None
        window_start = self._clock.now() - self._settings.short_term_window
        fresh = await asyncio.to_thread(self._conversations.changed_messages, channel.id, mark.ts, mark.edited)
        short_term = _loaded(read, scope, Term.SHORT, audience, label)
        fresh_ts = {m.ts for m in fresh}
        window = await asyncio.to_thread(self._conversations.messages_since, channel.id, window_start)
        earlier = self._earlier([m for m in window if m.ts not in fresh_ts], fresh)
        batches = _batches(fresh, self._settings.batch_max_tokens, _cost)
        return _Backlog(audience, label, long_term, short_term, mark, window_start, earlier, batches)

    async def _thread(self, backlog: _Backlog, thread_ts: str) -> Memory:
        scope = Scope(backlog.long_term.scope.channel_id, thread_ts)
        return await self._load(scope, Term.SHORT, backlog.audience, backlog.label)

    def _earlier(self, window: Sequence[Message], fresh: Sequence[Message]) -> list[Message]:
        """The window's already-read messages of the threads the new ones continue, newest kept within a
        quarter of the batch budget: the short-term memory stands for the rest."""
        threads = {m.thread_ts for m in fresh if m.thread_ts}
        related = [m for m in window if m.thread_ts in threads or m.ts in threads]
        return fit_items(related, self._settings.batch_max_tokens // 4, _cost)

    def _channel_prompt(
        self,
        channel: Channel,
        long_term: Memory,
        short_term: Memory,
        threads: Sequence[Memory],
        earlier: Sequence[Message],
        batch: Sequence[Message],
        window_start: datetime,
    ) -> MemoryPrompt:
        return MemoryPrompt(
            persona=self._persona,
            now=self._clock.now().astimezone(self._persona.timezone),
            channel=channel,
            long_term=self._fit(long_term.active),
            short_term=tuple(b for b in short_term.active if _newest(b) >= window_start),
            earlier=tuple(self._line(m) for m in earlier),
            material=tuple(self._line(m) for m in batch),
            threads=tuple((t.scope.thread_ts or "", t.active) for t in threads),
        )

    def _active_threads(self, messages: Sequence[Message]) -> list[str]:
        """The threads among `messages` with a message within `thread_memory_days`."""
        horizon = self._clock.now() - timedelta(days=self._settings.thread_memory_days)
        return list(dict.fromkeys(m.thread_ts for m in messages if m.thread_ts and m.posted_at > horizon))

    def _line(self, message: Message) -> str:
        where = f" (thread {message.thread_ts})" if message.thread_ts and message.thread_ts != message.ts else ""
        line = f"ts={message.ts}{where} {format_message(message, self._persona.timezone, {})}"
        return cut_text(line, self._settings.batch_max_tokens, self._settings.cut)

    def _apply(
        self, backlog: _Backlog, threads: Sequence[Memory], update: MemoryUpdate, heard: tuple[str, ...]
    ) -> tuple[Memory, Memory, list[Memory]]:
        """The memories with the model's update of the backlog's next batch applied; sources it did not read
        are dropped. Every bullet records the conversations `heard` by the call.

        Long-term bullets may only come from the new messages, so nothing is learnt twice.
        """
        batch = backlog.batches[0]
        long_term = backlog.long_term.grow(
            self._dated(update.long_term, {m.ts for m in batch}, heard), after=backlog.mark.last_id
        )
        sources = {m.ts for m in (*backlog.earlier, *batch)}
        short_term = self._renewed(
            backlog.short_term, self._dated(update.short_term, sources | _sources(backlog.short_term), heard)
        )
        drafts = dict(update.threads)
        renewed = [
            self._renewed(thread, self._dated(drafts[thread.scope.thread_ts], sources | _sources(thread), heard))
            for thread in threads
            if thread.scope.thread_ts in drafts
        ]
        return long_term, short_term, renewed

    def _dated(self, drafts: Sequence[Draft], allowed: set[str], heard: tuple[str, ...]) -> list[tuple[Draft, date]]:
        """The drafts whose sources are among `allowed` (others dropped from them), each with its day and the
        conversations `heard` by the call that wrote them."""
        dated = []
        for draft in drafts:
            source_ts = tuple(ts for ts in dict.fromkeys(draft.source_ts) if ts in allowed)
            text = " ".join(draft.text.split())
            if not source_ts or not text:
                continue
            day = ts_to_datetime(max(source_ts)).astimezone(self._persona.timezone).date()
            dated.append((replace(draft, text=text, source_ts=source_ts, heard_in=heard), day))
        return dated

    def _renewed(self, memory: Memory, dated: Sequence[tuple[Draft, date]]) -> Memory:
        """Short-term `memory` made afresh from the notes `dated` that fit, in the model's order, a quarter of the
        batch budget: what a runaway model writes beyond it is dropped (logged), not stored and shown again in
        every later call."""
        max_tokens = self._settings.batch_max_tokens // 4
        kept = []
        size = 0
        for note in dated:
            cost = _note_cost(note[0].text)
            if size + cost <= max_tokens:
                kept.append(note)
                size += cost
        if len(kept) < len(dated):
            logger.warning(
                "memory: %d short-term note(s) of %s dropped, over %d tokens",
                len(dated) - len(kept),
                memory.scope.key,
                max_tokens,
            )
        return memory.renewed(kept)

    def _expire_short_terms(self) -> None:
        """Drop short-term bullets whose messages all left the window (no model call)."""
        window_start = self._clock.now() - self._settings.short_term_window
        expired = []
        for memory in self._memories.channels(Term.SHORT):
            kept = tuple(b for b in memory.bullets if _newest(b) >= window_start)
            if kept != memory.bullets:
                expired.append(replace(memory, bullets=kept))
        if expired:
            self._memories.save(expired)

    def absorbed(self, channel: Channel, messages: Sequence[Message]) -> set[str]:
        """The ts of those of the channel's `messages` the job has read, into the channel's memory and into
        their authors' profiles: only their raw text may go. The job reads nothing more of a channel the bot
        has left (or never stored): its messages count as read, so their raw text is not kept for ever. Blocking."""
        if not channel.is_member:
            return {m.ts for m in messages}
        memory = self._memories.get(Scope(channel.id), Term.LONG)
        mark = _Mark.parse(memory.covered) if memory is not None else _Mark()
        read = [m for m in messages if m.ts <= mark.ts]
        if self._profiles is not None:
            learnt = self._profiles.absorbed(channel, read)
            read = [m for m in read if m.ts in learnt]
        return {m.ts for m in read}

    # -- workspace -----------------------------------------------------------

    async def _workspace(self, report: RoundReport) -> RoundReport:
        """Update the workspace memory from the public channels whose memory changed since it was made, in calls
        of at most the batch budget of their notes each (`_workspace_calls`), each saved with the marks of what it
        read (a failed call leaves the rest for the next round); what was made from a message edited meanwhile
        (the channels' notes held its old words) is left out."""
        started = self._clock.now()
        sources = await asyncio.to_thread(self._workspace_sources)
        long_term = await self._load(WORKSPACE_SCOPE, Term.LONG, WORKSPACE)
        seen = json.loads(long_term.covered or "{}")
        changed = [(long, short) for long, short in sources if seen.get(long.scope.key, [""])[0] != long.covered]
        if not changed:
            return report
        notes = self._notes(changed, seen)
        if not notes:  # the channels changed but learnt nothing: nothing to tell the workspace
            covered = {**seen, **{long.scope.key: [long.covered, _last_id(long)] for long, _ in changed}}
            covered_json = json.dumps(covered, sort_keys=True)
            await asyncio.to_thread(self._memories.save, [replace(long_term, covered=covered_json)])
            return report
        calls = self._workspace_calls(notes)
        for index, call in enumerate(calls):
            if index:  # read again: a narrowing meanwhile dropped the memory, which the next round makes again
                saved = long_term.covered
                long_term = await self._load(WORKSPACE_SCOPE, Term.LONG, WORKSPACE)
                if long_term.covered != saved:
                    break
            short_term = await self._load(WORKSPACE_SCOPE, Term.SHORT, WORKSPACE)
            heard = {c for b in (*long_term.active, *short_term.active) for c in b.heard_in}
            heard.update(c for note in call for c in note.heard)
            allowed = {ts for note in call for ts in note.source_ts}
            prompt = MemoryPrompt(
                persona=self._persona,
                now=self._clock.now().astimezone(self._persona.timezone),
                channel=None,
                long_term=self._fit(long_term.active),
                short_term=short_term.active,
                earlier=(),
                material=tuple(note.line for note in call),
                threads=(),
            )
            updates = await self._ask([prompt])
            report = replace(report, calls=report.calls + 1, failures=report.failures + (updates is None))
            read = [Scope.from_key(key).channel_id or "" for key in dict.fromkeys(note.channel_key for note in call)]
            if updates is None:
                self._suspects.failed(read)
                break
            self._suspects.read(read)
            (update,) = updates
            seen = {**seen, **{note.channel_key: note.mark for note in call}}
            if index == len(calls) - 1:  # and the channels with nothing after what was read, up to their end too
                seen.update({long.scope.key: [long.covered, _last_id(long)] for long, _ in changed})
            long_term = long_term.grow(self._dated(update.long_term, allowed, tuple(sorted(heard))))
            long_term = replace(long_term, covered=json.dumps(seen, sort_keys=True))
            short_term = self._renewed(
                short_term, self._dated(update.short_term, allowed | _sources(short_term), tuple(sorted(heard)))
            )
            await asyncio.to_thread(self._memories.save, [long_term, short_term], heard=True, read_at=started)
            await asyncio.to_thread(still_public, self._conversations, self._memories, read)
            if index == 0:
                report = replace(report, updated=report.updated + (WORKSPACE_SCOPE.key,))
        return report

    def _workspace_calls(self, notes: Sequence[_Note]) -> list[list[_Note]]:
        """`notes` in calls within the batch budget: those of the channels of failed calls last, in calls of their
        own channel's, those after the first of the last failed call first (notes the model refuses for good, a
        content filter say, hold back no other channel's for ever)."""

        def channel_id(note: _Note) -> str:
            return Scope.from_key(note.channel_key).channel_id or ""

        def cost(note: _Note) -> int:
            return estimate_tokens(note.line)

        return self._suspects.calls(notes, channel_id, cost, self._settings.batch_max_tokens)

    def _notes(self, changed: Sequence[tuple[Memory, Memory]], seen: dict[str, list[Any]]) -> list[_Note]:
        """The notes of the changed channels the workspace memory has not read: each channel's long-term ones
        after the last it read, then its short-term ones, each with the channel's mark once it is read."""
        notes = []
        for long, short in changed:
            before, read_up_to = seen.get(long.scope.key, ["", 0])
            read = [(b, [before, b.id]) for b in long.active if b.id > read_up_to]
            read += [(b, [before, _last_id(long)]) for b in short.active]
            for index, (bullet, mark) in enumerate(read, start=1):
                line = f"{long.label} ts={','.join(bullet.source_ts)} [{bullet.day.isoformat()}] {bullet.text}"
                notes.append(
                    _Note(
                        channel_key=long.scope.key,
                        line=cut_text(line, self._settings.batch_max_tokens, self._settings.cut),
                        source_ts=bullet.source_ts,
                        heard=(long.scope.channel_id or "", *bullet.heard_in),
                        mark=[long.covered, _last_id(long)] if index == len(read) else mark,
                    )
                )
        return notes

    def _workspace_sources(self) -> list[tuple[Memory, Memory]]:
        """The public channels' (long, short) memories, the only ones the workspace memory is made from, as every
        conversation may be shown them (`Memory.shown_in` for `WORKSPACE_VIEW`): kept for the workspace, of a channel
        that is public and that the bot is in, without the notes heard in one since stored as not public. A channel
        stored as private before its narrowing reaches its memories, or what others heard there, is read no more."""

        def shown(term: Term) -> dict[str, Memory]:
            read = self._memories.for_prompt((), term)
            memories = (memory.shown_in(WORKSPACE_VIEW, source, read.not_public) for memory, source in read.news)
            return {memory.scope.key: memory for memory in memories if memory is not None}

        shorts = shown(Term.SHORT)
        return [
            (memory, shorts.get(key) or Memory(memory.scope, Term.SHORT, memory.audience))
            for key, memory in shown(Term.LONG).items()
        ]

    # -- helpers -------------------------------------------------------------

    async def _ask(self, prompts: Sequence[MemoryPrompt]) -> tuple[MemoryUpdate, ...] | None:
        """The model's updates of `prompts` (one call), or None when it failed (logged; the old memories stay)."""
        try:
            return await self._writer.update(prompts)
        except ModelUnavailable as exc:
            logger.warning("memory update skipped this round: %s", exc)
            return None

    async def _load(self, scope: Scope, term: Term, audience: Audience, label: str = "") -> Memory:
        """The stored memory as a call for `audience` reads it (`_loaded`)."""
        read = await asyncio.to_thread(self._memories.for_prompt, [(scope, term)], None)
        return _loaded(read, scope, term, audience, label)

    def _fit(self, bullets: Sequence[Bullet]) -> tuple[Bullet, ...]:
        """The newest active long-term bullets that fit half the batch budget."""
        return tuple(
            fit_items(bullets, self._settings.batch_max_tokens // 2, lambda b: _note_cost(b.text))
        )


def _loaded(read: PromptMemories, scope: Scope, term: Term, audience: Audience, label: str) -> Memory:
    """The memory of `scope` and `term` in `read` (with the audience of the call that reads it and its source's
    label), or an empty one; without the bullets written with words in sight that its readers may not all read now
    (a channel since turned private, before its narrowing reaches them), which a save would drop: a call never shows
    them, nor its preview."""
    memory = replace(read.stored.get((scope, term)) or Memory(scope, term, audience), audience=audience, label=label)
    return memory.heard_by_readers(read.not_public)


def still_public(conversations: ConversationStore, memories: MemoryStore, channel_ids: Sequence[str]) -> None:
    """After saving for the workspace what was made from these channels: any that stopped being public
    meanwhile (the save raced its narrowing) is narrowed again, the workspace memory with it."""
    for channel_id in channel_ids:
        channel = conversations.get_channel(channel_id)
        if channel is not None and channel.is_private:
            memories.narrow(channel_id)


def _heard(prompts: Sequence[MemoryPrompt]) -> tuple[str, ...]:
    """The conversations whose words one call reading `prompts` has in sight: the channels read, and those
    the bullets shown had in sight when they were written (a bullet may carry another channel's words)."""
    heard = {p.channel.id for p in prompts if p.channel is not None}
    for prompt in prompts:
        shown = (*prompt.long_term, *prompt.short_term, *(b for _, bullets in prompt.threads for b in bullets))
        heard.update(c for b in shown for c in b.heard_in)
    return tuple(sorted(heard))


def _batches(items: Sequence[T], max_tokens: int, cost: Callable[[T], int]) -> list[list[T]]:
    """Consecutive batches of `items`, each within `max_tokens` (one item at least)."""
    batches: list[list[T]] = []
    size = 0
    for item in items:
        item_cost = cost(item)
        if not batches or size + item_cost > max_tokens:
            batches.append([])
            size = 0
        batches[-1].append(item)
        size += item_cost
    return batches


def _cost(message: Message) -> int:
    """About what a message costs in a memory prompt: its text and its line's prefix."""
    return estimate_tokens(message.text) + 16


def _note_cost(text: str) -> int:
    """About what a note costs in a memory prompt: its text and its line's id and day."""
    return estimate_tokens(text) + 8


def _last_id(memory: Memory) -> int:
    return max((b.id for b in memory.bullets), default=0)


def _sources(memory: Memory) -> set[str]:
    """The ts of the messages a memory's active bullets came from."""
    return {ts for b in memory.active for ts in b.source_ts}


def _newest(bullet: Bullet) -> datetime:
    return ts_to_datetime(max(bullet.source_ts)) if bullet.source_ts else datetime.min.replace(tzinfo=timezone.utc)
