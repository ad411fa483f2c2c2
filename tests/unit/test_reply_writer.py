from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib.util
import json
import logging
import threading
from collections.abc import Iterator
from contextlib import aclosing
from datetime import datetime, timezone
from typing import Any
from zoneinfo import ZoneInfo

import openai
import pytest

from myao2.application.agents import ModelUnavailable
from myao2.application.context import Persona, PromptContext
from myao2.application.reply_stream import ReplyDone, TextDelta, ToolFinished, ToolStarted
from myao2.config import AgentConfig, AgentsConfig, ConfigError
from myao2.domain.conversation import Channel, ChannelKind
from myao2.domain.memo import Origin
from myao2.domain.visibility import Reader
from myao2.infrastructure.clock import SystemClock
from myao2.infrastructure.db.engine import open_database
from myao2.infrastructure.db.memo_store import SqlMemoStore
from myao2.infrastructure.llm.agents import ModelClients, StrandsReplyWriter
from myao2.infrastructure.llm.phrases import tool_title
from myao2.infrastructure.llm.prompts import PromptRenderer
from tests.fakes.openai_server import Error, FakeOpenAI, Text, ToolCall, ToolCalls

API_KEY = "sk-test-7f3a9c1e5b2d4f60a8e1-distinctive"
MEMO_TOOL_NAMES = {"add_memo", "edit_memo", "remove_memo", "list_memo", "get_memo", "list_memo_tags"}
FAST_RETRY = {"retry-after-ms": "1"}
LOGGER = "myao2.infrastructure.llm.agents"

CONTEXT = PromptContext(
    persona=Persona(name="myao", system_prompt="You adore cats.", language="en", timezone=ZoneInfo("UTC")),
    now=datetime(2025, 1, 2, 3, 0, tzinfo=timezone.utc),
    channel=Channel("C1", "general"),
    conversation=("[2025-01-02 02:59] Alice: @myao I love ramen!",),
    important_memos=(),
    recent_memos=(),
)
ORIGIN = Origin(channel_id="C1", user_id="U1", message_ts="1735786740.000100")
RENDERER = PromptRenderer("en")


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(api_key=API_KEY) as server:
        yield server


@pytest.fixture
def store(tmp_path) -> Iterator[SqlMemoStore]:
    engine = open_database(f"sqlite:///{tmp_path}/m.db")
    yield SqlMemoStore(engine, SystemClock())
    engine.dispose()


@pytest.fixture
async def make_writer(fake, store):
    """Builds a writer against the fake; keyword arguments override the response AgentConfig."""
    opened: list[ModelClients] = []

    def make(debug: bool = False, **overrides: Any) -> StrandsReplyWriter:
        settings = {
            "model_id": "fake-model",
            "client_args": {"base_url": fake.base_url, "api_key": API_KEY},
            "max_retries": 2,
            "timeout_seconds": 5,
            **overrides,
        }
        config = AgentConfig(**settings)
        clients = ModelClients(AgentsConfig(response=config))
        opened.append(clients)
        renderer = PromptRenderer("en", system_overrides={"response": config.system_prompt})
        return StrandsReplyWriter(clients, renderer, store, "en", debug)

    yield make
    for clients in opened:
        await clients.close()


def text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content)
    return content or ""


async def test_a_plain_answer_is_returned_stripped(fake, make_writer):
    fake.script(Text("  Ramen is the best!  \n"))

    reply = await make_writer().write(CONTEXT, ORIGIN)

    assert reply == "Ramen is the best!"
    assert len(fake.requests) == 1


async def test_the_request_carries_the_memo_tools_and_the_rendered_prompts(fake, make_writer):
    await make_writer().write(CONTEXT, ORIGIN)

    request = fake.requests[0]
    assert request["model"] == "fake-model"
    assert {tool["function"]["name"] for tool in request["tools"]} == MEMO_TOOL_NAMES
    system, query = request["messages"]
    assert system["role"] == "system"
    assert text_of(system) == RENDERER.render("response", "system", CONTEXT)
    assert "You adore cats." in text_of(system)
    assert query["role"] == "user"
    assert text_of(query) == RENDERER.render("response", "query", CONTEXT)
    assert "Alice: @myao I love ramen!" in text_of(query)


