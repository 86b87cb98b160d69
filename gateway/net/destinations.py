"""Where the gateway may send requests for its users: public addresses only (no SSRF).

A webhook URL is a user's choice, and the gateway is a server: left alone, a URL would reach
its loopback, its private network or the cloud's metadata service. A destination is refused
unless every address its host resolves to is global (``ipaddress``'s ``is_global``, which
leaves out loopback, private, link-local, shared, documentation and reserved ranges, and so
169.254.169.254 and the other metadata addresses), an IPv4-mapped IPv6 address judged as its
IPv4. The check runs at registration and again at each connection (DNS can change), on the
address actually connected to.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from gateway.base.errors import BadRequest

MAX_URL_CHARS = 2048
RESOLVE_TIMEOUT_SECONDS = 5.0
Resolver = Callable[[str, int], Awaitable[list[str]]]


class DestinationRefused(Exception):
    """The host resolves to an address the gateway does not send to, or not at all."""


def is_public(address: str) -> bool:
    """Whether ``address`` (an IP literal) is a global unicast address."""
    ip = ipaddress.ip_address(address.partition("%")[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


async def system_resolver(host: str, port: int) -> list[str]:
    """The addresses the operating system resolves ``host`` to."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


def _literal(host: str) -> str | None:
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return None


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
            if not is_public(address):
                raise DestinationRefused(
                    f"{host} is {address}, a loopback, private, link-local or reserved "
                    "address")
    return found


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
