"""``/api/webhooks``: register, list and delete endpoints; their delivery log; a test event."""

from __future__ import annotations

import re
import secrets

from aiohttp import web

from gateway.api.context import caller, int_param
from gateway.api.middleware import read_json_object
from gateway.base.errors import BadRequest, NotFound
from gateway.base.times import iso_utc
from gateway.net import destinations
from gateway.store import Webhook, WebhookDelivery
from gateway.store import events as webhook_events
from gateway.webhooks import signing as webhook_signing
from gateway.webhooks.dispatcher import PENDING, seal_context

MAX_WEBHOOKS = 20  # per user
WEBHOOK_ID = re.compile(r"wh_[0-9a-f]{24}")
DEFAULT_DELIVERIES = 50
MAX_DELIVERIES = 500
SUBSCRIBABLE = tuple(t for t in webhook_events.EVENT_TYPES if t != webhook_events.WEBHOOK_TEST)


def _webhook_json(webhook: Webhook) -> dict[str, object]:
    return {"id": webhook.id, "url": webhook.url, "events": list(webhook.events),
            "createdAt": webhook.created_at}


def _delivery_json(delivery: WebhookDelivery) -> dict[str, object]:
    return {"id": delivery.message_id, "event": delivery.event, "status": delivery.state,
            "attempts": delivery.attempts, "lastStatusCode": delivery.last_status,
            "nextAttemptAt": iso_utc(delivery.next_attempt)
            if delivery.state == PENDING else None,
            "createdAt": iso_utc(delivery.created), "lastError": delivery.last_error}


def _events(value: object) -> tuple[str, ...]:
    """The event types to subscribe to: a non-empty list of known ones, kept in order."""
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise BadRequest("events must be a non-empty list of event types: "
                         + ", ".join(SUBSCRIBABLE), code="invalid_events")
    unknown = [v for v in value if v not in SUBSCRIBABLE]
    if unknown:
        raise BadRequest(f"unknown event type {unknown[0][:64]!r}; known: "
                         + ", ".join(SUBSCRIBABLE), code="invalid_events")
    return tuple(dict.fromkeys(value))


async def _owned(request: web.Request) -> Webhook:
    """The caller's endpoint named in the path; 404 for anybody else's or none."""
    gateway, user = caller(request)
    webhook_id = request.match_info["webhook_id"]
    webhook = await gateway.store.get_webhook(webhook_id) \
        if WEBHOOK_ID.fullmatch(webhook_id) else None
    if webhook is None or webhook.user_id != user.user_id:
        raise NotFound("no such webhook", code="webhook_not_found")
    return webhook


async def post_webhook(request: web.Request) -> web.Response:
    """Register an endpoint for some event types; the answer holds its signing secret, shown
    only here. 400 if the URL is not http(s), resolves to no public address (unless
    ``CLOUDYBOT_WEBHOOKS_ALLOW_PRIVATE``) or the event types are unknown."""
    gateway, user = caller(request)
    body = await read_json_object(request)
    url, host, port = destinations.web_url(body.get("url"))
    events = _events(body.get("events"))
    if len(await gateway.store.list_webhooks(user.user_id)) >= MAX_WEBHOOKS:
        raise BadRequest(f"an account has at most {MAX_WEBHOOKS} webhooks",
                         code="too_many_webhooks")
    try:
        await destinations.addresses(host, port, gateway.settings.webhooks_allow_private,
                                     gateway.webhooks.resolve)
    except destinations.DestinationRefused as exc:
        raise BadRequest(f"the webhook URL is refused: {exc}",
                         code="destination_refused") from None
    secret = webhook_signing.new_secret()
    webhook = Webhook(f"wh_{secrets.token_hex(12)}", user.user_id, url, events,
                      gateway.secret_box.seal({"secret": secret}, seal_context(user.user_id)),
                      iso_utc(gateway.clock()))
    await gateway.store.create_webhook(webhook)
    return web.json_response({**_webhook_json(webhook), "secret": secret}, status=201)


async def list_webhooks(request: web.Request) -> web.Response:
    """The caller's endpoints (never their secrets)."""
    gateway, user = caller(request)
    return web.json_response({"webhooks": [
        _webhook_json(w) for w in await gateway.store.list_webhooks(user.user_id)]})


async def delete_webhook(request: web.Request) -> web.Response:
    """Delete an endpoint and its delivery log; what was pending is not sent."""
    gateway, user = caller(request)
    webhook = await _owned(request)
    await gateway.store.delete_webhook(user.user_id, webhook.id)
    await gateway.webhooks.endpoint_deleted(webhook.id)
    return web.Response(status=204)


async def list_deliveries(request: web.Request) -> web.Response:
    """The endpoint's deliveries, newest first (``?limit=`` up to 500, default 50)."""
    gateway, user = caller(request)
    webhook = await _owned(request)
    limit = int_param(request, "limit", DEFAULT_DELIVERIES, low=1, high=MAX_DELIVERIES)
    assert limit is not None
    deliveries = await gateway.store.webhook_deliveries(user.user_id, webhook.id, limit)
    return web.json_response({"webhookId": webhook.id,
                              "deliveries": [_delivery_json(d) for d in deliveries]})


async def post_test(request: web.Request) -> web.Response:
    """Queue a ``webhook.test`` event for this endpoint alone (202: it is sent apart)."""
    gateway, user = caller(request)
    webhook = await _owned(request)
    await gateway.store.emit(user.user_id, [webhook_events.webhook_test(webhook.id)],
                             only=webhook.id)
    return web.json_response({"webhookId": webhook.id, "event": webhook_events.WEBHOOK_TEST},
                             status=202)
