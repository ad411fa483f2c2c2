"""Activity: every model call, judgment and post is recorded, without text, and a failed write never stops the work."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Sequence
from contextlib import aclosing
from datetime import datetime, timedelta

import pytest
from sqlalchemy import event
from sqlmodel import Session, select

from myao2.application.activity import Activity
from myao2.application.agents import ModelUnavailable
from myao2.application.reply_stream import TextDelta
from myao2.config import AgentConfig, AgentsConfig
from myao2.domain.activity import CallOutcome, JudgmentOutcome, ModelCall, ReplyKind
from myao2.domain.judgment import Judgment
from myao2.infrastructure.db.activity_store import SqlActivityLog
from myao2.infrastructure.db.memo_store import SqlMemoStore
from myao2.infrastructure.db.tables import JudgmentRow, ModelCallRow, ReplyRow
from myao2.infrastructure.llm.agents import ModelClients, StrandsJudge, StrandsReplyWriter
from myao2.infrastructure.llm.prompts import PromptRenderer
from tests.clocks import ManualClock
from tests.fakes.openai_server import Error, FakeOpenAI, Text
from tests.unit.test_reply_writer import CONTEXT, FAST_RETRY, ORIGIN

API_KEY = "sk-activity-test"


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(api_key=API_KEY) as server:
        yield server


class Recorded:
    """An `ActivityLog` that keeps what it is given."""

    def __init__(self) -> None:
        self.calls: list[ModelCall] = []
        self.judgments: list[tuple[str, JudgmentOutcome, float]] = []
        self.replies: list[tuple[str, ReplyKind]] = []

    def model_call(self, call: ModelCall, at: datetime) -> None:
        self.calls.append(call)

    def judgment(self, channel_id: str, outcome: JudgmentOutcome, confidence: float, at: datetime) -> None:
        self.judgments.append((channel_id, outcome, confidence))

    def reply(
        self, channel_id: str, kind: ReplyKind, at: datetime, calls: Sequence[tuple[ModelCall, datetime]] = ()
    ) -> None:
        self.calls.extend(call for call, _ in calls)
        self.replies.append((channel_id, kind))


def clients_for(fake: FakeOpenAI, activity: Activity, timeout_seconds: float = 5) -> ModelClients:
    config = AgentConfig(
        model_id="fake-model",
        client_args={"base_url": fake.base_url, "api_key": API_KEY},
        max_retries=0,
        timeout_seconds=timeout_seconds,
    )
    return ModelClients(AgentsConfig(response=config, judgment=config), activity)


def writer_for(clients: ModelClients, engine) -> StrandsReplyWriter:  # type: ignore[no-untyped-def]
    return StrandsReplyWriter(clients, PromptRenderer("en"), SqlMemoStore(engine, ManualClock()), "en")


async def write_with(fake: FakeOpenAI, engine, activity: Activity) -> str:  # type: ignore[no-untyped-def]
    clients = clients_for(fake, activity)
    try:
        return await writer_for(clients, engine).write(CONTEXT, ORIGIN)
    finally:
        await clients.close()


def recorded_calls(engine) -> list[tuple[str, int, int, str]]:  # type: ignore[no-untyped-def]
    """The stored model calls: (outcome, input tokens, output tokens, detail)."""
    with Session(engine) as session:
        rows = session.exec(select(ModelCallRow).order_by(ModelCallRow.id)).all()
    return [(r.outcome, r.input_tokens, r.output_tokens, r.detail) for r in rows]


async def test_each_model_call_is_recorded_with_its_tokens_and_outcome(fake, engine) -> None:
    fake.script(Error(429, "slow down", "requests", "rate_limit_exceeded", headers=FAST_RETRY), Text("Ramen!"))
    seen: list[ModelCall] = []
    await write_with(fake, engine, Activity(SqlActivityLog(engine), ManualClock(), watch=seen.append))

    with Session(engine) as session:
        rows = session.exec(select(ModelCallRow).order_by(ModelCallRow.id)).all()
    assert [(r.role, r.model, r.outcome) for r in rows] == [
        ("response", "fake-model", "error"),
        ("response", "fake-model", "ok"),
    ]
    failed, answered = rows
    assert failed.input_tokens == failed.output_tokens == 0 and "429" in failed.detail
    assert answered.input_tokens > 0 and answered.output_tokens > 0 and answered.detail == "end_turn"
    assert answered.latency_ms >= 0
    assert [c.outcome for c in seen] == [CallOutcome.ERROR, CallOutcome.OK]


async def test_a_failing_activity_log_does_not_stop_the_answer(fake, engine, caplog) -> None:
    class Broken(Recorded):
        def model_call(self, call: ModelCall, at: datetime) -> None:
            raise RuntimeError("disk full")

    fake.script(Text("Still here."))
    with caplog.at_level(logging.WARNING):
        assert await write_with(fake, engine, Activity(Broken(), ManualClock())) == "Still here."
    assert "could not record activity: RuntimeError" in caplog.text


CUT_SHORT = ("aborted", 0, 0, "cancelled")
"""A call cut short: no usage is known (the provider reports it only at the end of its answer)."""


async def test_a_reply_cancelled_while_the_model_streams_records_the_call_cut_short(fake, engine) -> None:
    # As the bot stopping (or a stop) cancels the reply's task.
    fake.script(Text("The first words, then a long pause", pieces=2, interval=60))
    activity = Activity(SqlActivityLog(engine), ManualClock())
    clients = clients_for(fake, activity, timeout_seconds=300)
    first = asyncio.Event()

    async def reply() -> None:
        async for _ in writer_for(clients, engine).stream(CONTEXT, ORIGIN):
            first.set()

    task = asyncio.create_task(reply())
    await asyncio.wait_for(first.wait(), 30)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await clients.close()

    assert recorded_calls(engine) == [CUT_SHORT]


async def test_a_reply_stream_given_up_midway_records_the_call_cut_short(fake, engine) -> None:
    # As a reply held back, or cut at the answer's length cap, is closed.
    fake.script(Text("The first words, then a long pause", pieces=2, interval=60))
    clients = clients_for(fake, Activity(SqlActivityLog(engine), ManualClock()), timeout_seconds=300)
    async with aclosing(writer_for(clients, engine).stream(CONTEXT, ORIGIN)) as events:
        async for event in events:
            assert isinstance(event, TextDelta)
            break
    await clients.close()

    assert recorded_calls(engine) == [CUT_SHORT]


async def test_a_judgment_cancelled_while_it_waits_for_the_model_records_the_call_cut_short(fake, engine) -> None:
    fake.script(Text("never sent in time", delay=60))
    clients = clients_for(fake, Activity(SqlActivityLog(engine), ManualClock()), timeout_seconds=300)
    task = asyncio.create_task(StrandsJudge(clients, PromptRenderer("en"), "en").judge(CONTEXT, timedelta(minutes=5)))
    await asyncio.to_thread(fake.wait_for_requests, 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await clients.close()

    assert recorded_calls(engine) == [CUT_SHORT]


async def test_a_call_strands_ends_as_its_invocation_is_cancelled_is_recorded_cut_short(fake, engine) -> None:
    from strands import Agent

    fake.script(Text("The first words, then the rest", pieces=2, interval=0.5))
    clients = clients_for(fake, Activity(SqlActivityLog(engine), ManualClock()))
    await clients.load()
    agent = Agent(model=clients.model("response"), callback_handler=None, hooks=[clients.call_log("response", False)])
    async for event in agent.stream_async("Hello?"):
        if event.get("data"):
            agent.cancel()  # seen by strands at the answer's next chunk
    await clients.close()

    [(outcome, _, _, detail)] = recorded_calls(engine)
    assert (outcome, detail) == ("aborted", "cancelled")


async def test_a_model_failing_mid_stream_is_recorded_once_as_an_error(fake, engine) -> None:
    fake.script(Text("This answer will break off somewhere in the middle", pieces=6, fail_after=2))
    with pytest.raises(ModelUnavailable):
        await write_with(fake, engine, Activity(SqlActivityLog(engine), ManualClock()))

    [(outcome, tokens_in, tokens_out, detail)] = recorded_calls(engine)
    assert (outcome, tokens_in, tokens_out) == ("error", 0, 0) and detail.startswith("APIConnectionError")


async def test_a_model_call_timing_out_mid_stream_is_recorded_once_as_an_error(fake, engine) -> None:
    fake.script(Text("The first words, then a pause past the timeout", pieces=2, interval=30))
    clients = clients_for(fake, Activity(SqlActivityLog(engine), ManualClock()), timeout_seconds=0.5)
    with pytest.raises(ModelUnavailable, match="APITimeoutError"):
        await writer_for(clients, engine).write(CONTEXT, ORIGIN)
    await clients.close()

    [(outcome, tokens_in, tokens_out, detail)] = recorded_calls(engine)
    assert (outcome, tokens_in, tokens_out) == ("error", 0, 0) and detail.startswith("APITimeoutError")


@pytest.mark.parametrize(
    ("judgment", "outcome"),
    [
        (Judgment(True, "asked", 0.9), JudgmentOutcome.RESPOND),
        (Judgment(False, "chatting", 0.7), JudgmentOutcome.QUIET),
        (Judgment.invalid("no structured answer"), JudgmentOutcome.INVALID),
        (None, JudgmentOutcome.FAILED),
    ],
)
async def test_judgments_are_recorded_by_outcome(judgment: Judgment | None, outcome: JudgmentOutcome) -> None:
    log = Recorded()
    await Activity(log, ManualClock()).judgment("C1", judgment)
    assert log.judgments == [("C1", outcome, judgment.confidence if judgment else 0.0)]


async def test_a_judgment_row_keeps_no_reason(engine) -> None:
    await Activity(SqlActivityLog(engine), ManualClock()).judgment("C1", Judgment(True, "Alice's secret", 0.8))
    with Session(engine) as session:
        row = session.exec(select(JudgmentRow)).one()
    assert (row.channel_id, row.outcome, row.confidence) == ("C1", "respond", 0.8)
    assert "secret" not in repr(row)


def a_call(tokens: int) -> ModelCall:
    return ModelCall("response", "fake-model", tokens, tokens, 5, CallOutcome.OK, "end_turn")


async def test_model_calls_made_for_a_reply_are_recorded_in_the_trip_that_records_the_post(monkeypatch) -> None:
    trips: list[object] = []
    to_thread = asyncio.to_thread

    async def counted(func, /, *args, **kwargs):  # type: ignore[no-untyped-def]
        trips.append(func)
        return await to_thread(func, *args, **kwargs)

    monkeypatch.setattr(asyncio, "to_thread", counted)
    log, seen = Recorded(), []
    activity = Activity(log, ManualClock(), watch=seen.append)
    async with activity.held_for_reply():
        await activity.model_call(a_call(1))
        await activity.model_call(a_call(2))
        assert log.calls == [] and trips == [] and len(seen) == 2  # held, though watched at once
        await asyncio.to_thread(activity.reply, "C1", ReplyKind.ANSWER)  # the trip storing the post
    assert log.calls == [a_call(1), a_call(2)] and log.replies == [("C1", ReplyKind.ANSWER)]
    assert len(trips) == 1

    await activity.model_call(a_call(3))  # outside the block: recorded at once, in a trip of its own
    assert log.calls[-1] == a_call(3) and len(trips) == 2


async def test_model_calls_held_for_a_reply_that_never_came_are_recorded_when_it_fails() -> None:
    log = Recorded()
    activity = Activity(log, ManualClock())
    with pytest.raises(RuntimeError):
        async with activity.held_for_reply():
            await activity.model_call(a_call(1))
            raise RuntimeError("Slack refused the post")
    assert log.calls == [a_call(1)] and log.replies == []


async def test_a_post_and_the_model_calls_held_for_it_are_stored_in_one_transaction(engine) -> None:
    commits: list[object] = []
    event.listen(engine, "commit", commits.append)
    activity = Activity(SqlActivityLog(engine), ManualClock())
    async with activity.held_for_reply():
        await activity.model_call(a_call(1))
        await activity.model_call(a_call(2))
        await asyncio.to_thread(activity.reply, "C1", ReplyKind.ANSWER)
    assert len(commits) == 1
    with Session(engine) as session:
        calls = session.exec(select(ModelCallRow).order_by(ModelCallRow.id)).all()
        replies = session.exec(select(ReplyRow)).all()
    assert [(c.input_tokens, c.outcome) for c in calls] == [(1, "ok"), (2, "ok")]
    assert [(r.channel_id, r.kind) for r in replies] == [("C1", "answer")]
