"""Strands agents over the configured models: one model client per role, agents kept between calls (`AgentPool`).

Retries are bounded in two layers. The openai client retries timeouts, 429 and 5xx
`max_retries` times with its own short backoff; strands' throttle retry adds at most
one more round a second later. A reply makes at most `max_tool_cycles` model calls.

openai and strands take about 1 s to import and are not needed to connect to
Slack: they are imported in a thread of their own (`load_model_libraries`), which
`myao2 run` starts before connecting and model calls await.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib.util
import json
import logging
import platform
import ssl
import threading
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing, suppress
from dataclasses import dataclass
from datetime import timedelta
from functools import cache, cached_property
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from myao2.application import tracing
from myao2.application.activity import Activity
from myao2.application.agents import (
    DigestPrompt,
    MemoryBatch,
    MemoryPrompt,
    MemoryUpdate,
    ModelUnavailable,
    PersonUpdate,
    ProfilePrompt,
)
from myao2.application.context import PromptContext
from myao2.application.reply_stream import (
    ReplyDone,
    ReplyEvent,
    ReplyStream,
    TextDelta,
    ToolFinished,
    ToolStarted,
)
from myao2.application.search import Search
from myao2.config import AgentConfig, AgentsConfig, ConfigError
from myao2.domain.activity import CallOutcome, ModelCall
from myao2.domain.conversation import ts_to_datetime
from myao2.domain.judgment import Judgment
from myao2.domain.memo import MAX_CHANGES_PER_REPLY, ChangeBudget, Origin
from myao2.domain.memory import Draft
from myao2.domain.profile import Confirmation, NewFact
from myao2.domain.ports import MemoStore
from myao2.infrastructure.llm.agent_pool import AgentPool
from myao2.infrastructure.llm.chat_client import cleaned
from myao2.infrastructure.llm.deferred_inits import defer_package_inits
from myao2.infrastructure.llm.phrases import elapsed_phrase, tool_title
from myao2.infrastructure.llm.prompts import Kind, PromptRenderer
from myao2.infrastructure.llm.trust import model_trust

if TYPE_CHECKING:
    import openai

    from myao2.infrastructure.llm.tool_registry import FixedToolRegistry
    from myao2.infrastructure.web.toolbox import WebToolbox
    from strands import Agent, ModelRetryStrategy
    from strands.hooks import AfterInvocationEvent, AfterModelCallEvent, BeforeModelCallEvent, HookRegistry
    from strands.models import Model
    from strands.plugins import Plugin
    from strands.types.content import Message, Messages

logger = logging.getLogger(__name__)

Role = Literal["response", "judgment", "memory"]
ROLES: tuple[Role, ...] = ("response", "judgment", "memory")

THROTTLE_ATTEMPTS = 2
"""Model calls strands makes on a throttled (429) call, each already retried by the client."""
THROTTLE_DELAY_SECONDS = 1

_LIMIT_STOPS = ("limit_turns", "limit_total_tokens", "limit_output_tokens")


@dataclass(frozen=True)
class ModelPrompt:
    """What an agent's first model call sends: the system prompt, the query and the tools offered.

    Each tool is given as the model sees it: ``{"name", "description", "parameters"}``,
    the parameters a JSON schema.
    """

    system: str
    query: str
    tools: tuple[dict[str, Any], ...] = ()


def tool_schemas(tools: list[Any]) -> tuple[dict[str, Any], ...]:
    """Strands tools as the model is offered them (see `ModelPrompt`), normalised as an agent's registry does."""
    from strands.tools.registry import ToolRegistry

    registry = ToolRegistry()
    registry.process_tools(tools)
    specs = registry.get_all_tool_specs()
    return tuple(
        {"name": spec["name"], "description": spec["description"], "parameters": spec["inputSchema"]["json"]}
        for spec in specs
    )


