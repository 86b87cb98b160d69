"""Secrets at rest: AES-256-GCM with a key from CLOUDYBOT_SECRET_KEY or a generated key file.

Also API tokens: only their SHA-256 hashes are stored.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from .errors import ConfigError

KEY_FILE_NAME = "secret.key"
REDACTED = "[redacted]"
TOKEN_PREFIX = "cb_"


def new_api_token() -> str:
    """A fresh random API token (shown once, never stored)."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    """The stored form of an API token."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def load_or_create_key(configured: str, data_dir: Path) -> bytes:
    """The 32-byte key: derived from ``configured`` if set, else read or created in data_dir."""
    if configured:
        return hashlib.sha256(configured.encode("utf-8")).digest()
    path = data_dir / KEY_FILE_NAME
    data_dir.mkdir(parents=True, exist_ok=True)
    try:
        # O_EXCL: two processes starting together never write two different keys.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        try:
            key = base64.urlsafe_b64decode(path.read_bytes().strip())
        except ValueError:
            key = b""
        if len(key) != 32:
            raise ConfigError(f"{path} does not hold a valid secret key") from None
        return key
    key = AESGCM.generate_key(bit_length=256)
    with os.fdopen(fd, "wb") as handle:
        handle.write(base64.urlsafe_b64encode(key) + b"\n")
    return key


class SecretBox:
    """Encrypts small JSON documents; the associated data binds a ciphertext to its owner."""

    def __init__(self, key: bytes) -> None:
        self._aead = AESGCM(key)

    def seal(self, document: dict[str, str], context: str) -> bytes:
        """Encrypt ``document`` for ``context`` (for example the owning user id)."""
        nonce = os.urandom(12)
        plain = json.dumps(document).encode("utf-8")
        return nonce + self._aead.encrypt(nonce, plain, context.encode("utf-8"))

    def open(self, blob: bytes, context: str) -> dict[str, str] | None:
        """Decrypt a sealed document; None if the key or context does not match."""
        try:
            plain = self._aead.decrypt(blob[:12], blob[12:], context.encode("utf-8"))
        except (InvalidTag, ValueError):
            return None
        document: dict[str, str] = json.loads(plain)
        return document


def redact(text: str, secrets_: tuple[str, ...] | list[str]) -> str:
    """``text`` with every occurrence of each secret replaced by ``[redacted]``."""
    for secret in sorted(secrets_, key=len, reverse=True):
        if secret:
            text = text.replace(secret, REDACTED)
    return text
