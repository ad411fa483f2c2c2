"""Inbox: the two events Slack sends for one mention store it once, and it is answered once it is stored."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any, cast

import pytest
from sqlalchemy import Engine

from myao2.application import inbox as inbox_module
from myao2.application.inbox import Inbox
from myao2.application.mention import ClaimAhead, Claimed
from myao2.domain.conversation import BotIdentity, Channel, ChannelKind, Message
from myao2.infrastructure.db.conversation_store import SqlConversationStore
from tests.clocks import ManualClock
from tests.stored import stored_message

BOT = BotIdentity(user_id="UBOT", bot_id="BBOT", team_id="T1")
NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


class SlowStore:
    """Counts saves; each takes a while in its worker thread, and `fail` makes the next ones fail."""

    def __init__(self) -> None:
        self.saved: list[Message] = []
        self.fail = 0
        self._lock = threading.Lock()

    def save_messages(self, messages: list[Message]) -> None:
        threading.Event().wait(0.05)
        with self._lock:
            if self.fail:
                self.fail -= 1
                raise OSError("disk full")
            self.saved.extend(messages)

    def save_channel(self, channel: Channel, as_of: datetime | None = None) -> None:
        pass

    def one_connection(self) -> AbstractContextManager[None]:
        return nullcontext()


class Chat:
    async def channel(self, channel_id: str) -> Channel:
        return Channel(id=channel_id, name="general", kind=ChannelKind.PUBLIC)


def mention(text: str = "<@UBOT> hello") -> Message:
    return Message(
        channel_id="C1",
        ts="1700000000.000100",
        user_id="U1",
        user_name="alice",
        text=text,
        mentions=("UBOT",),
    )


class Answers:
    """Records the messages handed on (with how many messages were stored then), and the claims made ahead, in
    the trip that stored them (with how many trips to a worker thread had been made by then)."""

    def __init__(self, store: SlowStore) -> None:
        self.answered: list[tuple[Message, int]] = []
        self.claimed: list[tuple[Message, int, int]] = []
        self.taken_up: list[Message] = []
        self.trips = 0
        self._store = store
        self._reserved: set[str] = set()

    async def __call__(self, message: Message) -> None:
        self.answered.append((message, len(self._store.saved)))

    def claim_ahead(self, message: Message) -> ClaimAhead | None:
        if message.ts in self._reserved:
            return None
        self._reserved.add(message.ts)

        def claim() -> Claimed:
            self.claimed.append((message, len(self._store.saved), self.trips))
            return Claimed(True)

        return ClaimAhead(claim, lambda: self._reserved.discard(message.ts))

    async def take_up(self, message: Message, claimed: Claimed) -> None:
        assert claimed.claimed
        self.taken_up.append(message)


def answers_of(store: SlowStore) -> tuple[Inbox, Answers]:
    answers = Answers(store)
    spawned: list[asyncio.Task[None]] = []

    def spawn(work: Coroutine[Any, Any, None]) -> None:
        spawned.append(asyncio.ensure_future(work))

    box = Inbox(store=cast(Any, store), chat=cast(Any, Chat()), bot=BOT, answer=answers, spawn=spawn, clock=ManualClock(NOW))
    return box, answers


def inbox(store: SlowStore) -> tuple[Inbox, list[tuple[Message, int]]]:
    box, answers = answers_of(store)
    return box, answers.answered


async def test_a_mention_arriving_twice_at_once_is_stored_once_and_answered_after_it_is_stored() -> None:
    store = SlowStore()
    box, answered = inbox(store)
    await asyncio.gather(box.message_posted(mention(), None), box.message_posted(mention(), None))
    await asyncio.sleep(0)
    assert store.saved == [mention()]
    assert [stored for _, stored in answered] == [1, 1]  # each handed on only once the message was stored


async def test_a_message_is_stored_in_the_writers_task_with_no_task_of_its_own() -> None:
    store = SlowStore()
    saving, saved = threading.Event(), threading.Event()
    save = store.save_messages

    def held(messages: list[Message]) -> None:
        saving.set()
        saved.wait(10)
        save(messages)

    store.save_messages = held  # type: ignore[method-assign]
    box, _ = inbox(store)
    before = asyncio.all_tasks()
    posting = asyncio.ensure_future(box.message_posted(mention("what a quiet day"), ChannelKind.PUBLIC))
    await asyncio.to_thread(saving.wait, 10)
    started = asyncio.all_tasks() - before - {posting}
    saved.set()
    await posting
    assert sorted(task.get_coro().__qualname__ for task in started) == ["GroupedSaves._write"]


async def test_a_changed_copy_arriving_meanwhile_is_stored_too() -> None:
    store = SlowStore()
    box, _ = inbox(store)
    await asyncio.gather(box.message_posted(mention(), None), box.message_posted(mention("<@UBOT> hi"), None))
    assert [m.text for m in store.saved] == ["<@UBOT> hello", "<@UBOT> hi"]


async def test_the_other_event_saves_again_when_the_first_save_failed() -> None:
    store = SlowStore()
    store.fail = 1
    box, answered = inbox(store)
    results = await asyncio.gather(
        box.message_posted(mention(), None), box.message_posted(mention(), None), return_exceptions=True
    )
    assert isinstance(results[0], OSError) and results[1] is None
    assert store.saved == [mention()]
    await asyncio.sleep(0)
    assert len(answered) == 1


@pytest.mark.parametrize("hops", range(8))
def test_a_copy_arriving_just_as_the_save_ends_neither_spins_nor_saves_again(hops: int) -> None:
    # A third copy starts on the loop `hops` loop steps after the save's thread returned: one of
    # them lands between the save ending and the loop seeing it through. It must neither find the
    # save still under way and spin (which froze the event loop) nor save the message again.
    outcome: list[object] = []

    def scenario() -> None:
        async def run() -> None:
            loop = asyncio.get_running_loop()
            store = SlowStore()
            box, _ = inbox(store)
            late: list[asyncio.Task[None]] = []
            save = store.save_messages

            def post_after(steps: int) -> None:
                if steps:
                    loop.call_soon(post_after, steps - 1)
                else:
                    late.append(asyncio.ensure_future(box.message_posted(mention(), None)))

            def save_then_post(messages: list[Message]) -> None:
                save(messages)
                loop.call_soon_threadsafe(post_after, hops)

            store.save_messages = save_then_post  # type: ignore[method-assign]
            await box.message_posted(mention(), None)
            while not late:
                await asyncio.sleep(0.01)
            await asyncio.wait_for(late[0], 5)
            outcome.append(len(store.saved))

        asyncio.run(run())

    worker = threading.Thread(target=scenario, daemon=True)
    worker.start()
    worker.join(10)
    assert not worker.is_alive(), "the event loop spun"
    assert outcome == [1]


async def test_a_leaving_recorded_while_the_channel_was_looked_up_stands(engine: Engine) -> None:
    # The lookup read "member" just before the bot was removed; its save comes after the leaving.
    clock = ManualClock(NOW)
    store = SqlConversationStore(engine, clock)
    store.save_channel(Channel("C1", "general", ChannelKind.PUBLIC))

    class RemovedDuringLookup:
        removals = 1

        async def channel(self, channel_id: str) -> Channel:
            clock.advance(1)
            if self.removals:
                self.removals -= 1
                await asyncio.to_thread(store.leave_channel, channel_id)
            return Channel(channel_id, "general", ChannelKind.PUBLIC)

    async def answer(message: Message) -> None:
        pass

    chat: Any = RemovedDuringLookup()
    box = Inbox(store=store, chat=chat, bot=BOT, answer=answer, spawn=asyncio.ensure_future, clock=clock)
    await box.message_posted(mention("what a quiet day"), None)
    channel = store.get_channel("C1")
    assert channel is not None and not channel.is_member

    clock.advance(60)
    await box.channel_changed("C1")  # a lookup made after the leaving (the bot invited back) counts
    channel = store.get_channel("C1")
    assert channel is not None and channel.is_member


async def test_a_channel_turned_private_while_it_was_looked_up_stays_private(engine: Engine) -> None:
    # The lookup read "public" just before the channel was converted; its save comes after the conversion was stored.
    clock = ManualClock(NOW)
    store = SqlConversationStore(engine, clock)
    store.save_channel(Channel("C1", "general", ChannelKind.PUBLIC))

    class ConvertedDuringLookup:
        async def channel(self, channel_id: str) -> Channel:
            read = Channel(channel_id, "general", ChannelKind.PUBLIC)
            clock.advance(1)
            await asyncio.to_thread(store.set_channel_kind, channel_id, ChannelKind.PRIVATE)
            return read

    async def answer(message: Message) -> None:
        pass

    box = Inbox(
        store=store, chat=ConvertedDuringLookup(), bot=BOT, answer=answer, spawn=asyncio.ensure_future, clock=clock  # type: ignore[arg-type]
    )
    await box.channel_changed("C1")
    channel = store.get_channel("C1")
    assert channel is not None and channel.kind is ChannelKind.PRIVATE


def sql_inbox(
    engine: Engine, began: threading.Event | None = None, gate: threading.Event | None = None
) -> tuple[Inbox, SqlConversationStore]:
    """An inbox over a real store whose message saves, in their worker thread, set `began` and wait for `gate`."""
    store = SqlConversationStore(engine, ManualClock(NOW))
    store.save_channel(Channel("C1", "general", ChannelKind.PUBLIC))
    save = store.save_messages

    def held_save(messages: list[Message]) -> None:
        if began is not None and gate is not None:
            began.set()
            gate.wait(10)
        save(messages)

    store.save_messages = held_save  # type: ignore[method-assign]

    async def answer(message: Message) -> None:
        pass

    chat: Any = Chat()
    clock = ManualClock(NOW)
    return Inbox(store=store, chat=chat, bot=BOT, answer=answer, spawn=asyncio.ensure_future, clock=clock), store


async def test_an_edit_arriving_before_its_message_is_the_text_stored(engine: Engine) -> None:
    box, store = sql_inbox(engine)
    original = mention("<@UBOT> lunch at noon?")
    await box.message_edited("C1", original.ts, "lunch at one?")
    await box.message_posted(original, None)
    stored = stored_message(store, "C1", original.ts)
    assert stored is not None and stored.text == "lunch at one?" and stored.mentions == ()


async def test_an_edit_arriving_while_its_message_is_being_stored_is_not_lost(engine: Engine) -> None:
    began, gate = threading.Event(), threading.Event()
    box, store = sql_inbox(engine, began, gate)
    original = mention("<@UBOT> lunch at noon?")
    posting = asyncio.ensure_future(box.message_posted(original, None))
    while not began.is_set():  # the save is under way in its thread, held at the gate
        await asyncio.sleep(0.01)
    editing = asyncio.ensure_future(box.message_edited("C1", original.ts, "<@UBOT> lunch at one?"))
    await asyncio.sleep(0)  # the edit reaches the save under way
    gate.set()
    await asyncio.gather(posting, editing)
    stored = stored_message(store, "C1", original.ts)
    assert stored is not None and stored.text == "<@UBOT> lunch at one?"


class GatedStore(SlowStore):
    """Records each group of messages saved; the first save waits in its thread until `gate` is set; a group
    holding a message whose text is `refused` fails."""

    def __init__(self, refused: str | None = None) -> None:
        super().__init__()
        self.groups: list[list[str]] = []
        self.gate = threading.Event()
        self._refused = refused

    def save_messages(self, messages: list[Message]) -> None:
        self.groups.append([m.text for m in messages])
        self.gate.wait(10)
        if any(m.text == self._refused for m in messages):
            raise ValueError("refused")
        super().save_messages(messages)


def line(n: int) -> Message:
    return Message(channel_id="C1", ts=f"1700000000.{n:06d}", user_id="U1", user_name="alice", text=f"line {n}")


async def burst_behind_a_save(store: GatedStore) -> list[object]:
    """Post line 0, then lines 1-3 while line 0 is being saved; what each post came to."""
    box, _ = inbox(store)
    first = asyncio.ensure_future(box.message_posted(line(0), None))
    while not store.groups:  # line 0 is in its worker thread, held at the gate
        await asyncio.sleep(0.01)
    rest = [asyncio.ensure_future(box.message_posted(line(n), None)) for n in (1, 2, 3)]
    for _ in range(20):  # every post reaches its save: none ends before line 0 is committed
        await asyncio.sleep(0)
    assert not any(post.done() for post in rest) and store.groups == [["line 0"]]
    store.gate.set()
    return await asyncio.gather(first, *rest, return_exceptions=True)


async def test_messages_arriving_while_a_save_is_under_way_are_stored_together_next() -> None:
    store = GatedStore()
    assert await burst_behind_a_save(store) == [None] * 4
    assert store.groups == [["line 0"], ["line 1", "line 2", "line 3"]]  # two transactions for four messages
    assert [m.text for m in store.saved] == ["line 0", "line 1", "line 2", "line 3"]


async def test_a_message_that_fails_its_group_fails_alone() -> None:
    store = GatedStore(refused="line 2")
    outcomes = await burst_behind_a_save(store)
    assert outcomes[:2] == [None, None] and isinstance(outcomes[2], ValueError) and outcomes[3] is None
    assert store.groups[1:] == [["line 1", "line 2", "line 3"], ["line 1"], ["line 2"], ["line 3"]]
    assert [m.text for m in store.saved] == ["line 0", "line 1", "line 3"]


def counting_trips(monkeypatch: pytest.MonkeyPatch, answers: Answers) -> None:
    to_thread = asyncio.to_thread

    async def counted(func, /, *args, **kwargs):  # type: ignore[no-untyped-def]
        answers.trips += 1
        return await to_thread(func, *args, **kwargs)

    monkeypatch.setattr(asyncio, "to_thread", counted)


async def test_a_mention_in_a_known_channel_is_claimed_in_the_trip_that_stores_it(monkeypatch) -> None:
    store = SlowStore()
    box, answers = answers_of(store)
    await box.channel_changed("C1")  # its kind is known from now on
    counting_trips(monkeypatch, answers)
    await asyncio.gather(box.message_posted(mention(), None), box.message_posted(mention(), None))  # the pair
    await asyncio.sleep(0)
    assert answers.trips == 1 and store.saved == [mention()]
    assert answers.claimed == [(mention(), 1, 1)]  # once it was stored, in that trip
    assert answers.taken_up == [mention()]
    assert answers.answered == [(mention(), 1)]  # the pair's other event, handed on as ever: refused as claimed here


async def test_a_claim_ahead_whose_save_failed_is_not_made_and_the_other_event_claims_as_usual() -> None:
    store = SlowStore()
    box, answers = answers_of(store)
    await box.channel_changed("C1")
    store.fail = 1
    results = await asyncio.gather(
        box.message_posted(mention(), None), box.message_posted(mention(), None), return_exceptions=True
    )
    await asyncio.sleep(0)
    assert isinstance(results[0], OSError) and results[1] is None
    assert answers.claimed == [] and answers.taken_up == []
    assert answers.answered == [(mention(), 1)]  # handed on once stored, to claim it in a trip of its own
    assert answers.claim_ahead(mention()) is not None  # the failed save's claim was dropped


async def paced(monkeypatch: pytest.MonkeyPatch, pace_seconds: float) -> tuple[Inbox, GatedStore, Answers]:
    """An inbox pacing writes at `pace_seconds`, where C1's kind is known and line 0 was just written (at once: none
    was written before it)."""
    monkeypatch.setattr(inbox_module, "PACE_SECONDS", pace_seconds)
    store = GatedStore()
    store.gate.set()
    box, answers = answers_of(store)
    await box.channel_changed("C1")
    await box.message_posted(line(0), None)
    return box, store, answers


async def test_plain_messages_soon_after_a_write_wait_for_the_pace_and_a_mention_takes_them_along(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    box, store, answers = await paced(monkeypatch, 60.0)
    waiting = [asyncio.ensure_future(box.message_posted(line(n), None)) for n in (1, 2)]
    await asyncio.sleep(0.3)
    assert store.groups == [["line 0"]] and not any(post.done() for post in waiting)
    await box.message_posted(mention(), None)
    await asyncio.gather(*waiting)
    assert store.groups == [["line 0"], ["line 1", "line 2", "<@UBOT> hello"]]  # one trip, in arrival order
    assert answers.claimed == [(mention(), 4, answers.trips)]


async def test_a_plain_message_waiting_is_written_when_the_pace_has_passed(monkeypatch: pytest.MonkeyPatch) -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    box, store, _ = await paced(monkeypatch, 0.2)
    await asyncio.wait_for(box.message_posted(line(1), None), 30)
    assert store.groups == [["line 0"], ["line 1"]]
    assert loop.time() - started >= 0.2


async def test_a_message_whose_channel_is_not_known_yet_is_written_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    box, store, _ = await paced(monkeypatch, 60.0)
    elsewhere = replace(line(1), channel_id="C2")
    await asyncio.wait_for(box.message_posted(elsewhere, None), 30)  # it may be a DM to the bot
    assert store.groups == [["line 0"], ["line 1"]]


async def test_closing_writes_what_waits_and_every_message_after_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    box, store, _ = await paced(monkeypatch, 60.0)
    waiting = asyncio.ensure_future(box.message_posted(line(1), None))
    await asyncio.sleep(0.1)
    assert not waiting.done()
    await asyncio.wait_for(box.close(), 30)
    assert waiting.done() and store.groups == [["line 0"], ["line 1"]]
    await asyncio.wait_for(box.message_posted(line(2), None), 30)
    assert store.groups[-1] == ["line 2"]
