"""Replies streamed into Slack as they are written (chat.startStream / appendStream / stopStream).

slack_sdk's `chat_stream` helper flushes only by size; here text is flushed by size
or by age, so the first words appear soon after the model writes them and a long
answer still takes few calls. A reply done while its first words are held back
(`FIRST_WORDS_HOLD_SECONDS`) is posted whole with one chat.postMessage, as is every
reply where the workspace refuses streaming (or the setting turns it off).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from myao2.application.agents import ModelUnavailable
from myao2.application.reply_stream import (
    AboutToShow,
    LeftOpen,
    NotShown,
    PublishedReply,
    ReplyDone,
    ReplyHeldBack,
    ReplyStream,
    ReplyWithdrawn,
    Started,
    TasksRunning,
    TextDelta,
    ToolFinished,
    ToolStarted,
    Unheard,
    apology_tail,
    failed_reply_text,
)
from myao2.domain.conversation import Channel, ChannelKind
from myao2.domain.ports import ConversationClosed
from myao2.infrastructure.slack.gateway import (
    CALL_FAILURES,
    MARKDOWN_TEXT_LIMIT,
    SlackGateway,
    answer_metadata,
    closed_or,
    describe,
    error_code,
    message_text,
    retrying,
    transient,
)

logger = logging.getLogger(__name__)

FLUSH_CHARS = 120
"""Text held back until this much is buffered (a 1,000-character answer: about 8 appends)..."""
FLUSH_SECONDS = 1.0
"""...or until the oldest unsent text is this old."""
FIRST_WORDS_HOLD_SECONDS = 0.1
"""How long the first words are held back, whatever the model does meanwhile, before the stream starts with them
(sooner with `FLUSH_CHARS` of text, or a task to show): a reply done by then is posted whole, in one call rather
than a stream's two and the record of its ts."""
NO_STREAM_METHODS = frozenset({"unknown_method", "method_deprecated"})
"""Errors of chat.startStream meaning this workspace has no streamed messages at all."""
REFUSALS = frozenset({"not_allowed", "feature_not_enabled"}) | NO_STREAM_METHODS
"""Errors of chat.startStream meaning this workspace does not take streamed messages (of a top-level stream: see
`TOP_LEVEL_REFUSALS`)."""
NOT_STREAMING = "message_not_in_streaming_state"
"""The error of a stream call on a message Slack no longer streams (stopped, or expired)."""
TOP_LEVEL_REFUSALS = frozenset(
    {"invalid_arguments", "thread_ts_required", "missing_argument", "missing_recipient_user_id",
     "missing_recipient_team_id", "not_allowed", "feature_not_enabled"}
)
"""Errors of a top-level chat.startStream (a DM answered inline, sent without recipient ids) meaning only threads
stream, or that may mean no more: threads try for themselves."""


@dataclass(frozen=True)
class StreamSettings:
    """`response.streaming` and `response.show_memo_tasks`."""

    streaming: bool = True
    show_tasks: bool = True


