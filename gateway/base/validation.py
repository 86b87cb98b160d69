"""Checks on identifiers that come from outside: they never become paths or SQL unchecked."""

from __future__ import annotations

import re

from gateway.base.errors import BadRequest, PayloadTooLarge

THREAD_ID = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
MEMORY_KEY = re.compile(r"[A-Za-z0-9_.-]{1,64}")
NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
USER_ID = re.compile(r"[A-Za-z0-9_.:@-]{1,128}")
MAX_MEMORY_VALUE_CHARS = 2000
MAX_INSTRUCTIONS_CHARS = 8000
MAX_SITE_CHARS = 260  # a 253-character host name and a port
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
# 1-65535 in at most five digits (leading zeros allowed, as int() reads them)
PORT_PATTERN = (r"0{0,4}[1-9]|0{0,3}[1-9][0-9]|0{0,2}[1-9][0-9]{2}|0?[1-9][0-9]{3}|[1-5][0-9]{4}"
         r"|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]")
SITE = re.compile(rf"(?:{_LABEL}(?:\.{_LABEL})*|\[[0-9A-Fa-f:.]+\])(?::(?:{PORT_PATTERN}))?")


def thread_id(value: object) -> str:
    """A client-chosen thread id: 1-128 of ``[A-Za-z0-9_.:-]``, not ``.`` or ``..``."""
    if not isinstance(value, str) or not THREAD_ID.fullmatch(value) or value in {".", ".."}:
        raise BadRequest("threadId must be 1-128 characters of A-Z a-z 0-9 _ . : - "
                         "(and not '.' or '..')", code="invalid_thread_id")
    return value


def memory_key(value: object) -> str:
    """A pinned-memory key: 1-64 of ``[A-Za-z0-9_.-]``."""
    if not isinstance(value, str) or not MEMORY_KEY.fullmatch(value):
        raise BadRequest("key must be 1-64 characters of A-Z a-z 0-9 _ . -",
                         code="invalid_key")
    return value


def _encodable(value: str, field: str) -> str:
    """Refuse text that is not valid Unicode (a lone surrogate from a JSON ``\\ud800``)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise BadRequest(f"{field} is not valid Unicode text", code=f"invalid_{field}") from None
    return value


def memory_value(value: object) -> str:
    """A pinned-memory value: a string of at most 2,000 characters."""
    if not isinstance(value, str) or len(value) > MAX_MEMORY_VALUE_CHARS:
        raise BadRequest(f"value must be a string of at most {MAX_MEMORY_VALUE_CHARS} "
                         "characters", code="invalid_value")
    return _encodable(value, "value")


def name(value: object, what: str = "name") -> str:
    """A specialist name and the like: 1-64 of ``[A-Za-z0-9_.-]``."""
    if not isinstance(value, str) or not NAME.fullmatch(value):
        raise BadRequest(f"{what} must be 1-64 characters of A-Z a-z 0-9 _ . -",
                         code=f"invalid_{what}")
    return value


def user_id(value: object) -> str:
    """An account id: 1-128 of ``[A-Za-z0-9_.:@-]``, no ``--``, not ending in ``-``.

    ``{userId}--{threadId}`` must name one thread only: with no ``--`` in the user id and no
    ``-`` at its end, the first ``--`` of a session key always ends the user id.
    """
    if (not isinstance(value, str) or not USER_ID.fullmatch(value) or "--" in value
            or value.endswith("-")):
        raise BadRequest("user id must be 1-128 characters of A-Z a-z 0-9 _ . : @ - "
                         "without '--' and not ending in '-'", code="invalid_user_id")
    return value


def text(value: object, field: str, max_chars: int, *, allow_empty: bool = False) -> str:
    """A free-text field: a string, not blank unless allowed, at most ``max_chars``."""
    if not isinstance(value, str):
        raise BadRequest(f"{field} must be a string", code=f"invalid_{field}")
    if not allow_empty and not value.strip():
        raise BadRequest(f"{field} must not be empty", code=f"invalid_{field}")
    if len(value) > max_chars:
        raise PayloadTooLarge(f"{field} is longer than {max_chars} characters",
                              code=f"{field}_too_long")
    if "\x00" in value:
        raise BadRequest(f"{field} must not contain NUL characters", code=f"invalid_{field}")
    return _encodable(value, field)


def site(value: object) -> str:
    """A saved login's site: a host name (or IP address), with ``:port`` when not the
    default, as ``bank.example.com`` or ``127.0.0.1:8443``; lower-cased."""
    found = SITE.fullmatch(text(value, "site", MAX_SITE_CHARS).strip())
    if found is None:
        raise BadRequest("site must be a host name, with :port (1-65535) when not the default "
                         "(bank.example.com, 127.0.0.1:8443)", code="invalid_site")
    return found.group(0).lower()
