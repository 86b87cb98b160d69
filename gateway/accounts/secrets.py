"""Secrets at rest: AES-256-GCM with a key from CLOUDYBOT_SECRET_KEY or a generated key file.

Also API tokens: only their SHA-256 hashes are stored; and the redaction of saved passwords in
every encoding the gateway reads or writes.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import logging
import os
import re
import secrets
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from gateway.base.errors import BadRequest, ConfigError
from gateway.base.files import private_dir, private_file
from gateway.tools import Credential

if TYPE_CHECKING:
    from gateway.store import SecretRecord, Store

log = logging.getLogger(__name__)

KEY_FILE_NAME = "secret.key"
REDACTED = "[redacted]"
TOKEN_PREFIX = "cb_"


def new_api_token() -> str:
    """A fresh random API token (shown once, never stored)."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    """The stored form of an API token."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def derived_key(configured: str) -> bytes:
    """The 32-byte key of a configured ``CLOUDYBOT_SECRET_KEY``."""
    return hashlib.sha256(configured.encode("utf-8")).digest()


def read_key(path: Path) -> bytes:
    """The 32-byte key a key file holds (made 0600); a file that holds none is a config
    error."""
    private_file(path)
    try:
        key = base64.urlsafe_b64decode(path.read_bytes().strip())
    except ValueError:
        key = b""
    if len(key) != 32:
        raise ConfigError(f"{path} does not hold a valid secret key") from None
    return key


def load_or_create_key(configured: str, data_dir: Path) -> bytes:
    """The 32-byte key: derived from ``configured`` if set, else read or created in data_dir."""
    if configured:
        return derived_key(configured)
    path = data_dir / KEY_FILE_NAME
    private_dir(data_dir)
    try:
        # O_EXCL: two processes starting together never write two different keys.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return read_key(path)
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


# --- redaction -----------------------------------------------------------------------------------
# A saved password must not survive in any encoding the gateway reads or writes. One
# regular expression per set of secrets finds, for each secret:
#
# * every JSON-escaped spelling, character by character: raw, ``\uXXXX`` in either case (a
#   surrogate pair above U+FFFF), and the short escapes ``\"`` ``\\`` ``\/`` ``\b`` ``\f`` ``\n``
#   ``\r`` ``\t``. The backslash of an escape may be doubled any number of times, so JSON text
#   inside a JSON string (tool-call arguments in a session event) is found at any depth, and
#   json.dumps output with ``ensure_ascii`` on or off, or any mix of the two, is found too;
# * every Python-escaped spelling, the same way: ``repr()``, ``ascii()`` and the
#   ``unicode_escape`` codec (``\'``, ``\xNN``, ``\uNNNN``, ``\UNNNNNNNN``), and ``repr()`` of
#   the UTF-8 bytes or ``backslashreplace`` (each byte of a non-ASCII character as ``\xNN``);
# * URL encoding (``quote``, ``quote_plus``): each character raw or as its UTF-8 bytes ``%XX``
#   in either case, a space also as ``+``;
# * base64 of the UTF-8 bytes (and of the ``ensure_ascii`` JSON-escaped bytes), standard and
#   URL-safe alphabet, padded or not, at each of the three byte alignments inside a longer
#   base64 text: the characters that depend on the secret alone are matched. Up to two
#   characters at either end, which mix the secret's bits with its neighbours', are left; so is
#   base64 broken by line breaks inside the secret's span (MIME), which the gateway never writes.
#
# A match is replaced by ``[redacted]``. What is redacted is what came from outside: the
# user's words, the model's text and tool calls (id, name, arguments), a tool's result, never the
# scaffolding the gateway writes around them: a chat message's keys and role, a tool call's keys
# and type, the session file's records, the roles of the inspector's lines. JSON from outside (tool
# arguments, a tool's result) is redacted after decoding and before encoding, so it stays valid
# and its keys, which are outside words too, are covered as well.

# JSON's short escapes, and Python's ``\'`` (repr() of a string holding both quotes).
_SHORT_ESCAPES = {'"': '"', "'": "'", "\\": "\\", "/": "/", "\b": "b", "\f": "f", "\n": "n",
                  "\r": "r", "\t": "t"}
MAX_REDACTION_PASSES = 8
MIN_BASE64_CORE_CHARS = 8  # a shorter core would match ordinary base64 by chance


def _hex(value: int, width: int) -> str:
    """A pattern for ``value`` as ``width`` hex digits, either case."""
    return "".join(f"[{d}{d.upper()}]" if d.isalpha() else d for d in f"{value:0{width}x}")


