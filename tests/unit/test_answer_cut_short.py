"""A streamed answer cut short at each point its attempt awaits, then taken up again after a restart: what the
thread shows in the end.

The attempt is cut short at one await point of the path from the model's first words to the answer stored: the
bot stopping (the attempt cancelled there, and the bot restarted), or that step failing (the model, a Slack call
whose connection dropped, the database). A Slack call or a trip to the database is cut before it took effect or
after (Slack took the call, or the store wrote, but the attempt never heard): a call cancelled in flight is one
of the two. Whatever the point, a user sees one answer to the mention, which shows each word written at most once
and, if any is missing, ends with the apology ("a word may be missing, followed by the apology", never "a word
shown twice"); its stream is stopped exactly once, the answer is recorded with the ts Slack gave it, and a later
retry does nothing.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from sqlalchemy.exc import OperationalError

from myao2.application.agents import ModelUnavailable
from myao2.application.reply_stream import ReplyDone, ReplyEvent, TextDelta, ToolFinished, ToolStarted
from myao2.domain.conversation import Message
from myao2.infrastructure.slack import gateway as gateway_module
from myao2.infrastructure.slack import streaming as streaming_module
from myao2.infrastructure.slack.gateway import SlackGateway, make_web_client
from tests.fakes import WAIT_SECONDS
from tests.unit.test_mention import APOLOGY
from tests.unit.test_mention_over_slack import World, answered, started_world
from tests.unit.test_slack_streaming import SLOWLY

FIRST = "Alpha bravo charlie."
SECOND = " " + " ".join(f"word{i:02d}" for i in range(24))  # past FLUSH_CHARS: appended as it comes
LAST = " Yankee zulu."  # held back until the stream is stopped
SCRIPT: tuple[ReplyEvent, ...] = (
    TextDelta(FIRST),  # chat.startStream, as the first words' hold ends (the model writes on `SLOWLY`)
    ToolStarted("c1", "add_memo", "Add memo: alpha"),  # chat.appendStream #1
    TextDelta(SECOND),  # chat.appendStream #2
    ToolFinished("c1", "add_memo", True),  # chat.appendStream #3
    TextDelta(LAST),
    ReplyDone(FIRST + SECOND + LAST),  # chat.stopStream
)
WORDS = (FIRST + SECOND + LAST).split()
SLACK_METHODS = (
    "chat.startStream",
    "chat.appendStream",
    "chat.stopStream",
    "chat.update",
    "chat.postMessage",
    "chat.delete",
    "conversations.replies",
)


@dataclass(frozen=True)
class Point:
    """The `nth` call of `at` in the first attempt: a Slack Web API method, a function the attempt runs in a
    worker thread (`asyncio.to_thread`), or "model" (the nth event of the model's reply, before it is yielded);
    cut short `after` it took effect, or before."""

    at: str
    nth: int = 1
    after: bool = False

    def __str__(self) -> str:
        if self.at == "model":
            return f"model-event{self.nth}"
        return f"{self.at}#{self.nth}-{'after' if self.after else 'before'}"


class Cutter:
    """Cuts the first attempt short at `point`: held there (to be cancelled), or failing there; `failing` points
    fail as they are met, to lead the attempt down another path. Disarmed, every call goes through."""

    def __init__(self, point: Point, *, cancel: bool, failing: tuple[Point, ...] = ()) -> None:
        self.point = point
        self.cancel = cancel
        self.failing = failing
        self.reached = asyncio.Event()
        self.armed = True
        self._seen: Counter[str] = Counter()

    async def call(self, at: str, call: Callable[[], Awaitable[Any]]) -> Any:
        """`call()`, unless the attempt is to be cut short here."""
        if not self.armed:
            return await call()
        self._seen[at] += 1
        point = next((p for p in (self.point, *self.failing) if (p.at, p.nth) == (at, self._seen[at])), None)
        if point is None:
            return await call()
        if point.after:
            await call()
        if point is not self.point:
            raise _failure(at)
        self.reached.set()
        if not self.cancel:
            raise _failure(at)
        await asyncio.Event().wait()  # the attempt is cancelled here


def _failure(at: str) -> Exception:
    """What fails at `at`: the model, a Slack call's connection, or the database."""
    if at == "model":
        return ModelUnavailable("down")
    if at in SLACK_METHODS:
        return aiohttp.ServerDisconnectedError()
    return OperationalError("UPDATE claims", {}, Exception("database is locked"))


class ScriptedWriter:
    """Writes `SCRIPT`, its first reply through the cutter."""

    def __init__(self, cutter: Cutter) -> None:
        self.cutter = cutter

    async def stream(self, context: Any, origin: Any) -> AsyncIterator[ReplyEvent]:
        for nth, event in enumerate(SCRIPT, 1):
            await self.cutter.call("model", _nothing)
            if nth == 2:
                await asyncio.sleep(SLOWLY)  # the first words show meanwhile, the stream started in a task of its own
            yield event


async def _nothing() -> None:
    return None


def cut_slack(world: World, cutter: Cutter) -> None:
    """The Slack Web API calls of `world.client` go through `cutter`."""
    for method in SLACK_METHODS:
        attribute = method.replace(".", "_")
        call = getattr(world.client, attribute)

        def through(*args: Any, _method: str = method, _call: Any = call, **kwargs: Any) -> Awaitable[Any]:
            return cutter.call(_method, lambda: _call(*args, **kwargs))

        setattr(world.client, attribute, through)


def cut_trips(cutter: Cutter, monkeypatch: pytest.MonkeyPatch) -> None:
    """The trips to worker threads go through `cutter`, named by the function they run."""
    to_thread = asyncio.to_thread

    async def through(func: Any, /, *args: Any, **kwargs: Any) -> Any:
        return await cutter.call(func.__name__, lambda: to_thread(func, *args, **kwargs))

    monkeypatch.setattr(asyncio, "to_thread", through)


async def attempt_cut_short(world: World, message: Message, cutter: Cutter) -> None:
    """The first attempt at answering `message`, cut short by `cutter` (cancelled there, as the bot stops, or
    failing there); its calls go through unhindered from then on."""
    attempt = asyncio.ensure_future(world.answer(message))
    reached = asyncio.ensure_future(cutter.reached.wait())
    await asyncio.wait({attempt, reached}, timeout=WAIT_SECONDS, return_when=asyncio.FIRST_COMPLETED)
    reached.cancel()
    assert cutter.reached.is_set(), f"the attempt never came to {cutter.point}"
    if cutter.cancel:
        attempt.cancel()
    [outcome] = await asyncio.gather(attempt, return_exceptions=True)
    assert isinstance(outcome, asyncio.CancelledError) if cutter.cancel else outcome is None, outcome
    cutter.armed = False


async def restart(world: World) -> None:
    """The bot started again: a new Slack client, publisher and use case over the same store and Slack."""
    world.client = make_web_client(world.slack.bot_token, world.slack.base_url)
    world.gateway = SlackGateway(world.client)
    await world.start()


def assert_shows_each_word_once(shown: str) -> None:
    """The words written show in order, each at most once; if any is missing, the apology ends the text."""
    body = shown.removesuffix(APOLOGY)
    words = body.split()
    assert words == [word for word in WORDS if word in words], f"a word repeated or out of place: {shown!r}"
    assert words == WORDS or body != shown, f"words missing without the apology: {shown!r}"


def assert_answered_once(world: World, message: Message) -> None:
    """One answer to `message` in its thread (what it lost may follow it, marked as following it), showing each
    word once; its stream stopped exactly once; recorded as the answer with its ts."""
    replies = [m for m in world.slack.messages("C1") if m.get("thread_ts") == message.ts and m["ts"] != message.ts]
    answering = [(m.get("metadata") or {}).get("event_payload", {}).get("answers") for m in replies]
    [answer] = [m for m, to in zip(replies, answering) if to == message.ts]
    assert all(to == answer["ts"] for m, to in zip(replies, answering) if m is not answer), replies
    assert_shows_each_word_once("\n".join(m["text"] for m in replies))
    stops = Counter(p["ts"] for p in world.slack.posted if p["method"] == "chat.stopStream")
    for stream in world.slack.streams:
        assert not stream["streaming"] and stops[stream["ts"]] == 1, stream
    assert answered(world, message) == [(answer["ts"], True)]


PLAIN: tuple[Point, ...] = ()
BROKEN = (Point("chat.appendStream", 2, after=True),)  # the long text's append lost its answer: taken or not
UNREADABLE = (*BROKEN, *(Point("conversations.replies", nth) for nth in range(1, 5)))  # past the read's retries
STOP_LOST = (Point("chat.stopStream", after=True),)  # Slack stopped the stream, its answer lost
UNHEARD = (Point("chat.startStream", after=True),)  # Slack started the stream, its answer lost
MODEL_DOWN = (Point("model", 1),)  # the model fails before it writes: the apology is posted whole
STOP_FAILS = (Point("chat.stopStream"),)  # the stop fails before Slack took it


def _around(at: str, nth: int = 1) -> list[Point]:
    return [Point(at, nth), Point(at, nth, after=True)]


CUTS: list[tuple[tuple[Point, ...], bool, Point]] = [  # (failing on the way, chat.update refused, the cut)
    *[(PLAIN, False, Point("model", nth)) for nth in range(1, len(SCRIPT) + 1)],
    *[(PLAIN, False, point) for point in _around("begin_showing")],
    *[(PLAIN, False, point) for point in _around("chat.startStream")],
    *[(PLAIN, False, point) for point in _around("start_answer")],
    *[(PLAIN, False, point) for nth in (1, 2, 3) for point in _around("chat.appendStream", nth)],
    *[(PLAIN, False, point) for point in _around("chat.stopStream")],
    *[(PLAIN, False, point) for point in _around("store")],  # the answer stored and settled
    *[(failing, False, Point("model", 3)) for failing in (STOP_FAILS, STOP_LOST)],  # the stop ending it early
    *[(MODEL_DOWN, False, point) for point in _around("chat.postMessage")],
    *[(BROKEN, False, Point("model", nth)) for nth in range(4, len(SCRIPT) + 1)],
    *[(BROKEN, False, point) for point in _around("chat.stopStream")],
    *[(BROKEN, False, point) for point in _around("chat.update")],
    *[(BROKEN, True, point) for point in _around("conversations.replies")],  # what the broken stream shows
    *[(BROKEN, True, point) for point in _around("chat.postMessage")],  # what it lost, after it
    *[(UNREADABLE, True, point) for point in _around("store")],  # what it lost follows it, the message unread
    *[(STOP_LOST, True, point) for point in _around("store")],
    *[(UNHEARD, False, point) for point in _around("note_unheard_start")],
    *[(UNHEARD, False, point) for point in _around("showing_unheard_beside")],
    *[(UNHEARD, False, point) for point in _around("conversations.replies")],  # the bot's unmarked messages
    *[(UNHEARD, False, point) for point in _around("known_answers")],
    *[(UNHEARD, False, point) for point in _around("start_answer")],
]
PATHS = {
    PLAIN: "",
    BROKEN: "broken-",
    UNREADABLE: "broken-unread-",
    STOP_LOST: "stop-lost-",
    UNHEARD: "unheard-",
    MODEL_DOWN: "model-down-",
    STOP_FAILS: "stop-failing-",
}
CASES = [
    pytest.param(
        failing, refused, point, cancel,
        id=f"{PATHS[failing]}{'update-refused-' if refused else ''}{point}-{'cancelled' if cancel else 'failing'}",
    )
    for failing, refused, point in CUTS
    for cancel in (True, False)
]


@pytest.mark.parametrize(("failing", "update_refused", "point", "cancel"), CASES)
async def test_an_answer_cut_short_anywhere_shows_once_and_its_retry_settles_it(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    failing: tuple[Point, ...],
    update_refused: bool,
    point: Point,
    cancel: bool,
) -> None:
    monkeypatch.setattr(gateway_module, "RETRY_DELAYS", (0.01, 0.01, 0.01))  # a failed call is retried at once
    async with started_world(tmp_path) as world:
        message = world.mention()
        cutter = Cutter(point, cancel=cancel, failing=failing)
        world.writer = ScriptedWriter(cutter)  # type: ignore[assignment]
        await world.start()
        cut_slack(world, cutter)
        cut_trips(cutter, monkeypatch)
        if update_refused:
            world.slack.inject_error("chat.update", "cant_update_message")

        await attempt_cut_short(world, message, cutter)

        await restart(world)
        await world.retry_after(10)  # due again: at once if cancelled, 10 s after the claim if it failed
        assert_answered_once(world, message)

        calls = len(world.slack.web_calls)
        assert await world.retry_after(60) == 0
        assert not [method for method, _ in world.slack.web_calls[calls:] if method.startswith("chat.")]


@pytest.mark.parametrize("cancel", [True, False], ids=["cancelled", "failing"])
@pytest.mark.parametrize("point", _around("chat.delete"), ids=str)
async def test_an_answer_withdrawn_as_it_starts_showing_and_cut_short_as_it_is_taken_back_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, point: Point, cancel: bool
) -> None:
    """Another replica took the answer over as this one's stream started (this one stalled past its lease): the
    message is taken back however its deletion is cut short, never left open nor ended as an answer beside the
    other replica's."""
    monkeypatch.setattr(gateway_module, "RETRY_DELAYS", (0.01, 0.01, 0.01))
    async with started_world(tmp_path, replica="r1") as world:
        message = world.mention()
        cutter = Cutter(point, cancel=cancel)
        world.writer = ScriptedWriter(cutter)  # type: ignore[assignment]
        await world.start()
        cut_slack(world, cutter)
        world.store.start_answer = lambda *args, **kwargs: False  # type: ignore[method-assign]  # r2 took it over

        await attempt_cut_short(world, message, cutter)

        assert [m["ts"] for m in world.slack.messages("C1")] == [message.ts]
        assert "chat.stopStream" not in [p["method"] for p in world.slack.posted]


