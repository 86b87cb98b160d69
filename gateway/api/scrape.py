"""``GET /metrics``: the Prometheus scrape, open from loopback, elsewhere with the metrics
token (``Authorization: Bearer $CLOUDYBOT_METRICS_TOKEN``)."""

from __future__ import annotations

import hmac
import ipaddress

from aiohttp import web

from gateway.api.keys import gateway_key
from gateway.base.errors import Forbidden, Unauthorized
from gateway.base.metrics import CONTENT_TYPE


def may_scrape(remote: str | None, authorization: str, token: str) -> bool:
    """Whether a scrape from ``remote`` with this ``Authorization`` header is let in."""
    try:
        if remote is not None and ipaddress.ip_address(remote.partition("%")[0]).is_loopback:
            return True
    except ValueError:  # a unix socket, say: no address to judge
        pass
    scheme, _, given = authorization.partition(" ")
    return bool(token) and scheme.lower() == "bearer" and hmac.compare_digest(
        given.strip().encode(), token.encode())


async def get_metrics(request: web.Request) -> web.Response:
    """The gateway's metrics in Prometheus text format (inbox and outbox depths read now)."""
    gateway = request.app[gateway_key]
    token = gateway.settings.metrics_token
    if not may_scrape(request.remote, request.headers.get("Authorization", ""), token):
        if token:
            raise Unauthorized("GET /metrics needs the metrics token", code="unauthorized")
        raise Forbidden("GET /metrics is open from loopback only (set CLOUDYBOT_METRICS_TOKEN "
                        "to scrape from elsewhere)", code="metrics_forbidden")
    depths = dict.fromkeys((name for name, channel in gateway.channels.items()
                            if channel.enabled), (0, 0))
    depths.update(await gateway.store.queue_depths())
    gateway.metrics.set_depths(depths)
    return web.Response(body=gateway.metrics.exposition(),
                        headers={"Content-Type": CONTENT_TYPE})
