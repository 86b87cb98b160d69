"""A webhook receiver on 127.0.0.1 that checks every delivery as a real receiver would: with the
``standardwebhooks`` library and the endpoint's secret."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

import standardwebhooks
from aiohttp import web

from gateway.testing.loopback import LoopbackServer


@dataclass(frozen=True)
class Received:
    """One request the receiver got: its webhook-id, whether the signature verified, and the
    event (None if it did not verify); its headers."""

    webhook_id: str
    verified: bool
    event: dict[str, Any] | None
    path: str
    headers: dict[str, str] = field(default_factory=dict)


class WebhookReceiver:
    """Answers ``statuses`` in turn (then 200 for ever); while ``hold`` is clear, requests wait
    for it (a slow endpoint). ``secret`` is set once the endpoint is registered."""

    def __init__(self, statuses: list[int] | None = None) -> None:
        self.statuses = list(statuses or [])
        self.secret = ""
        self.received: list[Received] = []
        self.arrived = asyncio.Queue[Received]()
        self.hold = asyncio.Event()
        self.hold.set()
        self.in_flight = 0
        self.most_in_flight = 0
        self._server = LoopbackServer()

    async def start(self) -> str:
        """Serve; return the URL to register."""
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        port = await self._server.serve(app)
        return f"http://127.0.0.1:{port}/hooks/cloudybot"

    async def close(self) -> None:
        """Stop serving (held requests are cancelled)."""
        self.hold.set()
        await self._server.close()

    async def next(self, timeout: float = 10.0) -> Received:
        """The next request to arrive."""
        return await asyncio.wait_for(self.arrived.get(), timeout)

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        try:
            event = standardwebhooks.Webhook(self.secret).verify(body, dict(request.headers))
            verified = True
        except standardwebhooks.WebhookVerificationError:
            event, verified = None, False
        if verified:
            assert event == json.loads(body)
        got = Received(request.headers.get("webhook-id", ""), verified, event, request.path,
                       dict(request.headers))
        self.received.append(got)
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        await self.arrived.put(got)
        try:
            await self.hold.wait()
        finally:
            self.in_flight -= 1
        status = self.statuses.pop(0) if self.statuses else 200
        if 300 <= status < 400:
            return web.Response(status=status, headers={"Location": "/elsewhere"})
        return web.Response(status=status, text="ok")
