"""Standard Webhooks signatures: what a receiver checks with the ``standardwebhooks`` library.

A secret is ``whsec_`` and the base64 of 24 random bytes. Each attempt carries
``webhook-id`` (the delivery's, the same on every attempt), ``webhook-timestamp`` (the
attempt's, in epoch seconds) and ``webhook-signature``: ``v1,`` and the base64 HMAC-SHA256,
keyed with the secret's bytes, of ``{id}.{timestamp}.{body}``.
"""

from __future__ import annotations

import base64
import hmac
import secrets

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 24


def new_secret() -> str:
    """A fresh endpoint secret."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def signing_key(secret: str) -> bytes:
    """The HMAC key a secret stands for."""
    return base64.b64decode(secret.removeprefix(SECRET_PREFIX))


def signature(key: bytes, message_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value of one attempt (``key``: :func:`signing_key`)."""
    signed = b"%s.%d.%s" % (message_id.encode(), timestamp, body)
    return "v1," + base64.b64encode(hmac.digest(key, signed, "sha256")).decode()


def headers(key: bytes, message_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The three headers of one attempt."""
    return {"webhook-id": message_id, "webhook-timestamp": str(timestamp),
            "webhook-signature": signature(key, message_id, timestamp, body)}