class ModelClients:
    """One model, with one client, per agent role, shared by every call of that role.

    Models are built by `load` (or on first use), while the event loop that then owns
    their connections runs. A litellm provider without the litellm package is refused here.
    """

    def __init__(self, agents: AgentsConfig, activity: Activity | None = None) -> None:
        """`activity` records every model call."""
        self._agents = agents
        self._activity = activity
        self._models: dict[Role, Model] = {}
        self._clients: dict[str, openai.AsyncOpenAI] = {}
        """One client per distinct `client_args`: roles that share them share its connections and TLS context."""
        self._building: asyncio.Future[None] | None = None
        for role in ROLES:
            if self.config(role).provider == "litellm" and importlib.util.find_spec("litellm") is None:
                raise ConfigError(f"agents.{role}.provider: litellm is not installed (pip install litellm)")

    async def load(self) -> None:
        """Wait for the model libraries (`load_model_libraries`), then build every role's model in a worker
        thread, once; concurrent callers share it.

        Model calls await this first: the event loop goes on meanwhile, and never
        imports the libraries itself nor builds a model (its client's TLS context
        alone is ~30 ms of CPU). A role whose model cannot be built is left to fail
        at its first call. Once built, it returns at once (waiting on the libraries' future took a turn of the
        loop at every model call).
        """
        if self._building is not None and self._building.done():
            self._building.result()  # what building raised, if anything
            return
        await asyncio.shield(asyncio.wrap_future(load_model_libraries()))
        if self._building is None:
            self._building = asyncio.ensure_future(asyncio.to_thread(self._build_all))
        await asyncio.shield(self._building)

    def config(self, role: Role) -> AgentConfig:
        """The configuration of `role`'s agent."""
        config: AgentConfig = getattr(self._agents, role)
        return config

    def call_log(self, role: Role, debug: bool) -> ModelCallLog:
        """The hook that logs and records `role`'s model calls (with `debug`, their messages too)."""
        return ModelCallLog(role, self.config(role).model_id, debug, self._activity)

    def model(self, role: Role) -> Model:
        """`role`'s model, built on the first call."""
        model = self._models.get(role)
        if model is None:
            model = self._models[role] = self._build(role)
        return model

    def _build_all(self) -> None:
        for role in ROLES:
            if role not in self._models:  # a call on the loop may have built it meanwhile
                with suppress(ConfigError):
                    self._models[role] = self._build(role)

    async def close(self) -> None:
        """Close the clients built so far."""
        clients, self._clients, self._models = self._clients, {}, {}
        for client in clients.values():
            await client.close()

    @cached_property
    def _trust(self) -> ssl.SSLContext | None:
        """The clients' TLS context (`model_trust`), made with the first client; None: the SDK makes its own."""
        return model_trust()

    def _build(self, role: Role) -> Model:
        import openai

        from myao2.infrastructure.llm.chat_client import LeanChatClient
        from myao2.infrastructure.llm.merging_http_client import MergingHttpClient
        from myao2.infrastructure.llm.tool_registry import SpecCountingModel

        config = self.config(role)
        if config.provider == "litellm":
            from myao2.infrastructure.llm.litellm_model import EncodableLiteLLMModel

            client_args = {"num_retries": config.max_retries, "timeout": config.timeout_seconds, **config.client_args}
            return EncodableLiteLLMModel(client_args=client_args, model_id=config.model_id, params=config.params)
        shared = json.dumps(config.client_args, sort_keys=True, default=repr)
        base = self._clients.get(shared)
        if base is None:
            trust = self._trust
            verify = {} if trust is None else {"verify": trust}
            # The SDK's aiohttp transport, its documented alternative to httpx's own (httpcore, h11 and anyio: HTTP/1.1
            # in pure Python): a reply takes 15% fewer instructions. Retries, timeouts and errors stay the SDK's.
            try:
                base = openai.AsyncOpenAI(**config.client_args, http_client=MergingHttpClient(**verify))
            except openai.OpenAIError as exc:  # e.g. no API key: its message holds no secret
                raise ConfigError(f"agents.{role}.client_args: {exc}") from None
            self._clients[shared] = base
        client = base.with_options(max_retries=config.max_retries, timeout=config.timeout_seconds)
        return SpecCountingModel(client=LeanChatClient(client), model_id=config.model_id, params=config.params)


_Output = TypeVar("_Output", bound=BaseModel)


class NoStructuredAnswer(Exception):
    """The model answered, but not with a structured answer of the wanted type; the text says why."""


async def ask_structured(
    clients: ModelClients,
    agents: AgentPool,
    role: Role,
    system: str,
    query: str,
    output_model: type[_Output],
    *,
    max_calls: int,
) -> _Output:
    """The `role` model's answer of type `output_model` to `query`, in at most `max_calls` calls, asked of an agent
    of `agents` (`role`'s), given back once the ask ended cleanly.

    Raises `ModelUnavailable` when the model cannot be reached, `NoStructuredAnswer` when it gives no such answer.
    """
    await clients.load()
    if not output_model.__pydantic_complete__:  # built at its first use (see `ModelOutput`), off the event loop
        await asyncio.to_thread(output_model.model_rebuild)
    from strands.types.exceptions import StructuredOutputException

    agent = agents.take(clients.model(role), system)
    try:
        result = await agent.invoke_async(query, structured_output_model=output_model, limits={"turns": max_calls})
    except StructuredOutputException:
        raise NoStructuredAnswer("no structured answer") from None
    except model_errors() as exc:
        raise ModelUnavailable(f"{role} model failed: {describe_error(exc)}") from None
    except Exception as exc:  # malformed output from the provider, or a bug
        logger.error("%s agent failed unexpectedly: %s", role, type(exc).__name__, exc_info=True)
        raise NoStructuredAnswer(type(exc).__name__) from None
    agents.give_back(agent)
    output = result.structured_output
    if not isinstance(output, output_model):
        raise NoStructuredAnswer(f"stopped with {result.stop_reason}")
    return output


