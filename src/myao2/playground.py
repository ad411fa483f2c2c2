"""`myao2 playground`: the persona in a local web chat, over the very application the Slack bot runs."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import signal
from contextlib import suppress

from aiohttp import web

from myao2 import start_up
from myao2.application.conversations import Conversations
from myao2.application.mention import AnswerMention
from myao2.composition import Application, build_application, mention_settings
from myao2.config import Config, ConfigError
from myao2.domain.conversation import BotIdentity
from myao2.infrastructure import event_loop
from myao2.infrastructure.clock import SystemClock
from myao2.infrastructure.db.engine import open_database
from myao2.infrastructure.playground.chat import PlaygroundChat, PlaygroundPublisher, Stamps
from myao2.infrastructure.playground.rooms import BOT_USER_ID, ROOMS
from myao2.infrastructure.playground.server import Playground, build_web_app, is_loopback
from myao2.infrastructure.search.setup import IndexWorker
from myao2.infrastructure.tasks import TaskSet, every
from myao2.listening import cannot_listen

logger = logging.getLogger(__name__)

SHUTDOWN_GRACE_SECONDS = 5.0


def run_playground(config: Config) -> int:
    """Serve the playground until SIGTERM or SIGINT; returns the process exit status."""
    check_playground_settings(config)
    config.require("agents.response")
    try:
        return event_loop.run(_serve(config))
    finally:
        start_up.ending()


def check_playground_settings(config: Config) -> None:
    """A host other than a loopback address is reachable by others: it needs a token."""
    settings = config.playground
    if not is_loopback(settings.host) and not settings.token.strip():
        raise ConfigError(
            f"playground.token: required when playground.host ({settings.host}) is not a loopback address"
        )


async def _serve(config: Config) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)

    engine = await asyncio.to_thread(open_database, config.memory.sqlalchemy_url)
    application = build_application(config, engine, SystemClock(), BOT_USER_ID)
    tasks = TaskSet()
    playground = await _playground(application, tasks)
    settings = config.playground
    runner = web.AppRunner(
        build_web_app(playground, settings.token), access_log=None, shutdown_timeout=SHUTDOWN_GRACE_SECONDS
    )
    await runner.setup()
    try:
        await web.TCPSite(runner, settings.host, settings.port).start()
    except OSError as exc:
        await runner.cleanup()
        await application.clients.close()
        engine.dispose()
        raise cannot_listen(exc, "playground.port", settings.port, settings.host, "playground.host") from None
    host = f"[{settings.host}]" if ":" in settings.host else settings.host
    port = runner.addresses[0][1]  # the one taken when `playground.port` is 0
    print(f"myao2 playground: http://{host}:{port}/", flush=True)
    tasks.spawn(application.clients.load())  # the model libraries, before the first message needs them

    indexer = IndexWorker(application.index, engine)
    indexer.start()
    memory = asyncio.create_task(every(config.memory.update_interval_seconds, application.remember, stop))
    await stop.wait()
    logger.info("shutting down")
    await runner.cleanup()
    await tasks.drain(SHUTDOWN_GRACE_SECONDS)
    memory.cancel()
    with suppress(asyncio.CancelledError):
        await memory
    indexer.stop()
    await application.clients.close()
    engine.dispose()
    return 0


async def _playground(application: Application, tasks: TaskSet) -> Playground:
    """The playground's chat platform and answering use case around `application`."""
    config = application.config
    store = application.conversations
    for channel in ROOMS:
        await asyncio.to_thread(store.save_channel, channel)
    stamps = Stamps()
    publisher = PlaygroundPublisher(stamps)
    chat = PlaygroundChat(store, stamps)
    bot = BotIdentity(BOT_USER_ID, None, None)
    talk = Conversations(
        store,
        chat,
        bot,
        config.persona.name,
        publisher,
        allow_broadcasts=config.response.allow_broadcast_mentions,
        activity=application.activity,
    )
    answer = AnswerMention(
        store=store,
        chat=chat,
        contexts=application.contexts,
        writer=application.writer,
        conversations=talk,
        bot=bot,
        clock=application.clock,
        spawn=tasks.spawn,
        settings=dataclasses.replace(
            mention_settings(config),
            reaction="",  # the page shows a typing indicator instead
            reply_in_thread=False,  # the page is one flow per conversation
        ),
    )
    return Playground(
        conversations=store,
        memos=application.memos,
        memories=application.memories,
        answer=answer,
        publisher=publisher,
        stamps=stamps,
        tasks=tasks,
        bot_name=config.persona.name,
        avatar=config.persona.avatar,
    )