async def test_every_reply_offers_the_same_tools_normalised_once(fake, make_writer, monkeypatch):
    from strands.tools import registry

    normalised: list[str] = []
    normalise = registry.normalize_tool_spec
    monkeypatch.setattr(registry, "normalize_tool_spec", lambda spec: normalised.append(spec["name"]) or normalise(spec))
    writer = make_writer()
    offered = [
        {"name": tool["name"], "description": tool["description"], "parameters": tool["parameters"]}
        for tool in writer.prompt(CONTEXT).tools
    ]
    normalised.clear()

    await writer.write(CONTEXT, ORIGIN)
    await writer.write(CONTEXT, ORIGIN)

    assert len(fake.requests) == 2
    for request in fake.requests:
        assert [tool["function"] for tool in request["tools"]] == offered
    assert sorted(normalised) == sorted(MEMO_TOOL_NAMES)


async def test_a_reply_offers_the_writers_tools_and_no_tool_strands_registers_itself(fake, make_writer, monkeypatch):
    """Were strands to register tools of its own in every agent (as a sandbox may vend some), the reply agent
    would still offer the model exactly the writer's tools."""
    from strands import tool
    from strands.tools.registry import ToolRegistry

    @tool
    def shell(command: str) -> str:
        """Run a shell command."""
        return command

    initialize = ToolRegistry.initialize_tools

    def vending(self, *args, **kwargs):
        initialize(self, *args, **kwargs)
        self.register_tool(shell)

    monkeypatch.setattr(ToolRegistry, "initialize_tools", vending)
    writer = make_writer()
    offered = sorted(tool["name"] for tool in writer.prompt(CONTEXT).tools)

    await writer.write(CONTEXT, ORIGIN)

    assert sorted(tool["function"]["name"] for tool in fake.requests[0]["tools"]) == offered


async def test_every_reply_agent_is_given_the_one_delegation_plugin_made_once(fake, make_writer, monkeypatch):
    """Strands makes its agent-delegation plugin anew for every agent not given one (introspecting the plugin's
    class); it keeps its state per agent, so one made once serves every reply."""
    from strands.agent import _agent_delegation

    made: list[object] = []
    init = _agent_delegation.AgentDelegation.__init__

    def counted(self: object) -> None:
        made.append(self)
        init(self)

    monkeypatch.setattr(_agent_delegation.AgentDelegation, "__init__", counted)
    writer = make_writer()

    for _ in range(3):
        await writer.write(CONTEXT, ORIGIN)

    assert len(fake.requests) == 3
    assert len(made) <= 1


async def test_a_configured_system_prompt_replaces_the_rendered_one(fake, make_writer):
    await make_writer(system_prompt="You are a terse bot.").write(CONTEXT, ORIGIN)

    assert text_of(fake.requests[0]["messages"][0]) == "You are a terse bot."


async def test_add_memo_writes_a_memo_with_the_origin(fake, make_writer, store):
    fake.script(
        ToolCalls([ToolCall("add_memo", {"name": "alice-ramen", "content": "Alice loves ramen", "priority": 3})]),
        Text("Noted, Alice!"),
    )

    reply = await make_writer().write(CONTEXT, ORIGIN)

    assert reply == "Noted, Alice!"
    memo = store.get("alice-ramen", Reader("C1"))
    assert (memo.content, memo.channel_id, memo.user_id) == ("Alice loves ramen", "C1", "U1")
    second = fake.requests[1]["messages"]
    assert second[-1]["role"] == "tool"
    assert "alice-ramen" in text_of(second[-1])


