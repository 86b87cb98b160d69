"""The HTTP API: ``/chat``, ``/api/*`` and ``/v1/*``, every route behind a bearer token or a
dashboard session (served by the dashboard channel), declared in
:mod:`gateway.api.operations`."""

from __future__ import annotations

from aiohttp import web

from gateway.api import operations


def api_routes() -> list[web.RouteDef]:
    """Every ``/chat``, ``/api/*`` and OpenAI-compatible ``/v1/*`` route (all need a bearer
    token or a dashboard session) and the dashboard's sign-in routes under ``/auth/``."""
    return operations.routes()
