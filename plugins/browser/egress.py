"""The browser's only way out: a forward proxy on loopback that checks every connection (SSRF).

Chromium is launched with this proxy for all its traffic, loopback included (Playwright adds
Chromium's ``<-loopback>`` rule). For each connection the proxy resolves the host itself,
refuses every special-purpose address (loopback, private, link-local, shared, metadata, the
IANA registries' other ranges, and their NAT64, 6to4 and mapped forms) unless they are allowed
(:func:`gateway.net.destinations.addresses`), and connects to exactly the address it checked, so a
DNS answer that changes between a check and a connection (rebinding) changes nothing. HTTPS and
WebSockets arrive as ``CONNECT`` tunnels; a plain ``http://`` request is forwarded alone on its
connection (``Connection: close``), so that one proxy connection never carries a second host.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from urllib.parse import urlsplit

from gateway import DestinationRefused, Resolver, system_resolver
from gateway import public_addresses as addresses

log = logging.getLogger(__name__)
HEAD_TIMEOUT_SECONDS = 30.0
CONNECT_TIMEOUT_SECONDS = 10.0
CHUNK_BYTES = 65536
# Request headers meant for the proxy, or for one connection: never forwarded.
HOP_HEADERS = frozenset({b"proxy-connection", b"proxy-authorization", b"connection",
                         b"keep-alive", b"te", b"trailer", b"upgrade"})


class BadProxyRequest(ValueError):
    """Chromium sent a request this proxy does not forward."""


def _host_port(authority: str, default: int) -> tuple[str, int]:
    """``host:port`` (``[v6]:port``) as (host, port); the port ``default`` when absent."""
    parts = urlsplit(f"//{authority}")
    try:
        port = parts.port
    except ValueError:
        raise BadProxyRequest(f"bad port in {authority!r}") from None
    if not parts.hostname:
        raise BadProxyRequest(f"no host in {authority!r}")
    return parts.hostname, port if port is not None else default


def _forwarded_head(method: str, target: str, version: str,
                    header_lines: list[bytes]) -> tuple[str, int, bytes]:
    """A plain-HTTP request in absolute form, as (host, port, the head to send upstream in
    origin form, with ``Connection: close``)."""
    parts = urlsplit(target)
    if parts.scheme != "http":
        raise BadProxyRequest(f"only http:// requests are forwarded, not {target[:80]!r}")
    host, port = _host_port(parts.netloc.rpartition("@")[2], 80)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    kept = [line for line in header_lines
            if line.split(b":", 1)[0].strip().lower() not in HOP_HEADERS]
    head = b"\r\n".join([f"{method} {path} {version}".encode("latin-1"), *kept,
                         b"Connection: close", b"", b""])
    return host, port, head


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        while data := await reader.read(CHUNK_BYTES):
            writer.write(data)
            await writer.drain()


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(ConnectionError, OSError):
        await writer.wait_closed()


class EgressProxy:
    """The proxy; ``port`` is set once :meth:`start` returned. ``refused`` counts the
    connections it refused (a test reads it)."""

    def __init__(self, allow_private: bool, resolve: Resolver = system_resolver) -> None:
        self.allow_private = allow_private
        self.resolve = resolve
        self.port = 0
        self.refused = 0
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        """Listen on a free port of 127.0.0.1; return it."""
        if self._server is None:
            self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
            self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def close(self) -> None:
        """Stop listening, cut every connection still open and end their handlers (one may
        be waiting for a DNS answer that never comes)."""
        if self._server is not None:
            self._server.close()
            for writer in list(self._open):
                writer.close()
            handlers = list(self._handlers)
            for handler in handlers:
                handler.cancel()
            await asyncio.gather(*handlers, return_exceptions=True)
            await self._server.wait_closed()
            self._server = None

    async def check(self, host: str, port: int) -> str:
        """The address to connect to for ``host``; :class:`DestinationRefused` if it is not
        one the browser may reach."""
        return (await addresses(host, port, self.allow_private, self.resolve))[0]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handler = asyncio.current_task()
        assert handler is not None
        self._handlers.add(handler)
        self._open.add(writer)
        try:
            await self._handle(reader, writer)
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            if self._server is not None:
                raise  # not ours: let whoever cancelled it see it
        finally:
            self._open.discard(writer)
            self._handlers.discard(handler)
            writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(HEAD_TIMEOUT_SECONDS):
                head = await reader.readuntil(b"\r\n\r\n")
        except (TimeoutError, asyncio.LimitOverrunError):
            return
        request_line, *header_lines = head[:-4].split(b"\r\n")
        try:
            method, target, version = request_line.decode("latin-1").split(" ", 2)
            if method == "CONNECT":
                host, port = _host_port(target, 443)
                upstream_head = b""
            else:
                host, port, upstream_head = _forwarded_head(method, target, version,
                                                            header_lines)
        except (ValueError, BadProxyRequest) as exc:
            await self._answer(writer, 400, str(exc))
            return
        try:
            address = await self.check(host, port)
        except DestinationRefused as exc:
            self.refused += 1
            log.info("browser: refused a connection to %s:%d (%s)", host, port, exc)
            await self._answer(writer, 403, f"refused by the gateway: {exc}")
            return
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_SECONDS):
                up_reader, up_writer = await asyncio.open_connection(address, port)
        except (OSError, TimeoutError) as exc:
            await self._answer(writer, 502, f"cannot connect to {host}:{port} ({exc})")
            return
        self._open.add(up_writer)
        try:
            if upstream_head:
                up_writer.write(upstream_head)
            else:
                writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            # Either side finishing ends the exchange (an origin's Connection: close, a tunnel
            # closed): the other direction is cut rather than left waiting.
            pipes = [asyncio.ensure_future(_pipe(reader, up_writer)),
                     asyncio.ensure_future(_pipe(up_reader, writer))]
            try:
                await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for pipe in pipes:
                    pipe.cancel()
                await asyncio.gather(*pipes, return_exceptions=True)
        finally:
            self._open.discard(up_writer)
            await _close(up_writer)

    @staticmethod
    async def _answer(writer: asyncio.StreamWriter, status: int, text: str) -> None:
        body = text.encode("utf-8", "replace")
        reason = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway"}[status]
        writer.write(f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8"
                     f"\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
                     .encode("latin-1") + body)
        await writer.drain()
