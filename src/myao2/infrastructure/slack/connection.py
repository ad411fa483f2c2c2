"""Reaching Slack: who the bot is, asked until Slack answers; Socket Mode, kept up through drops and silence.

slack_sdk's own client retries a refused app token forever with a traceback each time
and notices a connection that went silent only after four ping intervals; this one
tells a refused token apart (`AppTokenRejected`), retries everything else with
backoff, and pings every `PING_INTERVAL_SECONDS` so a dead connection is replaced
within a few seconds. Envelopes are handed to the bolt app, as bolt's own adapter does, but for two kinds of
event it would run on for nothing: the second of a mention's pair (`Twins`) and the bot's own messages.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from slack_bolt.adapter.socket_mode.async_internals import run_async_bolt_app
from slack_bolt.async_app import AsyncApp
from slack_bolt.response import BoltResponse
from slack_sdk.errors import SlackApiError
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.web.async_client import AsyncWebClient

from myao2.domain.conversation import BotIdentity
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
    one right after the other. The app is run on the second of the pair only if its run on the first failed, or
    the two differ in what is stored of the message: the second is a no-op for the inbox otherwise (it is stored
    and claimed already), and the app's dispatch of an event is most of its cost. An event of the same kind again
    (Slack delivering it once more, e.g. after a reconnect) is run as any other.
    """

    def __init__(self) -> None:
        self._first: OrderedDict[tuple[str, str], tuple[str, tuple[Any, ...], asyncio.Future[bool]]] = OrderedDict()

    async def run(self, payload: dict[str, Any], app: Callable[[], Awaitable[bool]]) -> None:
        """Run `app` (True: it handled the event) on an Events API `payload`, unless it is the second of a pair
        whose first it handled."""
        event = payload.get("event")
        kind = _paired_kind(event)
        if kind is None:
            await app()
            return
        assert isinstance(event, dict)
        key = (str(event.get("channel")), str(event.get("ts")))
        said = _said(event)
        first = self._first.get(key)
        if first is not None:
            first_kind, first_said, handled = first
            if first_kind != kind and first_said == said and await asyncio.shield(handled):
                return
            await app()  # the other of a pair that failed or differs, or this kind again (a redelivery)
            return
        handled = asyncio.get_running_loop().create_future()
        self._first[key] = (kind, said, handled)
        if len(self._first) > RECENT_PAIRS:
            self._first.popitem(last=False)
        ok = False
        try:
            ok = await app()
        finally:
            handled.set_result(ok)


def _own_message(event: object, bot: BotIdentity) -> bool:
    """A message event of the bot's own (its posts and streams, and their changes and deletions): bolt's app
    ignores those (its ``IgnoringSelfEvents``, which reads who it is from as `_author` does), though only once most
    of its dispatch has run."""
    if not isinstance(event, dict) or event.get("type") != "message":
        return False
    return (bot.bot_id is not None and event.get("bot_id") == bot.bot_id) or _author(event) == bot.user_id


def _author(event: dict[str, Any]) -> Any:
    """Who a message event is from, as bolt reads it: the event's user, else that of the message it changed
    (``message``) or deleted (``previous_message``)."""
    user = event.get("user")
    if user is not None:
        return user if isinstance(user, str) else user.get("id")
    if "user_id" in event:
        return event["user_id"]
    nested = event["message"] if isinstance(event.get("message"), dict) else event.get("previous_message")
    return _author(nested) if isinstance(nested, dict) else None


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
    """Keeps one Socket Mode connection open for `app` until cancelled.

    `on_state(connected)` is called when a connection says hello and when it is lost.
    """

    def __init__(
        self,
        app: AsyncApp,
        app_token: str,
        client: AsyncWebClient,
        on_state: Callable[[bool], None],
        ping_interval: float = PING_INTERVAL_SECONDS,
        backoff: Backoff | None = None,
        *,
        bot: BotIdentity | None = None,
    ) -> None:
        """Given `bot`, the bot's own messages are acknowledged without running `app` on them (see `_own_message`)."""
        self._app = app
        self._bot = bot
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
        """Hand envelopes to the app until the connection ends; returns why it ended."""
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
                if kind == "events_api":
                    # An event's acknowledgement carries nothing: it goes out at once, before the app
                    # runs (bolt would acknowledge it before running the listeners too).
                    await self._acknowledge(ws, {"envelope_id": frame["envelope_id"]})
                    if self._own(frame):
                        continue  # no task to start for it: a streamed answer brings several
                task = asyncio.create_task(self._handle(ws, frame))
                self._envelopes.add(task)
                task.add_done_callback(self._envelopes.discard)
        error = ws.exception()
        return f"closed: {describe(error)}" if error else f"closed with code {ws.close_code}"

    def _own(self, frame: dict[str, Any]) -> bool:
        """Whether an Events API envelope carries a message event of the bot's own (see `_own_message`)."""
        payload = frame.get("payload")
        return self._bot is not None and isinstance(payload, dict) and _own_message(payload.get("event"), self._bot)

    async def _handle(self, ws: aiohttp.ClientWebSocketResponse, frame: dict[str, Any]) -> None:
        """Run the app on one envelope and, unless it is an event (acknowledged on arrival), acknowledge it
        (with the app's response, if any)."""
        request = SocketModeRequest.from_dict(frame)
        if request is None:
            return
        if request.type == "events_api":

            async def handled() -> bool:
                response = await self._run_app(request)
                return response is not None and response.status == 200

            await self._twins.run(request.payload, handled)
            return
        response = await self._run_app(request)
        if response is None or response.status != 200:
            return
        ack: dict[str, Any] = {"envelope_id": request.envelope_id}
        if response.body:
            try:
                ack["payload"] = json.loads(response.body)
            except ValueError:
                ack["payload"] = {"text": response.body}
        await self._acknowledge(ws, ack)

    async def _run_app(self, request: SocketModeRequest) -> BoltResponse | None:
        """The app's response to `request`; None if it failed (logged)."""
        try:
            return await run_async_bolt_app(self._app, request)
        except Exception:
            logger.exception("an envelope of type %s could not be handled", request.type)
            return None

    @staticmethod
    async def _acknowledge(ws: aiohttp.ClientWebSocketResponse, ack: dict[str, Any]) -> None:
        try:
            await ws.send_str(json.dumps(ack))
        except (ConnectionError, RuntimeError) as exc:
            logger.warning("could not acknowledge envelope %s: %s", ack["envelope_id"], describe(exc))


def _app_token_help(error: str) -> str:
    return (
        f"slack.app_token: Slack refused the app-level token ({error}). Set SLACK_APP_TOKEN to an "
        "app-level token (xapp-…, under Basic Information > App-Level Tokens) with the "
        "connections:write scope, and make sure Socket Mode is enabled for the app; "
        "generate a new one if it was revoked."
    )
