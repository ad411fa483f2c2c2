"""Answering a message addressed to the bot: a mention, or anything said to it in a DM."""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from contextlib import aclosing, suppress
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from myao2.application import tracing
from myao2.application.agents import ModelUnavailable, ReplyWriter
from myao2.application.channels import reads_as_stored
from myao2.application.context import ContextBuilder, StoredContext
from myao2.application.conversations import Conversations
from myao2.application.locks import KeyedLocks
from myao2.application.reaction import PendingReaction
from myao2.application.reply_stream import (
    LeftOpen,
    ReplyDeferred,
    ReplyDone,
    ReplyStream,
    ReplyWithdrawn,
    TasksRunning,
    TextDelta,
)
from myao2.domain.answers import PendingAnswer, RetryPolicy, words_digest
from myao2.domain.conversation import BotIdentity, Channel, ChannelKind, Message, Person
from myao2.domain.memo import Origin
from myao2.domain.ports import ChatPlatform, Clock, ConversationClosed, ConversationStore
from myao2.domain.visibility import Reader

logger = logging.getLogger(__name__)

RECENT_CLAIMS = 1024
"""Claims remembered in memory; a claim is never undone, so a remembered one needs no query."""
ANSWER_MAX_CHARS = 39_000
"""The most text of an answer read from the model: a Slack message keeps 40,000 characters, the apology ends
one cut here. A model writing on without end (a loop) is stopped there. Also the most of the end a stream left
open lacks that its claim keeps (`_left_open`)."""

Spawn = Callable[[Coroutine[Any, Any, None]], None]


@dataclass(frozen=True)
class MentionSettings:
    """How mentions are answered (from the `response` config section)."""

    reaction: str
    reply_in_thread: bool
    context_message_limit: int
    max_message_age_seconds: int
    catchup_seconds: int
    retries: RetryPolicy
    apology: str


@dataclass(frozen=True)
class Conversation:
    """What the prompt of an answer shows of its conversation: the messages (the one answered among them), what
    the store adds to them and the stored people they name; read after `mark` (of `AnswerMention._threads`)."""

    messages: list[Message]
    stored: StoredContext
    people: dict[str, Person]
    mark: int


ReadAhead = tuple[Channel | None, Conversation | None]
"""The channel as stored and the conversation, read in the trip of a claim (either None if it could not be)."""


@dataclass(frozen=True)
class Claimed:
    """What became of a claim made ahead (`AnswerMention.claim_ahead`): made or refused (with the channel as
    stored and the conversation, if they could be read), or failed."""

    claimed: bool
    channel: Channel | None = None
    error: Exception | None = None
    conversation: Conversation | None = None


@dataclass(frozen=True)
class ClaimAhead:
    """A claim to make in a worker thread (`claim`, which never raises), or to `drop` if it is not made."""

    claim: Callable[[], Claimed]
    drop: Callable[[], object]


