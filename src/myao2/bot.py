"""`myao2 run`: wires the bot together, connects to Slack and runs until SIGTERM or SIGINT."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Awaitable, Callable
from contextlib import suppress
from datetime import timedelta
from typing import TYPE_CHECKING, Protocol, TypeVar

from myao2 import start_up
from myao2.application.autonomous import AutonomousResponder, AutonomySettings
from myao2.application.channels import ChannelLifecycle
from myao2.application.conversations import Conversations
from myao2.application.history_sync import HistorySync
from myao2.application.inbox import Inbox
from myao2.application.mention import AnswerMention
from myao2.application.replicas import Replica
from myao2.composition import build_application, mention_settings
from myao2.config import Config, ConfigError
from myao2.domain.conversation import BotIdentity
from myao2.domain.judgment import SkipPolicy, WaitPolicy
from myao2.infrastructure import event_loop
from myao2.infrastructure.clock import SystemClock
from myao2.infrastructure.db.autonomy_store import SqlAutonomyStore
from myao2.infrastructure.db.engine import open_database
from myao2.infrastructure.db.health import DatabaseCheck
from myao2.infrastructure.db.lease_store import SqlLeaseStore
from myao2.infrastructure.health import Health, HealthServer, ModelReachability
from myao2.infrastructure.llm.agents import ModelClients, load_model_libraries
from myao2.infrastructure.search.setup import IndexWorker
from myao2.infrastructure.slack.app import build_app
from myao2.infrastructure.slack.connection import AppTokenRejected, SocketMode, identify
from myao2.infrastructure.slack.gateway import SlackAuthError, SlackGateway, make_web_client, web_session
from myao2.infrastructure.slack.streaming import SlackReplyPublisher, StreamSettings
from myao2.infrastructure.tasks import TaskSet, every
from myao2.infrastructure.threads import worker_threads
from myao2.infrastructure.tracing import start_tracing
from myao2.listening import CannotListen, cannot_listen

if TYPE_CHECKING:
    import aiohttp

logger = logging.getLogger(__name__)

SHUTDOWN_GRACE_SECONDS = 5.0

T = TypeVar("T")
RETRY_AFTER_FAILURE_SECONDS = 10.0
"""How long the bot waits before looking for answers due again after looking failed (the database, say)."""
INDEX_START_DELAY_SECONDS = 1.0
"""How long after the models have loaded the search index worker starts: the answers that waited for them go first
(a search meanwhile indexes what it needs itself)."""


def run_bot(config: Config) -> int:
    """Run the bot until it is told to stop; returns the process exit status."""
    check_slack_settings(config)
    config.require("agents.response")
    traces = start_tracing(config.logging.debug_llm_messages)
    try:
        return event_loop.run(Bot(config).run())
    finally:
        if traces is not None:
            traces.shutdown()  # sends the spans still waiting
        start_up.ending()


def check_slack_settings(config: Config) -> None:
    """Fail early, naming the key, on missing or malformed Slack credentials."""
    slack = config.slack
    if slack.mode == "http":
        config.require("slack.bot_token", "slack.signing_secret")
    else:
        config.require("slack.bot_token", "slack.app_token")
    problems = []
    if not slack.bot_token.startswith("xoxb-"):
        problems.append("slack.bot_token: must be a bot token, which starts with xoxb-")
    if slack.mode == "socket" and not slack.app_token.startswith("xapp-"):
        problems.append("slack.app_token: must be an app-level token, which starts with xapp-")
    if problems:
        raise ConfigError(problems)


class Bot:
    """The running bot: its stores, Slack connection, agents and background work."""

    def __init__(self, config: Config) -> None:
        self._config = config
        self._stop = asyncio.Event()
        self._tasks = TaskSet()
        self._clock = SystemClock()

    async def run(self) -> int:
        config = self._config
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._stop.set)
        loop.call_later(start_up.LIMIT_SECONDS, start_up.settled)
        loop.set_default_executor(worker_threads())
        # The model libraries load meanwhile: while the database opens and Slack is reached, then connected,
        # so that the first mention finds them loaded.
        load_model_libraries()

        engine = await asyncio.to_thread(open_database, config.memory.sqlalchemy_url)
        model = ModelReachability(config.health_check.model_failure_window_seconds)
        health = Health(DatabaseCheck(engine), model)
        try:
            health_server = self._start_health_server(health)
        except OSError as exc:
            engine.dispose()
            raise cannot_listen(exc, "health_check.port", config.health_check.port) from None
        beat = asyncio.create_task(health.beat())
        web = web_session()  # kept-alive connections for the bot's Web API calls

        async def close_early() -> None:
            beat.cancel()
            if health_server is not None:
                health_server.stop()
            await web.close()
            engine.dispose()

        gateway = SlackGateway(make_web_client(config.slack.bot_token, config.slack.api_base_url, web))
        try:
            identity = await self._until_stopped(identify(gateway))
        except SlackAuthError as exc:
            await close_early()
            return _refuse(str(exc))
        if identity is None:
            await close_early()
            return 0

        parts = build_application(config, engine, self._clock, identity.user_id, watch=model.observe)
        self._tasks.spawn(asyncio.to_thread(parts.renderer.warm))
        await asyncio.to_thread(parts.conversations.save_identity, identity)  # for the commands without Slack
        replica = Replica(SqlLeaseStore(engine), self._clock, config.memory.replica_lease_seconds)
        await replica.join()
        conversations, persona, clients, activity = parts.conversations, config.persona, parts.clients, parts.activity
        response = config.response
        publisher = SlackReplyPublisher(
            make_web_client(config.slack.bot_token, config.slack.api_base_url, web),
            gateway,
            identity.team_id,
            StreamSettings(streaming=response.streaming, show_tasks=response.show_memo_tasks),
        )
        talk = Conversations(
            conversations,
            gateway,
            identity,
            persona.name,
            publisher,
            allow_broadcasts=response.allow_broadcast_mentions,
            activity=activity,
        )
        answer = AnswerMention(
            store=conversations,
            chat=gateway,
            contexts=parts.contexts,
            writer=parts.writer,
            conversations=talk,
            bot=identity,
            clock=self._clock,
            spawn=self._tasks.spawn,
            settings=mention_settings(config),
            replica=replica.name,
        )
        inbox = Inbox(
            store=conversations, chat=gateway, bot=identity, answer=answer, spawn=self._tasks.spawn, clock=self._clock
        )
        history = HistorySync(
            gateway,
            conversations,
            self._clock,
            identity.user_id,
            response.max_message_age_seconds,
            response.history_message_limit,
        )
        lifecycle = ChannelLifecycle(
            conversations, parts.memos, parts.memories, inbox.channel_changed, profiles=parts.profiles
        )
        app = build_app(
            client=make_web_client(None, config.slack.api_base_url),
            bot=identity,
            bot_token=config.slack.bot_token,
            chat=gateway,
            inbox=inbox,
            channels=lifecycle,
            signing_secret=config.slack.signing_secret if config.slack.mode == "http" else None,
        )

        autonomous = AutonomousResponder(
            store=conversations,
            autonomy=SqlAutonomyStore(engine),
            conversations=talk,
            contexts=parts.contexts,
            judge=parts.judge,
            writer=parts.writer,
            bot=identity,
            clock=self._clock,
            settings=autonomy_settings(config),
            spawn=self._tasks.spawn,
            activity=activity,
        )

        def catch_up() -> None:
            self._tasks.spawn(self._catch_up(history, lifecycle, answer))

        connection = self._connection(app, identity, health, catch_up, web)
        try:
            await self._until_stopped(connection.open())
        except (AppTokenRejected, CannotListen, OSError) as exc:
            await connection.close()
            await clients.close()
            await close_early()
            if isinstance(exc, CannotListen):
                raise
            return _refuse(_reason(exc) if isinstance(exc, OSError) else str(exc))
        if self._stop.is_set():
            logger.info("stopped before Slack was reached")
            await connection.close()
            await clients.close()
            await close_early()
            return 0
        logger.info("connected to Slack as %s (%s)", persona.name, identity.user_id)
        indexer = IndexWorker(parts.index, engine)
        self._tasks.spawn(self._settle(clients, indexer))
        caught_up = asyncio.Event()
        self._tasks.spawn(self._first_catch_up(history, lifecycle, answer, caught_up))
        self._tasks.spawn(replica.keep(self._stop, gone=answer.wake))
        self._tasks.spawn(
            self._every(
                response.history_sync_interval_seconds,
                replica.only_here("history", lambda: self._catch_up(history, lifecycle, answer)),
            )
        )
        self._tasks.spawn(self._retry_when_due(answer))
        self._tasks.spawn(self._every(response.check_interval_seconds, replica.only_here("autonomous", autonomous.check)))
        self._tasks.spawn(
            self._every_after(caught_up, config.memory.update_interval_seconds, replica.only_here("memory", parts.remember))
        )

        status = 0
        try:
            await self._until_stopped(connection.watch())
        except AppTokenRejected as exc:
            status = _refuse(str(exc))
            self._stop.set()  # the background jobs end too
        logger.info("shutting down")
        indexer.stop()
        health.slack_connected = False
        await connection.close()
        await inbox.close()  # the messages waiting to be stored with the next ones
        await self._tasks.drain(SHUTDOWN_GRACE_SECONDS)
        try:
            await replica.leave()
        except Exception:
            logger.exception("handing this replica's jobs and answers over failed")
        beat.cancel()
        if health_server is not None:
            health_server.stop()
        await clients.close()
        await web.close()
        engine.dispose()
        return status

    def _start_health_server(self, health: Health) -> HealthServer | None:
        port = self._config.health_check.port
        if port is None:
            return None
        server = HealthServer(health, port)
        server.start()
        logger.info("health endpoints on port %d", server.port)  # the one taken when `port` is 0
        return server

    def _connection(  # type: ignore[no-untyped-def]
        self, app, identity: BotIdentity, health: Health, reconnected: Callable[[], None], web: aiohttp.ClientSession
    ) -> _Connection:
        """How events will reach the bot (`identity`); `reconnected` runs whenever Socket Mode is back after a loss.

        Socket Mode asks for its URL (apps.connections.open) over `web`, on the connection auth.test has just
        opened: with Slack's Web API over the internet that is one TCP and TLS handshake fewer before the bot
        can answer, at every start and reconnection.
        """
        slack = self._config.slack
        if slack.mode == "http":
            return _HttpConnection(app, slack.http_port, health)
        state = _SocketState(health, reconnected)
        client = make_web_client(None, slack.api_base_url, web)
        return _SocketConnection(SocketMode(app, slack.app_token, client, state, bot=identity), state)

    async def _until_stopped(self, work: Awaitable[T]) -> T | None:
        """The result of `work`, or None (with `work` cancelled) if the bot is told to stop first."""
        task = asyncio.ensure_future(work)
        stop = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
        if not task.done():
            task.cancel()
            with suppress(asyncio.CancelledError):
                await task
            return None
        return task.result()

    async def _settle(self, clients: ModelClients, indexer: IndexWorker) -> None:
        """Once connected: wait for the model libraries (loading since Slack answered) and the models,
        then end start-up's garbage collection (`start_up.settled`) and, `INDEX_START_DELAY_SECONDS`
        later, start indexing for search.

        Loading the embedding model and embedding the backlog took ~0.5 s of CPU; begun at
        connection, it was spent while the first mention waited for the model libraries.
        Begun as the models loaded, importing numpy and reading the vectors (~0.15 s holding
        the GIL) was spent while the mentions that had waited for them were answered.

        A stop ends the wait: the shutdown's grace period is for answers in progress, which wait for the
        libraries themselves, and it was spent whole on a bot stopped before they had loaded.
        """
        try:
            await self._until_stopped(clients.load())
        finally:
            start_up.settled()
            asyncio.get_running_loop().call_later(INDEX_START_DELAY_SECONDS, indexer.start)

    async def _catch_up(self, history: HistorySync, channels: ChannelLifecycle, answer: AnswerMention) -> None:
        """Fill the gaps in the store from Slack's history, narrow what channels turned private meanwhile had
        kept for the workspace, then answer the messages for the bot it brought."""
        try:
            await history.sync()
        except Exception:
            logger.exception("history sync failed; answering what is stored")
        try:
            await channels.reconcile()
        except Exception:
            logger.exception("narrowing the channels turned private failed")
        started = await answer.catch_up()
        if started:
            logger.info("taking up %d message(s) for the bot found unanswered", started)

    async def _first_catch_up(
        self, history: HistorySync, channels: ChannelLifecycle, answer: AnswerMention, done: asyncio.Event
    ) -> None:
        """The catch-up after start-up; `done` is set when it ends, however it ends."""
        try:
            await self._catch_up(history, channels, answer)
        finally:
            done.set()

    async def _retry_when_due(self, answer: AnswerMention) -> None:
        """Take up answers due again (after a failed or interrupted attempt) when they fall due, until the bot stops."""
        while not self._stop.is_set():
            try:
                await self._until_stopped(answer.wait_until_due())
                if not self._stop.is_set():
                    await answer.catch_up()
            except Exception:
                logger.exception("taking up answers due again failed")
                await self._until_stopped(asyncio.sleep(RETRY_AFTER_FAILURE_SECONDS))

    async def _every(self, seconds: float, job: Callable[[], Awaitable[object]]) -> None:
        """Run `job` every `seconds` until the bot stops (see `every`)."""
        await every(seconds, job, self._stop)

    async def _every_after(self, ready: asyncio.Event, seconds: float, job: Callable[[], Awaitable[object]]) -> None:
        """Once `ready` is set, run `job` every `seconds` until the bot stops: the memory job's first round
        reads what the start-up catch-up brought, not whatever part of it was stored by then."""
        await ready.wait()
        await self._every(seconds, job)


def autonomy_settings(config: Config) -> AutonomySettings:
    """The autonomous-reply settings from the `response` section."""
    response = config.response
    dynamic = response.dynamic_wait
    skip = response.judgment_skip
    return AutonomySettings(
        active_channel_days=response.active_channel_days,
        max_message_age_seconds=response.max_message_age_seconds,
        context_message_limit=response.context_message_limit,
        wait=WaitPolicy(
            min_wait_seconds=response.min_wait_seconds,
            jitter_ratio=response.jitter_ratio,
            dynamic=dynamic.enabled,
            thresholds=[(t.messages_per_minute, t.multiplier) for t in dynamic.thresholds],
            floor_seconds=dynamic.min_seconds,
        ),
        skip=SkipPolicy(
            thresholds=[(t.confidence, timedelta(seconds=t.seconds)) for t in skip.thresholds],
            default=timedelta(seconds=skip.default_seconds),
        )
        if skip.enabled
        else None,
        interval_seconds=(response.response_interval.min, response.response_interval.max),
        max_replies_per_hour=response.max_autonomous_replies_per_hour,
        judgments_at_once=response.max_concurrent_judgments,
        reply_to_bots=response.reply_to_bots,
        include=frozenset(response.channels.include),
        exclude=frozenset(response.channels.exclude),
    )


class _Connection(Protocol):
    """How events reach the bot: Socket Mode or HTTP."""

    async def open(self) -> None:
        """Return once events can arrive; raises `AppTokenRejected` or `OSError` when they never will."""
        ...

    async def watch(self) -> None:
        """Return (or raise `AppTokenRejected`) only if events can no longer arrive."""
        ...

    async def close(self) -> None: ...


class _SocketState:
    """Socket Mode's connection state into /ready; after a loss, `reconnected` catches up on the gap."""

    def __init__(self, health: Health, reconnected: Callable[[], None]) -> None:
        self._health = health
        self._reconnected = reconnected
        self.ever_connected = asyncio.Event()

    def __call__(self, connected: bool) -> None:
        was_connected = self._health.slack_connected
        self._health.slack_connected = connected
        if connected and not was_connected:
            if self.ever_connected.is_set():
                logger.info("Socket Mode is back; catching up on what was said meanwhile")
                self._reconnected()
            self.ever_connected.set()