class StrandsReplyWriter:
    """`ReplyWriter` with the response agent, the memo tools, the configured web tools and (given a `search`) the search tools."""

    ROLE: Role = "response"

    def __init__(
        self,
        clients: ModelClients,
        renderer: PromptRenderer,
        store: MemoStore,
        language: str,
        debug_messages: bool = False,
        web: WebToolbox | None = None,
        search: Search | None = None,
        *,
        max_memo_changes: int = MAX_CHANGES_PER_REPLY,
    ) -> None:
        self._clients = clients
        self._config = clients.config(self.ROLE)
        self._renderer = renderer
        self._store = store
        self._language = language
        self._debug = debug_messages
        self._web = web
        self._search = search
        self._max_memo_changes = max_memo_changes
        self._registry: FixedToolRegistry | None = None
        self._agents = AgentPool(self._new_agent)

    async def write(self, context: PromptContext, origin: Origin) -> str:
        """The reply to the conversation in `context`; memo tools act within `origin`.

        Raises ModelUnavailable when the model fails after the bounded retries or
        gives no answer.
        """
        async with aclosing(self.stream(context, origin)) as events:  # type: ignore[type-var]
            async for event in events:
                if isinstance(event, ReplyDone):
                    return event.text
        raise AssertionError("a reply stream ends with ReplyDone")  # pragma: no cover

    async def stream(self, context: PromptContext, origin: Origin) -> ReplyStream:
        """The reply as the model writes it: text deltas, memo tool calls, then `ReplyDone`.

        The text of a model turn that follows tool calls is set apart by a blank line.
        Raises ModelUnavailable when the model fails (also midway) or gives no answer.
        """
        await self._clients.load()
        from myao2.infrastructure.llm import web_tools
        from myao2.infrastructure.llm.memo_tools import SCOPE_KEY, MemoToolScope
        from myao2.infrastructure.llm.search_tools import SEARCH_KEY, SearchToolScope

        system, query = self._render(context)
        if self._debug:
            logger.debug("%s system prompt:\n%s", self.ROLE, system)
        agent = self._agents.take(self._clients.model(self.ROLE), system)
        state: dict[str, Any] = {
            SCOPE_KEY: MemoToolScope(self._store, origin, self._language, ChangeBudget(self._max_memo_changes)),
            web_tools.SCOPE_KEY: self._web,
        }
        if self._search is not None:
            state[SEARCH_KEY] = SearchToolScope(
                self._search,
                reader=origin.channel_id,
                cutoff=ts_to_datetime(origin.message_ts) if origin.message_ts else None,
                language=self._language,
                timezone=context.persona.timezone,
            )
        tools: dict[str, str] = {}  # tool use id -> tool name
        wrote = after_tools = False
        result = None
        events = agent.stream_async(query, invocation_state=state, limits={"turns": self._config.max_tool_cycles})
        event: dict[str, Any] = {}
        read_to_end = False
        try:
            async for event in events:
                if event.get("data"):
                    yield TextDelta(("\n\n" if wrote and after_tools else "") + event["data"])
                    wrote, after_tools = True, False
                    # The SDK and strands hand over every chunk already read without giving the event loop
                    # a turn: after a stall, a burst of them (~0.5 ms of CPU each, and the consumer's work
                    # on top) would hold up everything else, Socket Mode acks included, until it was through.
                    await asyncio.sleep(0)
                elif "message" in event:
                    for tool_event in self._tool_events(event["message"], tools):
                        after_tools = True
                        yield tool_event
                elif "result" in event:
                    result = event["result"]
            read_to_end = True
        except model_errors() as exc:
            raise ModelUnavailable(f"{self.ROLE} model failed: {describe_error(exc)}") from None
        except Exception as exc:  # malformed output from the provider, or a bug
            logger.error("%s agent failed unexpectedly: %s", self.ROLE, type(exc).__name__, exc_info=True)
            raise ModelUnavailable(f"{self.ROLE} agent failed: {type(exc).__name__}") from None
        finally:
            if not read_to_end:
                await _end(agent, events, event)
        if result is None:
            raise ModelUnavailable(f"{self.ROLE} agent ended without a result")
        if result.stop_reason in _LIMIT_STOPS:
            logger.warning("%s agent stopped at its cap of %d model calls", self.ROLE, self._config.max_tool_cycles)
            reply = last_assistant_text(agent.messages)
        else:
            reply = message_text(result.message)
        self._agents.give_back(agent)
        if not reply:
            raise ModelUnavailable(f"{self.ROLE} model gave no answer (stop reason {result.stop_reason})")
        yield ReplyDone(reply)

    def prompt(self, context: PromptContext) -> ModelPrompt:
        """What a reply to the conversation in `context` starts with (imports the tools on first use)."""
        system, query = self._render(context)
        return ModelPrompt(system, query, tool_schemas(self._tools()))

    def _render(self, context: PromptContext) -> tuple[str, str]:
        return self._renderer.render(self.ROLE, "system", context), self._renderer.render(self.ROLE, "query", context)

    def _new_agent(self) -> Agent:
        """A reply agent (`new_agent`) with the writer's tools, registered once for every reply
        (`FixedToolRegistry`), and them alone: any tool strands registered in it unasked (none today) is not
        offered to the model."""
        from myao2.infrastructure.llm.tool_registry import FixedToolRegistry

        if self._registry is None:
            self._registry = FixedToolRegistry(self._tools(), read_only_specs=self._config.provider == "openai")
        agent = new_agent(self._clients, self.ROLE, "", self._debug)
        agent.tool_registry = self._registry
        return agent

    def _tools(self) -> list[Any]:
        """The memo tools, the configured web tools and, with a search, the search tools."""
        from myao2.infrastructure.llm import web_tools
        from myao2.infrastructure.llm.memo_tools import MEMO_TOOLS
        from myao2.infrastructure.llm.search_tools import SEARCH_TOOLS

        return [*MEMO_TOOLS, *web_tools.offered_tools(self._web), *(SEARCH_TOOLS if self._search is not None else [])]

    def _tool_events(self, message: Message, tools: dict[str, str]) -> list[ReplyEvent]:
        """Tool calls an assistant message makes, or tool results a user message carries."""
        events: list[ReplyEvent] = []
        for block in message.get("content", []):
            if "toolUse" in block:
                use = block["toolUse"]
                tools[use["toolUseId"]] = use["name"]
                args = use.get("input") if isinstance(use.get("input"), dict) else {}
                title = tool_title(use["name"], args, self._language)
                events.append(ToolStarted(use["toolUseId"], use["name"], title))
            elif "toolResult" in block:
                done = block["toolResult"]
                tool = tools.get(done["toolUseId"], "")
                events.append(ToolFinished(done["toolUseId"], tool, done.get("status") == "success"))
        return events


