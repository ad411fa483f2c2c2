from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import pytest

from myao2.application.agents import MemoryPrompt, ModelUnavailable
from myao2.application.context import Persona
from myao2.config import AgentConfig, AgentsConfig
from myao2.domain.conversation import Channel
from myao2.domain.memory import Draft
from myao2.infrastructure.llm.agents import ModelClients, StrandsMemoryWriter
from myao2.infrastructure.llm.prompts import PromptRenderer
from tests.fakes.openai_server import Error, FakeOpenAI, Text, ToolCall, ToolCalls

API_KEY = "sk-test-memory-writer"
PROMPT = MemoryPrompt(
    persona=Persona("myao", "", "en", ZoneInfo("UTC")),
    now=datetime(2025, 1, 2, 3, 0, tzinfo=timezone.utc),
    channel=Channel("C1", "general"),
    long_term=(),
    short_term=(),
    earlier=(),
    material=("ts=1.0 [2025-01-02 02:59] Alice: release moved to friday",),
    threads=(),
)


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(api_key=API_KEY) as server:
        yield server


@pytest.fixture
async def writer(fake) -> AsyncIterator[StrandsMemoryWriter]:
    config = AgentConfig(
        model_id="fake", client_args={"base_url": fake.base_url, "api_key": API_KEY}, max_retries=0, timeout_seconds=5
    )
    clients = ModelClients(AgentsConfig(memory=config))
    yield StrandsMemoryWriter(clients, PromptRenderer("en"))
    await clients.close()


def update_call(**arguments) -> ToolCalls:  # type: ignore[no-untyped-def]
    return ToolCalls([ToolCall("MemoryUpdateOutput", arguments)])


async def test_the_structured_answer_becomes_the_update(fake, writer):
    fake.script(
        update_call(
            long_term=[{"text": "Release is on Friday", "ts": ["1.0"], "supersedes": [3]}],
            short_term=[{"text": "Release talk", "ts": ["1.0"]}],
            threads=[{"thread_ts": "1.0", "bullets": [{"text": "Release thread", "ts": ["1.0"]}]}],
        )
    )

    (update,) = await writer.update([PROMPT])

    assert update.long_term == (Draft("Release is on Friday", ("1.0",), (3,)),)
    assert update.short_term == (Draft("Release talk", ("1.0",)),)
    assert update.threads == (("1.0", (Draft("Release thread", ("1.0",)),)),)
    request = fake.requests[0]
    system = next(m["content"] for m in request["messages"] if m["role"] == "system")
    assert "memory of a Slack workspace" in str(system)
    assert "release moved to friday" in str(request["messages"])


async def test_channels_read_together_get_each_their_update_in_their_order(fake, writer):
    other = replace(PROMPT, channel=Channel("C2", "random"), material=("ts=2.0 [2025-01-02 03:00] Bob: cats",))
    fake.script(
        ToolCalls(
            [
                ToolCall(
                    "ChannelsMemoryOutput",
                    {
                        "channels": [
                            {"channel_id": "C2", "long_term": [{"text": "Bob likes cats", "ts": ["2.0"]}], "short_term": []},
                            {"channel_id": "C1", "long_term": [], "short_term": [{"text": "Release talk", "ts": ["1.0"]}]},
                        ]
                    },
                )
            ]
        )
    )

    general, random = await writer.update([PROMPT, other])

    assert (general.long_term, general.short_term) == ((), (Draft("Release talk", ("1.0",)),))
    assert random.long_term == (Draft("Bob likes cats", ("2.0",)),)
    query = str(fake.requests[0]["messages"])
    assert "channel_id C1" in query and "channel_id C2" in query and "release moved" in query and "cats" in query


async def test_a_channel_left_out_of_a_joint_answer_makes_it_unavailable(fake, writer):
    other = replace(PROMPT, channel=Channel("C2", "random"))
    fake.script(ToolCalls([ToolCall("ChannelsMemoryOutput", {"channels": [{"channel_id": "C1", "long_term": [], "short_term": []}]})]))

    with pytest.raises(ModelUnavailable, match="C2"):
        await writer.update([PROMPT, other])


async def test_a_model_that_never_answers_in_structure_is_unavailable(fake, writer):
    fake.set_responder(lambda request: Text("I would rather chat."))

    with pytest.raises(ModelUnavailable):
        await writer.update([PROMPT])
    assert len(fake.requests) == 2


async def test_malformed_arguments_are_unavailable(fake, writer):
    fake.set_responder(lambda request: ToolCalls([ToolCall("MemoryUpdateOutput", '{"long_term": [{"te')]))

    with pytest.raises(ModelUnavailable):
        await writer.update([PROMPT])


async def test_a_server_error_is_unavailable(fake, writer):
    fake.set_responder(lambda request: Error(500, "boom"))

    with pytest.raises(ModelUnavailable):
        await writer.update([PROMPT])


async def test_a_digest_is_asked_with_the_day_s_messages_and_the_stage_s_length(fake, writer):
    from datetime import date

    from myao2.application.agents import DigestPrompt
    from myao2.domain.memory import Stage

    day = DigestPrompt(
        persona=PROMPT.persona,
        channel=Channel("C1", "general"),
        day=date(2025, 1, 2),
        stage=Stage.CONDENSED,
        messages=("[2025-01-02 02:59] Alice: release moved to friday",),
    )
    fake.script(ToolCalls([ToolCall("DigestOutput", {"lines": ["  Alice: release on   Friday ", ""]})]))

    assert await writer.digest(day) == ("Alice: release on Friday",)
    query = str(fake.requests[0]["messages"])
    assert "Day: 2025-01-02" in query and "release moved to friday" in query and "3 lines at most" in query

    fake.script(Error(500, "boom", "server_error"))
    with pytest.raises(ModelUnavailable):
        await writer.digest(day)


async def test_half_an_emoji_in_the_structured_answer_becomes_text_the_stores_take(fake, writer):
    # JSON may escape half an emoji ("\ud83c"), which decodes to a lone surrogate: no database stores it.
    fake.script(
        ToolCalls(
            [ToolCall("MemoryUpdateOutput", '{"long_term": [{"text": "lunch \\ud83c ramen", "ts": ["1.0"]}], "short_term": []}')]
        )
    )

    (update,) = await writer.update([PROMPT])

    assert update.long_term == (Draft("lunch \ufffd ramen", ("1.0",)),)
