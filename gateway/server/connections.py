"""Connections per client address: each accepted connection is counted against its address
(one /64 for IPv6) and, past the cap, answered 503 and closed before aiohttp sees it."""

from __future__ import annotations

import asyncio
import ipaddress
import json
from collections import Counter
from collections.abc import Callable
from typing import Any

IPV6_PREFIX = 64  # one host's share of an IPv6 network: an attacker has a whole /64
LINGER_SECONDS = 1.0  # how long a refused connection may take to read its answer and close


def address_key(peername: Any) -> str:
    """The name a client is counted under: its IPv4 address (an IPv4-mapped IPv6 one too), the
    /64 of an IPv6 one, ``""`` when the socket has none (a Unix socket)."""
    if not isinstance(peername, tuple) or not peername:
        return ""
    try:
        address = ipaddress.ip_address(str(peername[0]).split("%", 1)[0])
    except ValueError:
        return str(peername[0])
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, IPV6_PREFIX), strict=False))
    return str(address)


def refusal(cap: int) -> bytes:
    """The whole 503 answer a connection over the cap gets, in the API's error shape."""
    body = json.dumps({"error": {
        "code": "too_many_connections",
        "message": f"this address already has {cap} connections open; close one and retry"}},
        separators=(",", ":")).encode()
    return (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
            b"Retry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%b"
            % (len(body), body))


class AddressCap:
    """How many connections each client address holds; ``admit`` counts one more unless the
    address is at ``limit`` (0: no limit), ``release`` counts one fewer. ``on_refused`` is
    called for each connection refused (a metric)."""

    def __init__(self, limit: int, on_refused: Callable[[], None] = lambda: None) -> None:
        self.limit = limit
        self._on_refused = on_refused
        self._open: Counter[str] = Counter()
        self._refusal = refusal(limit)

    def admit(self, key: str) -> bool:
        """Count a new connection from ``key``; False (not counted) when it is at the cap."""
        if self.limit and self._open[key] >= self.limit:
            self._on_refused()
            return False
        self._open[key] += 1
        return True

    def release(self, key: str) -> None:
        """A connection of ``key`` closed."""
        self._open[key] -= 1
        if self._open[key] <= 0:
            del self._open[key]

    def refuse(self) -> asyncio.Protocol:
        """A connection past the cap: its 503 answer, then the close."""
        return Refusal(self._refusal)


class Refusal(asyncio.Protocol):
    """Answer ``answer`` at once and close, without breaking the answer: the client's bytes are
    read and dropped until it closes its end (at most ``LINGER_SECONDS``), as a close with bytes
    unread would reset the connection and lose the answer."""

    def __init__(self, answer: bytes) -> None:
        self._answer = answer
        self._linger: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Send the answer and end this side; close for good after ``LINGER_SECONDS``."""
        assert isinstance(transport, asyncio.Transport)
        transport.write(self._answer)
        if transport.can_write_eof():
            transport.write_eof()
        self._linger = asyncio.get_running_loop().call_later(LINGER_SECONDS, transport.abort)

    def data_received(self, data: bytes) -> None:
        """Dropped: nothing of a refused request is read."""

    def eof_received(self) -> bool:
        """The client read the answer and closed: close (False lets the transport close)."""
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        """Closed: the linger timer is not needed."""
        if self._linger is not None:
            self._linger.cancel()


class CappedConnection(asyncio.Protocol):
    """One accepted connection: handed to the protocol ``make`` builds (aiohttp's request
    handler) when its address is under the cap, refused at once when it is not.

    The address is only known once the connection is made, so this stands in front of the
    handler and passes every event on."""

    __slots__ = ("_cap", "_inner", "_key", "_make")

    def __init__(self, cap: AddressCap, make: Callable[[], asyncio.Protocol]) -> None:
        self._cap = cap
        self._make = make
        self._inner: asyncio.Protocol | None = None
        self._key: str | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Admit the connection (to a new handler) or refuse it."""
        key = address_key(transport.get_extra_info("peername"))
        if self._cap.admit(key):
            self._key = key
            self._inner = self._make()
        else:
            self._inner = self._cap.refuse()
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        """Pass the bytes on."""
        if self._inner is not None:
            self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        """Pass the client's end of sending on."""
        return self._inner.eof_received() if self._inner is not None else None

    def pause_writing(self) -> None:
        """Pass flow control on."""
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        """Pass flow control on."""
        if self._inner is not None:
            self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        """Free the address's slot and tell the handler."""
        if self._key is not None:
            self._cap.release(self._key)
            self._key = None
        if self._inner is not None:
            self._inner.connection_lost(exc)
