"""A generic signed-webhook channel for CloudyBot (an example of a third-party channel plugin)."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web

from gateway import (
    BadRequest,
    Channel,
    DeliveryFailed,
    DeliveryRetry,
    InboundMessage,
    PluginHost,
    PluginSettings,
    Unauthorized,
    hookimpl,
    setting,
)

NAME = "webhook"
MAX_SKEW_SECONDS = 300
MAX_CHARS = 8000
IDENTIFIER = re.compile(r"[A-Za-z0-9_.:@-]{1,100}")


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """``sha256=`` + hex HMAC-SHA256 of ``"{timestamp}." + body``."""
    digest = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + digest.hexdigest()


def signed_headers(secret: str, body: bytes, timestamp: int | None = None) -> dict[str, str]:
    """The headers that sign ``body`` (used for outbound calls, handy for senders' tests)."""
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    return {"X-Webhook-Timestamp": stamp, "X-Webhook-Signature": signature(secret, stamp, body),
            "Content-Type": "application/json"}


def _identifier(payload: dict[str, Any], field: str) -> str:
    value = payload.get(field)
    if not isinstance(value, str) or not IDENTIFIER.fullmatch(value):
        raise BadRequest(f"{field} must be 1-100 characters of A-Z a-z 0-9 _ . : @ -",
                         code=f"invalid_{field}")
    return value


@dataclass(frozen=True)
class WebhookSettings:
    """``[plugins.webhook]`` in the TOML file, or ``CLOUDYBOT_WEBHOOK_*`` variables."""

    secret: str = setting("", "shared secret that signs requests both ways (HMAC-SHA256)",
                          secret=True)
    callback_url: str = setting("", "where replies are POSTed")

    def __post_init__(self) -> None:
        if self.callback_url and not self.callback_url.startswith(("http://", "https://")):
            raise ValueError("callback_url must be an http:// or https:// URL")


class WebhookChannel(Channel):
    """Inbound on ``POST /webhook/messages``; replies POSTed to the callback URL."""

    name = NAME

    def __init__(self, host: PluginHost) -> None:
        settings = host.settings.plugin(WebhookSettings)
        self.host = host
        self.secret = settings.secret
        self.callback_url = settings.callback_url
        self._session: aiohttp.ClientSession | None = None

    @property
    def enabled(self) -> bool:
        """On when both a secret and a callback URL are configured."""
        return bool(self.secret and self.callback_url)

    def routes(self) -> list[web.RouteDef]:
        """``POST /webhook/messages`` when enabled."""
        return [web.post("/webhook/messages", self.receive)] if self.enabled else []

    async def start(self) -> None:
        """Open the HTTP session used for replies."""
        if self.enabled and self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15))

    async def close(self) -> None:
        """Close the HTTP session (after the gateway delivered every queued reply)."""
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def receive(self, request: web.Request) -> web.Response:
        """Verify the signature before parsing; commit the message to the gateway's inbox;
        answer 202 only then (503 while the gateway shuts down, so the sender retries later)."""
        body = await request.read()
        stamp = request.headers.get("X-Webhook-Timestamp", "")
        given = request.headers.get("X-Webhook-Signature", "")
        if not (stamp.isascii() and stamp.isdigit()) or \
                abs(time.time() - int(stamp)) > MAX_SKEW_SECONDS:
            raise Unauthorized("missing or stale X-Webhook-Timestamp")
        expected = signature(self.secret, stamp, body).encode()
        if not hmac.compare_digest(given.encode("utf-8", "replace"), expected):
            raise Unauthorized("bad X-Webhook-Signature")
        try:
            payload = json.loads(body)
        except (ValueError, RecursionError):
            raise BadRequest("the body is not JSON", code="invalid_json") from None
        if not isinstance(payload, dict):
            raise BadRequest("the body must be a JSON object", code="invalid_json")
        message_id = _identifier(payload, "id")
        conversation = _identifier(payload, "conversation")
        sender = _identifier(payload, "sender")
        text = payload.get("text")
        if not isinstance(text, str) or not text.strip():
            raise BadRequest("text must be a non-empty string", code="invalid_text")
        await self.host.receive(InboundMessage(
            channel=NAME, conversation=f"{NAME}:{conversation}", sender=f"{NAME}:{sender}",
            message_id=message_id, text=text,
            address={"inReplyTo": message_id, "conversation": conversation},
            max_chars=MAX_CHARS))
        return web.json_response({"accepted": True}, status=202)

    async def send(self, address: Mapping[str, Any], text: str) -> None:
        """POST the reply, signed, to the callback URL."""
        if self._session is None:
            raise ConnectionError("the channel is not started yet")
        body = json.dumps({**address, "text": text}).encode()
        async with self._session.post(self.callback_url, data=body,
                                      headers=signed_headers(self.secret, body)) as answer:
            if answer.status == 429:
                raise DeliveryRetry(float(answer.headers.get("Retry-After", "1")))
            if 400 <= answer.status < 500:
                raise DeliveryFailed(f"callback answered {answer.status}")
            answer.raise_for_status()  # 5xx: the outbox retries with backoff


@hookimpl
def plugin_settings() -> PluginSettings:
    """Declare the channel's settings."""
    return PluginSettings(NAME, WebhookSettings)


@hookimpl
def register_channels(host: PluginHost) -> list[Channel]:
    """Register the webhook channel (inactive until configured)."""
    return [WebhookChannel(host)]
