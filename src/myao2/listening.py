"""Listening where the config says: the one way every server (the bot's HTTP mode and health endpoints, the
playground, `myao2 mcp --http`) refuses an address it cannot take, naming the config key."""

from __future__ import annotations

import errno
import socket


class CannotListen(Exception):
    """A server cannot listen where its config says. The message is one line naming the key: `myao2` prints it
    and exits 2, as for any invalid config."""


def cannot_listen(
    error: OSError, port_key: str, port: int, host: str | None = None, host_key: str | None = None
) -> CannotListen:
    """Why a server cannot listen on `port` (of `host`, configured under `host_key`) as `error` says."""
    if error.errno == errno.EADDRINUSE:
        return CannotListen(f"{port_key}: port {port} is already in use")
    reason = error.strerror or str(error)
    if host_key is not None and (isinstance(error, socket.gaierror) or error.errno == errno.EADDRNOTAVAIL):
        return CannotListen(f"{host_key}: cannot listen on {host} ({reason})")
    where = f"{host}:{port}" if host else f"port {port}"
    return CannotListen(f"{port_key}: cannot listen on {where} ({reason})")


def listening_socket(host: str, port: int, port_key: str, host_key: str) -> socket.socket:
    """A TCP socket listening on `host`:`port`, for a server that takes one bound already (uvicorn, which binds by
    itself exits with its own message); `CannotListen` if it cannot be had."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family)
    except OSError as exc:
        raise cannot_listen(exc, port_key, port, host, host_key) from None
