"""The composition root: the application's parts built from the config, the one place they are wired.

`myao2 run` adds Slack around them; `preview`, `mcp` and the playground use them
without Slack. Building touches neither Slack nor the model: model clients and the
embedding model load on first use.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import Engine

from myao2.application.activity import Activity
from myao2.application.context import Absorbed, Budget, ContextBuilder, MemoryBudgets, Persona
from myao2.application.memory_job import MemoryJob, MemorySettings
from myao2.application.mention import MentionSettings
from myao2.application.profiles import ProfileKeeper
from myao2.application.retention import RetentionJob
from myao2.application.search import Search
from myao2.config import Config
from myao2.domain.activity import ModelCall
from myao2.domain.answers import RetryPolicy
from myao2.domain.memory import RetentionPolicy
from myao2.domain.ports import Clock
from myao2.infrastructure.db.activity_store import SqlActivityLog
from myao2.infrastructure.db.conversation_store import SqlConversationStore
from myao2.infrastructure.db.memo_store import SqlMemoStore
from myao2.infrastructure.db.memory_store import SqlMemoryStore
from myao2.infrastructure.db.profile_store import SqlProfileStore
from myao2.infrastructure.llm.agents import ROLES, ModelClients, StrandsJudge, StrandsMemoryWriter, StrandsReplyWriter
from myao2.infrastructure.llm.phrases import apology, prompt_marks
from myao2.infrastructure.llm.prompts import PromptRenderer
from myao2.infrastructure.search.setup import SearchIndex, open_index
from myao2.infrastructure.web.toolbox import build_web_toolbox


@dataclass(frozen=True)
class Application:
    """The bot's stores, prompt machinery and agents, without any chat platform."""

    config: Config
    clock: Clock
    persona: Persona
    activity: Activity
    """Records model calls, judgments and replies (for `myao2 stats`)."""
    conversations: SqlConversationStore
    memos: SqlMemoStore
    memories: SqlMemoryStore
    profiles: SqlProfileStore
    contexts: ContextBuilder
    """Builds prompt contexts as the bot whose Slack user id was given."""
    renderer: PromptRenderer
    clients: ModelClients
    """The model clients; whoever builds the application closes them (the engine too)."""
    index: SearchIndex
    """The search index; kept up to date by whoever runs an `IndexWorker`."""
    search: Search
    """Memo and message search over the index, for any reader."""
    writer: StrandsReplyWriter
    judge: StrandsJudge
    memory_writer: StrandsMemoryWriter
    memory_job: MemoryJob
    retention: RetentionJob

    async def remember(self) -> None:
        """A memory round, then a retention round: raw messages are read before any is deleted."""
        await self.memory_job.run()
        await self.retention.run()


def build_application(
    config: Config,
    engine: Engine,
    clock: Clock,
    bot_user_id: str,
    *,
    watch: Callable[[ModelCall], None] | None = None,
) -> Application:
    """Wire the application from `config` over `engine`, as the bot whose Slack user id is `bot_user_id`.

    `watch` sees every model call (e.g. the health check's model reachability).
    """
    persona = Persona(
        config.persona.name, config.persona.system_prompt, config.persona.language, config.persona.tzinfo
    )
    conversations = SqlConversationStore(engine, clock)
    memos = SqlMemoStore(engine, clock)
    memories = SqlMemoryStore(engine, clock)
    profiles = SqlProfileStore(engine, clock)
    contexts = ContextBuilder(
        memos,
        clock,
        persona,
        bot_user_id=bot_user_id,
        budget=Budget(config.response.conversation_max_tokens, config.response.message_max_tokens),
        marks=prompt_marks(persona.language),
        absorbed=Absorbed(memories, profiles, memory_budgets(config)),
    )
    renderer = PromptRenderer(
        persona.language,
        config.prompts.template_dir,
        system_overrides={role: getattr(config.agents, role).system_prompt for role in ROLES},
    )
    activity = Activity(SqlActivityLog(engine), clock, watch=watch)
    clients = ModelClients(config.agents, activity)
    debug = config.logging.debug_llm_messages
    index = open_index(engine, config.search, memos, conversations, memories)
    search = Search(index, memos, conversations, memories)
    writer = StrandsReplyWriter(
        clients,
        renderer,
        memos,
        persona.language,
        debug,
        web=build_web_toolbox(config.tools, persona.language),
        search=search,
        max_memo_changes=config.response.max_memo_changes_per_reply,
    )
    memory_writer = StrandsMemoryWriter(clients, renderer, debug)
    memory_job = MemoryJob(
        conversations=conversations,
        memories=memories,
        writer=memory_writer,
        clock=clock,
        persona=persona,
        settings=memory_settings(config),
        profiles=ProfileKeeper(
            conversations=conversations,
            profiles=profiles,
            writer=memory_writer,
            clock=clock,
            persona=persona,
            batch_max_tokens=config.memory.batch_max_tokens,
            cut=prompt_marks(persona.language).cut,
        ),
    )
    retention = RetentionJob(
        conversations=conversations,
        memories=memories,
        writer=memory_writer,
        clock=clock,
        persona=persona,
        policy=retention_policy(config),
        bot_user_id=bot_user_id,
        max_tokens=config.memory.batch_max_tokens,
        memory=memory_job,
    )
    return Application(
        config=config,
        clock=clock,
        persona=persona,
        activity=activity,
        conversations=conversations,
        memos=memos,
        memories=memories,
        profiles=profiles,
        contexts=contexts,
        renderer=renderer,
        clients=clients,
        index=index,
        search=search,
        writer=writer,
        judge=StrandsJudge(clients, renderer, persona.language, debug),
        memory_writer=memory_writer,
        memory_job=memory_job,
        retention=retention,
    )


def mention_settings(config: Config) -> MentionSettings:
    """How messages addressed to the bot are answered, from the `response` section."""
    response = config.response
    return MentionSettings(
        reaction=response.reaction,
        reply_in_thread=response.reply_in_thread,
        context_message_limit=response.context_message_limit,
        max_message_age_seconds=response.max_message_age_seconds,
        catchup_seconds=response.mention_catchup_seconds,
        retries=RetryPolicy(tuple(response.answer_retry_seconds)),
        apology=apology(config.persona.language),
    )


def memory_settings(config: Config) -> MemorySettings:
    """The memory job's settings from the `memory` section."""
    memory = config.memory
    return MemorySettings(
        short_term_window=timedelta(hours=memory.short_term_window_hours),
        thread_memory_days=memory.thread_memory_days,
        batch_max_tokens=memory.batch_max_tokens,
        cut=prompt_marks(config.persona.language).cut,
    )


def memory_budgets(config: Config) -> MemoryBudgets:
    """The prompt budgets of the memory sections from the `memory` section."""
    memory = config.memory
    return MemoryBudgets(
        workspace=memory.workspace_max_tokens,
        channel=memory.channel_max_tokens,
        thread=memory.thread_max_tokens,
        elsewhere=memory.elsewhere_max_tokens,
        digest=memory.digest_max_tokens,
        people=memory.people_max_tokens,
    )


def retention_policy(config: Config) -> RetentionPolicy:
    """When raw messages are digested, condensed and deleted, from `memory.retention`."""
    retention = config.memory.retention
    return RetentionPolicy(
        digest_after_days=retention.digest_after_days,
        condense_after_days=retention.condense_after_days,
        delete_after_days=retention.delete_after_days,
    )