async def _end(agent: Agent, events: AsyncIterator[Any], last: dict[str, Any]) -> None:
    """End `events`, the stream of `agent`'s invocation, in this task, should the reply leave it early (held back,
    cut at the answer's length cap, the bot stopping) at event `last`; a stream that ended already (failing) ends
    at once.

    Closed at an event (`aclose`), strands would leave the streams it reads from (its loop, the model's) to the
    garbage collector, whose `aclose` runs in a task of its own: that task's Context cannot detach the
    OpenTelemetry contexts they attached (each logging an ERROR traceback), and those streams, closed in tasks of
    their own at once, collide ("aclose(): asynchronous generator is already running"). Instead the stream is read
    on, each step cut short by a timeout at its first wait (for the model, mostly), which ends every stream on the
    way by an exception, here. After a whole message, strands runs the tools it asks for, or calls the model
    again: the invocation is cancelled first, so that neither happens. (Not before: cancelled, strands leaves the
    model's answer unfinished at its next part as the garbage collector's to close.)
    """
    while True:
        if "message" in last:
            agent.cancel()
        try:
            async with asyncio.timeout(0):
                last = await anext(events)
        except Exception:  # noqa: BLE001 - the end (StopAsyncIteration), the wait cut short, or a failure: over
            return


class ModelOutput(BaseModel):
    """A model's answer in structure, its strings made text the stores take (`clean_text`): JSON may escape half
    an emoji ("\\ud83c"), which decodes to a lone surrogate that neither a database nor pydantic's JSON takes.

    Each is built at its first use (`ask_structured` builds it in a worker thread), not when the bot imports this
    module to start: answering a mention uses none of them."""

    model_config = ConfigDict(defer_build=True)

    @model_validator(mode="before")
    @classmethod
    def _clean(cls, data: Any) -> Any:
        return cleaned(data)


class JudgmentOutput(ModelOutput):
    """Your decision about joining the conversation."""

    should_respond: bool = Field(description="true to post a reply now, false to stay quiet")
    reason: str = Field(description="one short sentence on why")
    confidence: float = Field(ge=0, le=1, description="how sure you are, from 0 to 1")


