"""Requests in flight when the gateway stops end with its grace period, not after it.

aiohttp's own shutdown waits ``shutdown_timeout`` for a handler, then cancels only the request's
body and waits as long again before it cancels the handler: a request stuck at the model held a
stop for twice the grace. Here every handler runs under an ``asyncio.timeout`` with no deadline;
when the stop begins, each is given the grace period's end (``Gateway.begin_stop``), and so is
every request that comes in after it. A handler cut off there answers 503 ``shutting_down``
(nothing of its turn was committed, so the client may send it again), or, if its response had
begun (a stream), ends the connection.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from aiohttp import web

from gateway.base.errors import Unavailable

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class InFlight:
    """The deadlines of the requests being handled."""

    def __init__(self) -> None:
        self._timeouts: set[asyncio.Timeout] = set()
        self.deadline: float | None = None  # the event loop's time the stop's grace ends

    def end_all_at(self, deadline: float) -> None:
        """Give every request in flight, and every later one, ``deadline`` (loop time)."""
        self.deadline = deadline
        for timeout in self._timeouts:
            timeout.reschedule(deadline)

    async def run(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """``handler(request)``, cut off at the stop's deadline once there is one."""
        try:
            async with asyncio.timeout(self.deadline) as timeout:
                self._timeouts.add(timeout)
                try:
                    return await handler(request)
                finally:
                    self._timeouts.discard(timeout)
        except TimeoutError:
            if not timeout.expired():
                raise  # the handler's own
            if request.writer is not None and request.writer.output_size:
                raise asyncio.CancelledError() from None  # a stream begun: close it
            raise Unavailable("the gateway is shutting down; send the request again in a "
                              "moment", code="shutting_down") from None


in_flight_key = web.AppKey("in_flight", InFlight)


@web.middleware
async def in_flight_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Run the handler under the stop's deadline (see the module's docstring)."""
    return await request.app[in_flight_key].run(request, handler)