async def test_server_errors_are_retried_by_the_client(fake, make_writer):
    fake.script(Error(500, "boom", headers=FAST_RETRY), Error(502, "bad gateway", headers=FAST_RETRY), Text("Hi!"))

    assert await make_writer(max_retries=2).write(CONTEXT, ORIGIN) == "Hi!"
    assert len(fake.requests) == 3


async def test_persistent_server_errors_give_up_after_the_client_retries(fake, make_writer):
    fake.set_responder(lambda request: Error(500, "boom", headers=FAST_RETRY))
    writer = make_writer(max_retries=2)

    with pytest.raises(ModelUnavailable, match=r"InternalServerError \(HTTP 500\)"):
        await writer.write(CONTEXT, ORIGIN)

    assert len(fake.requests) == 3  # the client's (1 + max_retries), and no further round


async def test_a_429_storm_is_tried_once_more_a_second_later_then_given_up(fake, make_writer):
    fake.set_responder(lambda request: Error(429, "Rate limit reached", "requests", "rate_limit_exceeded"))
    writer = make_writer(max_retries=1)

    with pytest.raises(ModelUnavailable, match=r"ModelThrottledException from RateLimitError \(HTTP 429\)"):
        await writer.write(CONTEXT, ORIGIN)

    # Two strands attempts of (1 + max_retries) requests, the second a second after the first: strands' own throttle
    # retry makes 6 attempts, waiting 4 s, then 8, 16, ...
    assert len(fake.requests) == 2 * 2
    first_attempt_ended, second_attempt = fake.arrivals[1:3]
    assert second_attempt - first_attempt_ended >= 1.0


async def test_a_timeout_is_unavailable(fake, make_writer):
    fake.script(Text("too late", delay=0.5))

    with pytest.raises(ModelUnavailable, match="APITimeoutError"):
        await make_writer(max_retries=0, timeout_seconds=0.1).write(CONTEXT, ORIGIN)


async def test_an_empty_answer_is_unavailable(fake, make_writer):
    fake.script(Text("   "))

    with pytest.raises(ModelUnavailable, match="no answer"):
        await make_writer().write(CONTEXT, ORIGIN)


async def test_the_tool_cycle_cap_stops_a_model_that_calls_tools_forever(fake, make_writer):
    fake.set_responder(lambda request: ToolCalls([ToolCall("list_memo_tags", {})]))

    with pytest.raises(ModelUnavailable, match="no answer"):
        await make_writer(max_tool_cycles=3).write(CONTEXT, ORIGIN)

    assert len(fake.requests) == 3


async def test_at_the_cap_the_last_text_the_model_wrote_is_the_reply(fake, make_writer):
    fake.script(ToolCalls([ToolCall("list_memo", {})], content="Let me check my notes."))
    fake.set_responder(lambda request: ToolCalls([ToolCall("list_memo_tags", {})]))

    reply = await make_writer(max_tool_cycles=2).write(CONTEXT, ORIGIN)

    assert reply == "Let me check my notes."
    assert len(fake.requests) == 2