class AnswerMention:
    """Takes up a message addressed to the bot and sees that it is answered exactly once.

    The story of one attempt: claim, compose, post (after a reaction, when slow to), settle. The claim in the
    store is first-come, so Slack's redeliveries and the app_mention/message pair
    never produce a second answer; it also records the answer's progress. An attempt
    that does not settle (a Slack error, a crash, a deploy) is taken up again by
    `catch_up` once due (see `RetryPolicy`), and before a retry composes anything it
    asks Slack whether the answer was posted after all. The claim is a row with a
    unique key, so this holds across replicas too; a replica's unsettled claims pass
    to the others only once it is gone. Answers in one thread are written one after
    another by this process (two replicas may answer in one thread at once); other
    threads go on concurrently.
    """

    def __init__(
        self,
        *,
        store: ConversationStore,
        chat: ChatPlatform,
        contexts: ContextBuilder,
        writer: ReplyWriter,
        conversations: Conversations,
        bot: BotIdentity,
        clock: Clock,
        spawn: Spawn,
        settings: MentionSettings,
        replica: str | None = None,
    ) -> None:
        """`replica` names this process among the replicas sharing the store (see `Replica`): it holds the claims
        it makes, and takes up another's only once that replica is gone."""
        self._store = store
        self._chat = chat
        self._conversations = conversations
        self._contexts = contexts
        self._writer = writer
        self._bot = bot
        self._clock = clock
        self._spawn = spawn
        self._settings = settings
        self._replica = replica
        self._threads = KeyedLocks()
        """Answers in one thread are written one after another, each reading the conversation once the one
        before is stored."""
        self._claimed: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._in_flight: set[tuple[str, str]] = set()
        self._due = asyncio.Event()
        self._read_until: datetime | None = None
        """The latest moment a `catch_up` read the answers due up to: those falling due since are due now."""

    async def __call__(self, message: Message) -> None:
        """Answer a message that just arrived, unless it is already taken up."""
        claimed, (channel, conversation) = await self._claim(message, then=self._read_ahead(message))
        if claimed:
            await self._attempt(message, 1, fresh=True, channel=channel, conversation=conversation)

    def claim_ahead(self, message: Message) -> ClaimAhead | None:
        """The claim of a message that just arrived, for the worker thread's trip that stores it; None when it is
        claimed here already. Once the claim is made, `take_up` answers; if it is not made, `ClaimAhead.drop`."""
        key = (message.channel_id, message.ts)
        if not self._reserve(key):
            return None
        claim_in_store = self._claim_in_store(message, self._read_ahead(message))

        def claim() -> Claimed:
            try:
                made, (channel, conversation) = claim_in_store()
            except Exception as exc:  # noqa: BLE001 - raised by `take_up`, as a claim's failure is by `__call__`
                return Claimed(False, error=exc)
            return Claimed(made, channel, conversation=conversation)

        return ClaimAhead(claim, lambda: self._claimed.pop(key, None))

    async def take_up(self, message: Message, claimed: Claimed) -> None:
        """Answer a message whose `claim_ahead` claim was made."""
        if claimed.error is not None:
            self._claimed.pop((message.channel_id, message.ts), None)  # not claimed after all
            raise claimed.error
        if claimed.claimed:
            await self._attempt(message, 1, fresh=True, channel=claimed.channel, conversation=claimed.conversation)

    async def catch_up(self) -> int:
        """Take up what is owed: messages for the bot never claimed, and answers due again.

        Only messages posted in the `catchup_seconds` before it began are taken up: one posted since is its
        event's to take up (or the next catch-up's), so with 0 no message is. Answers owed (claimed, not settled)
        are due again whatever that window (`_owed_since`). Returns how many attempts were started (they run in
        the background).
        """
        now = self._clock.now()
        self._read_until = max(now, self._read_until or now)
        try:
            return await self._take_up_owed(now)
        except Exception:
            self._due.set()  # what it did not take up is still due: the wait after this failure ends at once
            raise

    async def _take_up_owed(self, now: datetime) -> int:
        """`catch_up` as of `now`."""
        since = now - timedelta(seconds=self._settings.catchup_seconds)

        def read() -> tuple[list[Message], list[PendingAnswer]]:
            """Both in one trip, over one connection: the messages claimed below are due after `now`, never now."""
            with self._store.one_connection():
                missed = self._store.unclaimed_mentions(self._bot.user_id, since, now)
                return missed, self._store.due_answers(now, self._owed_since(now), holder=self._replica)

        missed, due = await asyncio.to_thread(read)
        started = 0
        for message in missed:
            if (await self._claim(message))[0]:
                self._spawn(self._attempt(message, 1, fresh=False))
                started += 1
        for pending in due:
            message, attempt = pending.message, pending.attempts + 1
            if (message.channel_id, message.ts) in self._in_flight:
                continue  # still being answered here: its attempt outlived its lease
            retry_at = self._settings.retries.retry_at(now, attempt)
            if await asyncio.to_thread(
                self._store.next_attempt, message.channel_id, message.ts, pending.attempts, retry_at, holder=self._replica
            ):
                self._spawn(self._attempt(message, attempt, fresh=False))
                started += 1
        return started

    async def wait_until_due(self) -> None:
        """Return when `catch_up` may find an answer due: when the next one falls due, an attempt or a catch-up
        here failed, or `wake` was called.

        Sleeps meanwhile, however long; nothing is polled. Answers other replicas
        owe are taken up once they are gone (`wake`).
        """
        now = self._clock.now()
        after = min(now, self._read_until or now)  # one falling due since the last catch-up read is due at once
        due = await asyncio.to_thread(self._store.next_due, after, self._owed_since(now), holder=self._replica)
        with suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._due.wait(), None if due is None else max(0.0, (due - now).total_seconds()))
        self._due.clear()

    def _owed_since(self, now: datetime) -> datetime:
        """Answers owed to messages posted after this are taken up again (and at last apologised for): those
        the conversation still shows (`max_message_age_seconds`), or missed ones may be if that is longer. A
        shorter catch-up window does not leave a failed answer silent."""
        settings = self._settings
        return now - timedelta(seconds=max(settings.catchup_seconds, settings.max_message_age_seconds))

    def wake(self) -> None:
        """Another replica is gone: the answers it held may be due here now."""
        self._due.set()

    async def _claim(
        self, message: Message, then: Callable[[], ReadAhead] | None = None
    ) -> tuple[bool, ReadAhead]:
        """Claim the message in the store; a message already claimed here is refused without asking it.

        Claimed, `then` is called in the claim's worker thread (it may use the stores) and its result returned
        (nothing read without it).
        """
        key = (message.channel_id, message.ts)
        if not self._reserve(key):
            return False, (None, None)
        try:
            return await asyncio.to_thread(self._claim_in_store(message, then))
        except BaseException:
            self._claimed.pop(key, None)  # not claimed after all: a redelivery may try again
            raise

    def _claim_in_store(
        self, message: Message, then: Callable[[], ReadAhead] | None
    ) -> Callable[[], tuple[bool, ReadAhead]]:
        """The store's claim of `message` (due again after the first retry delay), for a worker thread: whether it
        was made and, if so, what `then` (called in the same thread) returned."""
        retry_at = self._settings.retries.retry_at(self._clock.now(), 1)

        def claim() -> tuple[bool, ReadAhead]:
            if not self._store.claim(message.channel_id, message.ts, retry_at, holder=self._replica):
                return False, (None, None)
            return True, (None, None) if then is None else then()

        return claim

    def _read_ahead(self, message: Message) -> Callable[[], ReadAhead]:
        """What the answer to `message` reads in its claim's trip to a worker thread, before its turn in its thread
        (`_threads`): the channel as stored and the conversation; either None if it could not be read (the attempt
        reads it again, as it does if an answer in the thread ended its turn meanwhile)."""
        read = self._conversation_read(message)

        def ahead() -> ReadAhead:
            channel = self._stored_channel(message.channel_id)
            if channel is None:
                return None, None
            try:
                return channel, read(channel)
            except Exception:  # noqa: BLE001 - read again in the answer's turn, where a failure defers the reply
                return channel, None

        return ahead

    def _reserve(self, key: tuple[str, str]) -> bool:
        """Note that message `key` is being claimed here; False if it was claimed (or is being claimed) here already."""
        if key in self._claimed:
            return False
        self._claimed[key] = None  # the other event of the pair, arriving meanwhile, is refused
        if len(self._claimed) > RECENT_CLAIMS:
            self._claimed.popitem(last=False)
        return True

    def _stored_channel(self, channel_id: str) -> Channel | None:
        """The channel as stored, or None (not stored, or not readable now): the attempt then looks it up again."""
        try:
            return self._store.get_channel(channel_id)
        except Exception:  # noqa: BLE001 - the attempt reads it again, and fails (to be retried) if it must
            return None

    async def _attempt(
        self,
        message: Message,
        attempt: int,
        *,
        fresh: bool,
        channel: Channel | None = None,
        conversation: Conversation | None = None,
    ) -> None:
        """One attempt at answering; `fresh` when no earlier attempt can have posted anything; `channel` and the
        `conversation` for its prompt as just read from the store, if they were."""
        attributes = {
            "slack.channel_id": message.channel_id,
            "slack.thread_ts": message.thread_ts,
            "slack.message_ts": message.ts,
            "myao2.answer.attempt": attempt,
        }
        with tracing.span("answer", attributes):
            await self._answer(message, attempt, fresh=fresh, channel=channel, conversation=conversation)

    async def _answer(
        self, message: Message, attempt: int, *, fresh: bool, channel: Channel | None, conversation: Conversation | None
    ) -> None:
        key = (message.channel_id, message.ts)
        self._in_flight.add(key)
        reaction = self._reaction(message)
        try:
            if channel is None:
                channel = await self._conversations.channel(message.channel_id)
            reply_thread = message.thread_ts or (message.ts if self._threads_replies(channel) else None)
            turn = (message.channel_id, reply_thread)
            async with self._threads.hold(turn):
                if conversation is not None and self._threads.released_since(turn, conversation.mark):
                    conversation = None  # read before an answer there was stored: read again
                answer_ts = None if fresh else await self._earlier_answer(message, reply_thread)
                if answer_ts is None:
                    await self._publish(channel, message, attempt, reply_thread, reaction, conversation)  # settles it
                else:
                    await asyncio.to_thread(self._settle, message, answer_ts)
        except asyncio.CancelledError:
            await asyncio.shield(asyncio.to_thread(self._store.release, *key, self._clock.now()))
            raise
        except ReplyWithdrawn:
            self._given_up(message)
        except ConversationClosed as exc:  # no attempt can post there: settled unanswered
            logger.warning("answer to %s/%s given up: Slack takes no post there (%s)", *key, exc)
            await asyncio.to_thread(self._store.settle, *key, None, holder=self._replica)
        except Exception as exc:  # noqa: BLE001 - the claim stays open: it is taken up again when due
            logger.warning(
                "answer to %s/%s failed (attempt %d), to be taken up again: %r",
                message.channel_id,
                message.ts,
                attempt,
                exc,
            )
            self._due.set()
        finally:
            if reaction is not None:
                reaction.drop()
            self._in_flight.discard(key)

    def _reaction(self, message: Message) -> PendingReaction | None:
        """The reaction to `message`, sent should its answer be slow to show; None when reactions are off."""
        emoji = self._settings.reaction
        if not emoji:
            return None
        return PendingReaction(lambda: self._chat.react(message.channel_id, message.ts, emoji))

    def _threads_replies(self, channel: Channel) -> bool:
        """Top-level messages get a threaded answer, except in a DM, which reads like a chat."""
        return self._settings.reply_in_thread and channel.kind is not ChannelKind.IM

    async def _earlier_answer(self, message: Message, reply_thread: str | None) -> str | None:
        """The ts of an answer an earlier attempt showed: one left half-written is ended with what it lacks, as the
        attempt that left it open kept it (`_left_open`), else with the apology.

        An answer Slack holds complete (marked as the answer) is taken as it is, also when its stream's ts was
        recorded: that attempt ended it (or did as it was cut short), and a stream is stopped once.
        """
        unfinished = await asyncio.to_thread(self._store.unfinished_answer, message.channel_id, message.ts)
        answer_ts = await self._chat.answer_ts(message.channel_id, message.ts, reply_thread)
        if answer_ts is not None or unfinished is None:
            return answer_ts
        if unfinished.ts is not None:
            await self._conversations.finish(
                message.channel_id,
                unfinished.ts,
                reply_thread,
                self._settings.apology,
                answering=message.ts,
                ending=unfinished.ending,
                tasks=unfinished.tasks,
                left_open=self._left_open(message),
            )
            return unfinished.ts
        if not unfinished.showing:
            return None
        return await self._unheard_answer(message, reply_thread, unfinished.unheard_start, unfinished.tasks)

    async def _unheard_answer(
        self, message: Message, reply_thread: str | None, start: str | None, tasks: dict[str, str] | None
    ) -> str | None:
        """The ts of an answer an earlier attempt began to stream but never heard the ts of (the bot died, or the
        call starting the stream went unanswered and its stream was not found at once, see `_unheard`); it is
        ended with the apology, its `tasks` still running marked failed. None: none found.

        It is the first of `_unheard` that is still streaming (takes chat.stopStream, which ends it). A stream
        Slack already ended (expired) is not taken for it: the answer is then written again, two messages
        rather than none.
        """
        for ts in await self._unheard(message, reply_thread, start):
            if await self._conversations.finish(
                message.channel_id, ts, reply_thread, self._settings.apology, answering=message.ts, tasks=tasks
            ):
                logger.warning(
                    "answer to %s/%s found streaming as %s, its ts never heard: ended with the apology",
                    message.channel_id,
                    message.ts,
                    ts,
                )
                return ts
        return None

    async def _started_unheard(self, message: Message, reply_thread: str | None, sent: str) -> list[str]:
        """`Unheard` for the answer to `message`: the call starting its stream, sent `sent`, went unanswered.

        What it was sent is noted first (as a digest), for the next attempt to tell the stream by, should it not
        be found now.
        """
        start = words_digest(sent)
        await asyncio.to_thread(
            self._store.note_unheard_start, message.channel_id, message.ts, start, holder=self._replica
        )
        return await self._unheard(message, reply_thread, start, strict=True)

    async def _unheard(
        self, message: Message, reply_thread: str | None, start: str | None, *, strict: bool = False
    ) -> list[str]:
        """The messages that may be a stream of the answer to `message` whose ts an attempt never heard, oldest
        first.

        chat.startStream takes no metadata, so the stream is told from the bot's other messages by where it is,
        after `message` in its thread, marked as no message's answer and recorded as none's, and, when an attempt
        noted what the call starting it was sent (`start`, a `words_digest`), by showing just that. Only such
        messages are offered then, if any do (or if `strict`): those of other answers in the thread whose ts went
        unheard too are told apart so. Without `start`, none is offered while another answer in the thread may
        be streaming with its ts unheard: which is whose could not be told (two messages rather than another's
        taken). Nor is any while another replica may be streaming there a message whose ts it has not recorded
        yet (it has just started): that could be its answer.
        """
        beside = await asyncio.to_thread(
            self._store.showing_unheard_beside, message.channel_id, message.ts, reply_thread
        )
        if self._replica is not None and beside - {None, self._replica}:
            logger.warning(
                "answer to %s/%s may be streaming unheard, but so may another replica's answer there: written again",
                message.channel_id,
                message.ts,
            )
            return []
        posts = await self._chat.unmarked_posts(message.channel_id, message.ts, reply_thread)
        known = await asyncio.to_thread(self._store.known_answers, message.channel_id, posts)
        found = {ts: text for ts, text in posts.items() if ts not in known}
        if start is not None:
            showing = [ts for ts, text in found.items() if words_digest(text) == start]
            if showing or strict or beside:
                return showing
        elif beside:
            logger.warning(
                "answer to %s/%s may be streaming unheard, as may another answer there: written again",
                message.channel_id,
                message.ts,
            )
            return []
        return list(found)  # told by where it is alone (Slack may show the words it was sent otherwise)

    async def _publish(
        self,
        channel: Channel,
        message: Message,
        attempt: int,
        reply_thread: str | None,
        reaction: PendingReaction | None,
        conversation: Conversation | None,
    ) -> None:
        """Show the answer as it is written, marked as the answer to `message`, and settle it once stored; its
        prompt shows `conversation`, if it was read.

        Should it be slow to show, `reaction` lands first (see `PendingReaction`). Just before it first shows
        (its stream starts, or it is posted whole) it is noted as showing (`_begin_showing`); its ts is recorded
        as soon as it shows, so an attempt cut short ends it instead of starting a second answer.
        """

        async def started(answer_ts: str) -> None:
            if not await asyncio.to_thread(
                self._store.start_answer, message.channel_id, message.ts, answer_ts, holder=self._replica
            ):
                raise ReplyWithdrawn

        shown = False  # noted as showing: its first words go to Slack

        async def about_to_show() -> None:
            nonlocal shown
            if reaction is not None:
                await reaction.before_answer()
            if not shown:  # once: a stream Slack refused to start is posted whole
                await self._begin_showing(message, channel)
                shown = True

        # Left unfinished (withdrawn as it starts showing, the bot stopping), the reply ends here, in this task.
        held = self._held_to_the_end(message, self._reply(channel, message, attempt, conversation), lambda: shown)
        async with aclosing(held) as reply:  # type: ignore[type-var]
            await self._conversations.publish(
                channel,
                reply_thread,
                message.user_id,
                reply,
                self._settings.apology,
                answering=message.ts,
                started=started,
                unheard=lambda sent: self._started_unheard(message, reply_thread, sent),
                left_open=self._left_open(message),
                tasks_running=self._tasks_running(message),
                about_to_show=about_to_show,
                not_shown=reaction.not_shown if reaction is not None else None,
                stored=lambda answer_ts: self._settle(message, answer_ts),
            )

    def _left_open(self, message: Message) -> LeftOpen:
        """`LeftOpen` for the answer to `message`: the end its stream lacks is kept with its claim (in the store, so
        the next attempt ends the stream with it after a restart too, or on another replica), for that stream only.

        Its last `ANSWER_MAX_CHARS` characters: only an end with the apology can be longer (no answer is), which
        then still ends it."""

        async def keep(answer_ts: str, ending: str) -> None:
            await asyncio.to_thread(
                self._store.keep_ending,
                message.channel_id,
                message.ts,
                answer_ts,
                ending[-ANSWER_MAX_CHARS:],
                holder=self._replica,
            )

        return keep

    def _tasks_running(self, message: Message) -> TasksRunning:
        """`TasksRunning` for the answer to `message`: the tasks its stream shows still running are kept with its claim
        (in the store, so the next attempt marks them failed as it ends the stream, after a restart too). They quote
        the model's tool arguments, read in this conversation: the claim is this conversation's, and cleared once
        the answer is settled."""

        async def keep(tasks: dict[str, str]) -> None:
            await asyncio.to_thread(
                self._store.keep_tasks, message.channel_id, message.ts, tasks, holder=self._replica
            )

        return keep

    async def _reply(
        self, channel: Channel, message: Message, attempt: int, conversation: Conversation | None
    ) -> ReplyStream:
        """The answer as the model writes it, or the apology once the attempts are used up; `conversation`, if
        not None, is the conversation read for it.

        A conversation that cannot be read for it defers the reply (see `_showing`).
        """
        if self._settings.retries.apologises(attempt):
            logger.warning("answering %s/%s with an apology after %d attempts", message.channel_id, message.ts, attempt - 1)
            yield ReplyDone(self._settings.apology)
            return
        try:
            if conversation is None:
                conversation = await asyncio.to_thread(self._conversation_read(message), channel)
            names = await self._conversations.names(conversation.messages, conversation.people)
        except Exception as exc:  # the store or Slack, failing before anything shows: a passing failure
            raise ReplyDeferred(f"could not read the conversation: {exc!r}") from exc
        context = self._contexts.assemble(
            channel, conversation.messages, conversation.stored, names, answering=message
        )
        origin = Origin.of(channel, message.user_id, message.ts)
        written = 0
        async with aclosing(self._writer.stream(context, origin)) as events:  # type: ignore[type-var]
            async for event in events:
                if isinstance(event, TextDelta):
                    written += len(event.text)
                    if written > ANSWER_MAX_CHARS:
                        raise ModelUnavailable(f"the answer passed {ANSWER_MAX_CHARS} characters: cut short")
                yield event

    def _conversation_read(self, message: Message) -> Callable[[Channel], Conversation]:
        """The read of the conversation of `message` (in `channel`) for its answer's prompt, for a worker thread:
        the messages, what the store adds to them and the people they name, over one database connection."""
        since = self._clock.now() - timedelta(seconds=self._settings.max_message_age_seconds)
        mark = self._threads.mark()

        def read(channel: Channel) -> Conversation:
            with self._store.one_connection():
                messages = self._conversations.read_messages(
                    message.channel_id, message.thread_ts, self._settings.context_message_limit, since
                )
                if message.ts not in {m.ts for m in messages}:
                    messages.append(message)
                stored, people = self._contexts.read(channel, messages), self._conversations.stored_people(messages)
                return Conversation(messages, stored, people, mark)

        return read

    async def _begin_showing(self, message: Message, channel: Channel) -> None:
        """Note in the claim that the answer to `message` shows next (its first words go to Slack, before Slack
        tells a stream's ts): a later attempt then looks for a stream whose ts this one never heard (see
        `_unheard_answer`).

        Withdrawn if the claim is settled, or another replica took the answer over meanwhile (this one stalled for
        longer than its lease: that one answers). A note that cannot be written (the database locked or
        unreachable) defers the reply: nothing shows, and the attempt fails, to be taken up again. So does an answer
        written from what a conversation of the workspace reads (`channel` as read for its prompt) once its
        conversation is stored as read from outside (shared since): the next attempt writes it from what it reads
        now.
        """
        inside = not Reader.of(channel.id, channel).outside
        try:
            begun = await asyncio.to_thread(
                self._store.begin_showing, message.channel_id, message.ts, holder=self._replica, inside=inside
            )
        except Exception as exc:
            raise ReplyDeferred(f"could not note the answer as showing: {exc!r}") from exc
        if not begun:
            if inside and not await reads_as_stored(self._store, channel):
                raise ReplyDeferred("its conversation is read from outside now: written again")
            raise ReplyWithdrawn

    async def _held_to_the_end(self, message: Message, reply: ReplyStream, shown: Callable[[], bool]) -> ReplyStream:
        """`reply`, withdrawn as it is complete if it shows already (`shown`) and another replica took the answer
        over meanwhile: a streamed answer then never ends beside that replica's. One not showing yet (posted whole
        once complete) is checked as it is noted as showing (`_begin_showing`), just before it is posted."""
        async with aclosing(reply) as events:  # held back, the model's reply ends here, in this task
            async for event in events:
                if isinstance(event, ReplyDone) and self._replica is not None and shown():
                    if not await asyncio.to_thread(self._store.holds, message.channel_id, message.ts, self._replica):
                        raise ReplyWithdrawn
                yield event

    def _settle(self, message: Message, answer_ts: str) -> None:
        """Record that `message` is answered by `answer_ts`: it is never taken up again. Synchronous: called in
        a worker thread (the one that stores a published answer, in the transaction storing it: a refused settle,
        the claim taken over, writes nothing, and the answer's message is stored all the same)."""
        if not self._store.settle(message.channel_id, message.ts, answer_ts, holder=self._replica):
            self._given_up(message)

    def _given_up(self, message: Message) -> None:
        """The claim was settled or taken from this attempt meanwhile: its message was deleted before the answer
        showed (the person took it back), or another replica took the answer over while this one stalled (it is
        that one's to give)."""
        logger.info(
            "answer to %s/%s given up here: its message deleted, or taken over by another replica",
            message.channel_id,
            message.ts,
        )