class _SocketConnection:
    """Socket Mode, kept up in a task of its own."""

    def __init__(self, socket: SocketMode, state: _SocketState) -> None:
        self._socket = socket
        self._state = state
        self._task: asyncio.Task[None] | None = None

    async def open(self) -> None:
        self._task = asyncio.create_task(self._socket.run())
        connected = asyncio.ensure_future(self._state.ever_connected.wait())
        try:
            await asyncio.wait({self._task, connected}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            connected.cancel()
        if self._task.done():
            self._task.result()  # raises AppTokenRejected

    async def watch(self) -> None:
        assert self._task is not None
        await asyncio.shield(self._task)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with suppress(asyncio.CancelledError, AppTokenRejected):
                await self._task


class _HttpConnection:
    """The HTTP Events API, served by aiohttp on the configured port."""

    def __init__(self, app, port: int, health: Health) -> None:  # type: ignore[no-untyped-def]
        self._app = app
        self._port = port
        self._health = health
        self._runner = None

    async def open(self) -> None:
        from aiohttp import web

        self._runner = web.AppRunner(self._app.web_app(path="/slack/events", port=self._port))
        await self._runner.setup()
        try:
            await web.TCPSite(self._runner, port=self._port).start()
        except OSError as exc:
            raise cannot_listen(exc, "slack.http_port", self._port) from None
        self._health.slack_connected = True

    async def watch(self) -> None:
        await asyncio.Event().wait()

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


def _refuse(message: str) -> int:
    """Say why the bot cannot run (no traceback) and return exit status 2."""
    print(f"myao2: {message}", file=sys.stderr)
    return 2


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)