class SlackReplyPublisher:
    """`ReplyPublisher` on the Slack Web API; one per workspace, which it remembers refusing streams.

    Whole replies are posted through `chat` (its post of an answer is retried safely).
    """

    def __init__(
        self, client: AsyncWebClient, chat: SlackGateway, team_id: str | None, settings: StreamSettings
    ) -> None:
        self._client = client
        self._chat = chat
        self._team_id = team_id
        self._settings = settings
        self._streaming = settings.streaming
        self._top_level = True  # a refused top-level stream (an inline DM answer) is not tried again

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
    ) -> PublishedReply:
        """Stream `reply` into the conversation, or post it whole where streaming is not possible."""
        if self._streaming and (thread_ts or self._top_level):
            stream = _Stream(
                self,
                channel,
                thread_ts,
                recipient_user_id,
                answering,
                started,
                unheard,
                left_open,
                tasks_running,
                about_to_show,
                not_shown,
            )
            return await stream.run(reply, apology)
        text = await _whole(reply, apology)
        if about_to_show is not None:
            await about_to_show()
        return PublishedReply(await self._chat.post(channel.id, text, thread_ts, answering), text)

    async def finish(
        self,
        channel_id: str,
        ts: str,
        apology: str,
        *,
        answering: str | None = None,
        ending: str | None = None,
        tasks: dict[str, str] | None = None,
        left_open: LeftOpen | None = None,
    ) -> str | None:
        """Stop a stream left open (the bot stopped while it streamed, or its stop failed), ending it with `ending`
        (what an attempt that failed to end it told `left_open` it lacks), else with `apology`, and its `tasks` still
        running marked failed; its whole text as Slack tells it, None when `ts` is no open stream."""
        failed = [_task(call_id, title, "error") for call_id, title in (tasks or {}).items()]
        return await self._end(channel_id, ts, ending or f"\n\n{apology}", answering, left_open, failed)

    async def _end(
        self,
        channel_id: str,
        ts: str,
        tail: str,
        answering: str | None,
        left_open: LeftOpen | None,
        tasks: list[dict[str, Any]] | None = None,
    ) -> str | None:
        """Stop stream `ts`, left unfinished, with `tail`, marked as the answer to `answering`: the one way an
        unfinished stream is stopped, by the attempt cut short as the bot stops (`_Stream`) or by the next one
        (`finish`). `tasks` go with the stop (the tasks it shows still running, marked failed). Its whole text as
        Slack tells it; None when `ts` is no open stream; a passing failure raises.

        A tail longer than one call takes is appended in pieces first, so the stop itself is never refused for it.
        Should a call fail for a passing reason, `left_open` is told what the stream surely lacks of the tail, for
        the next attempt (`finish`): from the failed stop on (a stop Slack took ends the stream: its text cannot
        show twice), or from after the failed piece (Slack may show it already)."""
        try:
            while len(tail) > MARKDOWN_TEXT_LIMIT:
                piece, tail = tail[:MARKDOWN_TEXT_LIMIT], tail[MARKDOWN_TEXT_LIMIT:]
                await self._client.chat_appendStream(channel=channel_id, ts=ts, chunks=[_markdown(piece)])
            response = await self._client.chat_stopStream(
                channel=channel_id,
                ts=ts,
                chunks=[_markdown(tail), *(tasks or [])],
                metadata=answer_metadata(answering) if answering else None,
            )
        except CALL_FAILURES as exc:
            if transient(exc):
                await _tell_left_open(left_open, ts, tail)
                raise  # Slack failed to stop it now: the next attempt tries again
            # stopped or expired already, or never streamed
            logger.warning("could not stop the unfinished reply %s: %s", ts, describe(exc))
            return None
        return str((response.get("message") or {}).get("text") or "")

    def _refused(self, error: str, top_level: bool) -> bool:
        """Whether `error` from chat.startStream means falling back; remembered and logged once (for top-level
        replies, then for all)."""
        if top_level and error in TOP_LEVEL_REFUSALS:
            self._top_level = False
            logger.warning("Slack refused a top-level streamed reply (%s): DM answers are posted whole", error)
            return True
        if error in REFUSALS:
            self._streaming = False
            logger.warning("Slack refused a streamed reply (%s): replies are posted whole from now on", error)
            return True
        return False