class StrandsJudge:
    """`Judge` with the judgment agent: no tools, structured output, two model calls at most."""

    ROLE: Role = "judgment"
    MAX_CALLS = 2

    def __init__(self, clients: ModelClients, renderer: PromptRenderer, language: str, debug_messages: bool = False) -> None:
        self._clients = clients
        self._renderer = renderer
        self._language = language
        self._agents = AgentPool(lambda: structured_agent(clients, self.ROLE, debug_messages))

    async def judge(self, context: PromptContext, elapsed: timedelta) -> Judgment:
        system, query = self._render(context, elapsed)
        try:
            output = await ask_structured(
                self._clients, self._agents, self.ROLE, system, query, JudgmentOutput, max_calls=self.MAX_CALLS
            )
        except NoStructuredAnswer as exc:
            return Judgment.invalid(str(exc))
        return Judgment(output.should_respond, output.reason, output.confidence)

    def prompt(self, context: PromptContext, elapsed: timedelta) -> ModelPrompt:
        """What a judgment of the conversation in `context`, quiet for `elapsed`, starts with."""
        system, query = self._render(context, elapsed)
        return ModelPrompt(system, query, structured_output_schemas(JudgmentOutput))

    def _render(self, context: PromptContext, elapsed: timedelta) -> tuple[str, str]:
        query = self._renderer.render(self.ROLE, "query", context, elapsed=elapsed_phrase(elapsed, self._language))
        return self._renderer.render(self.ROLE, "system", context), query


class BulletOutput(ModelOutput):
    text: str = Field(description="one short, self-contained sentence")
    ts: list[str] = Field(description="the ts of the messages (or source lines) it comes from")


class LongTermBulletOutput(BulletOutput):
    supersedes: list[int] = Field(
        default_factory=list, description="ids of remembered bullets this one contradicts or replaces"
    )


class ThreadMemoryOutput(ModelOutput):
    thread_ts: str = Field(description="the thread's ts, as given")
    bullets: list[BulletOutput]


class MemoryUpdateOutput(ModelOutput):
    """The update of the memories: new long-term bullets, the short-term memory and thread memories."""

    long_term: list[LongTermBulletOutput] = Field(description="only what is new and worth keeping; may be empty")
    short_term: list[BulletOutput] = Field(description="what is going on in the window, made afresh")
    threads: list[ThreadMemoryOutput] = Field(default_factory=list, description="one per thread asked for")


class DigestOutput(ModelOutput):
    """The digest of one conversation's day."""

    lines: list[str] = Field(description="short lines, each one sentence naming who it is about")


class ChannelMemoryOutput(MemoryUpdateOutput):
    channel_id: str = Field(description="the channel's channel_id, as given")


class ChannelsMemoryOutput(ModelOutput):
    """The update of each channel's memories: new long-term bullets, the short-term memory and thread memories."""

    channels: list[ChannelMemoryOutput] = Field(description="one per channel given")


class NewFactOutput(ModelOutput):
    text: str = Field(description="one short sentence about the person, e.g. 'prefers short answers'")
    confidence: float = Field(ge=0, le=1, description="how sure the messages make you, from 0 to 1")
    ts: list[str] = Field(description="the ts of the messages it comes from")
    supersedes: list[int] = Field(default_factory=list, description="ids of known facts this one contradicts")


class ConfirmationOutput(ModelOutput):
    id: int = Field(description="the id of the known fact the messages confirm")
    confidence: float = Field(ge=0, le=1, description="how sure you are of the fact now, from 0 to 1")
    ts: list[str] = Field(description="the ts of the messages that confirm it")


class PersonUpdateOutput(ModelOutput):
    user_id: str = Field(description="the person's user id, as given")
    new_facts: list[NewFactOutput] = Field(default_factory=list, description="only what is new; may be empty")
    confirmed: list[ConfirmationOutput] = Field(default_factory=list, description="known facts said again")


class ProfileUpdateOutput(ModelOutput):
    """What the new messages teach about each person: new facts and confirmations of known ones."""

    people: list[PersonUpdateOutput] = Field(description="one per person given")


