"""A fake Slack workspace: Web API over HTTP and Socket Mode over WebSocket.

It speaks the wire protocols of the real ``slack_sdk`` clients, listens on
127.0.0.1 only and records everything it receives.

In-process use (tests, benchmarks)::

    with FakeSlack() as slack:
        slack.add_user("U1", "alice")
        slack.add_channel("C1", "general", members=["U1"])
        # point the bot at slack.base_url, with slack.bot_token / slack.app_token
        slack.wait_connected()
        slack.post_message("C1", "U1", "hello <@UBOT>")
        slack.wait_for_posts(1)

All public methods are thread-safe and never block on the clients, so they may
be called from a test's event loop. ``wait_*`` methods block the calling
thread: inside a coroutine whose loop also runs a Slack client, use
``await slack.async_wait_for(...)`` instead.

Behaviour worth knowing:

* Events are delivered only for channels the bot is a member of, to the most
  recent open Socket Mode connection, and only while one is open; otherwise
  the message is just stored (the bot must find it through the history).
  With ``spread_events`` each event goes to the open connections in turn, as
  Slack spreads an app's events over its connections (several bot processes).
* An envelope not acked within ``ack_timeout`` seconds is redelivered, like
  Slack does, with a new envelope id, the same event id, ``retry_attempt``
  1..3 and ``retry_reason`` "timeout".
* ``chat.postMessage`` and ``chat.update`` emit the ``message`` /
  ``message_changed`` events of the bot's own messages, as Slack does.
  ``reactions.add`` emits nothing.
* ``chat.startStream`` / ``appendStream`` / ``stopStream`` stream a bot
  message: it is stored (and its ``message`` event emitted) at the start and
  its text grows with each ``markdown_text`` (argument or chunk); task and plan
  chunks are recorded in ``streams``. Outside a DM the recipient ids are
  required and a top-level stream is refused (in a DM too after
  ``refuse_top_level_streams``); after stop the message is no
  longer streaming. ``refuse_streaming`` makes all three methods fail (as a
  workspace without the feature does), ``append_min_interval`` answers 429 to
  appends that come faster than that on one stream. An injected
  ``message_not_in_streaming_state`` ends the stream it names, as Slack says so
  only of a message it no longer streams (stopped, or expired).
* ``chat.update`` replaces the metadata when given one (``{}`` removes it) and
  keeps it otherwise, as Slack documents.
* ``chat.postMessage`` and ``chat.update`` take the text as ``markdown_text``
  (standard Markdown, at most 12,000 characters, not with ``text`` or
  ``blocks``) or as ``text`` (mrkdwn); the message's ``text`` is what was sent
  either way, as a stream's is its ``markdown_text``.

Subprocess use: ``python -m tests.fakes.slack_server --port N`` prints the Web
API base URL and serves until SIGTERM/SIGINT. There the world is driven over
HTTP: ``POST /_fake/<method>`` with a JSON object of keyword arguments calls
one of ``CONTROL_METHODS`` and answers ``{"result": ...}``; ``GET
/_fake/state`` returns the recordings.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import bisect
import copy
import json
import random
import re
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any, Callable

from aiohttp import WSMsgType, web

from tests.fakes import WAIT_SECONDS
from tests.fakes._server import LoopbackServer, serve_until_signalled

CONTROL_METHODS = (
    "add_user",
    "add_channel",
    "post_message",
    "edit_message",
    "delete_message",
    "delete_thread_parent",
    "emit_event",
    "redeliver",
    "disconnect",
    "inject_error",
    "inject_rate_limit",
    "convert_to_private",
    "share_externally",
    "remove_member",
    "add_member",
    "delete_channel",
    "set_fault",
    "refuse_streaming",
    "refuse_top_level_streams",
    "inject_server_error",
    "inject_delay",
    "inject_drop",
    "inject_cursor_loop",
    "set_chaos",
)
MAX_RETRIES = 3
LOOP_CURSOR = "bG9vcA=="
"""The next cursor of a page answered by `inject_cursor_loop`."""
_THREAD_SUMMARY = ("reply_count", "reply_users", "reply_users_count", "latest_reply")
STREAM_CHUNK_TYPES = ("markdown_text", "task_update", "plan_update", "blocks")
TASK_STATUSES = ("pending", "in_progress", "complete", "error")
MARKDOWN_LIMIT = 12_000
_CLOSE = object()
_ABORT = object()
_SILENCE = object()
FAULTS = (None, "refuse", "5xx")


class _SlackError(Exception):
    """A Web API error answered as ``{"ok": false, "error": code}``."""


@dataclass
class _Channel:
    id: str
    name: str
    is_private: bool
    is_im: bool
    is_mpim: bool
    members: list[str]
    created: int
    messages: list[dict[str, Any]] = field(default_factory=list)  # ascending ts
    is_ext_shared: bool = False

    @property
    def type(self) -> str:
        """The ``types`` value of users.conversations for this channel."""
        if self.is_im:
            return "im"
        if self.is_mpim:
            return "mpim"
        return "private_channel" if self.is_private else "public_channel"

    @property
    def channel_type(self) -> str:
        """The ``channel_type`` field of message events in this channel."""
        return {"im": "im", "mpim": "mpim", "private_channel": "group"}.get(self.type, "channel")


@dataclass
class _Connection:
    ws: web.WebSocketResponse
    request: web.Request
    outbox: asyncio.Queue = field(default_factory=asyncio.Queue)
    closing: bool = False  # the server started a clean close
    silent: bool = False  # dropped without a close frame: nothing read or written any more
    number: int = 0  # the nth connection accepted (1-based)


@dataclass
class _Stream:
    """A streamed bot message while and after it streams."""

    channel: str
    ts: str
    thread_ts: str | None
    recipient_user_id: str | None
    recipient_team_id: str | None
    task_display_mode: str
    streaming: bool = True
    calls: list[dict[str, Any]] = field(default_factory=list)  # method, time, markdown, chunks
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> latest task_update chunk
    task_history: list[dict[str, Any]] = field(default_factory=list)  # every task_update chunk
    plan_title: str | None = None
    last_call: float = 0.0

    def record(self) -> dict[str, Any]:
        return {
            "channel": self.channel,
            "ts": self.ts,
            "thread_ts": self.thread_ts,
            "recipient_user_id": self.recipient_user_id,
            "recipient_team_id": self.recipient_team_id,
            "task_display_mode": self.task_display_mode,
            "streaming": self.streaming,
            "calls": self.calls,
            "tasks": self.tasks,
            "task_history": self.task_history,
            "plan_title": self.plan_title,
        }


@dataclass
class _Injection:
    kind: str  # "error" | "rate_limit" | "server_error" | "delay" | "drop" | "cursor_loop"
    value: Any
    remaining: int
    after: bool = False  # the call takes effect before the failure is answered


def _ts_key(ts: str) -> Decimal:
    return Decimal(ts)


def _truthy(value: Any) -> bool:
    return str(value).lower() in ("1", "true", "yes")


def _encode_cursor(value: str) -> str:
    return base64.urlsafe_b64encode(value.encode()).decode()


def _decode_cursor(cursor: str, prefix: str) -> str:
    try:
        text = base64.urlsafe_b64decode(cursor.encode()).decode()
    except (ValueError, UnicodeDecodeError):
        raise _SlackError("invalid_cursor") from None
    if not text.startswith(prefix):
        raise _SlackError("invalid_cursor")
    return text[len(prefix) :]


class FakeSlack(LoopbackServer):
    """A fake Slack workspace serving the Web API and Socket Mode on 127.0.0.1."""

    def __init__(
        self,
        bot_token: str = "xoxb-test-token",
        app_token: str = "xapp-test-token",
        bot_user_id: str = "UBOT",
        bot_id: str = "BBOT",
        team_id: str = "T1",
        enterprise_id: str | None = None,
        ack_timeout: float | None = 3.0,
        port: int = 0,
        app_id: str = "A1",
        bot_name: str = "bot",
        append_min_interval: float | None = None,
        spread_events: bool = False,
    ) -> None:
        """Configure the workspace (of Enterprise Grid organisation ``enterprise_id``, if given); ``ack_timeout=None``
        disables redelivery.

        ``spread_events``: deliver each event to the next open connection in turn
        instead of the newest one.

        ``append_min_interval``: seconds that must pass between two calls on one
        stream before an ``appendStream`` is accepted (else HTTP 429).
        """
        super().__init__(port)
        self.bot_token = bot_token
        self.app_token = app_token
        self.bot_user_id = bot_user_id
        self.bot_id = bot_id
        self.team_id = team_id
        self.enterprise_id = enterprise_id
        self.app_id = app_id
        self.bot_name = bot_name
        self.ack_timeout = ack_timeout
        self.append_min_interval = append_min_interval
        self.spread_events = spread_events
        self._lock = threading.RLock()
        self._mention = re.compile(rf"<@{re.escape(bot_user_id)}(\|[^>]*)?>")
        # world
        self._users: dict[str, dict[str, Any]] = {}
        self._not_visible: set[str] = set()
        self._channels: dict[str, _Channel] = {}
        self._last_us = 0
        self._event_seq = 0
        # socket mode
        self._conns: list[_Connection] = []
        self._tickets: set[str] = set()
        self._connection_count = 0
        self._turn = 0  # spread_events: how many envelopes were delivered
        self._deliveries: dict[int, int] = {}  # connection number -> envelopes delivered to it
        self._payloads: dict[str, dict[str, Any]] = {}  # event_id -> payload
        self._envelope_events: dict[str, str] = {}  # envelope_id -> event_id
        self._envelope_sent: dict[str, float] = {}  # envelope_id -> monotonic time it was queued
        self._acked_events: set[str] = set()
        self._injections: dict[str, list[_Injection]] = {}
        self._fault: str | None = None
        self._holder: socket.socket | None = None  # "refuse": holds the port, never listening
        self._chaos_rate = 0.0
        self._chaos_random = random.Random()
        # recordings
        self._web_calls: list[tuple[str, dict[str, Any]]] = []
        self._web_call_ports: list[tuple[str, int]] = []
        self._acks: list[str] = []
        self._ack_frames: list[dict[str, Any]] = []
        self._ack_latencies: list[float] = []
        self._envelopes: list[dict[str, Any]] = []
        self._posted: list[dict[str, Any]] = []
        self._reactions: list[tuple[str, str, str]] = []
        self._streams: dict[tuple[str, str], _Stream] = {}
        self._stream_refusal: str | None = None
        self._top_level_refusal: str | None = None
        self.add_user(bot_user_id, bot_name, is_bot=True, bot_id=bot_id)

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/api/{method}", self._handle_api)
        app.router.add_get("/link/", self._handle_ws)
        app.router.add_get("/_fake/state", self._handle_state)
        app.router.add_post("/_fake/{method}", self._handle_control)
        return app

    async def _before_cleanup(self) -> None:
        await asyncio.gather(*(conn.ws.close(code=1001) for conn in list(self._conns)))
        if self._holder is not None:
            self._holder.close()

    # ------------------------------------------------------------------ properties

    @property
    def base_url(self) -> str:
        """Web API base URL for ``AsyncWebClient(base_url=...)``."""
        return f"http://127.0.0.1:{self.port}/api/"

    @property
    def web_calls(self) -> list[tuple[str, dict[str, Any]]]:
        """Every Web API call received: (method, params without token)."""
        with self._lock:
            return copy.deepcopy(self._web_calls)

    @property
    def web_call_ports(self) -> list[tuple[str, int]]:
        """Every Web API call received: (method, the client's port), which tells the connections it came over."""
        with self._lock:
            return list(self._web_call_ports)

    @property
    def acks(self) -> list[str]:
        """Envelope ids acked by clients, in arrival order."""
        with self._lock:
            return list(self._acks)

    @property
    def ack_latencies(self) -> list[float]:
        """Seconds from queueing each envelope to its first ack, in ack order."""
        with self._lock:
            return list(self._ack_latencies)

    @property
    def ack_frames(self) -> list[dict[str, Any]]:
        """Full ack frames (``envelope_id`` and optional ``payload``)."""
        with self._lock:
            return copy.deepcopy(self._ack_frames)

    @property
    def envelopes(self) -> list[dict[str, Any]]:
        """Every envelope pushed to a client (excluding hello/disconnect)."""
        with self._lock:
            return copy.deepcopy(self._envelopes)

    @property
    def posted(self) -> list[dict[str, Any]]:
        """Bot's chat.postMessage / chat.update / chat.stopStream (a streamed message, finished):
        dicts with method, channel, ts, text, thread_ts, metadata, and ``markdown``: whether the text is
        standard Markdown (``markdown_text``, as a stream's always is) rather than Slack's mrkdwn (``text``)."""
        with self._lock:
            return copy.deepcopy(self._posted)

    @property
    def reactions(self) -> list[tuple[str, str, str]]:
        """Reactions added through reactions.add: (channel, ts, name)."""
        with self._lock:
            return list(self._reactions)

    @property
    def streams(self) -> list[dict[str, Any]]:
        """Streamed messages in start order: channel, ts, thread_ts, recipient ids, ``streaming``,
        ``calls`` (method, time, markdown, chunks of each accepted call), ``tasks`` (id -> latest
        task_update), ``task_history`` and ``plan_title``."""
        with self._lock:
            return copy.deepcopy([stream.record() for stream in self._streams.values()])

    @property
    def connected(self) -> bool:
        """True while at least one Socket Mode connection is open."""
        return self.open_connections > 0

    @property
    def open_connections(self) -> int:
        """Number of currently open Socket Mode connections (silently dropped ones not counted)."""
        with self._lock:
            return sum(1 for c in self._conns if not c.ws.closed and not c.silent)

    @property
    def deliveries(self) -> dict[int, int]:
        """Envelopes delivered per connection (numbered 1.. in the order they were accepted)."""
        with self._lock:
            return dict(self._deliveries)

    @property
    def connection_count(self) -> int:
        """Number of Socket Mode connections accepted since start."""
        with self._lock:
            return self._connection_count

    def messages(self, channel: str) -> list[dict[str, Any]]:
        """All stored messages of a channel (replies included), oldest first."""
        with self._lock:
            return copy.deepcopy(self._get_channel(channel).messages)

    # ------------------------------------------------------------------ world set-up

    def add_user(
        self,
        user_id: str,
        name: str,
        display_name: str | None = None,
        real_name: str | None = None,
        is_bot: bool = False,
        bot_id: str | None = None,
        team_id: str | None = None,
        enterprise_id: str | None = None,
        visible: bool = True,
        guest: str | None = None,
    ) -> None:
        """Register a user returned by users.info; ``team_id``: the workspace they belong to (another one's: a
        person of another organisation, Slack Connect), ``enterprise_id``: the Enterprise Grid organisation of
        that workspace, if any (by default, the fake's own for a user of its workspace). Not ``visible``:
        users.info refuses them with ``user_not_visible`` (someone Slack will not show the bot). ``guest``:
        "multi" or "single", a multi- or single-channel guest of the workspace (`is_restricted`,
        `is_ultra_restricted`)."""
        real = real_name if real_name is not None else name
        team = team_id or self.team_id
        enterprise_id = enterprise_id or (None if team_id else self.enterprise_id)
        user = {
            "id": user_id,
            "team_id": team,
            "name": name,
            "real_name": real,
            "deleted": False,
            "is_bot": is_bot,
            "is_app_user": False,
            "is_restricted": guest is not None,
            "is_ultra_restricted": guest == "single",
            "profile": {"display_name": display_name or "", "real_name": real, "team": team},
        }
        if bot_id:
            user["profile"]["bot_id"] = bot_id
        if enterprise_id:
            user["enterprise_user"] = {"id": user_id, "enterprise_id": enterprise_id, "teams": [team]}
        with self._lock:
            self._users[user_id] = user
            if not visible:
                self._not_visible.add(user_id)

    def add_channel(
        self,
        channel_id: str,
        name: str,
        is_private: bool = False,
        is_im: bool = False,
        is_mpim: bool = False,
        members: tuple[str, ...] | list[str] = (),
        bot_member: bool = True,
        is_ext_shared: bool = False,
    ) -> None:
        """Create a conversation; the bot is a member unless ``bot_member=False``; ``is_ext_shared``: with people
        of another organisation (a DM or group DM with them, Slack Connect)."""
        member_list = [m for m in members if m != self.bot_user_id]
        if bot_member:
            member_list.append(self.bot_user_id)
        with self._lock:
            self._channels[channel_id] = _Channel(
                channel_id, name, is_private, is_im, is_mpim, member_list, int(time.time()), is_ext_shared=is_ext_shared
            )

    # ------------------------------------------------------------------ driving

    def post_message(
        self,
        channel: str,
        user: str,
        text: str,
        thread_ts: str | None = None,
        ts: str | None = None,
        subtype: str | None = None,
        bot_id: str | None = None,
        emit: bool = True,
        username: str | None = None,
    ) -> str:
        """Store a message from ``user`` and (if ``emit``) push its events; returns its ts.

        ``username`` is the name an integration posts under (with ``subtype="bot_message"``).
        """
        with self._lock:
            ch = self._get_channel(channel)
            extra = {"subtype": subtype} if subtype else {}
            if bot_id:
                extra["bot_id"] = bot_id
            if username:
                extra["username"] = username
            msg = self._store_message(ch, user, text, thread_ts, ts, extra)
            if emit:
                self._emit_message(ch, msg)
            return msg["ts"]

    def edit_message(self, channel: str, ts: str, new_text: str, emit: bool = True) -> None:
        """Change a message's text and emit ``message_changed``."""
        with self._lock:
            ch = self._get_channel(channel)
            self._edit(ch, ts, new_text, emit)

    def delete_message(self, channel: str, ts: str, emit: bool = True) -> None:
        """Remove a message and emit ``message_deleted``."""
        with self._lock:
            ch = self._get_channel(channel)
            msg = self._find_message(ch, ts)
            if msg is None:
                raise KeyError(f"no message {ts} in {channel}")
            ch.messages.remove(msg)
            root = msg.get("thread_ts")
            if root and root != ts:
                self._recount_thread(ch, root)
            if emit and self._bot_in(ch):
                event_ts = self._next_ts()
                event = {
                    "type": "message",
                    "subtype": "message_deleted",
                    "hidden": True,
                    "deleted_ts": ts,
                    "channel": ch.id,
                    "previous_message": copy.deepcopy(msg),
                    "ts": event_ts,
                    "event_ts": event_ts,
                    "channel_type": ch.channel_type,
                }
                if root and root != ts:
                    event["thread_ts"] = root
                self._emit(event)

    def delete_thread_parent(self, channel: str, ts: str) -> None:
        """Delete a message that has replies as Slack does: it stays as a tombstone ("This message was deleted.",
        subtype ``tombstone``, by USLACKBOT), its thread goes on, and ``message_changed`` is emitted with it."""
        with self._lock:
            ch = self._get_channel(channel)
            msg = self._find_message(ch, ts)
            if msg is None or not msg.get("reply_count"):
                raise KeyError(f"no message {ts} with replies in {channel}")
            previous = copy.deepcopy(msg)
            for key in ("blocks", "metadata", "edited", "files", "bot_id", "app_id", "team"):
                msg.pop(key, None)
            msg.update(
                subtype="tombstone", text="This message was deleted.", user="USLACKBOT", hidden=True,
                parent_user_id="USLACKBOT",
            )
            if self._bot_in(ch):
                self._emit_changed(ch, msg, previous, self._next_ts())

    def convert_to_private(self, channel: str) -> None:
        """Make a public channel private and emit ``channel_converted_to_private``."""
        with self._lock:
            ch = self._get_channel(channel)
            ch.is_private = True
            if self._bot_in(ch):
                self._emit({"type": "channel_converted_to_private", "channel": ch.id, "user": "UADMIN"})

    def share_externally(self, channel: str, team_id: str = "TOTHER") -> None:
        """Share a channel with another organisation (Slack Connect) and emit ``channel_shared``."""
        with self._lock:
            ch = self._get_channel(channel)
            ch.is_ext_shared = True
            if self._bot_in(ch):
                self._emit({"type": "channel_shared", "connected_team_id": team_id, "channel": ch.id})

    def delete_channel(self, channel: str) -> None:
        """Delete a channel and its messages: ``channel_deleted`` goes to every connection of the workspace, members
        or not (``group_deleted``, for a private channel, to its members only). Then no method finds it."""
        with self._lock:
            ch = self._channels.pop(channel)
            if not ch.is_private:
                self._emit({"type": "channel_deleted", "channel": ch.id})
            elif self._bot_in(ch):
                self._emit({"type": "group_deleted", "channel": ch.id})

    def add_member(self, channel: str, user: str) -> None:
        """Add someone to a channel and tell its members (the newcomer included) ``member_joined_channel``."""
        with self._lock:
            ch = self._get_channel(channel)
            if user not in ch.members:
                ch.members.append(user)
            if self._bot_in(ch):
                event = {"type": "member_joined_channel", "user": user, "channel": ch.id, "team": self.team_id}
                self._emit({**event, "channel_type": "G" if ch.is_private else "C"})

    def remove_member(self, channel: str, user: str) -> None:
        """Remove someone from a channel; the bot itself gets ``channel_left`` / ``group_left``.

        Everyone else's removal is told to the remaining members as ``member_left_channel``.
        """
        with self._lock:
            ch = self._get_channel(channel)
            bot_was_in = self._bot_in(ch)
            ch.members = [m for m in ch.members if m != user]
            if user == self.bot_user_id:
                kind = "group_left" if ch.is_private else "channel_left"
                self._emit({"type": kind, "channel": ch.id, "actor_id": "UADMIN"})
            elif bot_was_in:
                event = {"type": "member_left_channel", "user": user, "channel": ch.id, "team": self.team_id}
                self._emit({**event, "channel_type": "G" if ch.is_private else "C"})

    def emit_event(self, event: dict[str, Any]) -> str:
        """Push an arbitrary event (``event_ts`` filled in if missing); returns its event_id."""
        event = copy.deepcopy(event)
        with self._lock:
            event.setdefault("event_ts", self._next_ts())
            return self._emit(event)

    def redeliver(self, event_id: str, times: int = MAX_RETRIES) -> None:
        """Send an event again ``times`` times (retry_attempt 1..times), acked or not."""
        with self._lock:
            payload = self._payloads[event_id]
        for attempt in range(1, times + 1):
            self._in_loop(self._deliver, payload, attempt, "timeout", False)

    def disconnect(self, kind: str = "message") -> None:
        """Make clients reconnect.

        ``kind``: "message" sends ``{"type": "disconnect"}``, "close" closes the
        WebSocket (close frame), "abort" drops the TCP connection without one,
        "silent" keeps it open but never reads nor writes on it again (a network
        gone dead: no close, no pong; events go to no one until a new connection).
        """
        if kind not in ("message", "close", "abort", "silent"):
            raise ValueError(f"unknown disconnect kind {kind!r}")
        frame = {"type": "disconnect", "reason": "refresh_requested", "debug_info": {"host": "fake-applink"}}
        item = {"message": json.dumps(frame), "close": _CLOSE, "abort": _ABORT, "silent": _SILENCE}[kind]
        if kind == "silent":
            with self._lock:
                for conn in self._conns:
                    conn.silent = True

        def push() -> None:
            for conn in self._conns:
                conn.outbox.put_nowait(item)

        self._in_loop(push)

    def set_fault(self, fault: str | None) -> None:
        """Make the whole of Slack unreachable: "refuse" (connections refused), "5xx" (every
        Web API call answers HTTP 503 with an HTML page), or None (back to normal)."""
        if fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}")
        with self._lock:
            previous, self._fault = self._fault, fault
        if (previous == "refuse") != (fault == "refuse"):
            asyncio.run_coroutine_threadsafe(self._listen(fault != "refuse"), self._loop).result(timeout=10)

    async def _listen(self, listening: bool) -> None:
        """Stop or resume accepting connections on the same port (open connections stay).

        Meanwhile a socket that never listens holds the port: connections are refused, and no other process
        takes the port (it did, and listening again failed) but in the moment between the two closing it.
        """
        if listening:
            assert self._holder is not None
            await web.TCPSite(self._runner, "127.0.0.1", self.port).start()  # beside the holder (both reuse it)
            self._holder.close()
            self._holder = None
        else:
            for site in list(self._runner.sites):
                await site.stop()
            self._holder = socket.socket()
            self._holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._holder.bind(("127.0.0.1", self.port))

    def inject_error(self, method: str, error: str = "internal_error", times: int = 1, after: bool = False) -> None:
        """Answer the next ``times`` calls of ``method`` with ``{"ok": false, "error": error}``; with ``after``, the
        call takes effect first, as Slack says an ``internal_error`` or ``fatal_error`` may follow some of the work."""
        with self._lock:
            self._injections.setdefault(method, []).append(_Injection("error", error, times, after))

    def clear_injections(self, method: str) -> None:
        """Answer ``method`` normally again, whatever was injected for it and not used up."""
        with self._lock:
            self._injections.pop(method, None)

    def inject_rate_limit(self, method: str, times: int = 1, retry_after: int = 1) -> None:
        """Answer the next ``times`` calls of ``method`` with HTTP 429 and ``Retry-After``."""
        with self._lock:
            self._injections.setdefault(method, []).append(_Injection("rate_limit", retry_after, times))

    def refuse_streaming(self, error: str | None = "feature_not_enabled") -> None:
        """Answer every chat.*Stream call with ``error`` (e.g. not_allowed, unknown_method); None accepts again."""
        with self._lock:
            self._stream_refusal = error

    def refuse_top_level_streams(self, error: str | None = "invalid_arguments") -> None:
        """Answer chat.startStream without ``thread_ts`` in a DM too with ``error`` (e.g. missing_recipient_user_id,
        as some workspaces want the recipient ids in DMs as well); None takes them again."""
        with self._lock:
            self._top_level_refusal = error
    def inject_server_error(self, method: str, status: int = 500, times: int = 1, after: bool = False) -> None:
        """Answer the next ``times`` calls of ``method`` with HTTP ``status``.

        With ``after``, the call takes effect first (a post is stored and its event sent),
        as when Slack fails after doing the work.
        """
        with self._lock:
            self._injections.setdefault(method, []).append(_Injection("server_error", status, times, after))

    def inject_delay(self, method: str, seconds: float, times: int = 1) -> None:
        """Let the next ``times`` calls of ``method`` take effect at once but answer ``seconds`` later."""
        with self._lock:
            self._injections.setdefault(method, []).append(_Injection("delay", seconds, times, True))

    def inject_drop(self, method: str, times: int = 1) -> None:
        """Let the next ``times`` calls of ``method`` take effect, then drop their connection unanswered: Slack
        acted, and the client fails with a dropped connection (aiohttp's ServerDisconnectedError)."""
        with self._lock:
            self._injections.setdefault(method, []).append(_Injection("drop", None, times, True))

    def inject_cursor_loop(self, method: str, times: int = 1) -> None:
        """Answer the next ``times`` calls of the paginated ``method`` with its first page (whatever cursor they
        carry) and the cursor ``LOOP_CURSOR`` for the next one: a cursor that leads back to where it started."""
        with self._lock:
            self._injections.setdefault(method, []).append(_Injection("cursor_loop", None, times))

    def set_chaos(self, rate: float, seed: int | None = None) -> None:
        """Fail a random ``rate`` of Web API calls (not auth.test nor apps.connections.open).

        A failure is HTTP 429 (Retry-After 1) or 500; half of the failed chat.postMessage
        calls store the post before answering 500.
        """
        with self._lock:
            self._chaos_rate = rate
            self._chaos_random = random.Random(seed)

    # ------------------------------------------------------------------ waiting

    def wait_for(self, predicate: Callable[[], Any], timeout: float = WAIT_SECONDS, what: str | None = None) -> Any:
        """Poll ``predicate`` until it returns a truthy value, which is returned.

        Raises TimeoutError describing what was awaited and the recent traffic.
        """
        deadline = time.monotonic() + timeout
        while True:
            result = predicate()
            if result:
                return result
            if time.monotonic() >= deadline:
                raise TimeoutError(self._timeout_message(predicate, timeout, what))
            time.sleep(0.01)

    async def async_wait_for(
        self, predicate: Callable[[], Any], timeout: float = WAIT_SECONDS, what: str | None = None
    ) -> Any:
        """Like ``wait_for`` but sleeps with asyncio, for use inside coroutines."""
        deadline = time.monotonic() + timeout
        while True:
            result = predicate()
            if result:
                return result
            if time.monotonic() >= deadline:
                raise TimeoutError(self._timeout_message(predicate, timeout, what))
            await asyncio.sleep(0.01)

    def wait_connected(self, timeout: float = WAIT_SECONDS) -> None:
        """Wait until a Socket Mode client is connected."""
        self.wait_for(lambda: self.connected, timeout, "a Socket Mode connection")

    def wait_for_posts(self, n: int, timeout: float = WAIT_SECONDS) -> list[dict[str, Any]]:
        """Wait until the bot posted at least ``n`` messages (chat.postMessage, or a stream stopped); returns them."""

        def posts() -> list[dict[str, Any]]:
            found = [p for p in self.posted if p["method"] in ("chat.postMessage", "chat.stopStream")]
            return found if len(found) >= n else []

        return self.wait_for(posts, timeout, f"{n} posted message(s)")

    def wait_for_acks(self, n: int, timeout: float = WAIT_SECONDS) -> list[str]:
        """Wait until at least ``n`` envelopes were acked; returns the acked ids."""
        return self.wait_for(lambda: len(self.acks) >= n and self.acks, timeout, f"{n} ack(s)")

    def _timeout_message(self, predicate: Callable[[], Any], timeout: float, what: str | None) -> str:
        with self._lock:
            methods = [m for m, _ in self._web_calls[-10:]]
            summary = (
                f"connected={self.connected} connections={self._connection_count} "
                f"envelopes={len(self._envelopes)} acks={len(self._acks)} posted={len(self._posted)} "
                f"last web calls={methods}"
            )
        label = what or getattr(predicate, "__name__", repr(predicate))
        return f"timed out after {timeout}s waiting for {label}; {summary}"

    # ------------------------------------------------------------------ world internals (hold the lock)

    def _get_channel(self, channel_id: str) -> _Channel:
        try:
            return self._channels[channel_id]
        except KeyError:
            raise KeyError(f"unknown channel {channel_id!r}; add it with add_channel()") from None

    def _bot_in(self, ch: _Channel) -> bool:
        return self.bot_user_id in ch.members

    def _team_of(self, user: str) -> str:
        """The workspace of `user`, as a message of theirs carries it (``team``)."""
        return (self._users.get(user) or {}).get("team_id", self.team_id)

    def _next_ts(self, ts: str | None = None) -> str:
        if ts is not None:
            us = int(_ts_key(ts) * 1_000_000)
            self._last_us = max(self._last_us, us)
            return ts
        us = max(int(time.time() * 1_000_000), self._last_us + 1)
        self._last_us = us
        return f"{us // 1_000_000}.{us % 1_000_000:06d}"

    def _find_message(self, ch: _Channel, ts: str) -> dict[str, Any] | None:
        for msg in ch.messages:
            if msg["ts"] == ts:
                return msg
        return None

    def _store_message(
        self,
        ch: _Channel,
        user: str,
        text: str,
        thread_ts: str | None,
        ts: str | None,
        extra: dict[str, Any],
    ) -> dict[str, Any]:
        """Create a message (a thread reply when ``thread_ts``) and update its parent."""
        root = None
        if thread_ts:
            parent = self._find_message(ch, thread_ts)
            if parent is None:
                raise KeyError(f"no thread parent {thread_ts} in {ch.id}")
            root = parent.get("thread_ts", parent["ts"])
        if ts is not None and self._find_message(ch, ts) is not None:
            raise ValueError(f"duplicate ts {ts} in {ch.id}")
        msg: dict[str, Any] = {"type": "message", "user": user, "text": text, "ts": self._next_ts(ts)}
        msg.update(extra)
        msg["team"] = self._team_of(user)
        if root:
            msg["thread_ts"] = root
            msg["parent_user_id"] = self._find_message(ch, root)["user"]
        bisect.insort(ch.messages, msg, key=lambda m: _ts_key(m["ts"]))
        if root:
            self._recount_thread(ch, root)
        return msg

    def _recount_thread(self, ch: _Channel, root: str) -> None:
        parent = self._find_message(ch, root)
        if parent is None:
            return
        replies = [m for m in ch.messages if m.get("thread_ts") == root and m["ts"] != root]
        for key in _THREAD_SUMMARY:
            parent.pop(key, None)
        parent["thread_ts"] = root
        if replies:
            users = list(dict.fromkeys(m["user"] for m in replies))
            parent.update(
                reply_count=len(replies),
                reply_users_count=len(users),
                latest_reply=replies[-1]["ts"],
                reply_users=users,
            )

    def _edit(
        self, ch: _Channel, ts: str, text: str, emit: bool, metadata: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Change a message's text, and its metadata unless `metadata` is None (``{}`` removes it)."""
        msg = self._find_message(ch, ts)
        if msg is None:
            raise KeyError(f"no message {ts} in {ch.id}")
        previous = copy.deepcopy(msg)
        event_ts = self._next_ts()
        msg["text"] = text
        if metadata == {}:
            msg.pop("metadata", None)
        elif metadata is not None:
            msg["metadata"] = metadata
        msg["edited"] = {"user": msg.get("user"), "ts": event_ts}
        if emit and self._bot_in(ch):
            self._emit_changed(ch, msg, previous, event_ts)
        return msg

    def _emit_changed(self, ch: _Channel, msg: dict[str, Any], previous: dict[str, Any], event_ts: str) -> None:
        """Emit the ``message_changed`` event of stored message `msg`, which was `previous`."""
        self._emit(
            {
                "type": "message",
                "subtype": "message_changed",
                "hidden": True,
                "message": copy.deepcopy(msg),
                "previous_message": previous,
                "channel": ch.id,
                "ts": event_ts,
                "event_ts": event_ts,
                "channel_type": ch.channel_type,
            }
        )

    def _emit_message(self, ch: _Channel, msg: dict[str, Any]) -> None:
        """Emit the ``message`` event of a stored message, plus ``app_mention`` if it mentions the bot."""
        if not self._bot_in(ch):
            return
        event = {k: v for k, v in msg.items() if k not in _THREAD_SUMMARY}
        event.update(channel=ch.id, event_ts=msg["ts"], channel_type=ch.channel_type)
        self._emit(event)
        own = msg.get("bot_id") == self.bot_id
        mentionable = msg.get("subtype") in (None, "thread_broadcast", "file_share")
        if not own and mentionable and self._mention.search(msg["text"]):
            mention = {
                "type": "app_mention",
                "user": msg["user"],
                "text": msg["text"],
                "ts": msg["ts"],
                "team": self._team_of(msg["user"]),
                "channel": ch.id,
                "event_ts": msg["ts"],
            }
            if "thread_ts" in msg:
                mention["thread_ts"] = msg["thread_ts"]
            self._emit(mention)

    # ------------------------------------------------------------------ socket mode internals

    def _in_loop(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on the server loop, in call order, without waiting."""
        if self._loop is None:
            raise RuntimeError("FakeSlack is not started")
        self._loop.call_soon_threadsafe(fn, *args)

    def _emit(self, event: dict[str, Any]) -> str:
        """Wrap an event in an event_callback payload and deliver it; returns the event_id."""
        with self._lock:
            self._event_seq += 1
            event_id = f"Ev{self._event_seq:08X}"
            payload = {
                "token": "fake-verification-token",
                "team_id": self.team_id,
                "context_team_id": self.team_id,
                "api_app_id": self.app_id,
                "event": event,
                "type": "event_callback",
                "event_id": event_id,
                "event_time": int(time.time()),
                "authorizations": [
                    {
                        "enterprise_id": None,
                        "team_id": self.team_id,
                        "user_id": self.bot_user_id,
                        "is_bot": True,
                        "is_enterprise_install": False,
                    }
                ],
                "is_ext_shared_channel": False,
                "event_context": f"4-fake-{event_id}",
            }
            self._payloads[event_id] = payload
        if self._loop is not None:
            self._in_loop(self._deliver, payload, 0, "", True)
        return event_id

    def _live_connection(self) -> _Connection | None:
        live = [conn for conn in self._conns if not conn.ws.closed and not conn.silent]
        if not live:
            return None
        if not self.spread_events:
            return live[-1]
        self._turn += 1
        return live[self._turn % len(live)]

    def _deliver(self, payload: dict[str, Any], attempt: int, reason: str, retry: bool) -> None:
        """(Loop thread) Push one envelope to the newest connection; arm the ack timer."""
        conn = self._live_connection()
        if conn is None and attempt == 0:
            return  # nobody connected: the event is lost, the message stays in history
        if conn is not None:
            envelope = {
                "envelope_id": str(uuid.uuid4()),
                "payload": payload,
                "type": "events_api",
                "accepts_response_payload": False,
                "retry_attempt": attempt,
                "retry_reason": reason,
            }
            with self._lock:
                self._envelope_events[envelope["envelope_id"]] = payload["event_id"]
                self._envelopes.append(copy.deepcopy(envelope))
                self._envelope_sent[envelope["envelope_id"]] = time.monotonic()
                self._deliveries[conn.number] = self._deliveries.get(conn.number, 0) + 1
            conn.outbox.put_nowait(json.dumps(envelope))
        if retry and self.ack_timeout is not None and attempt < MAX_RETRIES:
            self._loop.call_later(self.ack_timeout, self._retry_unacked, payload, attempt + 1)

    def _retry_unacked(self, payload: dict[str, Any], attempt: int) -> None:
        with self._lock:
            acked = payload["event_id"] in self._acked_events
        if not acked:
            self._deliver(payload, attempt, "timeout", True)

    async def _handle_ws(self, request: web.Request) -> web.StreamResponse:
        with self._lock:  # tickets stay valid: slack_sdk retries a failed connect with the same URL
            valid = request.query.get("ticket") in self._tickets
        if not valid:
            return web.Response(status=401, text="invalid ticket")
        ws = web.WebSocketResponse(timeout=1.0)  # autoping answers pings; timeout bounds close()
        await ws.prepare(request)
        conn = _Connection(ws, request)
        with self._lock:
            self._conns.append(conn)
            self._connection_count += 1
            conn.number = self._connection_count
            hello = {
                "type": "hello",
                "num_connections": sum(1 for c in self._conns if not c.ws.closed),
                "debug_info": {"host": "fake-applink", "build_number": 1, "approximate_connection_time": 18060},
                "connection_info": {"app_id": self.app_id},
            }
        conn.outbox.put_nowait(json.dumps(hello))
        writer = asyncio.create_task(self._write_loop(conn))
        try:
            async for msg in ws:
                if msg.type == WSMsgType.TEXT:
                    self._on_client_frame(msg.data)
        finally:
            if conn.closing:
                await writer  # let close() finish its handshake
            else:
                writer.cancel()
            with self._lock:
                self._conns.remove(conn)
        return ws

    async def _write_loop(self, conn: _Connection) -> None:
        while True:
            item = await conn.outbox.get()
            if item is _CLOSE:
                conn.closing = True
                await conn.ws.close(code=1001)
                return
            if item is _ABORT:
                if conn.request.transport is not None:
                    conn.request.transport.abort()
                return
            if item is _SILENCE:
                if conn.request.transport is not None:
                    conn.request.transport.pause_reading()  # pings go unanswered
                return
            try:
                await conn.ws.send_str(item)
            except ConnectionError:
                return

    def _on_client_frame(self, data: str) -> None:
        try:
            frame = json.loads(data)
        except ValueError:
            return
        if isinstance(frame, dict) and "envelope_id" in frame:
            with self._lock:
                self._acks.append(frame["envelope_id"])
                self._ack_frames.append(frame)
                sent = self._envelope_sent.pop(frame["envelope_id"], None)
                if sent is not None:
                    self._ack_latencies.append(time.monotonic() - sent)
                event_id = self._envelope_events.get(frame["envelope_id"])
                if event_id:
                    self._acked_events.add(event_id)

    # ------------------------------------------------------------------ Web API

    async def _handle_api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        if self._fault == "5xx":
            return web.Response(status=503, text="<html><body>Service Unavailable</body></html>", content_type="text/html")
        params: dict[str, Any] = dict(request.query)
        if request.method == "POST" and request.can_read_body:
            if request.content_type == "application/json":
                try:
                    body = await request.json()
                except ValueError:
                    return web.json_response({"ok": False, "error": "invalid_json"})
                if isinstance(body, dict):
                    params.update(body)
            else:
                form = await request.post()
                params.update({k: v for k, v in form.items() if isinstance(v, str)})
        token = params.pop("token", None)
        auth = request.headers.get("Authorization", "")
        if auth.lower().startswith("bearer "):
            token = auth[7:].strip()
        with self._lock:
            self._web_calls.append((method, copy.deepcopy(params)))
            peer = request.transport.get_extra_info("peername") if request.transport is not None else None
            self._web_call_ports.append((method, peer[1] if peer else 0))
            if method in ("chat.startStream", "chat.appendStream", "chat.stopStream") and self._stream_refusal:
                if token != self.bot_token:
                    return web.json_response({"ok": False, "error": "invalid_auth"})
                return web.json_response({"ok": False, "error": self._stream_refusal})
            handler = self._api_methods().get(method)
            if handler is None:
                return web.json_response({"ok": False, "error": "unknown_method"})
            expected = self.app_token if method == "apps.connections.open" else self.bot_token
            if token != expected:
                return web.json_response({"ok": False, "error": "invalid_auth"})
            injection = self._take_injection(method) or self._chaos(method)
            if injection is not None and injection.kind == "rate_limit":
                return web.json_response(
                    {"ok": False, "error": "ratelimited"},
                    status=429,
                    headers={"Retry-After": str(injection.value)},
                )
            if injection is not None and injection.kind == "error" and not injection.after:
                if injection.value == "message_not_in_streaming_state":
                    self._end_stream(params)
                return web.json_response({"ok": False, "error": injection.value})
            if method == "chat.appendStream" and self._append_too_soon(params):
                return web.json_response(
                    {"ok": False, "error": "ratelimited"}, status=429, headers={"Retry-After": "1"}
                )
            if injection is not None and injection.kind == "server_error" and not injection.after:
                return web.Response(status=injection.value, text="server error")
            if injection is not None and injection.kind == "cursor_loop":
                params.pop("cursor", None)
            try:
                result = handler(params)
                if injection is not None and injection.kind == "cursor_loop":
                    result = {**result, "has_more": True, "response_metadata": {"next_cursor": LOOP_CURSOR}}
            except _SlackError as e:
                return web.json_response({"ok": False, "error": str(e)})
        if injection is not None and injection.kind == "server_error":
            return web.Response(status=injection.value, text="server error")
        if injection is not None and injection.kind == "error":
            return web.json_response({"ok": False, "error": injection.value})
        if injection is not None and injection.kind == "delay":
            await asyncio.sleep(injection.value)
        if injection is not None and injection.kind == "drop" and request.transport is not None:
            request.transport.abort()  # the response below is never sent
        return web.json_response({"ok": True, **result})

    def _chaos(self, method: str) -> _Injection | None:
        if method in ("auth.test", "apps.connections.open") or self._chaos_random.random() >= self._chaos_rate:
            return None
        if self._chaos_random.random() < 0.5:
            return _Injection("rate_limit", 1, 1)
        after = method == "chat.postMessage" and self._chaos_random.random() < 0.5
        return _Injection("server_error", 500, 1, after)

    def _take_injection(self, method: str) -> _Injection | None:
        queue = self._injections.get(method)
        if not queue:
            return None
        injection = queue[0]
        injection.remaining -= 1
        if injection.remaining <= 0:
            queue.pop(0)
        return injection

    def _api_methods(self) -> dict[str, Callable[[dict[str, Any]], dict[str, Any]]]:
        return {
            "auth.test": self._api_auth_test,
            "apps.connections.open": self._api_connections_open,
            "chat.postMessage": self._api_post_message,
            "chat.update": self._api_chat_update,
            "chat.delete": self._api_chat_delete,
            "chat.startStream": self._api_start_stream,
            "chat.appendStream": self._api_append_stream,
            "chat.stopStream": self._api_stop_stream,
            "reactions.add": self._api_reactions_add,
            "users.info": self._api_users_info,
            "users.conversations": self._api_users_conversations,
            "conversations.info": self._api_conversations_info,
            "conversations.history": self._api_conversations_history,
            "conversations.replies": self._api_conversations_replies,
            "conversations.members": self._api_conversations_members,
        }

    def _channel_param(self, params: dict[str, Any]) -> _Channel:
        ref = str(params.get("channel") or "")
        if ref in self._channels:
            return self._channels[ref]
        for ch in self._channels.values():
            if ref.lstrip("#") == ch.name:
                return ch
        raise _SlackError("channel_not_found")

    @staticmethod
    def _limit(params: dict[str, Any], default: int) -> int:
        try:
            limit = int(params.get("limit") or 0)
        except (TypeError, ValueError):
            raise _SlackError("invalid_limit") from None
        return min(limit, 1000) if limit > 0 else default

    @staticmethod
    def _in_range(ts: str, params: dict[str, Any]) -> bool:
        try:
            key = _ts_key(ts)
            oldest = _ts_key(str(params.get("oldest") or "0"))
            latest = _ts_key(str(params["latest"])) if params.get("latest") else None
        except InvalidOperation:
            raise _SlackError("invalid_ts_oldest") from None
        if _truthy(params.get("inclusive")):
            return key >= oldest and (latest is None or key <= latest)
        return key > oldest and (latest is None or key < latest)

    def _channel_object(self, ch: _Channel) -> dict[str, Any]:
        obj = {
            "id": ch.id,
            "name": ch.name,
            "name_normalized": ch.name,
            "is_channel": not (ch.is_im or ch.is_mpim),
            "is_group": False,
            "is_im": ch.is_im,
            "is_mpim": ch.is_mpim,
            "is_private": ch.is_private or ch.is_im or ch.is_mpim,
            "is_archived": False,
            "is_general": False,
            "is_ext_shared": ch.is_ext_shared,
            "is_shared": ch.is_ext_shared,
            "is_member": self._bot_in(ch),
            "created": ch.created,
            "num_members": len(ch.members),
        }
        if ch.is_im:
            others = [m for m in ch.members if m != self.bot_user_id]
            obj["user"] = others[0] if others else self.bot_user_id
        return obj

    @staticmethod
    def _page_by_offset(items: list[Any], params: dict[str, Any], limit: int) -> tuple[list[Any], str]:
        start = int(_decode_cursor(params["cursor"], "offset:")) if params.get("cursor") else 0
        page = items[start : start + limit]
        more = start + limit < len(items)
        return page, _encode_cursor(f"offset:{start + limit}") if more else ""

    def _api_auth_test(self, params: dict[str, Any]) -> dict[str, Any]:
        return {
            "url": f"https://fake-{self.team_id.lower()}.slack.com/",
            "team": "Fake Team",
            "user": self.bot_name,
            "team_id": self.team_id,
            "user_id": self.bot_user_id,
            "bot_id": self.bot_id,
            "is_enterprise_install": False,
        } | ({"enterprise_id": self.enterprise_id} if self.enterprise_id else {})

    def _api_connections_open(self, params: dict[str, Any]) -> dict[str, Any]:
        ticket = uuid.uuid4().hex
        self._tickets.add(ticket)
        return {"url": f"ws://127.0.0.1:{self.port}/link/?ticket={ticket}&app_id={self.app_id}"}

    def _api_post_message(self, params: dict[str, Any]) -> dict[str, Any]:
        ch = self._channel_param(params)
        if not self._bot_in(ch):
            raise _SlackError("not_in_channel")
        text, markdown = self._message_text(params)
        if not text and not params.get("blocks"):
            raise _SlackError("no_text")
        thread_ts = params.get("thread_ts") or None
        if thread_ts and self._find_message(ch, str(thread_ts)) is None:
            raise _SlackError("thread_not_found")
        extra: dict[str, Any] = {"bot_id": self.bot_id, "app_id": self.app_id}
        metadata = self._metadata_param(params)
        if metadata:
            extra["metadata"] = metadata
        if thread_ts and _truthy(params.get("reply_broadcast")):
            extra["subtype"] = "thread_broadcast"
        msg = self._store_message(ch, self.bot_user_id, text, thread_ts and str(thread_ts), None, extra)
        self._record_post("chat.postMessage", ch, msg, markdown)
        self._emit_message(ch, msg)
        return {"channel": ch.id, "ts": msg["ts"], "message": copy.deepcopy(msg)}

    def _own_message(self, params: dict[str, Any], refusal: str) -> tuple[_Channel, str]:
        """The channel and ts of the bot's own message that `params` name; `refusal` for another's message."""
        ch = self._channel_param(params)
        ts = str(params.get("ts") or "")
        msg = self._find_message(ch, ts)
        if msg is None:
            raise _SlackError("message_not_found")
        if msg.get("user") != self.bot_user_id:
            raise _SlackError(refusal)
        return ch, ts

    @staticmethod
    def _metadata_param(params: dict[str, Any]) -> dict[str, Any] | None:
        """The ``metadata`` argument of chat.postMessage / chat.update: None when not given, ``{}`` when given
        empty (chat.update then removes the message's metadata), else its event_type and event_payload."""
        metadata = params.get("metadata")
        if isinstance(metadata, str):
            if not metadata:
                return None
            try:
                metadata = json.loads(metadata)
            except ValueError:
                raise _SlackError("invalid_metadata_format") from None
        if metadata is None or metadata == {}:
            return metadata
        if not isinstance(metadata, dict) or not metadata.get("event_type"):
            raise _SlackError("invalid_metadata_format")
        return {"event_type": metadata["event_type"], "event_payload": metadata.get("event_payload") or {}}

    @staticmethod
    def _message_text(params: dict[str, Any]) -> tuple[str, bool]:
        """The text of a chat.postMessage / chat.update, and whether it is standard Markdown (``markdown_text``,
        stored as a stream's is) rather than mrkdwn (``text``). Slack documents ``markdown_text`` as not to be
        combined with ``text`` or ``blocks`` and at most 12,000 characters: the fake refuses either."""
        markdown = params.get("markdown_text")
        if markdown is None:
            return str(params.get("text") or ""), False
        if not isinstance(markdown, str) or params.get("text") or params.get("blocks"):
            raise _SlackError("invalid_arguments")
        if len(markdown) > MARKDOWN_LIMIT:
            raise _SlackError("msg_too_long")
        return markdown, True

    def _api_chat_update(self, params: dict[str, Any]) -> dict[str, Any]:
        """Slack's chat.update: the text is replaced; so is the metadata when given (``{}`` removes it), else it
        is kept."""
        ch, ts = self._own_message(params, "cant_update_message")
        text, markdown = self._message_text(params)
        msg = self._edit(ch, ts, text, emit=True, metadata=self._metadata_param(params))
        self._record_post("chat.update", ch, msg, markdown)
        return {"channel": ch.id, "ts": ts, "text": text, "message": copy.deepcopy(msg)}

    def _api_chat_delete(self, params: dict[str, Any]) -> dict[str, Any]:
        ch, ts = self._own_message(params, "cant_delete_message")
        self._streams.pop((ch.id, ts), None)
        self.delete_message(ch.id, ts)
        return {"channel": ch.id, "ts": ts}

    def _api_start_stream(self, params: dict[str, Any]) -> dict[str, Any]:
        ch = self._channel_param(params)
        if not self._bot_in(ch):
            raise _SlackError("not_in_channel")
        thread_ts = str(params.get("thread_ts") or "") or None
        if thread_ts is None and self._top_level_refusal:
            raise _SlackError(self._top_level_refusal)
        if not ch.is_im:
            if thread_ts is None:
                raise _SlackError("invalid_arguments")  # a top-level stream is only taken in a DM
            if not params.get("recipient_user_id"):
                raise _SlackError("missing_recipient_user_id")
            if not params.get("recipient_team_id"):
                raise _SlackError("missing_recipient_team_id")
        if thread_ts and self._find_message(ch, thread_ts) is None:
            raise _SlackError("thread_not_found")
        mode = str(params.get("task_display_mode") or "timeline")
        if mode not in ("timeline", "plan"):
            raise _SlackError("invalid_arguments")
        markdown, chunks = self._stream_content(params)
        extra: dict[str, Any] = {"bot_id": self.bot_id, "app_id": self.app_id}
        msg = self._store_message(ch, self.bot_user_id, "", thread_ts, None, extra)
        stream = _Stream(
            ch.id,
            msg["ts"],
            thread_ts,
            params.get("recipient_user_id"),
            params.get("recipient_team_id"),
            mode,
        )
        self._streams[(ch.id, msg["ts"])] = stream
        self._stream_write(stream, msg, "chat.startStream", markdown, chunks)
        self._emit_message(ch, msg)
        return {"channel": ch.id, "ts": msg["ts"]}

    def _api_append_stream(self, params: dict[str, Any]) -> dict[str, Any]:
        ch, stream, msg = self._live_stream(params)
        markdown, chunks = self._stream_content(params)
        if not markdown and not chunks:
            raise _SlackError("no_text")
        self._stream_write(stream, msg, "chat.appendStream", markdown, chunks)
        return {"channel": ch.id, "ts": stream.ts}

    def _api_stop_stream(self, params: dict[str, Any]) -> dict[str, Any]:
        ch, stream, msg = self._live_stream(params)
        markdown, chunks = self._stream_content(params)
        metadata = params.get("metadata")
        if isinstance(metadata, str):
            try:
                metadata = json.loads(metadata)
            except ValueError:
                raise _SlackError("invalid_metadata_format") from None
        if metadata is not None and not (isinstance(metadata, dict) and "event_type" in metadata):
            raise _SlackError("invalid_metadata_schema")
        self._stream_write(stream, msg, "chat.stopStream", markdown, chunks)
        stream.streaming = False
        if metadata is not None:
            msg["metadata"] = metadata
        if params.get("blocks"):
            msg["blocks"] = params["blocks"]
        self._record_post("chat.stopStream", ch, msg, True)
        return {"channel": ch.id, "ts": stream.ts, "message": copy.deepcopy(msg)}

    def _live_stream(self, params: dict[str, Any]) -> tuple[_Channel, _Stream, dict[str, Any]]:
        """The channel, stream and message named by ``channel``/``ts``, refused unless it is streaming."""
        ch = self._channel_param(params)
        ts = str(params.get("ts") or "")
        msg = self._find_message(ch, ts)
        if msg is None:
            raise _SlackError("message_not_found")
        stream = self._streams.get((ch.id, ts))
        if stream is None:
            if msg.get("bot_id") != self.bot_id:
                raise _SlackError("message_not_owned_by_app")
            raise _SlackError("message_not_in_streaming_state")
        if not stream.streaming:
            raise _SlackError("message_not_in_streaming_state")
        return ch, stream, msg

    def _end_stream(self, params: dict[str, Any]) -> None:
        """(Holding the lock) End the stream ``channel``/``ts`` name, if any: Slack answers
        message_not_in_streaming_state only of a message it no longer streams (stopped, or expired)."""
        stream = self._streams.get((str(params.get("channel") or ""), str(params.get("ts") or "")))
        if stream is not None:
            stream.streaming = False

    def _append_too_soon(self, params: dict[str, Any]) -> bool:
        """(Holding the lock) An append on a stream whose last call was under ``append_min_interval`` ago."""
        if self.append_min_interval is None:
            return False
        stream = self._streams.get((str(params.get("channel") or ""), str(params.get("ts") or "")))
        return stream is not None and time.monotonic() - stream.last_call < self.append_min_interval

    @staticmethod
    def _stream_content(params: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
        """The ``markdown_text`` and the validated ``chunks`` of a stream call."""
        markdown = params.get("markdown_text")
        if markdown is not None and not isinstance(markdown, str):
            raise _SlackError("invalid_arguments")
        chunks = params.get("chunks")
        if isinstance(chunks, str):
            try:
                chunks = json.loads(chunks)
            except ValueError:
                raise _SlackError("invalid_chunks") from None
        chunks = chunks or []
        if not isinstance(chunks, list):
            raise _SlackError("invalid_chunks")
        for chunk in chunks:
            if not isinstance(chunk, dict) or chunk.get("type") not in STREAM_CHUNK_TYPES:
                raise _SlackError("invalid_chunks")
            if chunk["type"] == "markdown_text" and not isinstance(chunk.get("text"), str):
                raise _SlackError("invalid_chunks")
            if chunk["type"] == "task_update" and not (
                chunk.get("id") and chunk.get("title") and chunk.get("status") in TASK_STATUSES
            ):
                raise _SlackError("invalid_chunks")
            if chunk["type"] == "plan_update" and not chunk.get("title"):
                raise _SlackError("invalid_chunks")
        texts = [markdown or ""] + [c["text"] for c in chunks if c["type"] == "markdown_text"]
        if any(len(text) > MARKDOWN_LIMIT for text in texts):
            raise _SlackError("msg_too_long")
        return markdown or "", chunks

    def _stream_write(
        self, stream: _Stream, msg: dict[str, Any], method: str, markdown: str, chunks: list[dict[str, Any]]
    ) -> None:
        """Apply a stream call's content to the stored message and record it."""
        added = markdown + "".join(c["text"] for c in chunks if c["type"] == "markdown_text")
        msg["text"] += added
        for chunk in chunks:
            if chunk["type"] == "task_update":
                stream.tasks[chunk["id"]] = copy.deepcopy(chunk)
                stream.task_history.append(copy.deepcopy(chunk))
            elif chunk["type"] == "plan_update":
                stream.plan_title = chunk["title"]
        stream.last_call = time.monotonic()
        stream.calls.append(
            {"method": method, "time": time.time(), "markdown": added, "chunks": copy.deepcopy(chunks)}
        )

    def _record_post(self, method: str, ch: _Channel, msg: dict[str, Any], markdown: bool) -> None:
        record = {"method": method, "channel": ch.id, "ts": msg["ts"], "text": msg["text"], "markdown": markdown}
        self._posted.append({**record, "thread_ts": msg.get("thread_ts"), "metadata": msg.get("metadata")})

    def _api_reactions_add(self, params: dict[str, Any]) -> dict[str, Any]:
        ch = self._channel_param(params)
        ts = str(params.get("timestamp") or "")
        name = str(params.get("name") or "").strip(":")
        if not name:
            raise _SlackError("invalid_name")
        msg = self._find_message(ch, ts)
        if msg is None:
            raise _SlackError("message_not_found")
        reactions = msg.setdefault("reactions", [])
        entry = next((r for r in reactions if r["name"] == name), None)
        if entry is None:
            entry = {"name": name, "users": [], "count": 0}
            reactions.append(entry)
        if self.bot_user_id in entry["users"]:
            raise _SlackError("already_reacted")
        entry["users"].append(self.bot_user_id)
        entry["count"] += 1
        self._reactions.append((ch.id, ts, name))
        return {}

    def _api_users_info(self, params: dict[str, Any]) -> dict[str, Any]:
        user_id = str(params.get("user") or "")
        if user_id in self._not_visible:
            raise _SlackError("user_not_visible")
        user = self._users.get(user_id)
        if user is None:
            raise _SlackError("user_not_found")
        return {"user": copy.deepcopy(user)}

    def _api_users_conversations(self, params: dict[str, Any]) -> dict[str, Any]:
        types = {t.strip() for t in str(params.get("types") or "public_channel").split(",")}
        user = str(params.get("user") or self.bot_user_id)
        channels = [
            self._channel_object(ch)
            for ch in self._channels.values()
            if ch.type in types and user in ch.members
        ]
        page, cursor = self._page_by_offset(channels, params, self._limit(params, 100))
        return {"channels": page, "response_metadata": {"next_cursor": cursor}}

    def _api_conversations_info(self, params: dict[str, Any]) -> dict[str, Any]:
        ch = self._channel_param(params)
        if (ch.is_private or ch.is_im or ch.is_mpim) and not self._bot_in(ch):
            raise _SlackError("channel_not_found")  # as Slack: a bot sees no private conversation it is not in
        return {"channel": self._channel_object(ch)}

    def _api_conversations_members(self, params: dict[str, Any]) -> dict[str, Any]:
        ch = self._channel_param(params)
        page, cursor = self._page_by_offset(list(ch.members), params, self._limit(params, 100))
        return {"members": page, "response_metadata": {"next_cursor": cursor}}

    def _api_conversations_history(self, params: dict[str, Any]) -> dict[str, Any]:
        ch = self._channel_param(params)
        limit = self._limit(params, 100)
        found = [
            m
            for m in reversed(ch.messages)
            if ("thread_ts" not in m or m["thread_ts"] == m["ts"] or m.get("subtype") == "thread_broadcast")
            and self._in_range(m["ts"], params)
        ]
        if params.get("cursor"):
            before = _ts_key(_decode_cursor(str(params["cursor"]), "next_ts:"))
            found = [m for m in found if _ts_key(m["ts"]) < before]
        page, rest = found[:limit], found[limit:]
        return {
            "messages": copy.deepcopy(page),
            "has_more": bool(rest),
            "pin_count": 0,
            "response_metadata": {"next_cursor": _encode_cursor(f"next_ts:{page[-1]['ts']}") if rest else ""},
        }

    def _api_conversations_replies(self, params: dict[str, Any]) -> dict[str, Any]:
        ch = self._channel_param(params)
        msg = self._find_message(ch, str(params.get("ts") or ""))
        if msg is None:
            raise _SlackError("thread_not_found")
        root = msg.get("thread_ts", msg["ts"])
        parent = self._find_message(ch, root) or msg
        replies = [
            m
            for m in ch.messages
            if m.get("thread_ts") == root and m["ts"] != root and self._in_range(m["ts"], params)
        ]
        items = [parent, *replies]
        if params.get("cursor"):
            after = _ts_key(_decode_cursor(str(params["cursor"]), "next_ts:"))
            items = [m for m in replies if _ts_key(m["ts"]) > after]
        limit = self._limit(params, 100)
        page, rest = items[:limit], items[limit:]
        return {
            "messages": copy.deepcopy(page),
            "has_more": bool(rest),
            "response_metadata": {"next_cursor": _encode_cursor(f"next_ts:{page[-1]['ts']}") if rest else ""},
        }

    # ------------------------------------------------------------------ subprocess control

    async def _handle_control(self, request: web.Request) -> web.Response:
        name = request.match_info["method"]
        if name not in CONTROL_METHODS:
            return web.json_response({"error": f"unknown control method {name}"}, status=404)
        kwargs = await request.json() if request.can_read_body else {}
        try:
            result = getattr(self, name)(**kwargs)
        except (KeyError, ValueError, TypeError) as e:
            return web.json_response({"error": f"{type(e).__name__}: {e}"}, status=400)
        return web.json_response({"result": result})

    async def _handle_state(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "web_calls": self.web_calls,
                "acks": self.acks,
                "posted": self.posted,
                "reactions": self.reactions,
                "streams": self.streams,
                "envelopes": self.envelopes,
                "connected": self.connected,
                "open_connections": self.open_connections,
                "connection_count": self.connection_count,
            }
        )


def main(argv: list[str] | None = None) -> None:
    """Serve a FakeSlack until SIGTERM/SIGINT, printing its Web API base URL."""
    parser = argparse.ArgumentParser(description="Fake Slack (Web API + Socket Mode) on 127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="port to listen on (0 = any free port)")
    parser.add_argument("--bot-token", default="xoxb-test-token")
    parser.add_argument("--app-token", default="xapp-test-token")
    parser.add_argument("--ack-timeout", type=float, default=3.0)
    parser.add_argument("--bot-name", default="bot")
    parser.add_argument("--spread-events", action="store_true", help="deliver events to the connections in turn")
    args = parser.parse_args(argv)
    fake = FakeSlack(
        bot_token=args.bot_token,
        app_token=args.app_token,
        ack_timeout=args.ack_timeout,
        port=args.port,
        bot_name=args.bot_name,
        spread_events=args.spread_events,
    )
    serve_until_signalled(fake, lambda: fake.base_url)


if __name__ == "__main__":
    main()
