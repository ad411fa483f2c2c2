"""A server refused the address its config names says so in one line naming the key."""

from __future__ import annotations

import socket

import pytest

from myao2.listening import CannotListen, listening_socket


def test_a_port_in_use_is_named_by_its_key() -> None:
    with socket.socket() as taken:  # held, bound and listening, while the server tries
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(CannotListen) as refused:
            listening_socket("127.0.0.1", port, "mcp.port", "mcp.host")
    assert str(refused.value) == f"mcp.port: port {port} is already in use"


def test_an_address_not_on_this_machine_is_named_by_the_host_key() -> None:
    with pytest.raises(CannotListen) as refused:
        listening_socket("192.0.2.1", 0, "mcp.port", "mcp.host")  # TEST-NET-1: no interface has it
    assert str(refused.value).startswith("mcp.host: cannot listen on 192.0.2.1 (")


def test_a_free_port_is_listened_on() -> None:
    with listening_socket("127.0.0.1", 0, "mcp.port", "mcp.host") as server:
        with socket.create_connection(server.getsockname(), timeout=5):
            pass