class _Stream:
    """One reply being streamed: holds back its first words a while, buffers text, sends it in few calls, shows
    memo tasks."""

    def __init__(
        self,
        owner: SlackReplyPublisher,
        channel: Channel,
        thread_ts: str | None,
        recipient_user_id: str | None,
        answering: str | None,
        started: Started | None,
        unheard: Unheard | None,
        left_open: LeftOpen | None,
        tasks_running: TasksRunning | None,
        about_to_show: AboutToShow | None,
        not_shown: NotShown | None,
    ) -> None:
        self._owner = owner
        self._client = owner._client
        self._channel = channel
        self._thread_ts = thread_ts
        self._recipient = recipient_user_id
        self._metadata = answer_metadata(answering) if answering else None
        self._answering = answering
        self._started = started
        self._unheard = unheard
        self._left_open = left_open
        self._tasks_running = tasks_running
        self._about_to_show = about_to_show
        self._not_shown = not_shown
        self._ts: str | None = None
        self._written = ""  # everything sent or buffered
        self._taken = ""  # the text the stream surely took (what the message shows)
        self._unsure = ""  # the text of the append (or stop) that failed: taken or not, only the message can tell
        self._buffer = ""  # text not sent yet
        self._since = 0.0  # when the oldest buffered text came
        self._hold: asyncio.TimerHandle | None = None  # the first words' hold, once they came
        self._starting: asyncio.Task[bool] | None = None  # the stream starting with them as their hold ended
        self._tasks: dict[str, str] = {}  # call id -> title, for the tasks shown and not finished yet
        self._tasks_told: dict[str, str] = {}  # the tasks `tasks_running` was last told
        self._broken = False  # the stream stopped taking text (e.g. expired), or its stop failed: chat.update ends it
        self._ending: str | None = None  # its whole text, once its end is sent (`_stop`): see `run`
        self._following = False  # what the message lost was posted after it (`_follow`), perhaps unheard
        self._withdrawn = False  # withdrawn as it started showing: taken back (`_withdraw`), never ended

    async def run(self, reply: ReplyStream, apology: str) -> PublishedReply:
        """Stream the reply; post it whole when it is done while its first words are held back, or when Slack
        refuses to start a stream (from then on, the publisher posts every reply whole).

        A failure of the reply ends the message with the apology; a Slack error raises.
        Cancelled (the bot is stopping), a message already showing is ended with the apology too, unless its end
        was sent already: one stream is stopped once (cut short as it stops, it is left to the next attempt). A
        broken stream cut short as its end is sent is completed with its whole text then: stopped, it is the
        answer as it shows. One withdrawn as it started showing is taken back, never ended.
        """
        try:
            return await self._run(reply, apology)
        except asyncio.CancelledError:
            await self._drop_hold(cancel=True)
            if self._withdrawn:
                await self._withdraw()  # its deletion may have been cut short
            elif self._ending is None and self._ts is not None and not self._broken:
                await self._stop_on_cancel(apology)
            elif self._ending is not None and self._broken:
                await self._complete_on_cancel(self._ending, apology)
            raise
        except BaseException:
            await self._drop_hold()
            raise

    def _end_hold(self) -> None:
        """The first words' hold is over: the stream starts with them (in a task of its own, as the model's reply
        is read on in this one)."""
        self._starting = asyncio.ensure_future(self._send([]))

    async def _hold_ended(self) -> bool:
        """Let the stream their hold's end is starting start (its failure raises here); False when Slack refused it."""
        if self._starting is None:
            return True
        try:
            return await self._starting
        finally:
            self._starting = None

    async def _drop_hold(self, *, cancel: bool = False) -> None:
        """The reply ends early: its first words' hold, if on, ends with no stream started; a stream starting as it
        ended is let start (or, with `cancel`, is cut short as a call of this task would be), its failure logged."""
        if self._hold is not None:
            self._hold.cancel()
        starting = self._starting
        if starting is None:
            return
        if cancel:
            starting.cancel()
        await asyncio.wait({starting})
        self._starting = None
        if not starting.cancelled() and starting.exception() is not None:
            logger.warning("streamed reply in %s failed to start: %r", self._channel.id, starting.exception())

    async def _stop_on_cancel(self, apology: str) -> None:
        """End the message with what is buffered and the apology, rather than leave it open while the bot is down
        (the attempt after the restart then finds it stopped as the answer, and records it).

        Text handed to a call the cancellation cut short is not sent again: Slack may show it already, and a word
        missing before the apology reads better than a word shown twice."""
        assert self._ts is not None
        tail = self._buffer + apology_tail(self._written, apology)
        try:
            await self._owner._end(
                self._channel.id, self._ts, tail, self._answering, self._left_open, self._unfinished_tasks()
            )
        except Exception as exc:  # noqa: BLE001 - the attempt after the restart ends it
            logger.warning("could not end the reply %s as the bot stopped: %r", self._ts, exc)

    async def _complete_on_cancel(self, text: str, apology: str) -> None:
        """Complete the broken stream with its whole `text` as the bot stops, as `_complete` was doing: chat.update
        sets it again, unless what the message lost was being posted after it: that is posted again, unless Slack
        shows it already.

        Its stop may have been cut short before Slack took it: it is sent again first (a stream once stopped
        refuses another stop), as a message chat.update marks as the answer is not ended by the next attempt."""
        ts = self._ts
        assert ts is not None
        try:
            if not self._following:
                await self._stop_again(ts)
                await self._complete(ts, text, apology)
            elif await self._owner._chat.answer_ts(self._channel.id, ts, self._thread_ts) is None:
                await self._follow(ts, text, apology)
        except Exception as exc:  # noqa: BLE001 - the message stays as it shows
            logger.warning("could not complete the reply %s as the bot stopped: %r", ts, exc)

    async def _stop_again(self, ts: str) -> None:
        """Stop broken stream `ts` without more text, in case its stop never reached Slack; refused when it did."""
        try:
            await self._client.chat_stopStream(channel=self._channel.id, ts=ts, chunks=[], metadata=self._metadata)
        except CALL_FAILURES as exc:
            if not isinstance(exc, SlackApiError) or error_code(exc) != NOT_STREAMING:
                logger.warning("streamed reply %s could not be stopped (%s)", ts, describe(exc))

    async def _run(self, reply: ReplyStream, apology: str) -> PublishedReply:
        final: str | None = None
        failed = False
        streaming = True  # False once Slack refused to start the stream
        events = aiter(reply)
        while True:
            try:
                event = await anext(events)
            except StopAsyncIteration:
                break
            except ReplyHeldBack:
                raise
            except ModelUnavailable as exc:
                logger.warning("reply in %s failed midway: %s", self._channel.id, exc)
                failed = True
                break
            except Exception:
                logger.exception("reply in %s failed midway", self._channel.id)
                failed = True
                break
            if isinstance(event, ReplyDone):
                final = event.text
            shown = streaming and await self._hold_ended()
            streaming = shown and await self._show(event)
            if not shown and isinstance(event, TextDelta):
                self._written += event.text  # to be posted whole: what a failure keeps before the apology
        if self._hold is not None:
            self._hold.cancel()
        if not (streaming and await self._hold_ended()):  # posted whole, as the publisher posts where it is refused
            if failed or final is None:
                return await self._post(failed_reply_text(self._written, apology))
            return await self._post(final)
        if failed:
            tail = apology_tail(self._written, apology)
        else:
            tail = "" if self._written.strip() else final or ""
        if self._ts is None:  # nothing shown yet: done while the first words were held, or only blank text
            return await self._post(self._written + tail)
        return await self._stop(tail, "" if failed else apology)

    async def _show(self, event: object) -> bool:
        """Send what `event` adds to the message; False when Slack refused to start the stream."""
        if isinstance(event, TextDelta):
            return await self._text(event.text)
        if isinstance(event, ToolStarted) and event.title and self._owner._settings.show_tasks:
            self._tasks[event.call_id] = event.title
            return await self._send([_task(event.call_id, event.title, "in_progress")])
        if isinstance(event, ToolFinished) and event.call_id in self._tasks:
            status = "complete" if event.ok else "error"
            shown = await self._send([_task(event.call_id, self._tasks[event.call_id], status)])
            del self._tasks[event.call_id]  # once shown finished: a killed bot never leaves it spinning
            await self._tell_tasks()
            return shown
        return True

    async def _tell_tasks(self) -> None:
        """Tell `tasks_running` the tasks shown still running, if they changed: before a task shows (`_call`), and
        once a task is shown finished. A failure to is logged (a killed bot may then leave that task spinning)."""
        if self._tasks_running is None or self._tasks == self._tasks_told:
            return
        try:
            await self._tasks_running(dict(self._tasks))
        except Exception as exc:  # noqa: BLE001 - the reply goes on
            logger.warning("could not keep the tasks the streamed reply in %s shows running: %r", self._channel.id, exc)
            return
        self._tasks_told = dict(self._tasks)

    async def _text(self, text: str) -> bool:
        """Buffer text; start the stream with the first words once held back a while (`FIRST_WORDS_HOLD_SECONDS`),
        append when enough is held back."""
        if not self._buffer:
            self._since = time.monotonic()
        self._buffer += text
        self._written += text
        if self._ts is None:
            if len(self._buffer) >= FLUSH_CHARS:
                return await self._send([])
            if self._hold is None and self._buffer.strip():
                self._hold = asyncio.get_running_loop().call_later(FIRST_WORDS_HOLD_SECONDS, self._end_hold)
            return True
        if len(self._buffer) >= FLUSH_CHARS or time.monotonic() - self._since >= FLUSH_SECONDS:
            return await self._send([])
        return True

    async def _send(self, chunks: list[dict[str, Any]]) -> bool:
        """Send the buffered text and `chunks`: startStream the first time, then appendStream (more calls for text
        longer than one takes).

        False when Slack refused to start a stream; other failures of the first call
        raise, later ones leave the message to be completed by chat.update.
        """
        if self._ts is None:
            if self._hold is not None:
                self._hold.cancel()
            self._buffer = self._buffer.lstrip()
        if not await self._send_pieces():
            return False
        # The text leaves the buffer as it is handed to the call: cut short there, it is not sent again.
        text, self._buffer = self._buffer, ""
        if text:
            chunks = [_markdown(text), *chunks]
        return not chunks or await self._call(chunks)

    async def _send_pieces(self) -> bool:
        """Send the buffered text but its last piece in pieces one call takes (a long text handed over at once);
        False when Slack refused to start the stream."""
        while len(self._buffer) > MARKDOWN_TEXT_LIMIT:
            piece, self._buffer = self._buffer[:MARKDOWN_TEXT_LIMIT], self._buffer[MARKDOWN_TEXT_LIMIT:]
            if not await self._call([_markdown(piece)]):
                return False
        return True

    async def _call(self, chunks: list[dict[str, Any]]) -> bool:
        """startStream with `chunks` the first time, then appendStream; False when Slack refused to start it."""
        if self._ts is None:
            recipients = await self._recipients()
            if self._about_to_show is not None:
                await self._about_to_show()
            await self._tell_tasks()
            try:
                response = await self._client.chat_startStream(
                    channel=self._channel.id, thread_ts=self._thread_ts, chunks=chunks, **recipients
                )
            except CALL_FAILURES as exc:
                if isinstance(exc, SlackApiError) and not transient(exc):  # refused: it did not start
                    if self._owner._refused(error_code(exc) or "", self._thread_ts is None):
                        if self._not_shown is not None:
                            self._not_shown()
                        return False
                    raise closed_or(exc) from None
                # Unanswered, a 5xx or an internal_error (never sent again, see `make_web_client`): Slack may have
                # started it.
                found = await self._started_unheard(_text_of(chunks))
                if found is None:
                    raise  # the next attempt looks for it, and ends it
                response = {"ts": found}
            self._ts = response["ts"]
            self._taken += _text_of(chunks)
            if self._started is not None:
                try:
                    await self._started(self._ts)
                except ReplyWithdrawn:
                    await self._withdraw()
                    raise
        elif not self._broken:
            await self._tell_tasks()
            try:
                await self._client.chat_appendStream(channel=self._channel.id, ts=self._ts, chunks=chunks)
            except CALL_FAILURES as exc:
                # Refused, or failed after it may have taken the text (never sent again, see `make_web_client`):
                # the stream takes no more, and the whole text is set by chat.update as it ends.
                logger.warning("streamed reply %s stopped taking text (%s)", self._ts, describe(exc))
                self._broken = True
                self._unsure = _text_of(chunks)
            else:
                self._taken += _text_of(chunks)
        return True

    async def _started_unheard(self, sent: str) -> str | None:
        """The ts of the stream that a chat.startStream left unanswered started with `sent`, if found: the newest
        of the messages `unheard` offers (they show just `sent`: no other call went to it since it started),
        which the reply then goes on in. None when none is (nor when `sent` is no text to tell it by)."""
        if self._unheard is None or not sent.strip():
            return None
        try:
            found = await self._unheard(sent)
        except Exception as exc:  # noqa: BLE001 - the store or Slack: the next attempt looks again
            logger.warning("could not look for a streamed reply started unanswered: %s", describe(exc))
            return None
        if found:
            logger.warning("streamed reply %s found started, its start unanswered: it goes on there", found[-1])
        return found[-1] if found else None

    async def _recipients(self) -> dict[str, str]:
        """Who the stream answers: required outside DMs, left out in a DM. The team is the asker's own (someone of
        another organisation in a shared channel belongs to theirs), the bot's where Slack does not tell it."""
        if self._channel.kind is ChannelKind.IM or not self._recipient or not self._owner._team_id:
            return {}
        try:
            team = await self._owner._chat.workspace_of(self._recipient)
        except CALL_FAILURES as exc:
            logger.warning("the team of %s could not be read: %s", self._recipient, describe(exc))
            team = None
        return {"recipient_user_id": self._recipient, "recipient_team_id": team or self._owner._team_id}

    async def _stop(self, tail: str, apology: str) -> PublishedReply:
        """Stop the stream with what is still buffered plus `tail`; the stored text is all of it.

        Should the message not take all of it (a broken stream, whose chat.update fails too), what it lost
        follows in the thread, with `apology` (empty: `tail` holds it already). A stop that fails for a passing
        reason however often it is sent raises: the stream is still open, not to be marked as the answer, and the
        next attempt ends it (`finish`) with the text the stop was to add (of a broken stream, all it lost), which
        `left_open` is told.
        """
        assert self._ts is not None
        ts = self._ts
        self._written += tail
        self._buffer += tail
        text = self._written.strip()
        await self._send_pieces()  # the stream has started: nothing is refused
        rest = self._buffer
        # A broken stream lost some text: it is stopped without more, and its whole text set by chat.update.
        chunks: list[dict[str, Any]] = []
        if not self._broken:  # a broken stream takes no more
            chunks = ([_markdown(rest)] if rest else []) + self._unfinished_tasks()
        self._ending = text
        try:  # sent again while it fails for a passing reason: a stream once stopped refuses another stop
            await retrying(
                "chat.stopStream",
                lambda: self._client.chat_stopStream(
                    channel=self._channel.id, ts=ts, chunks=chunks, metadata=self._metadata
                ),
            )
        except CALL_FAILURES as exc:  # perhaps stopped by a try unheard: chat.update sets the whole text either way
            logger.warning("streamed reply %s could not be stopped (%s)", ts, describe(exc))
            if transient(exc):  # still open: the next attempt ends it, with what the stop was to add
                if self._left_open is not None:
                    await _tell_left_open(self._left_open, ts, await self._unsent(ts, text, chunks))
                raise
            self._broken = True
            self._unsure += _text_of(chunks)
        if not self._broken:
            return PublishedReply(ts, text)
        return await self._complete(ts, text, apology)

    def _unfinished_tasks(self) -> list[dict[str, Any]]:
        """The tasks shown still running, marked failed, for the stream's stop: never left spinning."""
        return [_task(call_id, title, "error") for call_id, title in self._tasks.items()]

    async def _unsent(self, ts: str, text: str, chunks: list[dict[str, Any]]) -> str:
        """What stream `ts`, left open by a stop sent with `chunks` that failed, does not show of its whole `text`:
        those chunks' text, or, of a broken stream (which took no more text), all it lost (`_lost`)."""
        return (await self._lost(ts, text))[1] if self._broken else _text_of(chunks)

    async def _complete(self, ts: str, text: str, apology: str) -> PublishedReply:
        """Set the whole `text` of the broken stream `ts` by chat.update; should that fail, what the message lost
        follows it (`_follow`)."""
        try:
            await retrying(
                "chat.update",
                lambda: self._client.chat_update(
                    channel=self._channel.id, ts=ts, **message_text(text), metadata=self._metadata
                ),
            )
            return PublishedReply(ts, text)
        except SlackApiError as exc:
            logger.warning("streamed reply %s could not be completed (%s): the rest follows it", ts, error_code(exc))
        return await self._follow(ts, text, apology)

    async def _follow(self, ts: str, text: str, apology: str) -> PublishedReply:
        """Post what message `ts` did not take of `text`, then `apology`, after it in its thread.

        The post is marked as the answer to message `ts` (which stays the answer to the message answered, as it
        stands), so a post that failed after Slack stored it is found rather than posted again.
        """
        shown, lost = await self._lost(ts, text)
        lost = lost.strip()
        if lost:
            follow = lost + (apology_tail(lost, apology) if apology else "")
            self._following = True
            await self._owner._chat.post(self._channel.id, follow, self._thread_ts, ts)
        return PublishedReply(ts, shown)

    async def _lost(self, ts: str, text: str) -> tuple[str, str]:
        """What message `ts` shows of its whole `text` (`_took_unsure`), and what follows that."""
        shown = (self._taken + self._unsure if await self._took_unsure(ts) else self._taken).strip()
        return shown, text[len(shown) :]

    async def _took_unsure(self, ts: str) -> bool:
        """Whether message `ts` took the text of the call that failed (`_unsure`), as Slack shows it now: what
        follows it then starts after that text, which shows once. Unknown (Slack cannot be read): True, as a piece
        missing before the apology reads better than a piece shown twice."""
        if not self._unsure:
            return False
        try:
            shown = await self._owner._chat.posted_text(self._channel.id, ts, self._thread_ts)
        except (ConversationClosed, *CALL_FAILURES) as exc:
            logger.warning("could not read the streamed reply %s (%s)", ts, describe(exc))
            return True
        return shown is not None and shown.strip() == (self._taken + self._unsure).strip()

    async def _withdraw(self) -> None:
        """Take back a reply withdrawn as it started showing (another replica answers instead, and this message
        was never recorded as the answer, so nobody else ends it): the message is deleted, sent again while that
        fails for a passing reason (a message deleted once is not found again)."""
        ts = self._ts
        if ts is None:
            return
        self._withdrawn = True
        try:
            await retrying("chat.delete", lambda: self._client.chat_delete(channel=self._channel.id, ts=ts))
        except CALL_FAILURES as exc:
            logger.warning("could not take back the withdrawn reply %s: %s", ts, describe(exc))

    async def _post(self, text: str) -> PublishedReply:
        if self._about_to_show is not None:
            await self._about_to_show()
        ts = await self._owner._chat.post(self._channel.id, text.strip(), self._thread_ts, self._answering)
        return PublishedReply(ts, text.strip())


