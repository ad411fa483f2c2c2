"""Which addresses the web tools may connect to: the guard against server-side request forgery.

A URL is checked three times: its host when it is an IP literal (before connecting),
every address its name resolves to (the connection can only use those), and the
address the socket actually connected to (before a byte is sent). Every redirect
goes through the same checks.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import ThreadedResolver

from myao2.infrastructure.web.errors import WebError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
AddressCheck = Callable[[IPAddress], bool]
"""True when the tools may connect to the address."""


def is_public(address: IPAddress) -> bool:
    """True for a globally routable unicast address; False for private, loopback,
    link-local, shared, reserved, multicast and unspecified ones (IPv4 inside IPv6 included)."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is not None:
            return is_public(embedded)
        if address in _NAT64:
            return is_public(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return address.is_global and not address.is_multicast


def any_address(address: IPAddress) -> bool:
    """Allows every address (`tools.web_fetch.allow_private_networks`)."""
    return True


_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def parse_address(text: str) -> IPAddress | None:
    """The IP address `text` spells (brackets and an IPv6 zone allowed), or None for a name."""
    try:
        return ipaddress.ip_address(text.strip("[]").split("%", 1)[0])
    except ValueError:
        return None


def check_address(text: str, allowed: AddressCheck, host: str) -> None:
    """Raise WebError("refused_address") unless `text` is an address `allowed` accepts."""
    address = parse_address(text)
    if address is None or not allowed(address):
        raise WebError("refused_address", host=host)


class GuardedResolver(AbstractResolver):
    """Resolves names like the system does, and refuses a name if any of its addresses is not allowed.

    Refusing the whole name (not only its bad addresses) leaves no room for a name
    that mixes a public address with an internal one.
    """

    def __init__(self, allowed: AddressCheck) -> None:
        self._allowed = allowed
        self._resolver = ThreadedResolver()

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        results = await self._resolver.resolve(host, port, family)
        for result in results:
            check_address(result["host"], self._allowed, host)
        return results

    async def close(self) -> None:
        await self._resolver.close()


class GuardedConnector(aiohttp.TCPConnector):
    """A connector that resolves through `GuardedResolver` and refuses a socket connected
    to an address `allowed` rejects, before anything is sent on it.

    Each connection is used once (no pooling): every hop of a fetch is checked afresh.
    """

    def __init__(self, allowed: AddressCheck) -> None:
        super().__init__(resolver=GuardedResolver(allowed), use_dns_cache=False, force_close=True)
        self._allowed = allowed

    async def connect(self, req: Any, traces: Any, timeout: Any) -> Any:
        connection = await super().connect(req, traces, timeout)
        transport = connection.transport
        peer = transport.get_extra_info("peername") if transport is not None else None
        address = parse_address(str(peer[0])) if peer else None
        if address is None or not self._allowed(address):
            connection.close()
            raise WebError("refused_address", host=req.url.host or "")
        return connection