class StrandsMemoryWriter:
    """`MemoryWriter`, `DigestWriter` and `ProfileWriter` with the memory agent: no tools, structured output,
    two model calls at most."""

    ROLE: Role = "memory"
    MAX_CALLS = 2

    def __init__(self, clients: ModelClients, renderer: PromptRenderer, debug_messages: bool = False) -> None:
        self._clients = clients
        self._renderer = renderer
        self._agents = AgentPool(lambda: structured_agent(clients, self.ROLE, debug_messages))

    async def update(self, prompts: Sequence[MemoryPrompt]) -> tuple[MemoryUpdate, ...]:
        output = await self._ask(*_memory_call(prompts))
        if len(prompts) == 1:
            return (_memory_update(output),)
        updates = {channel.channel_id: _memory_update(channel) for channel in output.channels}
        missing = [p.channel.id for p in prompts if p.channel is not None and p.channel.id not in updates]
        if missing:
            raise ModelUnavailable(f"{self.ROLE} model left out channel(s) {', '.join(missing)}")
        return tuple(updates[p.channel.id] for p in prompts if p.channel is not None)

    async def digest(self, prompt: DigestPrompt) -> tuple[str, ...]:
        output = await self._ask("digest", prompt, DigestOutput)
        return tuple(line for line in (" ".join(line.split()) for line in output.lines) if line)

    async def learn(self, prompt: ProfilePrompt) -> tuple[PersonUpdate, ...]:
        output = await self._ask("profile", prompt, ProfileUpdateOutput)
        return tuple(
            PersonUpdate(
                person.user_id,
                new=tuple(NewFact(f.text, f.confidence, tuple(f.ts), tuple(f.supersedes)) for f in person.new_facts),
                confirmed=tuple(Confirmation(c.id, c.confidence, tuple(c.ts)) for c in person.confirmed),
            )
            for person in output.people
        )

    async def _ask(
        self,
        kind: Kind,
        prompt: MemoryPrompt | MemoryBatch | DigestPrompt | ProfilePrompt,
        output_model: type[_Output],
    ) -> _Output:
        """The model's structured answer to the `kind` templates rendered with `prompt`."""
        system, query = self._render(kind, prompt)
        try:
            return await ask_structured(
                self._clients, self._agents, self.ROLE, system, query, output_model, max_calls=self.MAX_CALLS
            )
        except NoStructuredAnswer as exc:
            raise ModelUnavailable(f"{self.ROLE} model gave no usable answer: {exc}") from None

    def prompt(self, prompts: Sequence[MemoryPrompt]) -> ModelPrompt:
        """What the memory update of `prompts` (one call) starts with."""
        kind, material, output = _memory_call(prompts)
        system, query = self._render(kind, material)
        return ModelPrompt(system, query, structured_output_schemas(output))

    def _render(
        self, kind: Kind, prompt: MemoryPrompt | MemoryBatch | DigestPrompt | ProfilePrompt
    ) -> tuple[str, str]:
        return self._renderer.render(kind, "system", prompt), self._renderer.render(kind, "query", prompt)


def _memory_call(prompts: Sequence[MemoryPrompt]) -> tuple[Kind, MemoryPrompt | MemoryBatch, type[Any]]:
    """How one memory call reads `prompts`: one channel alone, or several together, and the answer it wants."""
    if len(prompts) == 1:
        return "memory", prompts[0], MemoryUpdateOutput
    return "memories", MemoryBatch(tuple(prompts)), ChannelsMemoryOutput


def structured_output_schemas(output: type[BaseModel]) -> tuple[dict[str, Any], ...]:
    """The tool strands offers the model for a structured answer of type `output`."""
    from strands.tools.structured_output.structured_output_tool import StructuredOutputTool

    return tool_schemas([StructuredOutputTool(output)])


def _memory_update(output: MemoryUpdateOutput) -> MemoryUpdate:
    return MemoryUpdate(
        long_term=tuple(Draft(b.text, tuple(b.ts), tuple(b.supersedes)) for b in output.long_term),
        short_term=_drafts(output.short_term),
        threads=tuple((t.thread_ts, _drafts(t.bullets)) for t in output.threads),
    )


def _drafts(bullets: list[BulletOutput]) -> tuple[Draft, ...]:
    return tuple(Draft(b.text, tuple(b.ts)) for b in bullets)


