"""python-telegram-bot's requests on the gateway's own HTTP client.

:class:`GatewayRequest` is a ``telegram.request.BaseRequest``: every Bot API call of the bot
(sendMessage, drafts, edits, "typing…", getUpdates' long poll, getFile) and the download of a
file go through :class:`gateway.HTTPClient` (one keep-alive client per origin, one
``transport.write`` a request, llhttp parsing) instead of PTB's ``HTTPXRequest``, whose httpx
and httpcore stack cost most of a channel turn's CPU. What PTB does with an answer (its status
to ``BadRequest``, ``Forbidden``, ``RetryAfter``, ``ChatMigrated``..., the rate limiter, the
retries) is PTB's own and unchanged: only the exchange is ours.

The wire is what ``HTTPXRequest`` sends: a form-encoded POST (``application/x-www-form-urlencoded``,
every value a string, objects as JSON), PTB's User-Agent, and TLS trusting what httpx trusts
(``SSL_CERT_FILE``/``SSL_CERT_DIR``, else certifi's bundle). Failures map as ``HTTPXRequest``
maps them: no answer in time is ``TimedOut``, any other failure of the exchange (refused,
reset, malformed or too large an answer) ``NetworkError``.

Timeouts: ``connect_timeout`` bounds opening a connection; the whole exchange (connecting,
sending, the answer read to its end) is bounded by ``connect_timeout + read_timeout``
(httpx's read timeout bounds each socket read instead, so neither bounds a trickling answer the
same way). getUpdates' long poll gets PTB's read timeout plus its ``timeout``, as before.
``write_timeout`` and ``pool_timeout`` have nothing to bound here (a request is one buffered
write; connections are not limited in number).

Two things stay on ``HTTPXRequest``, made only when needed: a call that uploads a file
(multipart; the channel sends none) and, for the whole bot, a Bot API reached through a proxy
(``HTTPS_PROXY``/``ALL_PROXY``..., which httpx honours and this client does not):
:func:`bot_api_requests` picks.
"""

from __future__ import annotations

import asyncio
import ssl
import urllib.request
from typing import TYPE_CHECKING, cast
from urllib.parse import urlencode, urlsplit

import httpx
from telegram.error import NetworkError, TimedOut
from telegram.request import BaseRequest, HTTPXRequest, RequestData

from gateway import Connecting, HTTPClient, HTTPClientError

if TYPE_CHECKING:
    from telegram._utils.types import ODVInput

FORM = "application/x-www-form-urlencoded"
READ_TIMEOUT = CONNECT_TIMEOUT = WRITE_TIMEOUT = 5.0  # HTTPXRequest's defaults
MEDIA_WRITE_TIMEOUT = 20.0
_DEFAULT = type(BaseRequest.DEFAULT_NONE)  # a timeout the call left to the request's default


