"""The dashboard channel: the HTTP API (``/chat``, ``/api/*``), threads keyed
``{userId}--{threadId}``."""

from __future__ import annotations

from aiohttp import web

from gateway import Channel, Gateway, hookimpl
from gateway.api import api_routes


class DashboardChannel(Channel):
    """Serves ``/chat`` and ``/api/*`` to dashboards and other HTTP clients."""

    name = "dashboard"
    prefixed_keys = False

    def routes(self) -> list[web.RouteDef]:
        """The authenticated HTTP API."""
        return api_routes()


@hookimpl(trylast=True)
def register_channels(gateway: Gateway) -> list[Channel]:
    """Register the dashboard channel."""
    return [DashboardChannel()]
