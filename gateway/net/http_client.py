"""A small keep-alive HTTP/1.1 client for POSTs (JSON by default) to one origin (asyncio +
httptools); GETs too, for a file on the same origin.

It exists for the LLM provider's hot path: aiohttp's client spends a few hundred µs of CPU per
call on machinery this exchange never uses (cookie jars, tracing, multidicts, payload
registries). Here a request is one ``transport.write`` of bytes mostly built once, and the
response is parsed by llhttp (through httptools)::

    client = HTTPClient("https://api.openai.com/v1", headers={"Authorization": "Bearer ..."})
    async with client.post("/chat/completions", body) as response:   # POST /v1/chat/...
        data = await response.read()            # or: async for line in response.lines()
    await client.close()

Timeouts are the caller's (``asyncio.timeout``), but for ``connect_timeout``, which bounds
opening a connection (a :class:`ConnectionFailed` caused by a ``TimeoutError``). A connection
goes back to the pool only when its response was read to the end and the server keeps it
alive; a response left unread, an error, a timeout or a cancellation closes it. A request on a
pooled connection that the server had closed (no byte of an answer came back) is sent again
once on a fresh connection.

Every failure is an :class:`HTTPClientError`: :class:`ConnectionFailed` (no connection, a
connection that broke, malformed HTTP) or :class:`ResponseTooLarge`.
"""

from __future__ import annotations

import asyncio
import re
import ssl
import sys
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import cast
from urllib.parse import quote, urlsplit

import httptools

MAX_IDLE_CONNECTIONS = 100
KEEPALIVE_SECONDS = 15.0  # idle longer than this and a connection is closed, not reused
MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 32 * 1024 * 1024
MAX_LINE_BYTES = 1024 * 1024
HIGH_WATER_BYTES = 256 * 1024  # unread body beyond this pauses reading from the socket
CLOSE_WAIT_SECONDS = 2.0
USER_AGENT = f"cloudybot Python/{sys.version_info.major}.{sys.version_info.minor}"

_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_FORBIDDEN_VALUE = re.compile(r"[\r\n\x00]")
# Framing headers are the client's: a caller's version would desynchronize the connection.
_CLIENT_HEADERS = frozenset({"host", "content-length", "content-type", "transfer-encoding",
                             "connection", "te", "upgrade", "expect"})
_DEFAULT_HEADERS = {"User-Agent": USER_AGENT, "Accept": "*/*",
                    # without it, RFC 9110 lets the server pick any coding; we decode none
                    "Accept-Encoding": "identity"}
_PATH_SAFE = "/:@!$&'()*+,;=%~-._"


class HTTPClientError(Exception):
    """Base of every error this module raises."""


class ConnectionFailed(HTTPClientError):
    """No complete response: no connection, a connection that broke, or malformed HTTP."""


class ResponseTooLarge(HTTPClientError):
    """The response's head, body or one line of it is larger than the client accepts."""


@dataclass(frozen=True, slots=True)
class Limits:
    """What a client keeps and accepts: how many idle connections it keeps and for how long,
    and the sizes a response's head, a body read whole and one line may reach."""

    idle_connections: int = MAX_IDLE_CONNECTIONS
    keepalive_seconds: float = KEEPALIVE_SECONDS
    head: int = MAX_HEAD_BYTES
    body: int = MAX_BODY_BYTES
    line: int = MAX_LINE_BYTES


@dataclass(frozen=True, slots=True)
class Connecting:
    """How a client opens connections: ``ssl_context`` replaces the default verifying context
    for ``https://`` (a test's own CA); ``address``, if given, picks the address each new
    connection goes to (and may refuse by raising: it is how a caller checks the very address
    connected to); ``timeout`` bounds opening one (seconds; None: the caller's timeout only)."""

    ssl_context: ssl.SSLContext | None = None
    address: Callable[[str, int], Awaitable[str]] | None = None
    timeout: float | None = None


