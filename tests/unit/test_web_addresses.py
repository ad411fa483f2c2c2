"""Which addresses the web tools may reach: the rule against server-side request forgery."""

from __future__ import annotations

import ipaddress

import pytest

from myao2.infrastructure.web.addresses import is_public, parse_address


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "127.8.9.10",
        "10.0.0.1",
        "172.16.5.4",
        "192.168.1.1",
        "169.254.169.254",  # cloud metadata, link-local
        "100.64.0.1",  # carrier-grade NAT
        "0.0.0.0",
        "224.0.0.1",
        "255.255.255.255",
        "::1",
        "::",
        "fe80::1",
        "fc00::1",
        "fd12:3456::1",
        "ff02::1",
        "::ffff:127.0.0.1",  # IPv4-mapped loopback
        "::ffff:10.1.2.3",
        "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254
        "2002:c0a8:0101::1",  # 6to4 of 192.168.1.1
    ],
)
def test_internal_addresses_are_not_public(address: str) -> None:
    assert not is_public(ipaddress.ip_address(address))


@pytest.mark.parametrize("address", ["93.184.216.34", "8.8.8.8", "2606:4700:4700::1111", "::ffff:8.8.8.8"])
def test_global_addresses_are_public(address: str) -> None:
    assert is_public(ipaddress.ip_address(address))


def test_parse_address_reads_literals_and_leaves_names() -> None:
    assert parse_address("[::1]") == ipaddress.ip_address("::1")
    assert parse_address("fe80::1%eth0") == ipaddress.ip_address("fe80::1")
    assert parse_address("10.0.0.1") == ipaddress.ip_address("10.0.0.1")
    assert parse_address("example.com") is None
    assert parse_address("localhost") is None
