"""Reaching Slack: who the bot is, asked until Slack answers; Socket Mode, kept up through drops and silence.

slack_sdk's own client retries a refused app token forever with a traceback each time
and notices a connection that went silent only after four ping intervals; this one
tells a refused token apart (`AppTokenRejected`), retries everything else with
backoff, and pings every `PING_INTERVAL_SECONDS` so a dead connection is replaced
within a few seconds. Events are handed to the bot's listeners (`Listeners.dispatch`), but for two kinds
they would run on for nothing: the second of a mention's pair (`Twins`) and the bot's own events.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from myao2.domain.conversation import BotIdentity
from myao2.infrastructure.slack.events import Listeners
from myao2.infrastructure.slack.gateway import SlackAuthError, SlackGateway, describe, error_code
from myao2.infrastructure.slack.translate import SPOKEN_SUBTYPES, author_of, is_from_bot, text_of

logger = logging.getLogger(__name__)

PING_INTERVAL_SECONDS = 1.0
"""A ping every second; a pong missing for half of that drops the connection."""
CONNECT_TIMEOUT_SECONDS = 10.0
APP_TOKEN_ERRORS = frozenset(
    {"invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired", "not_allowed_token_type"}
)
STABLE_AFTER_SECONDS = 30.0
"""A connection that lasted this long resets the backoff."""
RECENT_PAIRS = 256
"""Messages remembered for their second event (`Twins`): the two come one right after the other."""


class AppTokenRejected(Exception):
    """Slack refused the app-level token; the message says what to set (never the token)."""


class Backoff:
    """Delays that double from `first` up to `cap` seconds; `reset` starts again from `first`."""

    def __init__(self, first: float = 0.5, cap: float = 5.0) -> None:
        self._first = first
        self._cap = cap
        self._next = first

    def next(self) -> float:
        delay = self._next
        self._next = min(self._next * 2, self._cap)
        return delay

    def reset(self) -> None:
        self._next = self._first


async def identify(gateway: SlackGateway, backoff: Backoff | None = None) -> BotIdentity:
    """Who the bot is, asking until Slack answers: one log line per failed attempt, no traceback.

    A refused bot token raises `SlackAuthError` at once; anything else (DNS, a refused
    connection, a 5xx) is retried with backoff. Cancel the call to give up.
    """
    backoff = backoff or Backoff()
    attempt = 0
    while True:
        attempt += 1
        try:
            return await gateway.auth()
        except SlackAuthError:
            raise
        except Exception as exc:  # noqa: BLE001 - whatever went wrong, Slack may answer later
            delay = backoff.next()
            logger.warning("Slack is unreachable (attempt %d: %s); retrying in %.1f s", attempt, describe(exc), delay)
        await asyncio.sleep(delay)


class Twins:
    """Slack reports a mention in a conversation twice, as a ``message`` event and as an ``app_mention`` event,
    one right after the other. The listeners are run on the second of the pair only if their run on the first
    failed, or the two differ in what is stored of the message: the second is a no-op for the inbox otherwise (it
    is stored and claimed already). An event of the same kind again (Slack delivering it once more, e.g. after a
    reconnect) is run as any other.
    """

    def __init__(self) -> None:
        self._first: OrderedDict[tuple[str, str], tuple[str, tuple[Any, ...], asyncio.Future[bool]]] = OrderedDict()

    async def run(self, payload: dict[str, Any], handle: Callable[[], Awaitable[bool]]) -> None:
        """Run `handle` (True: it handled the event) on an Events API `payload`, unless it is the second of a pair
        whose first it handled."""
        event = payload.get("event")
        kind = _paired_kind(event)
        if kind is None:
            await handle()
            return
        assert isinstance(event, dict)
        key = (str(event.get("channel")), str(event.get("ts")))
        said = _said(event)
        first = self._first.get(key)
        if first is not None:
            first_kind, first_said, handled = first
            if first_kind != kind and first_said == said and await asyncio.shield(handled):
                return
            await handle()  # the other of a pair that failed or differs, or this kind again (a redelivery)
            return
        handled = asyncio.get_running_loop().create_future()
        self._first[key] = (kind, said, handled)
        if len(self._first) > RECENT_PAIRS:
            self._first.popitem(last=False)
        ok = False
        try:
            ok = await handle()
        finally:
            handled.set_result(ok)


def _paired_kind(event: object) -> str | None:
    """The type of an event that may be one of a mention's pair: an ``app_mention``, or a new message."""
    if not isinstance(event, dict) or "ts" not in event or "channel" not in event:
        return None
    kind = event.get("type")
    if kind == "app_mention" or (kind == "message" and event.get("subtype") in SPOKEN_SUBTYPES):
        return str(kind)
    return None


def _said(event: dict[str, Any]) -> tuple[Any, ...]:
    """What is stored of a message event (see `translate.to_message`): who, what, in which thread."""
    return author_of(event), text_of(event), event.get("thread_ts"), is_from_bot(event)


