"""The address ranges the gateway never sends to, and why: the IANA special-purpose registries.

The table is written out from the IANA IPv4 and IPv6 Special-Purpose Address Registries
(https://www.iana.org/assignments/iana-ipv4-special-registry/ and
https://www.iana.org/assignments/iana-ipv6-special-registry/, as updated in 2025), plus
multicast (224.0.0.0/4, ff00::/8) and IPv6's deprecated site-local fec0::/10. It does not use
``ipaddress``'s ``is_global`` or ``is_private``: their tables change between Python releases,
and 3.11.7 calls 192.0.0.192, 64:ff9b::7f00:1, 2002:7f00:1::, ::7f00:1 and fec0::1 global.

Every choice leans toward refusing:

- Every range of the registries is refused, even the few entries the registry marks globally
  reachable (192.0.0.9 and 192.0.0.10, AS112 192.31.196.0/24, 192.175.48.0/24 and
  2620:4f:8000::/48, AMT 192.52.193.0/24, and in 2001::/23 the anycast 2001:1::1-3, AMT
  2001:3::/32, AS112 2001:4:112::/48, ORCHIDv2 2001:20::/28 and drone identifiers
  2001:30::/28): they are anycast services, DNS sinks, relays and identifiers, never a web
  server a user means.
- An IPv6 address is public only inside 2000::/3, the space IANA hands out for global unicast;
  the rest is reserved or special (::/8 with ::, ::1 and the deprecated IPv4-compatible
  ::a.b.c.d, 100::/64, fc00::/7, fe80::/10, fec0::/10, ff00::/8, and what is unassigned).
- An address that carries an IPv4 address is judged as that IPv4 address: IPv4-mapped
  ::ffff:0:0/96 and the NAT64 well-known prefix 64:ff9b::/96 (the low 32 bits, RFC 6052), 6to4
  2002::/16 (bits 16 to 48, RFC 3056). The NAT64 local-use prefix 64:ff9b:1::/48 (RFC 8215,
  not globally reachable) is refused whole: where it carries its IPv4 address depends on a
  prefix length only its network knows. Teredo 2001::/32 is refused whole too (its server and
  client addresses, the latter obfuscated, can be anything; no web server lives behind one).
"""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network

# Most specific first: the first range that holds an address names why it is refused.
IPV4_RANGES: tuple[tuple[IPv4Network, str], ...] = tuple(
    (IPv4Network(network), name) for network, name in (
        ("0.0.0.0/8", "'this network'"),
        ("10.0.0.0/8", "private"),
        ("100.64.0.0/10", "shared (carrier-grade NAT)"),
        ("127.0.0.0/8", "loopback"),
        ("169.254.0.0/16", "link-local (cloud metadata services)"),
        ("172.16.0.0/12", "private"),
        ("192.0.0.0/24", "IETF protocol assignments"),
        ("192.0.2.0/24", "documentation (TEST-NET-1)"),
        ("192.31.196.0/24", "AS112"),
        ("192.52.193.0/24", "AMT"),
        ("192.88.99.0/24", "6to4 relay anycast (deprecated)"),
        ("192.168.0.0/16", "private"),
        ("192.175.48.0/24", "AS112 direct delegation"),
        ("198.18.0.0/15", "benchmarking"),
        ("198.51.100.0/24", "documentation (TEST-NET-2)"),
        ("203.0.113.0/24", "documentation (TEST-NET-3)"),
        ("224.0.0.0/4", "multicast"),
        ("255.255.255.255/32", "limited broadcast"),
        ("240.0.0.0/4", "reserved"),
    ))

IPV6_RANGES: tuple[tuple[IPv6Network, str], ...] = tuple(
    (IPv6Network(network), name) for network, name in (
        ("::/128", "unspecified"),
        ("::1/128", "loopback"),
        ("::/96", "IPv4-compatible (deprecated)"),
        ("64:ff9b:1::/48", "NAT64 local-use"),
        ("100::/64", "discard-only"),
        ("100:0:0:1::/64", "dummy prefix"),
        ("2001::/32", "Teredo"),
        ("2001::/23", "IETF protocol assignments"),
        ("2001:db8::/32", "documentation"),
        ("2620:4f:8000::/48", "AS112 direct delegation"),
        ("3fff::/20", "documentation"),
        ("5f00::/16", "segment routing (SRv6) identifiers"),
        ("fc00::/7", "unique local (private)"),
        ("fe80::/10", "link-local"),
        ("fec0::/10", "site-local (deprecated)"),
        ("ff00::/8", "multicast"),
    ))

GLOBAL_UNICAST = IPv6Network("2000::/3")

# IPv6 ranges that carry an IPv4 address: (the range, its name, how far right the IPv4
# address's 32 bits sit).
IPV4_CARRIERS: tuple[tuple[IPv6Network, str, int], ...] = (
    (IPv6Network("::ffff:0:0/96"), "IPv4-mapped", 0),
    (IPv6Network("64:ff9b::/96"), "NAT64", 0),
    (IPv6Network("2002::/16"), "6to4", 80),
)


def carried_ipv4(ip: IPv6Address) -> tuple[str, IPv4Address] | None:
    """The IPv4 address ``ip`` carries, with the form's name, if it is one that does."""
    for network, name, shift in IPV4_CARRIERS:
        if ip in network:
            return name, IPv4Address((int(ip) >> shift) & 0xFFFF_FFFF)
    return None


def why_not_public(ip: IPv4Address | IPv6Address) -> str | None:
    """Why the gateway does not send to ``ip`` (the special-purpose range that holds it), or
    None if it is a public address."""
    if isinstance(ip, IPv6Address):
        carried = carried_ipv4(ip)
        if carried is not None:
            name, inner = carried
            why = why_not_public(inner)
            return None if why is None else f"the {name} form of {inner}, {why}"
        for network6, name in IPV6_RANGES:
            if ip in network6:
                return f"{name} ({network6})"
        return None if ip in GLOBAL_UNICAST else f"not global unicast (outside {GLOBAL_UNICAST})"
    for network4, name in IPV4_RANGES:
        if ip in network4:
            return f"{name} ({network4})"
    return None
