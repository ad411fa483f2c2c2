"""Structured answers (judgments, memory updates) are asked of agents kept between asks, as replies are: an agent
whose ask ended cleanly is made blank and asks the next; nothing of one conversation's ask reaches another's."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from myao2.application.agents import MemoryPrompt, ModelUnavailable
from myao2.application.context import Persona, PromptContext
from myao2.config import AgentConfig, AgentsConfig
from myao2.domain.conversation import Channel, ChannelKind
from myao2.infrastructure.llm.agents import ModelClients, StrandsJudge, StrandsMemoryWriter
from myao2.infrastructure.llm.phrases import elapsed_phrase
from myao2.infrastructure.llm.prompts import PromptRenderer
from tests.fakes.openai_server import Error, FakeOpenAI, Text, ToolCall, ToolCalls

API_KEY = "sk-test-structured-agents"
RENDERER = PromptRenderer("en")
PERSONA = Persona(name="myao", system_prompt="You adore cats.", language="en", timezone=ZoneInfo("UTC"))
NOW = datetime(2025, 1, 2, 3, 0, tzinfo=timezone.utc)
ELAPSED = timedelta(minutes=5)

DM_CANARY = "dm-canary-7c1f: Alice's surgery is on Tuesday"
ANSWER_CANARY = "answer-canary-52e0"
CANARIES = ("dm-canary-7c1f", ANSWER_CANARY)

CHANNEL_CONTEXT = PromptContext(
    persona=PERSONA,
    now=NOW,
    channel=Channel("C1", "general"),
    conversation=("[2025-01-02 02:59] Alice: I love ramen!",),
    important_memos=(),
    recent_memos=(),
)
DM_CONTEXT = replace(
    CHANNEL_CONTEXT,
    channel=Channel("DALICE", "alice", ChannelKind.IM),
    conversation=(f"[2025-01-02 02:58] Alice: {DM_CANARY}",),
)
CHANNEL_MEMORY = MemoryPrompt(
    persona=PERSONA,
    now=NOW,
    channel=Channel("C1", "general"),
    long_term=(),
    short_term=(),
    earlier=(),
    material=("ts=1.0 [2025-01-02 02:59] Alice: release moved to friday",),
    threads=(),
)
DM_MEMORY = replace(
    CHANNEL_MEMORY,
    channel=Channel("DALICE", "alice", ChannelKind.IM),
    material=(f"ts=1.0 [2025-01-02 02:58] Alice: {DM_CANARY}",),
)


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(api_key=API_KEY) as server:
        yield server


@pytest.fixture
async def clients(fake) -> AsyncIterator[ModelClients]:
    config = AgentConfig(
        model_id="fake", client_args={"base_url": fake.base_url, "api_key": API_KEY}, max_retries=0, timeout_seconds=5
    )
    clients = ModelClients(AgentsConfig(judgment=config, memory=config))
    yield clients
    await clients.close()


def judgment(
    should_respond: bool = True, reason: str = "a question for the bot", hold: threading.Event | None = None
) -> ToolCalls:
    arguments = {"should_respond": should_respond, "reason": reason, "confidence": 0.8}
    return ToolCalls([ToolCall("JudgmentOutput", arguments)], hold=hold)


def memory_update(text: str = "Release is on Friday") -> ToolCalls:
    return ToolCalls([ToolCall("MemoryUpdateOutput", {"long_term": [], "short_term": [{"text": text, "ts": ["1.0"]}]})])


def text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content)
    return content or ""


def assert_a_fresh_request(request: dict[str, Any], system: str, query: str) -> None:
    """`request` is a first model call of its ask: its system prompt and query alone, nothing of an ask before it."""
    assert [message["role"] for message in request["messages"]] == ["system", "user"]
    assert (text_of(request["messages"][0]), text_of(request["messages"][1])) == (system, query)
    sent = json.dumps(request, ensure_ascii=False)
    assert not [canary for canary in CANARIES if canary in sent]


def assert_a_fresh_judgment(request: dict[str, Any]) -> None:
    query = RENDERER.render("judgment", "query", CHANNEL_CONTEXT, elapsed=elapsed_phrase(ELAPSED, "en"))
    assert_a_fresh_request(request, RENDERER.render("judgment", "system", CHANNEL_CONTEXT), query)


async def judge_dm_then_channel(clients: ModelClients, fake: FakeOpenAI, *dm_replies: Any) -> dict[str, Any]:
    """Judge the DM (the model answering `dm_replies`, however the judgment ends), then the channel; the channel
    judgment's first request."""
    judge = StrandsJudge(clients, RENDERER, "en")
    fake.script(*dm_replies)
    await judge.judge(DM_CONTEXT, ELAPSED)
    assert any(DM_CANARY in text_of(m) for m in fake.requests[0]["messages"])  # the canary went out with the DM's
    seen = len(fake.requests)
    fake.script(judgment(False, "nothing to add"))
    assert (await judge.judge(CHANNEL_CONTEXT, ELAPSED)).should_respond is False
    return fake.requests[seen]


async def test_consecutive_judgments_are_asked_of_one_agent_made_once(fake, clients, agents_made):
    judge = StrandsJudge(clients, RENDERER, "en")
    fake.set_responder(lambda request: judgment())

    for _ in range(3):
        assert (await judge.judge(CHANNEL_CONTEXT, ELAPSED)).should_respond

    assert len(fake.requests) == 3 and len(agents_made) == 1


