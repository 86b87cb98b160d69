"""The aiohttp application: middlewares, /healthz, channel routes, gateway lifecycle."""

from __future__ import annotations

from collections.abc import AsyncIterator

from aiohttp import web

from gateway.api import api_routes
from gateway.api.cors import add_cors
from gateway.api.in_flight import InFlight, in_flight_key, in_flight_middleware
from gateway.api.keys import gateway_key
from gateway.api.middleware import (
    auth_middleware,
    body_middleware,
    errors_middleware,
    headers_middleware,
)
from gateway.api.openapi import add_openapi
from gateway.api.scrape import get_metrics
from gateway.api.stops import RunningTurns, running_turns_key
from gateway.base.logs import quiet_malformed_requests
from gateway.gateway import Gateway


async def healthz(request: web.Request) -> web.Response:
    """Liveness: no auth, no store access."""
    return web.json_response({"status": "ok"})


async def _gateway_lifecycle(app: web.Application) -> AsyncIterator[None]:
    gateway = app[gateway_key]
    await gateway.start()
    yield
    await gateway.stop()


async def _begin_stop(app: web.Application) -> None:
    # Before the server waits for requests in flight: they share the gateway's grace period,
    # and end with it.
    app[in_flight_key].end_all_at(app[gateway_key].begin_stop())


async def build_app(gateway: Gateway) -> web.Application:
    """The server for ``gateway``: each loaded channel contributes its routes."""
    await gateway.load_plugins()
    quiet_malformed_requests()
    app = web.Application(
        # Headers are cleaned before auth reads them; bodies are read after auth, so a caller
        # without a token never makes the server wait for (or buffer) a body.
        middlewares=[errors_middleware, in_flight_middleware, headers_middleware,
                     auth_middleware, body_middleware],
        client_max_size=gateway.settings.max_request_bytes,
    )
    app[gateway_key] = gateway
    app[in_flight_key] = InFlight()
    app[running_turns_key] = RunningTurns()
    add_cors(app, gateway.settings.cors_origins)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", get_metrics)
    add_openapi(app)
    app.router.add_routes(api_routes())  # /chat, /api/*, /v1/*, sign-in
    for channel in gateway.channels.values():
        app.router.add_routes(channel.routes())
    app.cleanup_ctx.append(_gateway_lifecycle)
    app.on_shutdown.append(_begin_stop)
    return app