class HTTPClient:
    """Keep-alive HTTP/1.1 POSTs of JSON bodies (or of ``content_type``) to the origin of
    ``base_url``; GETs of paths on it.

    ``base_url`` is ``http://`` or ``https://`` with an optional path prefix that every
    request's path is appended to. ``headers`` go with every request (``Authorization``, say).
    ``content_type`` is what POST bodies are (``application/x-www-form-urlencoded``, say).
    ``connecting`` (:class:`Connecting`) says how connections are opened. ``limits``
    (:class:`Limits`) say how many idle connections are kept and for how long; a
    head, a body read whole or one line larger than they allow is a :class:`ResponseTooLarge`.
    A body read by lines has no total limit (it is held a line at a time, reading paused while
    the reader lags): the caller's timeout ends it.
    """

    def __init__(self, base_url: str, *, headers: Mapping[str, str] | None = None,
                 content_type: str = "application/json", limits: Limits | None = None,
                 connecting: Connecting | None = None) -> None:
        connecting = connecting if connecting is not None else Connecting()
        parts = urlsplit(base_url)
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https"):
            raise ValueError(f"not an http:// or https:// URL: {base_url!r}")
        if not parts.hostname:
            raise ValueError(f"no host in URL: {base_url!r}")
        if parts.username is not None or parts.password is not None:
            raise ValueError("credentials in the URL are not supported; pass a header")
        port = parts.port  # ValueError when it is not a number in 0..65535
        default_port = 443 if scheme == "https" else 80
        self._host = parts.hostname
        self._port = port if port is not None else default_port
        host = f"[{self._host}]" if ":" in self._host else self._host
        self.origin = f"{scheme}://{host}:{self._port}"
        self._host_header = host if port is None or port == default_port else f"{host}:{port}"
        self._ssl: ssl.SSLContext | None = None
        if scheme == "https":
            self._ssl = connecting.ssl_context if connecting.ssl_context is not None \
                else ssl.create_default_context()
        self._prefix = quote(parts.path.rstrip("/"), safe=_PATH_SAFE)
        self._query = f"?{parts.query}" if parts.query else ""
        if _FORBIDDEN_VALUE.search(content_type) or not content_type.isascii():
            raise ValueError(f"not a content type: {content_type!r}")
        self._content_type = content_type
        self._connect_timeout = connecting.timeout
        self._given_headers = dict(headers or {})
        self._headers = _merged_headers(self._given_headers)
        self._limits = limits if limits is not None else Limits()
        self._max_idle = self._limits.idle_connections
        self._keepalive = self._limits.keepalive_seconds
        self._heads: dict[str, bytes] = {}
        self._idle: deque[_Connection] = deque()
        self._sweep: asyncio.TimerHandle | None = None
        self._closed = False
        self._connect_address = connecting.address

    def post(self, path: str, body: bytes,
             headers: Mapping[str, str] | None = None) -> _Exchange:
        """POST ``body`` (JSON) to the base URL's path + ``path`` (``""``: the base URL itself);
        use as ``async with``.

        Entering sends the request and waits for the response's head; the
        :class:`Response` it gives is valid until the block ends. ``headers`` are added to
        (and override) the client's own for this request.
        """
        if self._closed:
            raise RuntimeError("the HTTP client is closed")
        if headers:
            head = self._build_head(path, _merged_headers({**self._given_headers, **headers}))
        else:
            head = self._heads.get(path) or self._cache_head(path)
        return _Exchange(self, b"".join((head, b"%d\r\n\r\n" % len(body), body)))

    def get(self, path: str, headers: Mapping[str, str] | None = None) -> _Exchange:
        """GET the base URL's path + ``path``; use as ``async with`` (as :meth:`post`).

        The request head is built anew each time (GET paths, file paths say, are not cached).
        """
        if self._closed:
            raise RuntimeError("the HTTP client is closed")
        merged = _merged_headers({**self._given_headers, **headers}) if headers \
            else self._headers
        return _Exchange(self, b"%s\r\n\r\n" % self._build_head(path, merged, "GET"))

    async def close(self) -> None:
        """Close every idle connection (those in use close when their responses end)."""
        self._closed = True
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        connections = list(self._idle)
        self._idle.clear()
        for connection in connections:
            connection.close()
        pending = [c.lost for c in connections if not c.lost.done()]
        if pending:
            await asyncio.wait(pending, timeout=CLOSE_WAIT_SECONDS)
        for connection in connections:
            connection.abort_if_open()  # a TLS peer that never answered our close_notify

    def _cache_head(self, path: str) -> bytes:
        head = self._build_head(path, self._headers)
        self._heads[path] = head
        return head

    def _build_head(self, path: str, headers: Mapping[str, str], method: str = "POST") -> bytes:
        """A POST's head up to and including ``Content-Length: `` (its value is per call); a
        GET's without its last blank line."""
        tail = f"/{quote(path.lstrip('/'), safe=_PATH_SAFE)}" if path else ""
        target = f"{self._prefix}{tail}" or "/"
        target += self._query
        lines = [f"{method} {target} HTTP/1.1", f"Host: {self._host_header}",
                 *((f"Content-Type: {self._content_type}",) if method == "POST" else ()),
                 *(f"{name}: {value}" for name, value in headers.items())]
        if method != "POST":
            return "\r\n".join(lines).encode("latin-1")
        return ("\r\n".join(lines) + "\r\nContent-Length: ").encode("latin-1")

    async def _send(self, request: bytes) -> _Connection:
        """Send ``request`` and wait for the head of its response; the connection it is on."""
        connection = self._pooled()
        if connection is not None:
            try:
                await connection.exchange(request)
                return connection
            except ConnectionFailed:
                connection.close()
                if connection.received:
                    raise
                # Closed by the server while idle, before any answer: it never saw the
                # request, so sending it again cannot do anything twice.
            except BaseException:
                connection.close()
                raise
        connection = await self._connect()
        try:
            await connection.exchange(request)
        except BaseException:
            connection.close()
            raise
        return connection

    def _pooled(self) -> _Connection | None:
        """The most recently used idle connection that is still open and fresh, if any."""
        idle = self._idle
        if not idle:
            return None
        now = asyncio.get_running_loop().time()
        while idle:
            connection = idle.pop()
            if connection.closed:
                continue
            if now - connection.idle_since > self._keepalive:
                connection.close()
                continue
            return connection
        return None

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        connection = _Connection(loop, self._limits)
        host = self._host
        if self._connect_address is not None:
            host = await self._connect_address(host, self._port)
        deadline = asyncio.timeout(self._connect_timeout)
        try:
            async with deadline:
                await loop.create_connection(
                    lambda: connection, host, self._port, ssl=self._ssl,
                    server_hostname=self._host if self._ssl is not None else None)
        except OSError as exc:  # refused, unreachable, no such host, TLS failures, timeout
            reason = f"no connection within {self._connect_timeout} s" if deadline.expired() \
                else str(exc)
            raise ConnectionFailed(f"cannot connect to {self.origin}: {reason}") from exc
        return connection

    def _release(self, connection: _Connection) -> None:
        """Pool the connection if its response ended cleanly and it is kept alive; else close."""
        connection.active = False
        idle = self._idle
        if self._closed or not connection.reusable or len(idle) >= self._max_idle:
            connection.close()
            return
        loop = asyncio.get_running_loop()
        connection.idle_since = loop.time()
        idle.append(connection)
        if self._sweep is None:
            self._sweep = loop.call_later(self._keepalive, self._close_expired)

    def _close_expired(self) -> None:
        """Close idle connections past the keep-alive time; look again while any are left."""
        self._sweep = None
        idle = self._idle
        loop = asyncio.get_running_loop()
        deadline = loop.time() - self._keepalive
        while idle and (idle[0].closed or idle[0].idle_since <= deadline):
            idle.popleft().close()
        if idle:
            self._sweep = loop.call_later(self._keepalive, self._close_expired)