class GatewayRequest(BaseRequest):
    """A ``BaseRequest`` on :class:`gateway.HTTPClient`; the timeouts are HTTPXRequest's
    defaults unless given (seconds; None: no limit)."""

    __slots__ = ("_clients", "_connect_timeout", "_headers", "_initialized", "_media",
                 "_read_timeout", "_ssl", "_write_timeout")

    def __init__(self, *, read_timeout: float | None = READ_TIMEOUT,
                 connect_timeout: float | None = CONNECT_TIMEOUT,
                 write_timeout: float | None = WRITE_TIMEOUT) -> None:
        self._read_timeout = read_timeout
        self._connect_timeout = connect_timeout
        self._write_timeout = write_timeout
        self._clients: dict[str, HTTPClient] = {}  # by origin: the Bot API's, its files'
        self._headers = {"User-Agent": self.USER_AGENT}
        self._ssl: ssl.SSLContext | None = None  # made for the first https:// origin
        self._media: HTTPXRequest | None = None  # for uploads only, made when first needed
        self._initialized = False

    @property
    def read_timeout(self) -> float | None:
        """The read timeout used when a call names none (getUpdates adds its long poll)."""
        return self._read_timeout

    async def initialize(self) -> None:
        """Ready to send (connections are opened by the first calls)."""
        self._initialized = True

    async def shutdown(self) -> None:
        """Close every kept-alive connection; calls fail until :meth:`initialize` again."""
        self._initialized = False
        clients, self._clients = list(self._clients.values()), {}
        media, self._media = self._media, None
        await asyncio.gather(*(client.close() for client in clients),
                             *((media.shutdown(),) if media is not None else ()))

    async def do_request(
        self,
        url: str,
        method: str,
        request_data: RequestData | None = None,
        read_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
        write_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
        connect_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
        pool_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
    ) -> tuple[int, bytes]:
        """One exchange: ``(status, body)``; ``TimedOut`` or ``NetworkError`` if it failed."""
        if not self._initialized:
            raise RuntimeError("This GatewayRequest is not initialized!")
        if request_data is not None and request_data.contains_files:
            return await self._upload(url, method, request_data, read_timeout, write_timeout,
                                      connect_timeout, pool_timeout)
        read = _seconds(read_timeout, self._read_timeout)
        connect = _seconds(connect_timeout, self._connect_timeout)
        origin, path = _split(url)
        client = self._clients.get(origin) or self._client(origin)
        if method == "POST":
            body = urlencode(request_data.json_parameters).encode("ascii") \
                if request_data is not None else b""
            exchange = client.post(path, body)
        elif method == "GET":
            exchange = client.get(path)
        else:
            raise ValueError(f"unsupported HTTP method {method!r}")
        try:
            async with asyncio.timeout(None if read is None else read + (connect or 0.0)):
                async with exchange as response:
                    return response.status, await response.read()
        except TimeoutError as exc:
            raise TimedOut from exc
        except HTTPClientError as exc:
            if isinstance(exc.__cause__, TimeoutError):  # no connection within connect
                raise TimedOut(str(exc)) from exc
            raise NetworkError(f"{type(exc).__name__}: {exc}") from exc

    def _client(self, origin: str) -> HTTPClient:
        if self._ssl is None and origin.startswith("https:"):
            self._ssl = httpx.create_ssl_context()  # what httpx trusts: env, else certifi
        client = HTTPClient(origin, headers=self._headers, content_type=FORM,
                            connecting=Connecting(self._ssl, timeout=self._connect_timeout))
        self._clients[origin] = client
        return client

    async def _upload(self, url: str, method: str, request_data: RequestData,
                      read_timeout: ODVInput[float], write_timeout: ODVInput[float],
                      connect_timeout: ODVInput[float],
                      pool_timeout: ODVInput[float]) -> tuple[int, bytes]:
        """A call with files (multipart) goes through PTB's own HTTPXRequest."""
        if self._media is None:
            self._media = HTTPXRequest(read_timeout=self._read_timeout,
                                       connect_timeout=self._connect_timeout,
                                       write_timeout=self._write_timeout,
                                       media_write_timeout=MEDIA_WRITE_TIMEOUT)
            await self._media.initialize()
        return await self._media.do_request(url, method, request_data, read_timeout,
                                            write_timeout, connect_timeout, pool_timeout)


def bot_api_requests(base_url: str) -> tuple[BaseRequest, BaseRequest]:
    """The bot's two requests, ``(request, get_updates_request)``: on the gateway's client,
    or PTB's own HTTPXRequest when the environment sends ``base_url`` through a proxy."""
    parts = urlsplit(base_url)
    proxies = urllib.request.getproxies()
    if (proxies.get(parts.scheme) or proxies.get("all")) \
            and not urllib.request.proxy_bypass(parts.hostname or ""):
        return HTTPXRequest(), HTTPXRequest(connection_pool_size=1)  # as Bot() makes them
    return GatewayRequest(), GatewayRequest()


def _seconds(given: ODVInput[float], default: float | None) -> float | None:
    """A call's timeout, or the request's own when the call left it to the default."""
    return default if isinstance(given, _DEFAULT) else cast("float | None", given)


def _split(url: str) -> tuple[str, str]:
    """``(scheme://host[:port], /path)`` of an absolute URL."""
    start = url.find("://") + 3
    slash = url.find("/", start)
    return (url, "/") if slash < 0 else (url[:slash], url[slash:])