def _char_pattern(char: str) -> str:
    """Every spelling of one character: JSON and Python escapes (any depth), percent bytes,
    itself."""
    code = ord(char)
    utf8 = char.encode("utf-8", "surrogatepass")
    if code > 0xFFFF:
        high, low = 0xD800 + ((code - 0x10000) >> 10), 0xDC00 + ((code - 0x10000) & 0x3FF)
        forms = [rf"\\+u{_hex(high, 4)}\\+u{_hex(low, 4)}", rf"\\+U{_hex(code, 8)}"]
    else:
        forms = [rf"\\+u{_hex(code, 4)}"]
    if code < 0x100:  # Python's repr(), ascii() and unicode_escape: \xNN
        forms.append(rf"\\+x{_hex(code, 2)}")
    if code >= 0x80:  # repr() of the UTF-8 bytes, or backslashreplace on decoding them
        forms.append("".join(rf"\\+x{_hex(byte, 2)}" for byte in utf8))
    if char in _SHORT_ESCAPES:
        forms.append(r"\\+" + re.escape(_SHORT_ESCAPES[char]))
    forms.append("".join("%" + _hex(byte, 2) for byte in utf8))
    if char == " ":
        forms.append(r"\+")
    forms.append(re.escape(char))  # last: an escape is matched whole, never half
    return "(?:" + "|".join(forms) + ")"


def longest_spelling(secret: str) -> int:
    """The most characters ``secret`` takes in any encoding the redactor finds, with single
    backslashes (a streamed preview holds back that many: a password still arriving is not
    whole yet, so it cannot be redacted yet)."""
    # Per character: \uXXXX (6), a surrogate pair (12), each UTF-8 byte as \xNN (4) or %XX
    # (3); base64 is shorter than the escapes it encodes.
    return sum(max(12 if ord(c) > 0xFFFF else 6, 4 * len(c.encode("utf-8", "surrogatepass")))
               for c in secret)