class ModelCallLog:
    """Logs one line per model call (tokens, duration) and records it in `activity`, once, however it ends:
    answered, failed, or cut short (its invocation cancelled or its stream given up before the model's answer
    ended); with `debug`, logs its input and output too.

    A strands `HookProvider` (a runtime-checkable protocol: no base class, so no import). A call cut short gets
    no `AfterModelCallEvent` (strands only sends one for an answer or an `Exception`), but its invocation ends
    with an `AfterInvocationEvent`, which strands sends however the invocation ends.
    """

    def __init__(self, role: str, model_id: str, debug: bool, activity: Activity | None = None) -> None:
        self._role = role
        self._model_id = model_id
        self._debug = debug
        self._activity = activity
        self._started: float | None = None
        """When the call under way started; None between calls."""

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        """Register the before and after model call callbacks, and the end of the invocation."""
        from strands.hooks import AfterInvocationEvent, AfterModelCallEvent, BeforeModelCallEvent

        registry.add_callback(BeforeModelCallEvent, self._before)
        registry.add_callback(AfterModelCallEvent, self._after)
        registry.add_callback(AfterInvocationEvent, self._ended)

    def _before(self, event: BeforeModelCallEvent) -> None:
        self._started = time.perf_counter()
        if self._debug and event.agent.messages:
            logger.debug("%s model input: %s", self._role, _dump(event.agent.messages[-1]))

    async def _after(self, event: AfterModelCallEvent) -> None:
        duration_ms = self._finish()
        if duration_ms is None:  # no call under way (strands sends one after each BeforeModelCallEvent)
            return
        if event.stop_response is None:
            error = describe_error(event.exception) if event.exception else "no response"
            logger.warning(
                "model call failed: role=%s model=%s error=%s duration_ms=%d",
                self._role,
                self._model_id,
                error,
                duration_ms,
            )
            call = ModelCall(self._role, self._model_id, 0, 0, duration_ms, CallOutcome.ERROR, error)
        else:
            message = event.stop_response.message
            usage = message.get("metadata", {}).get("usage", {})
            tokens_in, tokens_out = usage.get("inputTokens", 0), usage.get("outputTokens", 0)
            stop = event.stop_response.stop_reason
            logger.info(
                "model call: role=%s model=%s input_tokens=%d output_tokens=%d duration_ms=%d stop=%s",
                self._role,
                self._model_id,
                tokens_in,
                tokens_out,
                duration_ms,
                stop,
            )
            if self._debug:
                logger.debug("%s model output: %s", self._role, _dump(message))
            # "cancelled": strands saw the invocation cancelled (`Agent.cancel`) as the answer came, and ended it
            outcome = CallOutcome.ABORTED if stop == "cancelled" else CallOutcome.OK
            call = ModelCall(self._role, self._model_id, tokens_in, tokens_out, duration_ms, outcome, stop)
        await self._record(call)

    async def _ended(self, event: AfterInvocationEvent) -> None:
        """The invocation ended: a call still under way was cut short."""
        duration_ms = self._finish()
        if duration_ms is None:
            return
        logger.info(
            "model call cut short: role=%s model=%s duration_ms=%d", self._role, self._model_id, duration_ms
        )
        await self._record(ModelCall(self._role, self._model_id, 0, 0, duration_ms, CallOutcome.ABORTED, "cancelled"))

    def _finish(self) -> int | None:
        """The duration in ms of the call under way, now over; None: no call was under way."""
        started, self._started = self._started, None
        return None if started is None else round((time.perf_counter() - started) * 1000)

    async def _record(self, call: ModelCall) -> None:
        if self._activity is not None:
            await self._activity.model_call(call)


_libraries: concurrent.futures.Future[None] | None = None
_libraries_lock = threading.Lock()


def load_model_libraries() -> concurrent.futures.Future[None]:
    """Start `import_model_libraries` in a thread of its own, once per process; its future.

    `myao2 run` starts it as it starts running, before the database opens and Slack is reached, so that
    the first mention does not wait for about a second of imports once connected.
    """
    global _libraries
    with _libraries_lock:
        if _libraries is None:
            loading: concurrent.futures.Future[None] = concurrent.futures.Future()
            loading.set_running_or_notify_cancel()

            def load() -> None:
                try:
                    import_model_libraries()
                except BaseException as exc:  # handed to whoever awaits the libraries
                    loading.set_exception(exc)
                else:
                    loading.set_result(None)

            threading.Thread(target=load, name="model-libraries", daemon=True).start()
            _libraries = loading
        return _libraries


def import_model_libraries() -> None:
    """Import openai, strands and the tools (about 1 s of CPU), create strands' tracer, and do what the
    first model call would otherwise do on the event loop, or wait for.

    Strands' tracer, made on first use, instruments threading for OpenTelemetry
    (context carried into every thread-pool task); without tracing that only costs
    CPU on every `asyncio.to_thread`, so it is undone then, and strands' spans are left unfilled
    (`leave_spans_unfilled`: they record nothing, and filling them serialised the prompt ~6 times a model call).

    anyio, under the SDK's HTTP client, imports its event loop backend and streams when
    first run (~35 ms of CPU, on the loop at the first model call). The SDK names the
    platform in its first request's headers: `platform.platform()` runs ``uname -p`` and
    scans the interpreter's binary for its libc (~35 ms, which the first call waited
    for); the standard library keeps the answer. A client's chat resource (``client.chat``)
    is imported at its first use, with the chat streaming helpers and their types: ~40 ms of
    CPU on the loop at the first model call (its first call took 57-108 ms of CPU, then
    16-32 ms; the next ones 5-10 ms). openai's type packages run their ``__init__`` (every type module) only
    when a name of theirs is read (`defer_package_inits`); so do ``strands.experimental``'s (its agent config
    alone imports jsonschema: ~120 M instructions) and ``strands.session``'s (its session managers, bidirectional
    agents), whose modules the agent needs (checkpoint, session_manager) it imports by their own names.
    Strands' context manager, which every Agent's constructor imports, is imported here. Strands' delegation
    plugin, whose module the first agent imported, is made (`_delegation`).
    """
    defer_package_inits("openai.types", "strands.experimental", "strands.session")
    import anyio
    import openai  # noqa: F401
    from openai.resources.chat import AsyncChat  # noqa: F401
    from strands.experimental.context_manager import ContextManager  # noqa: F401
    import strands.models.openai  # noqa: F401
    import strands.types.exceptions  # noqa: F401
    from opentelemetry.instrumentation.threading import ThreadingInstrumentor
    from strands.telemetry.tracer import get_tracer

    import myao2.infrastructure.llm.memo_tools  # noqa: F401
    import myao2.infrastructure.llm.web_tools  # noqa: F401
    import myao2.infrastructure.llm.search_tools  # noqa: F401
    import myao2.infrastructure.llm.tool_registry  # noqa: F401
    from myao2.infrastructure.llm.unrecorded_tracer import leave_spans_unfilled

    if tracing.enabled():
        get_tracer()
    else:
        leave_spans_unfilled()  # a strands tracer too: made, it instruments threading
        instrumentor = ThreadingInstrumentor()
        if instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.uninstrument()
    anyio.run(anyio.sleep, 0)
    platform.platform()
    _delegation()