async def test_consecutive_memory_updates_are_asked_of_one_agent_made_once(fake, clients, agents_made):
    writer = StrandsMemoryWriter(clients, RENDERER)
    fake.set_responder(lambda request: memory_update())

    for _ in range(3):
        [update] = await writer.update([CHANNEL_MEMORY])
        assert [draft.text for draft in update.short_term] == ["Release is on Friday"]

    assert len(fake.requests) == 3 and len(agents_made) == 1


async def test_nothing_of_a_dm_judgment_reaches_the_next_channel_judgments_request(fake, clients):
    request = await judge_dm_then_channel(clients, fake, judgment(reason=ANSWER_CANARY))

    assert_a_fresh_judgment(request)


async def test_nothing_of_a_dm_judgment_answered_in_text_reaches_the_next_channel_judgment(fake, clients):
    request = await judge_dm_then_channel(clients, fake, Text(ANSWER_CANARY), Text(ANSWER_CANARY))

    assert_a_fresh_judgment(request)


async def test_nothing_of_a_dm_judgment_with_malformed_arguments_reaches_the_next_channel_judgment(fake, clients):
    malformed = ToolCalls([ToolCall("JudgmentOutput", f'{{"should_respond": true, "reason": "{ANSWER_CANARY}')])

    request = await judge_dm_then_channel(clients, fake, malformed, malformed)

    assert_a_fresh_judgment(request)


async def test_nothing_of_a_failed_dm_judgment_reaches_the_next_channel_judgment(fake, clients):
    judge = StrandsJudge(clients, RENDERER, "en")
    fake.script(Error(500, "boom"))
    with pytest.raises(ModelUnavailable):
        await judge.judge(DM_CONTEXT, ELAPSED)
    fake.script(judgment(False))

    await judge.judge(CHANNEL_CONTEXT, ELAPSED)

    assert_a_fresh_judgment(fake.requests[-1])


async def test_nothing_of_a_dm_judgment_cancelled_midway_reaches_the_next_channel_judgment(fake, clients):
    judge = StrandsJudge(clients, RENDERER, "en")
    fake.script(judgment())
    await judge.judge(CHANNEL_CONTEXT, ELAPSED)  # an agent is idle now
    held = threading.Event()
    fake.script(judgment(reason=ANSWER_CANARY, hold=held))
    task = asyncio.create_task(judge.judge(DM_CONTEXT, ELAPSED))
    await fake.async_wait_for_requests(2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    held.set()
    fake.script(judgment(False))

    await judge.judge(CHANNEL_CONTEXT, ELAPSED)

    assert_a_fresh_judgment(fake.requests[-1])


async def test_judgments_asked_at_once_each_have_an_agent_of_their_own(fake, clients):
    judge = StrandsJudge(clients, RENDERER, "en")
    fake.script(judgment())
    await judge.judge(CHANNEL_CONTEXT, ELAPSED)  # an agent is idle now
    held = threading.Event()
    fake.script(judgment(reason=ANSWER_CANARY, hold=held), judgment(False))

    dm = asyncio.ensure_future(judge.judge(DM_CONTEXT, ELAPSED))
    await fake.async_wait_for_requests(2)
    assert (await judge.judge(CHANNEL_CONTEXT, ELAPSED)).should_respond is False  # while the DM's is under way
    held.set()

    assert (await dm).reason == ANSWER_CANARY
    assert_a_fresh_judgment(fake.requests[2])


async def test_nothing_of_a_dm_memory_update_reaches_the_next_channel_updates_request(fake, clients):
    writer = StrandsMemoryWriter(clients, RENDERER)
    fake.script(memory_update(ANSWER_CANARY), memory_update())
    await writer.update([DM_MEMORY])

    await writer.update([CHANNEL_MEMORY])

    system = RENDERER.render("memory", "system", CHANNEL_MEMORY)
    assert_a_fresh_request(fake.requests[1], system, RENDERER.render("memory", "query", CHANNEL_MEMORY))


async def test_a_judgment_offers_its_answers_tool_normalised_once_and_sends_it_as_preview_shows(
    fake, clients, monkeypatch
):
    """Strands normalised the structured answer's tool spec at every read of the agent's tools (three per ask) and
    deep-copied it before the model call; read once, it is read-only (the openai provider sends it as given)."""
    from strands.tools import registry

    judge = StrandsJudge(clients, RENDERER, "en")
    shown = judge.prompt(CHANNEL_CONTEXT, ELAPSED).tools
    normalised: list[str] = []
    normalise = registry.normalize_tool_spec
    monkeypatch.setattr(
        registry, "normalize_tool_spec", lambda spec: normalised.append(spec["name"]) or normalise(spec)
    )
    fake.set_responder(lambda request: judgment())

    await judge.judge(CHANNEL_CONTEXT, ELAPSED)
    await judge.judge(CHANNEL_CONTEXT, ELAPSED)

    assert normalised == ["JudgmentOutput", "JudgmentOutput"]
    for request in fake.requests:
        assert [tool["function"] for tool in request["tools"]] == [
            {"name": tool["name"], "description": tool["description"], "parameters": tool["parameters"]}
            for tool in shown
        ]
