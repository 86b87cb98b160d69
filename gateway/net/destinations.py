"""Where the gateway may send requests for its users: public addresses only (no SSRF).

A webhook URL is a user's choice, and the gateway is a server: left alone, a URL would reach
its loopback, its private network or the cloud's metadata service. A destination is refused
unless every address its host resolves to is public: in none of the IANA special-purpose
ranges (:mod:`gateway.net.special_ranges`, which also judges the IPv4 address an IPv4-mapped,
NAT64 or 6to4 address carries) and without an IPv6 zone id (``fe80::1%eth0``: a zone names a
local link). A host spelt as a number (``2130706433``, ``0x7f.1``, ``0177.0.0.1``,
``127.0.0.1.``) is read as the address browsers and ``getaddrinfo`` read, never looked up as a
name. The check runs at registration and again at each connection (DNS can change), on the
address actually connected to.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from gateway.base.errors import BadRequest
from gateway.net import special_ranges

MAX_URL_CHARS = 2048
RESOLVE_TIMEOUT_SECONDS = 5.0
Resolver = Callable[[str, int], Awaitable[list[str]]]


class DestinationRefused(Exception):
    """The host resolves to an address the gateway does not send to, or not at all."""


def why_not_public(address: str) -> str | None:
    """Why the gateway does not send to ``address`` (an IP literal), or None if it may."""
    if "%" in address:
        return "an address with a zone id (a local link)"
    return special_ranges.why_not_public(ipaddress.ip_address(address))


async def system_resolver(host: str, port: int) -> list[str]:
    """The addresses the operating system resolves ``host`` to."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


def _ipv4_part(part: str) -> int | None:
    """One dot-separated part of an IPv4 host as the URL standard reads it: decimal, ``0x``
    hexadecimal or ``0``-led octal (``0x`` alone is 0); None if it is not a number."""
    base, digits = 10, part
    if part[:2].lower() == "0x":
        base, digits = 16, part[2:]
    elif len(part) > 1 and part[0] == "0":
        base, digits = 8, part[1:]
    if not digits:
        return 0 if base != 10 else None
    allowed = "0123456789abcdefABCDEF"[:22 if base == 16 else base]
    significant = digits.lstrip("0") or "0"
    if not all(c in allowed for c in digits) or len(significant) > 12:
        return None  # not a number, or far past 32 bits (and past int()'s digit limit)
    return int(significant, base)


def _ipv4_number(host: str) -> str | None:
    """``host`` read as an IPv4 address the way the URL standard (browsers) and ``inet_aton``
    read it: one to four parts, the last filling the bytes left, an optional trailing dot."""
    parts = host.split(".")
    if len(parts) > 1 and parts[-1] == "":
        parts.pop()
    numbers = [_ipv4_part(part) for part in parts]
    if not 1 <= len(numbers) <= 4 or any(n is None for n in numbers):
        return None
    *leading, last = [n for n in numbers if n is not None]
    if any(n > 255 for n in leading) or last >= 256 ** (4 - len(leading)):
        return None
    value = last + sum(n << (8 * (3 - i)) for i, n in enumerate(leading))
    return str(ipaddress.IPv4Address(value))


def _literal(host: str) -> str | None:
    """``host`` as an IP address if it is one in any spelling, else None (a name)."""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return _ipv4_number(host)


async def addresses(host: str, port: int, allow_private: bool,
                    resolve: Resolver = system_resolver) -> list[str]:
    """The addresses to connect to for ``host``; :class:`DestinationRefused` if it does not
    resolve, or (unless ``allow_private``) if any of its addresses is not public."""
    literal = _literal(host)
    if literal is not None:
        found = [literal]
    else:
        try:
            async with asyncio.timeout(RESOLVE_TIMEOUT_SECONDS):
                found = await resolve(host, port)
        except (OSError, TimeoutError, UnicodeError) as exc:
            raise DestinationRefused(f"{host} does not resolve") from exc
        if not found:
            raise DestinationRefused(f"{host} does not resolve")
    if not allow_private:
        for address in found:
            why = why_not_public(address)
            if why is not None:
                raise DestinationRefused(f"{host} is {address}, {why}")
    return found


# What :func:`web_url` takes, as the API's description states it: http(s), a host (no
# credentials), a port of 0-65535, no fragment, printable ASCII without spaces.
_PORT_NUMBER = (r"[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]"
                r"|6553[0-5]")
_HOST_CHAR = r'[!-"$-.0-9;->A-Z\\^-~]'  # printable ASCII but # / : ? @ [ ]
WEB_URL_PATTERN = (rf"^[Hh][Tt][Tt][Pp][Ss]?://(?:{_HOST_CHAR}+|\[[0-9A-Fa-f:.]+\])"
                   rf"(?::0*(?:{_PORT_NUMBER})?)?(?:[/?][!-\x22$-~]*)?#?$")


def web_url(value: object) -> tuple[str, str, int]:
    """A client-given ``http(s)://`` URL, checked: (the URL, its host, its port); 400 if it is
    not one (no credentials in it, no fragment, at most 2,048 characters)."""
    if not isinstance(value, str) or not value.isascii() or len(value) > MAX_URL_CHARS:
        raise BadRequest(f"url must be an http:// or https:// URL of at most {MAX_URL_CHARS} "
                         "ASCII characters", code="invalid_url")
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        raise BadRequest("url is not a valid URL", code="invalid_url") from None
    if (parts.scheme not in ("http", "https") or not parts.hostname or parts.fragment
            or parts.username is not None or parts.password is not None
            or any(c.isspace() or ord(c) < 0x20 for c in value)):
        raise BadRequest("url must be an http:// or https:// URL with a host, without "
                         "credentials or a fragment", code="invalid_url")
    default = 443 if parts.scheme == "https" else 80
    return value, parts.hostname, port if port is not None else default
