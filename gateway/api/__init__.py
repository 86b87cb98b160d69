"""The HTTP API: ``/chat``, ``/api/*`` and ``/v1/*``, every route behind a bearer token or a
dashboard session (served by the core app, :mod:`gateway.app`), declared in
:mod:`gateway.api.operations`.

May import: ``gateway`` (its version), ``gateway.gateway``, ``gateway.base``, ``gateway.config``,
``gateway.store``, ``gateway.billing``, ``gateway.accounts``, ``gateway.webhooks``,
``gateway.net``, ``gateway.observe`` (a request's trace context), ``gateway.turn``,
``gateway.commands``, ``gateway.jobs``, ``gateway.interfaces`` (the pictures ``/chat`` takes).
"""

from __future__ import annotations

from aiohttp import web

from gateway.api import operations


def api_routes() -> list[web.RouteDef]:
    """Every ``/chat``, ``/api/*`` and OpenAI-compatible ``/v1/*`` route (all need a bearer
    token or a dashboard session) and the dashboard's sign-in routes under ``/auth/``."""
    return operations.routes()