async def _tell_left_open(left_open: LeftOpen | None, ts: str, ending: str) -> None:
    """Tell `left_open` the `ending` stream `ts`, left open, surely lacks; a failure to is logged (the next
    attempt then ends it with the apology)."""
    if left_open is None or not ending:
        return
    try:
        await left_open(ts, ending)
    except Exception as exc:  # noqa: BLE001 - the stream's own failure is what the attempt raises
        logger.warning("could not keep the end the unfinished reply %s lacks: %r", ts, exc)


def _text_of(chunks: list[dict[str, Any]]) -> str:
    """The text `chunks` add to a streamed message."""
    return "".join(chunk["text"] for chunk in chunks if chunk["type"] == "markdown_text")


def _markdown(text: str) -> dict[str, Any]:
    return {"type": "markdown_text", "text": text}


def _task(call_id: str, title: str, status: str) -> dict[str, Any]:
    return {"type": "task_update", "id": call_id, "title": title, "status": status}


async def _whole(reply: ReplyStream, apology: str) -> str:
    """The reply's final text; when it fails, what it wrote before, then `apology` (as a stream stopped midway)."""
    written = ""
    try:
        async for event in reply:
            if isinstance(event, ReplyDone):
                return event.text
            if isinstance(event, TextDelta):
                written += event.text
    except ReplyHeldBack:
        raise
    except ModelUnavailable as exc:
        logger.warning("reply failed: %s", exc)
    except Exception:
        logger.exception("reply failed")
    return failed_reply_text(written, apology)
