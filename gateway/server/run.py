"""Running the application until SIGINT or SIGTERM: aiohttp's runner with the gateway's
connection limits, on a site whose connections pass the per-address cap first."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

from gateway.config.settings import Settings
from gateway.server.connections import AddressCap, CappedConnection

log = logging.getLogger(__name__)

# Connections the kernel holds for accepting (capped at net.core.somaxconn). aiohttp's 128 is
# too few for a burst (clients reconnecting after a restart, or hundreds an address opens past
# its cap): a connection past the queue waits for its SYN to be sent again, 1, 3, 7 s later,
# instead of being answered (or refused with its 503) at once.
LISTEN_BACKLOG = 1024


# asyncio's message when accept() fails for want of a descriptor (or memory).
OUT_OF_RESOURCES = "socket.accept() out of system resource"
PAUSE_WARNING_EVERY = 60.0  # seconds between two log lines about accepting paused


def _nothing() -> None:
    pass


@dataclass(frozen=True)
class Listener:
    """Where to listen, the cap on each client address's connections, and what to call each
    time accepting pauses because the process is out of descriptors (a metric)."""

    host: str
    port: int
    cap: AddressCap
    on_accept_paused: Callable[[], None] = _nothing


class AcceptPauses:
    """The event loop's exception handler: an accept that failed for want of a descriptor is
    counted and logged once a minute, without a traceback; anything else goes to asyncio's
    default handler.

    When accept() fails with EMFILE, asyncio stops accepting for a second, but (to Python 3.12)
    it does not leave its accept loop: it tries every remaining slot of the backlog (1,024
    here) and reports each failure with a traceback. Logged as they come, those reports cost
    the whole process a second of CPU per pause, just when it is short of resources; counted,
    a few milliseconds. A burst of failures within half a second is one pause."""

    def __init__(self, on_paused: Callable[[], None]) -> None:
        self._on_paused = on_paused
        self._paused_at = -PAUSE_WARNING_EVERY
        self._warned_at = -PAUSE_WARNING_EVERY
        self._pauses_unreported = 0

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, object]) -> None:
        """Count and maybe log an accept pause; pass anything else to the default handler."""
        if context.get("message") != OUT_OF_RESOURCES:
            loop.default_exception_handler(context)
            return
        now = loop.time()
        if now - self._paused_at < 0.5:
            return
        self._paused_at = now
        self._pauses_unreported += 1
        self._on_paused()
        if now - self._warned_at >= PAUSE_WARNING_EVERY:
            self._warned_at = now
            log.warning("out of file descriptors: stopped accepting connections for a second "
                        "(%d time(s) since the last warning): %s; raise the process's limit "
                        "(ulimit -n) or lower max_connections_per_address",
                        self._pauses_unreported, context.get("exception"))
            self._pauses_unreported = 0


class CappedSite(web.BaseSite):
    """A TCP site whose every connection is admitted by ``listener.cap`` before aiohttp's
    request handler gets it."""

    def __init__(self, runner: web.BaseRunner, listener: Listener) -> None:
        super().__init__(runner, backlog=LISTEN_BACKLOG)
        self._listener = listener

    @property
    def name(self) -> str:
        """The URL the site answers on (its bound port, once started)."""
        port = self._listener.port
        if self._server is not None and isinstance(self._server, asyncio.Server) \
                and self._server.sockets:
            port = self._server.sockets[0].getsockname()[1]
        return f"http://{self._listener.host}:{port}"

    async def start(self) -> None:
        """Listen: each accepted connection goes through the cap to a new request handler."""
        await super().start()
        handler = self._runner.server
        assert handler is not None  # BaseSite refuses a runner that is not set up
        cap = self._listener.cap
        self._server = await asyncio.get_running_loop().create_server(
            lambda: CappedConnection(cap, handler), self._listener.host, self._listener.port,
            backlog=self._backlog)


def app_runner(app: web.Application, settings: Settings,
               access_log: logging.Logger | None) -> web.AppRunner:
    """aiohttp's runner for ``app``: a connection must have sent its request line and headers
    ``header_timeout_seconds`` after it opened or after its previous answer (aiohttp's keep-alive
    timer, armed at both moments, closes one whose request is not complete by then); requests
    in flight get ``shutdown_grace_seconds`` on stop."""
    return web.AppRunner(app, handle_signals=False, access_log=access_log,
                         keepalive_timeout=settings.header_timeout_seconds,
                         shutdown_timeout=settings.shutdown_grace_seconds)


async def serve(runner: web.AppRunner, listener: Listener,
                started: Callable[[str], None]) -> None:
    """Serve until SIGINT or SIGTERM, then stop gracefully (the runner's clean-up)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(AcceptPauses(listener.on_accept_paused))
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await runner.setup()
    try:
        site = CappedSite(runner, listener)
        await site.start()
        started(site.name)
        await stop.wait()
    finally:
        await runner.cleanup()


def run(app: Awaitable[web.Application], settings: Settings, listener: Listener,
        started: Callable[[str], None]) -> None:
    """Build ``app`` and serve it on ``listener`` until SIGINT or SIGTERM (``cloudybot
    serve``); raises OSError when the address cannot be listened on."""
    async def main() -> None:
        access_log = logging.getLogger("aiohttp.access") if settings.access_log else None
        await serve(app_runner(await app, settings, access_log), listener, started)
    asyncio.run(main())
