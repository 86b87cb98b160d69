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

# Connections the kernel holds for accepting (capped at net.core.somaxconn). aiohttp's 128 is
# too few for a burst (clients reconnecting after a restart, or hundreds an address opens past
# its cap): a connection past the queue waits for its SYN to be sent again, 1, 3, 7 s later,
# instead of being answered (or refused with its 503) at once.
LISTEN_BACKLOG = 1024


@dataclass(frozen=True)
class Listener:
    """Where to listen, and the cap on each client address's connections."""

    host: str
    port: int
    cap: AddressCap


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
