"""Which addresses the gateway sends to (no SSRF): every IANA special-purpose range refused, at
its first and last address and in every form that carries an IPv4 address, and a host spelt
as a number read as the address it is. The ranges are written out here again from the
registries, apart from the code's table, so that a range dropped from it fails a test."""

from __future__ import annotations

import ipaddress
import re
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from gateway.net.destinations import DestinationRefused, addresses, why_not_public

# The IANA IPv4 Special-Purpose Address Registry, multicast and the limited broadcast.
SPECIAL_V4 = ["0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
              "172.16.0.0/12", "192.0.0.0/24", "192.0.2.0/24", "192.31.196.0/24",
              "192.52.193.0/24", "192.88.99.0/24", "192.168.0.0/16", "192.175.48.0/24",
              "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4",
              "240.0.0.0/4", "255.255.255.255/32"]
# The IANA IPv6 Special-Purpose Address Registry (2001::/23 whole, its anycast exceptions
# too), the deprecated site-local range, multicast and IPv4-compatible ::a.b.c.d.
SPECIAL_V6 = ["::/128", "::1/128", "::/96", "64:ff9b:1::/48", "100::/64", "100:0:0:1::/64",
              "2001::/23", "2001::/32", "2001:1::1/128", "2001:1::2/128", "2001:1::3/128",
              "2001:2::/48", "2001:3::/32", "2001:4:112::/48", "2001:10::/28", "2001:20::/28",
              "2001:30::/28", "2001:db8::/32", "2620:4f:8000::/48", "3fff::/20", "5f00::/16",
              "fc00::/7", "fe80::/10", "fec0::/10", "ff00::/8"]
# Forms that carry an IPv4 address, and how to write one in each.
CARRIERS = {
    "IPv4-mapped": lambda v4, low: IPv6Address(0xFFFF_0000_0000 | int(v4)),
    "IPv4-compatible": lambda v4, low: IPv6Address(int(v4)),
    "NAT64": lambda v4, low: IPv6Address(int(IPv6Address("64:ff9b::")) | int(v4)),
    "NAT64 local-use": lambda v4, low: IPv6Address(
        int(IPv6Address("64:ff9b:1::")) | (low & (2**80 - 1) & ~0xFFFF_FFFF) | int(v4)),
    "6to4": lambda v4, low: IPv6Address((0x2002 << 112) | (int(v4) << 80)
                                        | (low & (2**80 - 1))),
}
PUBLIC = ["93.184.216.34", "8.8.8.8", "1.0.0.0", "11.0.0.0", "100.128.0.0", "128.0.0.0",
          "192.0.1.0", "192.0.3.0", "198.17.255.255", "198.20.0.0", "223.255.255.255",
          "2606:2800:220:1:248:1893:25c8:1946", "2001:4860:4860::8888", "2001:200::1",
          "64:ff9b::5db8:d822", "2002:5db8:d822::1", "::ffff:93.184.216.34", "2c0f:ffff::1"]


def ends(network: str) -> list[str]:
    net = ipaddress.ip_network(network)
    return [str(net.network_address), str(net.broadcast_address)]


@pytest.mark.parametrize("address", [a for n in SPECIAL_V4 + SPECIAL_V6 for a in ends(n)])
def test_the_first_and_last_address_of_every_special_range_are_refused(address: str) -> None:
    assert why_not_public(address) is not None


@pytest.mark.parametrize("form", sorted(CARRIERS))
@pytest.mark.parametrize("v4", [a for n in SPECIAL_V4 for a in ends(n)])
def test_every_special_ipv4_address_is_refused_in_every_ipv6_form(v4: str, form: str) -> None:
    carried = CARRIERS[form](IPv4Address(v4), 0xABCD_EF01_2345_6789_ABCD)
    assert why_not_public(str(carried)) is not None, f"{carried} ({form} of {v4})"


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_and_their_nat64_and_6to4_forms_are_allowed(address: str) -> None:
    assert why_not_public(address) is None


@pytest.mark.parametrize(("address", "reason"), [
    ("192.0.0.192", "IETF protocol assignments (192.0.0.0/24)"),
    ("64:ff9b::a9fe:a9fe", "the NAT64 form of 169.254.169.254, link-local"),
    ("2002:a00:1::", "the 6to4 form of 10.0.0.1, private (10.0.0.0/8)"),
    ("::ffff:127.0.0.1", "the IPv4-mapped form of 127.0.0.1, loopback"),
    ("fe80::1%eth0", "zone id"),
    ("4000::1", "not global unicast"),
])
def test_a_refusal_names_the_range(address: str, reason: str) -> None:
    assert reason in (why_not_public(address) or "")