class _Exchange:
    """``async with client.post(...) as response``: one request and its response."""

    __slots__ = ("_client", "_request", "_response")

    def __init__(self, client: HTTPClient, request: bytes) -> None:
        self._client = client
        self._request = request
        self._response: Response | None = None

    async def __aenter__(self) -> Response:
        self._response = Response(await self._client._send(self._request))
        return self._response

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        traceback: TracebackType | None) -> None:
        response, self._response = self._response, None
        if response is not None:
            self._client._release(response._detach())


class Response:
    """The status and headers of a response; its body by :meth:`read` or :meth:`lines`.

    ``headers`` has lowercased names; a header sent more than once is joined with ``", "``.
    The response is usable inside its ``async with`` block only.
    """

    __slots__ = ("_connection", "headers", "status")

    def __init__(self, connection: _Connection) -> None:
        self._connection: _Connection | None = connection
        self.status = connection.status
        self.headers = connection.headers

    def header(self, name: str) -> str | None:
        """The value of header ``name`` (any case), or None."""
        return self.headers.get(name.lower())

    @property
    def content_type(self) -> str:
        """The media type, lowercased, without parameters (``application/octet-stream`` if
        the server named none, as RFC 9110 suggests)."""
        value = self.headers.get("content-type")
        if not value:
            return "application/octet-stream"
        return value.partition(";")[0].strip().lower()

    async def read(self) -> bytes:
        """The whole body."""
        connection = self._live()
        connection.reading_all = True
        while not connection.complete:
            await connection.wait()
        body = bytes(connection.body)
        connection.body.clear()
        return body

    def lines(self) -> _Lines:
        """The body's lines as they arrive (for Server-Sent Events), without their LF or CRLF;
        a last line without one too. A line longer than the limit is a ResponseTooLarge."""
        self._live().by_lines = True
        return _Lines(self)

    def _live(self) -> _Connection:
        if self._connection is None:
            raise RuntimeError("the response was used after its 'async with' block ended")
        return self._connection

    def _detach(self) -> _Connection:
        connection = self._live()
        self._connection = None
        return connection