class SocketMode:
    """Keeps one Socket Mode connection open for `listeners` until cancelled.

    `on_state(connected)` is called when a connection says hello and when it is lost.
    """

    def __init__(
        self,
        listeners: Listeners,
        app_token: str,
        client: AsyncWebClient,
        on_state: Callable[[bool], None],
        ping_interval: float = PING_INTERVAL_SECONDS,
        backoff: Backoff | None = None,
    ) -> None:
        self._listeners = listeners
        self._app_token = app_token
        self._client = client
        self._on_state = on_state
        self._ping_interval = ping_interval
        self._backoff = backoff or Backoff()
        self._envelopes: set[asyncio.Task[None]] = set()
        self._twins = Twins()

    async def run(self) -> None:
        """Connect, serve, and reconnect whenever the connection ends; raises `AppTokenRejected`."""
        async with aiohttp.ClientSession() as session:
            attempt = 0
            while True:
                attempt += 1
                started = time.monotonic()
                try:
                    url = await self._open_url()
                    ws = await asyncio.wait_for(
                        session.ws_connect(
                            url, heartbeat=self._ping_interval, timeout=aiohttp.ClientWSTimeout(ws_close=1.0)
                        ),
                        CONNECT_TIMEOUT_SECONDS,
                    )
                    async with ws:
                        reason = await self._serve(ws)
                    logger.info("Socket Mode connection ended (%s); reconnecting", reason)
                except AppTokenRejected:
                    raise
                except (aiohttp.ClientError, SlackApiError, OSError, asyncio.TimeoutError, ValueError) as exc:
                    delay = self._backoff.next()
                    logger.warning(
                        "Socket Mode connection failed (attempt %d: %s); retrying in %.1f s", attempt, describe(exc), delay
                    )
                    self._on_state(False)
                    await asyncio.sleep(delay)
                    continue
                finally:
                    if time.monotonic() - started > STABLE_AFTER_SECONDS:
                        self._backoff.reset()
                self._on_state(False)
                attempt = 0

    async def _open_url(self) -> str:
        """A fresh WebSocket URL from apps.connections.open."""
        try:
            response = await asyncio.wait_for(
                self._client.apps_connections_open(app_token=self._app_token), CONNECT_TIMEOUT_SECONDS
            )
        except SlackApiError as exc:
            error = error_code(exc)
            if error in APP_TOKEN_ERRORS:
                raise AppTokenRejected(_app_token_help(error)) from None
            raise
        return str(response["url"])

    async def _serve(self, ws: aiohttp.ClientWebSocketResponse) -> str:
        """Hand events to the listeners until the connection ends; returns why it ended."""
        async for message in ws:
            if message.type is not aiohttp.WSMsgType.TEXT:
                continue
            try:
                frame = json.loads(message.data)
            except ValueError:
                continue
            kind = frame.get("type") if isinstance(frame, dict) else None
            if kind == "hello":
                self._on_state(True)
            elif kind == "disconnect":
                return f"Slack asked to reconnect: {frame.get('reason')}"
            elif frame.get("envelope_id"):
                if kind != "events_api":  # the app offers no commands, shortcuts or interactive components
                    logger.warning("an envelope of type %s has no listener: left unacknowledged", kind)
                    continue
                # An event's acknowledgement carries nothing: it goes out at once, before the listeners run.
                await self._acknowledge(ws, frame["envelope_id"])
                payload = frame.get("payload")
                if not isinstance(payload, dict) or self._listeners.ignores(payload):
                    continue  # no task to start for the bot's own: a streamed answer brings several
                task = asyncio.create_task(self._twins.run(payload, partial(self._handle, payload)))
                self._envelopes.add(task)
                task.add_done_callback(self._envelopes.discard)
        error = ws.exception()
        return f"closed: {describe(error)}" if error else f"closed with code {ws.close_code}"

    async def _handle(self, payload: dict[str, Any]) -> bool:
        """Run the listeners on an event; False if they failed (logged)."""
        try:
            await self._listeners.dispatch(payload)
        except Exception:
            event = payload.get("event")
            kind = event.get("type") if isinstance(event, dict) else None
            logger.exception("an event of type %s could not be handled", kind)
            return False
        return True

    @staticmethod
    async def _acknowledge(ws: aiohttp.ClientWebSocketResponse, envelope_id: str) -> None:
        try:
            await ws.send_str(json.dumps({"envelope_id": envelope_id}))
        except (ConnectionError, RuntimeError) as exc:
            logger.warning("could not acknowledge envelope %s: %s", envelope_id, describe(exc))


def _app_token_help(error: str) -> str:
    return (
        f"slack.app_token: Slack refused the app-level token ({error}). Set SLACK_APP_TOKEN to an "
        "app-level token (xapp-…, under Basic Information > App-Level Tokens) with the "
        "connections:write scope, and make sure Socket Mode is enabled for the app; "
        "generate a new one if it was revoked."
    )