def _base64_cores(data: bytes) -> set[str]:
    """The parts of base64 that ``data`` alone decides, at each alignment, in both alphabets."""
    cores = set()
    for shift in range(3):
        total = shift + len(data)
        encoded = base64.b64encode(bytes(shift) + data).decode("ascii")
        # Character i holds bits [6i, 6i + 6); the secret's bits are [8 * shift, 8 * total).
        core = encoded[-(-8 * shift // 6):8 * total // 6]
        if len(core) >= MIN_BASE64_CORE_CHARS:
            cores.add(core)
            cores.add(core.translate(str.maketrans("+/", "-_")))
    return cores


class Redactor:
    """Finds a set of secrets in every encoding the gateway reads or writes, and hides them.

    Built once per set of secrets (:func:`redactor_for` caches it): a turn redacts every message
    it stores with the same one.
    """

    def __init__(self, secrets_: Iterable[str]) -> None:
        ordered = sorted({s for s in secrets_ if s}, key=len, reverse=True)
        alternatives = ["".join(_char_pattern(c) for c in secret) for secret in ordered]
        cores: set[str] = set()
        for secret in ordered:
            cores |= _base64_cores(secret.encode("utf-8", "surrogatepass"))
            cores |= _base64_cores(json.dumps(secret)[1:-1].encode("ascii"))
        alternatives += [re.escape(core) for core in sorted(cores, key=len, reverse=True)]
        self._pattern = re.compile("|".join(alternatives)) if alternatives else None

    def contains(self, text: str) -> bool:
        """Whether ``text`` holds one of the secrets in any of the encodings."""
        return self._pattern is not None and self._pattern.search(text) is not None

    def text(self, text: str) -> str:
        """``text`` with every encoded occurrence of a secret replaced by ``[redacted]``."""
        if self._pattern is None:
            return text
        # A replacement can join its neighbours into a new occurrence ("a" + "a[redacted]"
        # → "a[redacted]"): repeat until none is left, and if one still is, give up the text.
        for _ in range(MAX_REDACTION_PASSES):
            text, count = self._pattern.subn(REDACTED, text)
            if not count:
                return text
        return REDACTED if self._pattern.search(text) else text

    def structure(self, value: Any) -> Any:
        """A copy of decoded JSON that came from outside (tool arguments, a tool's result) with
        every string redacted, keys too. Never for a structure the gateway writes: a chat
        message goes through :meth:`chat_message`, which keeps the protocol's keys.

        A string that is itself JSON (tool-call arguments) is redacted as a structure.
        """
        if isinstance(value, str):
            return self._string(value)
        if isinstance(value, dict):
            return {self._string(k) if isinstance(k, str) else k: self.structure(v)
                    for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.structure(item) for item in value]
        return value

    def chat_message(self, message: Mapping[str, Any]) -> dict[str, Any]:
        """A copy of a chat message the gateway wrote (a tool call or a tool result) with the
        secrets redacted in what came from outside it: the content, each call's id, name and
        arguments, a result's call id. The message's own keys and its role are the protocol's,
        not anybody's words, and stay: a password that happens to be ``tool_calls`` or
        ``assistant`` cannot take the exchange apart."""
        copy = dict(message)
        for key in ("content", "tool_call_id"):
            if key in copy:
                copy[key] = self.structure(copy[key])
        if isinstance(copy.get("tool_calls"), list):
            copy["tool_calls"] = [self._tool_call(call) for call in copy["tool_calls"]]
        return copy

    def _tool_call(self, call: Any) -> Any:
        if not isinstance(call, dict):
            return self.structure(call)
        copy = dict(call)
        if "id" in copy:
            copy["id"] = self.structure(copy["id"])
        function = copy.get("function")
        if isinstance(function, dict):
            copy["function"] = {key: self.structure(value) if key in ("name", "arguments")
                                else value for key, value in function.items()}
        return copy

    def _string(self, text: str) -> str:
        # Looked at as encoded, delimiters included: a password may begin or end with a quote.
        if not self.contains(json.dumps(text)):
            return text
        redacted = self.json_text(text)
        return REDACTED if self.contains(json.dumps(redacted)) else redacted

    def json_text(self, text: str) -> str:
        """Redact JSON text by decoding, redacting the structure and encoding again; text that
        is not JSON is redacted as text. Text without a secret is returned unchanged."""
        if not self.contains(text):
            return text
        try:
            value = json.loads(text)
            if not isinstance(value, dict | list | str):
                return self.text(text)
            redacted = self.structure(value)
        except (ValueError, RecursionError):
            return self.text(text)
        encoded = json.dumps(redacted, ensure_ascii=text.isascii())  # the input's style
        # Still there, the secret spans two strings ('a", "b'): keep the JSON valid, not it.
        return json.dumps(REDACTED) if self.contains(encoded) else encoded


@functools.lru_cache(maxsize=256)
def _cached_redactor(secrets_: tuple[str, ...]) -> Redactor:
    return Redactor(secrets_)


def redactor_for(secrets_: Iterable[str]) -> Redactor:
    """The (cached) :class:`Redactor` of a set of secrets."""
    return _cached_redactor(tuple(sorted({s for s in secrets_ if s})))


def redact(text: str, secrets_: Iterable[str]) -> str:
    """``text`` with each secret, in any encoding, replaced by ``[redacted]``."""
    return redactor_for(secrets_).text(text)


def redact_chat_message(message: Mapping[str, Any], secrets_: Iterable[str]) -> dict[str, Any]:
    """A chat message with each secret redacted in what came from outside (see
    :meth:`Redactor.chat_message`), its protocol keys intact."""
    return redactor_for(secrets_).chat_message(message)


def redact_json_text(text: str, secrets_: Iterable[str]) -> str:
    """JSON text (tool-call arguments) decoded, redacted and encoded again; other text redacted
    as text."""
    return redactor_for(secrets_).json_text(text)


# --- saved passwords ---------------------------------------------------------------------------
def open_credentials(box: SecretBox, user_id: str,
                     records: Iterable[SecretRecord]) -> list[Credential]:
    """The user's saved logins, decrypted; one that cannot be is logged and skipped."""
    credentials = []
    for record in records:
        document = box.open(record.blob, user_id)
        if document is None:
            log.warning("a saved credential of user %r cannot be decrypted; skipped", user_id)
            continue
        credentials.append(Credential(record.site, document["username"], document["password"]))
    return credentials


async def refuse_saved_passwords(store: Store, box: SecretBox, user_id: str,
                                 fields: Mapping[str, str]) -> None:
    """Raise 400 ``contains_secret`` if a field holds one of the user's saved passwords."""
    records = await store.list_credentials(user_id)
    if not records:
        return
    redactor = redactor_for(c.password for c in open_credentials(box, user_id, records))
    for name, text in fields.items():
        if redactor.contains(text):
            raise BadRequest(f"{name} contains one of your saved passwords; it is not stored",
                             code="contains_secret")
