"""/live and /ready, served from a thread of their own so they can tell when the event loop is stuck.

/live answers in plain text; /ready in JSON, naming each part (Slack, the database, the
model) and why it is not ready.
"""

from __future__ import annotations

import asyncio
import json
import logging
import selectors
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from myao2.domain.activity import CallOutcome, ModelCall

logger = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 1.0
STUCK_AFTER_SECONDS = 5.0


class ModelReachability:
    """Whether the model answers: not while the newest model call failed, for `window_seconds` after it.

    Fed every model call (on the event loop), read by the health server's thread.
    """

    def __init__(self, window_seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._window = window_seconds
        self._clock = clock
        self._failure: tuple[float, str] | None = None

    def observe(self, call: ModelCall) -> None:
        if call.outcome is not CallOutcome.ABORTED:  # a call cut short tells neither way
            self._failure = (self._clock(), call.detail) if call.outcome is CallOutcome.ERROR else None

    def __call__(self) -> str | None:
        """Why the model is taken as unreachable, or None."""
        failure = self._failure
        if failure is None:
            return None
        ago = self._clock() - failure[0]
        if ago > self._window:
            return None
        return f"the last model call failed {ago:.0f} s ago ({failure[1]})"


Check = Callable[[], str | None]
"""A readiness check: what is wrong, or None."""


class Health:
    """The bot's vital signs, updated by the event loop and read by the health server."""

    def __init__(self, database: Check, model: Check) -> None:
        self._database = database
        self._model = model
        self._last_beat = time.monotonic()
        self.slack_connected = False

    async def beat(self) -> None:
        """Runs on the event loop for as long as the bot does."""
        while True:
            self._last_beat = time.monotonic()
            await asyncio.sleep(HEARTBEAT_SECONDS)

    def live(self) -> bool:
        return time.monotonic() - self._last_beat < STUCK_AFTER_SECONDS

    def readiness(self) -> dict[str, str | None]:
        """Each part of readiness, with what is wrong with it (None: ready)."""
        return {
            "slack": None if self.slack_connected else "not connected",
            "database": self._database(),
            "model": self._model(),
        }


def ready_body(readiness: dict[str, str | None]) -> dict[str, object]:
    """/ready's JSON: ready or not, the parts that are not, and each part's state."""
    not_ready = [part for part, problem in readiness.items() if problem is not None]
    return {
        "ready": not not_ready,
        "not_ready": not_ready,
        "checks": {
            part: {"ready": True} if problem is None else {"ready": False, "reason": problem}
            for part, problem in readiness.items()
        },
    }


class HealthServer:
    """A tiny HTTP server on 0.0.0.0:`port` answering /live and /ready with 200 or 503."""

    def __init__(self, health: Health, port: int) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                if self.path == "/live":
                    ok = health.live()
                    self._answer(ok, b"ok\n" if ok else b"unavailable\n", "text/plain")
                elif self.path == "/ready":
                    body = ready_body(health.readiness())
                    self._answer(bool(body["ready"]), json.dumps(body).encode() + b"\n", "application/json")
                else:
                    self.send_error(404)

            def _answer(self, ok: bool, body: bytes, content_type: str) -> None:
                self.send_response(200 if ok else 503)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                logger.debug("health: " + format, *args)

        self._server = ThreadingHTTPServer(("0.0.0.0", port), Handler)
        self._stop, self._stopper = socket.socketpair()  # `stop` writes to one end, the server's thread reads the other
        self._thread = threading.Thread(target=self._serve, name="health", daemon=True)

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop answering, at once (the caller is the event loop, at the bot's exit)."""
        self._stopper.send(b"\0")
        if self._thread.ident is not None:
            self._thread.join()
        self._server.server_close()
        self._stop.close()
        self._stopper.close()

    def _serve(self) -> None:
        """Answer requests until `stop`, waking only for a request or the stop.

        `serve_forever` woke every 0.5 s to look for a stop, and its `shutdown` waited for that:
        every exit of the bot took up to half a second longer, the event loop held meanwhile.
        """
        with selectors.DefaultSelector() as selector:
            selector.register(self._server, selectors.EVENT_READ)
            selector.register(self._stop, selectors.EVENT_READ)
            while all(key.fileobj is not self._stop for key, _ in selector.select()):
                self._server.handle_request()  # a connection is waiting: accepted at once