async def test_one_log_line_per_model_call_with_tokens(fake, make_writer, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    fake.script(ToolCalls([ToolCall("list_memo_tags", {})]), Text("Nothing yet."))

    await make_writer().write(CONTEXT, ORIGIN)

    lines = [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == logging.INFO]
    assert len(lines) == 2
    for line in lines:
        assert line.startswith("model call: role=response model=fake-model input_tokens=")
        fields = dict(part.split("=", 1) for part in line.split(": ", 1)[1].split())
        assert int(fields["input_tokens"]) > 0 and int(fields["output_tokens"]) > 0
        assert int(fields["duration_ms"]) >= 0
    assert "stop=tool_use" in lines[0] and "stop=end_turn" in lines[1]
    assert not [r for r in caplog.records if r.name == LOGGER and r.levelno == logging.DEBUG]


async def test_debug_messages_log_prompts_and_output(fake, make_writer, caplog):
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    fake.script(Text("Purr."))

    await make_writer(debug=True).write(CONTEXT, ORIGIN)

    debug = "\n".join(r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == logging.DEBUG)
    assert "You adore cats." in debug
    assert "I love ramen!" in debug
    assert "Purr." in debug


async def test_the_api_key_never_appears_in_logs_or_errors(fake, make_writer, caplog):
    caplog.set_level(logging.DEBUG)
    fake.script(
        ToolCalls([ToolCall("add_memo", {"name": "k", "content": "c", "priority": 1})]),
        Text("ok"),
        Error(401, f"Incorrect API key provided: {API_KEY}", "invalid_request_error", "invalid_api_key"),
    )
    writer = make_writer(debug=True)

    await writer.write(CONTEXT, ORIGIN)
    with pytest.raises(ModelUnavailable) as failure:
        await writer.write(CONTEXT, ORIGIN)

    assert "AuthenticationError (HTTP 401)" in str(failure.value)
    assert API_KEY not in str(failure.value)
    assert failure.value.__cause__ is None and failure.value.__suppress_context__
    assert caplog.text and API_KEY not in caplog.text
    assert all(h["api_key_matched"] for h in fake.request_headers)


async def test_one_client_serves_every_call_and_close_closes_it(fake, store, monkeypatch):
    built: list[openai.AsyncOpenAI] = []

    class CountingAsyncOpenAI(openai.AsyncOpenAI):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            built.append(self)

    monkeypatch.setattr(openai, "AsyncOpenAI", CountingAsyncOpenAI)
    config = AgentConfig(model_id="fake-model", client_args={"base_url": fake.base_url, "api_key": API_KEY})
    clients = ModelClients(AgentsConfig(response=config))
    writer = StrandsReplyWriter(clients, RENDERER, store, "en")

    for _ in range(5):
        assert await writer.write(CONTEXT, ORIGIN) == "OK"

    response_clients = [client for client in built if str(client.base_url).startswith(fake.base_url)]
    assert len({id(client._client) for client in response_clients}) == 1 and len(fake.requests) == 5
    await clients.close()
    assert all(client.is_closed() for client in response_clients)


def test_litellm_without_the_package_is_a_config_error():
    if importlib.util.find_spec("litellm") is not None:
        pytest.skip("litellm is installed")

    with pytest.raises(ConfigError, match=r"agents\.memory\.provider: litellm is not installed"):
        ModelClients(AgentsConfig(memory=AgentConfig(provider="litellm")))


async def test_write_closes_the_reply_stream_before_it_returns(fake, make_writer, monkeypatch):
    """Not left to the garbage collector, whose aclose runs later in a task of its own."""
    fake.script(Text("Ramen it is."))
    writer = make_writer()
    stream, closed = writer.stream, []

    async def watched(context: PromptContext, origin: Origin) -> Any:
        try:
            async for event in stream(context, origin):
                yield event
        finally:
            closed.append(True)

    monkeypatch.setattr(writer, "stream", watched)

    assert await writer.write(CONTEXT, ORIGIN) == "Ramen it is."
    assert closed == [True]  # no turn of the event loop since write returned


# ---------------------------------------------------------------- the reply as a stream


async def collect(writer: StrandsReplyWriter) -> list[Any]:
    return [event async for event in writer.stream(CONTEXT, ORIGIN)]


async def test_the_stream_yields_text_as_it_comes_then_the_whole_reply(fake, make_writer):
    fake.script(Text("Ramen is the best, and so are you!", pieces=5))

    events = await collect(make_writer())

    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert len(deltas) == 5
    assert "".join(d.text for d in deltas) == "Ramen is the best, and so are you!"
    assert events[-1] == ReplyDone("Ramen is the best, and so are you!")


async def test_the_event_loop_gets_a_turn_between_text_deltas_read_together(fake, make_writer):
    fake.script(Text("Ramen is the best! " * 10, pieces=38, at_once=True))  # 38 pieces of 5 characters
    turns = 0

    async def count_turns() -> None:
        nonlocal turns
        while True:
            await asyncio.sleep(0)
            turns += 1

    counting = asyncio.create_task(count_turns())
    try:
        seen = [turns async for event in make_writer().stream(CONTEXT, ORIGIN) if isinstance(event, TextDelta)]
    finally:
        counting.cancel()

    assert len(seen) == 38
    assert all(a < b for a, b in zip(seen, seen[1:]))  # other tasks (a Socket Mode ack) run between any two


async def test_memo_tool_calls_are_announced_and_completed(fake, make_writer, store):
    fake.script(
        ToolCalls([ToolCall("add_memo", {"name": "alice-ramen", "content": "Alice loves ramen", "priority": 3}, id="c1")],
                  content="Noting that."),
        ToolCalls([ToolCall("list_memo_tags", {}, id="c2")]),
        Text("Noted!"),
    )

    events = await collect(make_writer())

    tool_events = [e for e in events if isinstance(e, (ToolStarted, ToolFinished))]
    assert tool_events == [
        ToolStarted("c1", "add_memo", "Add memo: alice-ramen"),
        ToolFinished("c1", "add_memo", True),
        ToolStarted("c2", "list_memo_tags", None),
        ToolFinished("c2", "list_memo_tags", True),
    ]
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert text == "Noting that.\n\nNoted!"
    assert events[-1] == ReplyDone("Noted!")
    assert store.get("alice-ramen", Reader("C1")).content == "Alice loves ramen"


async def test_a_refused_tool_call_finishes_not_ok(fake, make_writer):
    fake.script(ToolCalls([ToolCall("get_memo", {"memo_name": "nobody"}, id="c1")]), Text("I don't know."))

    events = await collect(make_writer())

    assert ToolStarted("c1", "get_memo", "Read memo: nobody") in events
    assert ToolFinished("c1", "get_memo", False) in events


@pytest.mark.parametrize(
    "arguments",
    [
        '{"memo_name": "lunch\\ud83c"}',  # half an emoji escaped: JSON decodes it to a lone surrogate
        '{"name": "lunch", "content": "ramen \\udf5c", "priority": 3}',
    ],
)
async def test_a_lone_surrogate_in_the_models_tool_arguments_still_gets_the_reply(fake, make_writer, store, arguments):
    # The tool's answer (a refusal quoting the name, or the memo) goes back to the model in the next request,
    # which the SDK encodes as UTF-8: a lone surrogate there used to fail the whole answer.
    tool = "get_memo" if "memo_name" in arguments else "add_memo"
    fake.script(ToolCalls([ToolCall(tool, arguments)]), Text("Done."))

    assert await make_writer(max_retries=0).write(CONTEXT, ORIGIN) == "Done."
    assert len(fake.requests) == 2
    assert [m.name for m in store.list(None).memos] == (["lunch"] if tool == "add_memo" else [])


async def test_a_lone_surrogate_in_the_models_tool_arguments_still_gets_the_reply_through_litellm(fake, make_writer):
    pytest.importorskip("litellm")
    fake.script(ToolCalls([ToolCall("get_memo", '{"memo_name": "lunch\\ud83c"}')]), Text("Done."))
    writer = make_writer(
        provider="litellm", model_id="openai/fake-model", max_retries=0,
        client_args={"api_base": fake.base_url, "api_key": API_KEY},
    )

    assert await writer.write(CONTEXT, ORIGIN) == "Done."
    assert len(fake.requests) == 2
    assert "lunch\ufffd" in json.dumps(fake.requests[1]["messages"], ensure_ascii=False)


async def test_a_model_failing_midway_raises_after_the_text_it_wrote(fake, make_writer):
    fake.script(Text("This answer will break off somewhere in the middle", pieces=6, fail_after=2))

    seen: list[Any] = []
    with pytest.raises(ModelUnavailable):
        async for event in make_writer(max_retries=0).stream(CONTEXT, ORIGIN):
            seen.append(event)

    assert seen and all(isinstance(e, TextDelta) for e in seen)
    assert not any(isinstance(e, ReplyDone) for e in seen)


def forget_earlier_leftovers(caplog) -> None:
    """Finalise what earlier tests in this process left to the garbage collector, then capture warnings afresh.

    (A task an earlier test's event loop left pending logs "Task was destroyed but it is pending!" when collected.)
    """
    gc.collect()
    caplog.clear()
    caplog.set_level(logging.WARNING)


async def test_a_stream_closed_early_ends_the_models_stream_in_its_own_task_without_errors(fake, make_writer, caplog):
    # As a reply held back, or cut at the answer's length cap, is closed: strands' stream attached OpenTelemetry
    # contexts as it began, and detaches them as it ends; ended by the garbage collector in another task (another
    # Context) instead, each detach failed and logged an ERROR traceback.
    fake.script(Text("This answer is closed after its first words", pieces=8, interval=0.05))
    forget_earlier_leftovers(caplog)

    async with aclosing(make_writer().stream(CONTEXT, ORIGIN)) as events:
        async for event in events:
            assert isinstance(event, TextDelta)
            break
    gc.collect()
    await asyncio.sleep(1)  # room for a left-over stream to be finalised (asserting that nothing happens)

    # (aiohttp.server is the fake model's, failing to write to the connection the writer closed)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR and r.name != "aiohttp.server"], caplog.text


async def test_a_stream_closed_at_a_tool_call_runs_no_tool(fake, make_writer, store, caplog):
    memo = {"name": "alice-ramen", "content": "Alice loves ramen", "priority": 3}
    fake.script(ToolCalls([ToolCall("add_memo", memo)]), Text("Noted!"))
    forget_earlier_leftovers(caplog)

    async with aclosing(make_writer().stream(CONTEXT, ORIGIN)) as events:
        async for event in events:
            if isinstance(event, ToolStarted):
                break
    await asyncio.sleep(1)  # room for a tool to run (asserting that none does)

    assert store.list(None).memos == []
    assert len(fake.requests) == 1
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


async def test_a_stream_closed_early_does_not_wait_for_a_stalled_model(fake, make_writer):
    fake.script(Text("Hello there, after a long pause", pieces=2, interval=120))
    stream = make_writer(timeout_seconds=300).stream(CONTEXT, ORIGIN)

    assert isinstance(await anext(stream), TextDelta)
    await asyncio.wait_for(stream.aclose(), 30)  # not the 120 s until the model's next piece


def test_task_titles_name_the_memo_or_the_search_in_the_persona_language():
    assert tool_title("add_memo", {"name": "alice-birthday"}, "ja") == "メモを追加: alice-birthday"
    assert tool_title("get_memo", {"memo_name": "alice-birthday"}, "ja") == "メモを参照: alice-birthday"
    assert tool_title("search_memo", {"query": "アリスの誕生日"}, "ja") == "メモを検索: アリスの誕生日"
    assert tool_title("recall", {"query": "lunch plans"}, "en") == "Search messages: lunch plans"
    assert tool_title("remove_memo", {"memo_name": "x\n  y"}, "en") == "Remove memo: x y"
    assert tool_title("list_memo", {}, "ja") is None
    assert tool_title("add_memo", {"name": 42}, "ja") is None
    assert tool_title("web_fetch", {"url": "https://example.com"}, "en") is None


async def test_without_tracing_a_reply_serialises_nothing_for_strands_spans(fake, make_writer, monkeypatch):
    """Strands fills its spans with the prompt and the answer as JSON (16 times in this reply); with no tracing
    nothing records them, so none is made."""
    from strands.telemetry import tracer

    serialised: list[str] = []
    serialize = tracer.serialize
    monkeypatch.setattr(tracer, "serialize", lambda value: serialised.append(serialize(value)) or serialised[-1])
    fake.script(ToolCalls([ToolCall("list_memo_tags", {})]), Text("Nothing yet."))

    assert await make_writer().write(CONTEXT, ORIGIN) == "Nothing yet."
    assert len(fake.requests) == 2
    assert serialised == []


async def test_a_reply_estimates_each_tool_spec_once_as_strands_would(fake, make_writer, monkeypatch):
    """Strands estimates the input tokens before every model call, the read-only tool specs as JSON each time:
    they are counted once, and the estimate is strands' own."""
    from strands.models import model as strands_model

    writer = make_writer()
    await writer.write(CONTEXT, ORIGIN)
    specs = writer._registry.get_all_tool_specs()
    messages = [{"role": "user", "content": [{"text": "hi"}]}]
    counted = strands_model.Model.count_tokens(writer._clients.model("response"), messages, specs, "system")
    assert await writer._clients.model("response").count_tokens(messages, specs, "system") == await counted
    estimated: list[object] = []
    estimate = strands_model._heuristic_estimate_json
    monkeypatch.setattr(strands_model, "_heuristic_estimate_json", lambda value: estimated.append(value) or estimate(value))

    await writer.write(CONTEXT, ORIGIN)
    await writer.write(CONTEXT, ORIGIN)

    assert len(fake.requests) == 3 and not [spec for spec in estimated if spec in specs]


# ---------------------------------------------------------------- agents reused between answers

DM_CANARY = "dm-canary-7c1f: Alice's surgery is on Tuesday"
DM_ANSWER_CANARY = "answer-canary-52e0: I'll keep your surgery date to myself"
DM_CONTEXT = PromptContext(
    persona=CONTEXT.persona,
    now=CONTEXT.now,
    channel=Channel("DALICE", "alice", ChannelKind.IM),
    conversation=(f"[2025-01-02 02:58] Alice: {DM_CANARY}",),
    important_memos=(),
    recent_memos=(),
)
DM_ORIGIN = Origin(channel_id="DALICE", user_id="U1", message_ts="1735786680.000100")
CANARIES = ("dm-canary-7c1f", "answer-canary-52e0", "tool-canary-93ab")


def assert_a_fresh_channel_request(request: dict[str, Any]) -> None:
    """`request` is a first model call for the channel answer: its system prompt and query alone, nothing of the
    DM answer before it (its prompt, its answer, its tool calls and results)."""
    assert [message["role"] for message in request["messages"]] == ["system", "user"]
    assert text_of(request["messages"][0]) == RENDERER.render("response", "system", CONTEXT)
    assert text_of(request["messages"][1]) == RENDERER.render("response", "query", CONTEXT)
    sent = json.dumps(request, ensure_ascii=False)
    assert not [canary for canary in CANARIES if canary in sent]


async def dm_then_channel(writer: StrandsReplyWriter, fake: FakeOpenAI, answer_in_dm: Any) -> dict[str, Any]:
    """Have `writer` answer in the DM (`answer_in_dm(stream)` reads the stream, however it ends), then in the
    channel; the channel answer's first request."""
    async with aclosing(writer.stream(DM_CONTEXT, DM_ORIGIN)) as stream:
        with contextlib.suppress(ModelUnavailable):
            await answer_in_dm(stream)
    assert any(DM_CANARY in text_of(m) for m in fake.requests[0]["messages"])  # the canary went out with the DM's
    seen = len(fake.requests)
    fake.script(Text("Ramen it is."))
    assert await writer.write(CONTEXT, ORIGIN) == "Ramen it is."
    return fake.requests[seen]


async def read_all(stream: Any) -> None:
    async for _ in stream:
        pass


async def test_consecutive_answers_are_written_by_one_agent_made_once(fake, make_writer, agents_made):
    """Making a strands Agent is a good part of an answer's CPU (its plugins introspected, its registries built):
    an agent that ended its answer cleanly writes the next one."""
    writer = make_writer()

    for _ in range(3):
        await writer.write(CONTEXT, ORIGIN)

    assert len(fake.requests) == 3
    assert len(agents_made) == 1


async def test_nothing_of_a_dm_answer_reaches_the_next_channel_answers_request(fake, make_writer):
    fake.script(Text(DM_ANSWER_CANARY, pieces=3))

    request = await dm_then_channel(make_writer(), fake, read_all)

    assert_a_fresh_channel_request(request)


async def test_nothing_of_a_dm_answer_with_tool_calls_reaches_the_next_channel_answers_request(fake, make_writer):
    memo = {"name": "alice-surgery", "content": "tool-canary-93ab: surgery on Tuesday", "priority": 3}
    fake.script(ToolCalls([ToolCall("add_memo", memo)], content="Noting that."), Text(DM_ANSWER_CANARY))

    request = await dm_then_channel(make_writer(), fake, read_all)

    assert len(fake.requests) == 3
    assert_a_fresh_channel_request(request)


async def test_nothing_of_a_dm_answer_stopped_at_the_tool_cycle_cap_reaches_the_next_channel_answer(fake, make_writer):
    fake.script(
        ToolCalls([ToolCall("get_memo", {"memo_name": "tool-canary-93ab"})], content=DM_ANSWER_CANARY),
        ToolCalls([ToolCall("list_memo_tags", {})]),
    )

    request = await dm_then_channel(make_writer(max_tool_cycles=2), fake, read_all)

    assert_a_fresh_channel_request(request)


async def test_nothing_of_a_dm_answer_the_model_broke_off_reaches_the_next_channel_answer(fake, make_writer):
    fake.script(Text(DM_ANSWER_CANARY + " and more words after it", pieces=6, fail_after=3))

    request = await dm_then_channel(make_writer(max_retries=0), fake, read_all)

    assert_a_fresh_channel_request(request)


async def test_nothing_of_a_dm_answer_closed_midway_reaches_the_next_channel_answer(fake, make_writer):
    fake.script(Text(DM_ANSWER_CANARY + " and more words after it", pieces=8, interval=0.05))

    async def first_words(stream: Any) -> None:
        assert isinstance(await anext(stream), TextDelta)

    request = await dm_then_channel(make_writer(), fake, first_words)

    assert_a_fresh_channel_request(request)


async def test_nothing_of_a_dm_answer_closed_at_a_tool_call_reaches_the_next_channel_answer(fake, make_writer):
    memo = {"name": "alice-surgery", "content": "tool-canary-93ab: surgery on Tuesday", "priority": 3}
    fake.script(ToolCalls([ToolCall("add_memo", memo)], content=DM_ANSWER_CANARY))

    async def up_to_the_tool(stream: Any) -> None:
        async for event in stream:
            if isinstance(event, ToolStarted):
                return

    request = await dm_then_channel(make_writer(), fake, up_to_the_tool)

    assert_a_fresh_channel_request(request)


async def test_nothing_of_an_empty_dm_answer_reaches_the_next_channel_answer(fake, make_writer):
    fake.script(Text("   "))

    request = await dm_then_channel(make_writer(), fake, read_all)

    assert_a_fresh_channel_request(request)


async def test_answers_written_at_once_each_have_an_agent_of_their_own(fake, make_writer):
    held = threading.Event()
    writer = make_writer()
    await writer.write(CONTEXT, ORIGIN)  # an agent is idle now
    fake.script(Text(DM_ANSWER_CANARY, hold=held), Text("Ramen it is."))

    dm = asyncio.ensure_future(writer.write(DM_CONTEXT, DM_ORIGIN))
    await fake.async_wait_for_requests(2)
    assert await writer.write(CONTEXT, ORIGIN) == "Ramen it is."  # while the DM answer is under way
    held.set()

    assert await dm == DM_ANSWER_CANARY
    assert_a_fresh_channel_request(fake.requests[2])