def model_errors() -> tuple[type[BaseException], ...]:
    """The errors that mean the model failed (after the bounded retries), not the bot."""
    import openai
    from strands.types.exceptions import (
        ContextWindowOverflowException,
        EventLoopException,
        MaxTokensReachedException,
        ModelThrottledException,
    )

    return (
        openai.APIError,
        ModelThrottledException,
        ContextWindowOverflowException,
        MaxTokensReachedException,
        EventLoopException,
    )


def new_agent(clients: ModelClients, role: Role, system: str, debug: bool) -> Agent:
    """A strands Agent of `role`'s model with `system` as its system prompt: no output printed, no conversation
    management, the bounded retries, the call log (`debug`: with messages) and the one delegation plugin."""
    from strands import Agent
    from strands.agent.conversation_manager import NullConversationManager

    return Agent(
        model=clients.model(role),
        system_prompt=system,
        callback_handler=None,
        conversation_manager=NullConversationManager(),
        retry_strategy=bounded_retry_strategy(),
        hooks=[clients.call_log(role, debug)],
        plugins=[_delegation()],
    )


def structured_agent(clients: ModelClients, role: Role, debug: bool) -> Agent:
    """An agent (`new_agent`) for structured answers: its tool registry (`FixedToolRegistry`, of no tool but the
    structured answer's, which strands registers for each ask) normalises that tool's spec once per ask, read-only
    for the openai provider as the reply agents' specs are (strands normalised it at each of its reads, three an
    ask, and deep-copied it before each model call)."""
    from myao2.infrastructure.llm.tool_registry import FixedToolRegistry

    agent = new_agent(clients, role, "", debug)
    agent.tool_registry = FixedToolRegistry([], read_only_specs=clients.config(role).provider == "openai")
    return agent


@cache
def _delegation() -> Plugin:
    """Strands' agent-delegation plugin, made once.

    Strands makes one for every agent not given it (by its name), introspecting its class each time. It keeps its
    state per agent (weakly), so one serves every agent, as strands' own would each. It enforces how tools made of
    agents (``delegate=True``) are called: none are offered, and it is kept so that nothing changes should one be.
    Strands exports it from no public module.
    """
    from strands.agent._agent_delegation import AgentDelegation

    return AgentDelegation()


def bounded_retry_strategy() -> ModelRetryStrategy:
    """Strands' throttle retry, short: the openai client has already backed off by then."""
    from strands import ModelRetryStrategy

    return ModelRetryStrategy(
        max_attempts=THROTTLE_ATTEMPTS, initial_delay=THROTTLE_DELAY_SECONDS, max_delay=THROTTLE_DELAY_SECONDS
    )


def describe_error(exc: BaseException) -> str:
    """An error's type (and its cause's) and HTTP status: never its message, which may quote the request."""
    names = [type(exc).__name__]
    status = getattr(exc, "status_code", None)
    cause = exc.__cause__
    if cause is not None:
        names.append(type(cause).__name__)
        status = status or getattr(cause, "status_code", None)
    described = " from ".join(names)
    return f"{described} (HTTP {status})" if status else described


def message_text(message: Message) -> str:
    """The text blocks of a message, joined and stripped."""
    return "".join(block["text"] for block in message.get("content", []) if "text" in block).strip()


def last_assistant_text(messages: Messages) -> str:
    """The text of the latest assistant message that has any."""
    for message in reversed(messages):
        if message["role"] == "assistant" and (text := message_text(message)):
            return text
    return ""


def _dump(message: Message) -> str:
    return json.dumps(message.get("content", []), ensure_ascii=False, default=str)