WHOLE: tuple[ReplyEvent, ...] = (TextDelta(FIRST), ReplyDone(FIRST))
"""An answer done while its first words are held back: posted whole, with one chat.postMessage."""
WHOLE_CUTS = [
    *[Point("model", nth) for nth in range(1, len(WHOLE) + 1)],
    *_around("begin_showing"),
    *_around("chat.postMessage"),
    *_around("store"),  # the answer stored and settled
]


class WholeWriter(ScriptedWriter):
    """Writes `WHOLE` at once, its first reply through the cutter."""

    async def stream(self, context: Any, origin: Any) -> AsyncIterator[ReplyEvent]:
        for event in WHOLE:
            await self.cutter.call("model", _nothing)
            yield event


@pytest.mark.parametrize("replica", [None, "r1"], ids=["alone", "replica"])
@pytest.mark.parametrize("cancel", [True, False], ids=["cancelled", "failing"])
@pytest.mark.parametrize("point", WHOLE_CUTS, ids=str)
async def test_an_answer_posted_whole_cut_short_anywhere_shows_once_and_its_retry_settles_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, point: Point, cancel: bool, replica: str | None
) -> None:
    """Cut short before it is posted, after, or as it is recorded, an answer posted whole is one message in the
    thread, marked as the answer (the answer, or where the model failed what it wrote and the apology), recorded
    with its ts; a later retry does nothing."""
    monkeypatch.setattr(gateway_module, "RETRY_DELAYS", (0.01, 0.01, 0.01))
    monkeypatch.setattr(streaming_module, "FIRST_WORDS_HOLD_SECONDS", 60.0)  # done within it, however slow the test
    async with started_world(tmp_path, replica=replica) as world:
        message = world.mention()
        cutter = Cutter(point, cancel=cancel)
        world.writer = WholeWriter(cutter)  # type: ignore[assignment]
        await world.start()
        cut_slack(world, cutter)
        cut_trips(cutter, monkeypatch)

        await attempt_cut_short(world, message, cutter)

        await restart(world)
        await world.retry_after(10)
        assert world.slack.streams == []
        replies = [m for m in world.slack.messages("C1") if m["ts"] != message.ts]
        [answer] = replies
        assert answer["thread_ts"] == message.ts, replies
        assert answer["text"] in (FIRST, f"{FIRST}\n\n{APOLOGY}", APOLOGY), answer  # the model failing, the apology
        assert answer["metadata"]["event_payload"] == {"answers": message.ts}
        assert answered(world, message) == [(answer["ts"], True)]

        calls = len(world.slack.web_calls)
        assert await world.retry_after(60) == 0
        assert not [method for method, _ in world.slack.web_calls[calls:] if method.startswith("chat.")]