def in_network(network: str) -> st.SearchStrategy[IPv4Address]:
    net = IPv4Network(network)
    return st.integers(int(net.network_address), int(net.broadcast_address)).map(IPv4Address)


SPECIAL_V4_ADDRESS = st.one_of([in_network(n) for n in SPECIAL_V4])
PUBLIC_V4_ADDRESS = st.integers(0, 2**32 - 1).map(IPv4Address).filter(
    lambda ip: not any(ip in IPv4Network(n) for n in SPECIAL_V4))


@given(SPECIAL_V4_ADDRESS, st.sampled_from(sorted(CARRIERS)), st.integers(0, 2**128 - 1))
def test_any_special_ipv4_address_in_any_ipv6_form_is_refused(v4: IPv4Address, form: str,
                                                              low: int) -> None:
    assert why_not_public(str(v4)) is not None
    assert why_not_public(str(CARRIERS[form](v4, low))) is not None


@given(PUBLIC_V4_ADDRESS, st.sampled_from(["IPv4-mapped", "NAT64", "6to4"]),
       st.integers(0, 2**128 - 1))
def test_a_public_ipv4_address_stays_public_in_the_forms_that_route_to_it(
        v4: IPv4Address, form: str, low: int) -> None:
    assert why_not_public(str(v4)) is None
    assert why_not_public(str(CARRIERS[form](v4, low))) is None


CARRYING_V4 = [IPv6Network(n) for n in ("::ffff:0:0/96", "64:ff9b::/96", "2002::/16")]
ANY_V6 = st.one_of(st.integers(0, 2**128 - 1),
                   st.integers(0x2000 << 112, (0x4000 << 112) - 1),  # global unicast
                   st.sampled_from(SPECIAL_V6).flatmap(
                       lambda n: st.integers(int(IPv6Network(n).network_address),
                                             int(IPv6Network(n).broadcast_address))))


@given(ANY_V6.map(IPv6Address))
def test_an_ipv6_address_carrying_no_ipv4_is_public_only_in_global_unicast_space(
        ip: IPv6Address) -> None:
    assume(not any(ip in network for network in CARRYING_V4))
    public = ip in IPv6Network("2000::/3") and not any(ip in IPv6Network(n) for n in SPECIAL_V6)
    assert (why_not_public(str(ip)) is None) == public


async def never_resolve(host: str, port: int) -> list[str]:
    raise AssertionError(f"{host} was looked up as a name")


@pytest.mark.parametrize(("host", "address"), [
    ("2130706433", "127.0.0.1"), ("0x7f.1", "127.0.0.1"), ("017700000001", "127.0.0.1"),
    ("0177.0.0.1", "127.0.0.1"), ("127.1", "127.0.0.1"), ("127.0.0.1.", "127.0.0.1"),
    ("0x7F000001", "127.0.0.1"), ("0xa9.0xfe.0xa9.0xfe", "169.254.169.254"),
    ("0", "0.0.0.0"), ("0x", "0.0.0.0"), ("3232235521", "192.168.0.1"),
    ("0x" + "0" * 5000 + "7f.1", "127.0.0.1"),
])
async def test_a_host_spelt_as_a_number_is_that_address_not_a_name(host: str,
                                                                   address: str) -> None:
    with pytest.raises(DestinationRefused, match=re.escape(f"{host} is {address},")):
        await addresses(host, 80, allow_private=False, resolve=never_resolve)
    assert await addresses(host, 80, allow_private=True, resolve=never_resolve) == [address]


@pytest.mark.parametrize("host", ["example.com", "1.2.3.4.5", "256.1", "08.1", "0x1g",
                                  "1..2", "1_0", "+1", "4294967296", "example.123",
                                  "1" * 5000, "1" + "0" * 12])
async def test_hosts_that_are_no_number_are_looked_up(host: str) -> None:
    async def public(host: str, port: int) -> list[str]:
        return ["93.184.216.34"]
    assert await addresses(host, 80, allow_private=False, resolve=public) == ["93.184.216.34"]


async def test_a_name_resolving_to_any_special_form_is_refused() -> None:
    answers = ["93.184.216.34", "64:ff9b::7f00:1"]

    async def resolve(host: str, port: int) -> list[str]:
        return answers
    with pytest.raises(DestinationRefused, match=re.escape("NAT64 form of 127.0.0.1")):
        await addresses("hooks.example.com", 443, allow_private=False, resolve=resolve)
