"""Serving a fake on 127.0.0.1 for a test: one place for the aiohttp runner boilerplate."""

from __future__ import annotations

from aiohttp import web


class LoopbackServer:
    """An aiohttp application listening on a free port of 127.0.0.1."""

    def __init__(self) -> None:
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def serve(self, app: web.Application) -> int:
        """Start serving ``app``; return the port. Handlers are cancelled on close, so a fake
        that delays an answer never holds a test's teardown."""
        self._runner = web.AppRunner(app, handler_cancellation=True)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.port = int(self._runner.addresses[0][1])
        return self.port

    def open_connections(self) -> int:
        """HTTP connections clients still hold open (keep-alive included)."""
        server = self._runner.server if self._runner is not None else None
        return len(server.connections) if server is not None else 0

    async def close(self) -> None:
        """Stop serving."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