class _Lines:
    """Async iterator over a response body's lines."""

    __slots__ = ("_response", "_scanned")

    def __init__(self, response: Response) -> None:
        self._response = response
        self._scanned = 0  # bytes at the buffer's start known to hold no line end

    def __aiter__(self) -> _Lines:
        return self

    async def __anext__(self) -> bytes:
        connection = self._response._live()
        body = connection.body
        limit = connection.limits.line
        while True:
            end = body.find(b"\n", self._scanned)
            if end > limit or (end < 0 and len(body) > limit):
                raise connection.fail(ResponseTooLarge(
                    f"a line of the response is longer than {limit} bytes"))
            if end >= 0:
                line = bytes(body[:end])
                del body[:end + 1]  # cheap: a bytearray drops its front without moving
                self._scanned = 0
                return line[:-1] if line.endswith(b"\r") else line
            if connection.complete:
                if not body:
                    raise StopAsyncIteration
                line = bytes(body)
                body.clear()
                return line[:-1] if line.endswith(b"\r") else line
            self._scanned = len(body)
            await connection.wait()


class _Connection(asyncio.Protocol):
    """One connection: the protocol asyncio feeds, httptools' callbacks, and the state of the
    response in progress (one at a time)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, limits: Limits) -> None:
        self._loop = loop
        self.limits = limits
        self._parser = httptools.HttpResponseParser(self)
        self._transport: asyncio.Transport | None = None
        self.lost: asyncio.Future[None] = loop.create_future()
        self.closed = False
        self.active = False
        self.idle_since = 0.0
        self._waiter: asyncio.Future[None] | None = None
        self._begin()

    def _begin(self) -> None:
        """Forget the previous response."""
        self.status = 0
        self.headers: dict[str, str] = {}
        self.head_done = False
        self.complete = False
        self.keep_alive = False
        self.error: HTTPClientError | None = None
        self.received = False
        self.body = bytearray()
        self.reading_all = False
        self.by_lines = False
        self._body_size = 0
        self._head_size = 0
        self._paused = False

    # --- used by the client -------------------------------------------------------------
    @property
    def reusable(self) -> bool:
        """Whether the last response ended cleanly on a connection the server keeps open."""
        return self.complete and self.keep_alive and self.error is None and not self.closed

    async def exchange(self, request: bytes) -> None:
        """Write ``request`` and wait for the head of its response."""
        if self.closed or self._transport is None:
            raise ConnectionFailed("the connection was closed")
        self._begin()
        self.active = True
        self._transport.write(request)
        while not self.head_done:
            await self.wait()

    async def wait(self) -> None:
        """Wait for the next event of the response (bytes, its end, a failure); raise the
        failure if there was one already (callers check what they wait for first, so an
        error in the body does not fail a wait for the head)."""
        if self.error is not None:
            raise self.error
        if self._paused and self._transport is not None:
            self._paused = False  # the reader wants more: let the socket be read again
            self._transport.resume_reading()
        waiter = self._loop.create_future()
        self._waiter = waiter
        try:
            await waiter
        finally:
            self._waiter = None

    def fail(self, error: HTTPClientError) -> HTTPClientError:
        """Record ``error`` as the response's failure, close the connection; return it."""
        if self.error is None:
            self.error = error
        self.close()
        self._wake()
        return self.error

    def close(self) -> None:
        """Close the connection (it will not be reused)."""
        self.closed = True
        if self._transport is not None:
            self._transport.close()

    def abort_if_open(self) -> None:
        """Drop the connection at once if closing it did not finish."""
        if not self.lost.done() and self._transport is not None:
            self._transport.abort()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # --- asyncio.Protocol ---------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Keep the transport."""
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        """Feed the parser; a parse failure fails the response."""
        if not self.active or self.complete:
            # Bytes nobody asked for: the connection's framing can no longer be trusted.
            self.keep_alive = False
            self.close()
            return
        self.received = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self.fail(ConnectionFailed("the server switched protocols"))
            return
        except httptools.HttpParserError as exc:
            cause = exc.__context__
            if self.complete:  # more after a complete response (raised by on_message_begin)
                self.keep_alive = False
                self.close()
            elif isinstance(cause, HTTPClientError):
                self.fail(cause)
            else:
                self.fail(ConnectionFailed(f"malformed HTTP response: {exc}"))
            return
        if not self.head_done:
            self._head_size += len(data)
            if self._head_size > self.limits.head:
                self.fail(ResponseTooLarge(
                    f"the response head is larger than {self.limits.head} bytes"))

    def eof_received(self) -> bool:
        """The server closed its side: the end of a body without length, or a failure."""
        self._peer_closed(None)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        """The connection is gone: the end of a body without length, or a failure."""
        self._peer_closed(exc)
        if not self.lost.done():
            self.lost.set_result(None)

    def _peer_closed(self, exc: Exception | None) -> None:
        self.closed = True
        if not self.active or self.complete or self.error is not None:
            return
        if self.head_done and self._ends_at_close():
            self.complete = True
            self._wake()
            return
        reason = f": {exc}" if exc is not None else ""
        self.fail(ConnectionFailed(
            f"the server closed the connection before the response was complete{reason}"))

    def _ends_at_close(self) -> bool:
        """Whether the body is framed by the connection's end (no length, not chunked)."""
        if "content-length" in self.headers:
            return False
        coding = self.headers.get("transfer-encoding")
        return coding is None or not coding.rstrip().lower().endswith("chunked")

    # --- httptools callbacks --------------------------------------------------------------
    def on_message_begin(self) -> None:
        """A response starts; a second one on the same request is the server's mistake."""
        if self.complete:
            raise ConnectionFailed("the server sent more than one response")

    def on_header(self, name: bytes, value: bytes) -> None:
        """Keep one header, its name lowercased."""
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        previous = self.headers.get(key)
        self.headers[key] = text if previous is None else f"{previous}, {text}"

    def on_headers_complete(self) -> None:
        """The head is in: status and headers are known (1xx heads are skipped)."""
        status = self._parser.get_status_code()
        if status < 200:
            return  # informational; on_message_complete forgets it
        coding = self.headers.get("content-encoding", "").strip().lower()
        if coding not in ("", "identity"):
            raise ConnectionFailed(f"the response is encoded ({coding}), which was not asked for")
        self.status = status
        self.head_done = True
        self._wake()

    def on_body(self, body: bytes) -> None:
        """Buffer a piece of body; pause reading while the reader lags far behind."""
        self._body_size += len(body)
        if self._body_size > self.limits.body and not self.by_lines:
            raise ResponseTooLarge(f"the response body is larger than {self.limits.body} bytes")
        self.body += body
        if (not self.reading_all and not self._paused and len(self.body) > HIGH_WATER_BYTES
                and self._transport is not None):
            self._paused = True
            self._transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        """The response ended; the connection may serve another if the server agrees."""
        if not self.head_done:
            self.headers = {}  # the end of a 1xx head: the real response follows
            return
        self.complete = True
        self.keep_alive = self._parser.should_keep_alive()
        if self._paused and self._transport is not None:
            self._paused = False  # nothing more belongs to this response: see EOF while idle
            self._transport.resume_reading()
        self._wake()


def _merged_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The default headers overridden by ``headers`` (names compared without case), checked."""
    merged = {name.lower(): (name, value) for name, value in _DEFAULT_HEADERS.items()}
    for name, value in headers.items():
        if not _TOKEN.fullmatch(name):
            raise ValueError(f"not a header name: {name!r}")
        if name.lower() in _CLIENT_HEADERS:
            raise ValueError(f"the client sets {name} itself")
        if _FORBIDDEN_VALUE.search(value):
            raise ValueError(f"header {name} has a line break or NUL in its value")
        value.encode("latin-1")  # UnicodeEncodeError (a ValueError) if it cannot be sent
        merged[name.lower()] = (name, value)
    return dict(merged.values())
