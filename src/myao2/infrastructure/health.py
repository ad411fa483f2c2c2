"""/live and /ready, served from a thread of their own so they can tell when the event loop is stuck."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

logger = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 1.0
STUCK_AFTER_SECONDS = 5.0


class Health:
    """The bot's vital signs, updated by the event loop and read by the health server."""

    def __init__(self, database_ok: Callable[[], bool]) -> None:
        self._database_ok = database_ok
        self._last_beat = time.monotonic()
        self.slack_connected = False

    async def beat(self) -> None:
        """Runs on the event loop for as long as the bot does."""
        while True:
            self._last_beat = time.monotonic()
            await asyncio.sleep(HEARTBEAT_SECONDS)

    def live(self) -> bool:
        return time.monotonic() - self._last_beat < STUCK_AFTER_SECONDS

    def ready(self) -> bool:
        return self.slack_connected and self._database_ok()


class HealthServer:
    """A tiny HTTP server on 0.0.0.0:`port` answering /live and /ready with 200 or 503."""

    def __init__(self, health: Health, port: int) -> None:
        checks = {"/live": health.live, "/ready": health.ready}

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                check = checks.get(self.path)
                if check is None:
                    self.send_error(404)
                    return
                ok = check()
                body = b"ok\n" if ok else b"unavailable\n"
                self.send_response(200 if ok else 503)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                logger.debug("health: " + format, *args)

        self._server = ThreadingHTTPServer(("0.0.0.0", port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="health", daemon=True)

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
