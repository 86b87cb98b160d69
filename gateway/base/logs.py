"""The gateway's logs: text or JSON lines, each line of a turn marked with the turn, and no
secret in any of them, whoever logs them (httpx logs Bot API URLs with the token).

Channels register their secrets with :func:`redact_in_logs`; every log record's message is
then checked and rewritten with the secret replaced. A turn adds its user's saved passwords
with :func:`masking_in_logs`, for the lines written in its context. Installed once,
process-wide.
:func:`quiet_malformed_requests` keeps the raw bytes of requests aiohttp's parser refused (a
token with a NUL byte in it) out of the log as well.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import json
import logging
import os
import reprlib
import sys
from collections.abc import Callable, Iterator
from typing import IO, Any

from aiohttp.http_exceptions import HttpProcessingError

from gateway.base.times import iso_utc

_secrets: set[str] = set()
_installed = False
MASK = "<redacted>"


def mask_secrets(text: str) -> str:
    """``text`` with every secret registered by :func:`redact_in_logs` masked (for error
    texts that are stored rather than logged, such as a delivery's last error)."""
    for secret in _secrets:
        text = text.replace(secret, MASK)
    return text



def redact_in_logs(*secrets: str) -> None:
    """Hide these strings in every log record from now on (empty strings are ignored)."""
    _secrets.update(secret for secret in secrets if secret)
    _install_masking()


# The masking of the work in hand (a turn's, knowing its user's saved passwords in all their
# encodings), applied to every line logged in its context: a provider plugin's words included.
_context_mask: contextvars.ContextVar[Callable[[str], str] | None] = contextvars.ContextVar(
    "cloudybot_log_mask", default=None)


@contextlib.contextmanager
def masking_in_logs(mask: Callable[[str], str]) -> Iterator[None]:
    """Pass every log line written inside (and in what it spawns) through ``mask``."""
    _install_masking()
    token = _context_mask.set(mask)
    try:
        yield
    finally:
        _context_mask.reset(token)


def _masked(text: str) -> str:
    if _secrets and any(secret in text for secret in _secrets):
        text = mask_secrets(text)
    mask = _context_mask.get()
    return mask(text) if mask is not None else text


def _install_masking() -> None:
    """Install the record factory that masks (once, process-wide)."""
    global _installed
    if _installed:
        return
    make_record = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make_record(*args, **kwargs)
        if _secrets or _context_mask.get() is not None:
            message = record.getMessage()
            masked = _masked(message)
            if masked != message:
                record.msg, record.args = masked, None
            if record.exc_info:  # a traceback is formatted later: format and mask it now
                record.exc_text = _masked(logging.Formatter().formatException(record.exc_info))
        return record

    logging.setLogRecordFactory(factory)
    _installed = True


class _MalformedRequestFilter(logging.Filter):
    """aiohttp logs a request its parser refused with the offending bytes (an Authorization
    header with a NUL byte, say): keep the line, drop the bytes."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError):
            remote = record.args[0] if isinstance(record.args, tuple) and record.args else "?"
            record.msg = "refused a malformed HTTP request from %s (%s, status %s)"
            record.args = (remote, type(exc).__name__, exc.code)
            record.exc_info = record.exc_text = None
        return True


_malformed_request_filter = _MalformedRequestFilter()


def quiet_malformed_requests() -> None:
    """Install the filter on aiohttp's server logger (idempotent)."""
    logging.getLogger("aiohttp.server").addFilter(_malformed_request_filter)


# --- format and per-turn context ----------------------------------------------------------
# The turn a line belongs to: set by the gateway around each turn, inherited by what the turn
# spawns (its summarization), read by every handler's filter.
TURN_FIELDS = ("turn", "user", "thread", "channel")
_turn: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar(
    "cloudybot_turn", default=None)
_turn_numbers = itertools.count(1)
_PROCESS = f"{os.getpid():x}"


@contextlib.contextmanager
def turn_context(user: str, thread: str, channel: str) -> Iterator[str]:
    """Mark every log line written inside as this turn's (a new turn id, yielded)."""
    turn = f"{_PROCESS}-{next(_turn_numbers):x}"
    token = _turn.set({"turn": turn, "user": user, "thread": thread, "channel": channel})
    try:
        yield turn
    finally:
        _turn.reset(token)


class _TurnFilter(logging.Filter):
    """Puts the current turn's fields on each record (``None`` outside a turn)."""

    def filter(self, record: logging.LogRecord) -> bool:
        context = _turn.get()
        for name in TURN_FIELDS:
            setattr(record, name, context[name] if context else None)
        return True


class TextFormatter(logging.Formatter):
    """``time level logger: message [turn=… user=… thread=… channel=…]``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        if getattr(record, "turn", None):
            fields = " ".join(f"{name}={getattr(record, name)}" for name in TURN_FIELDS)
            line = f"{line} [{fields}]"
        return line


class JSONFormatter(logging.Formatter):
    """One JSON object per line: ``time``, ``level``, ``logger``, ``message``, the turn's
    fields when inside one, and ``exception`` (the formatted traceback) when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {"time": iso_utc(record.created), "level": record.levelname,
                                "logger": record.name, "message": record.getMessage()}
        for name in TURN_FIELDS:
            if getattr(record, name, None):
                line[name] = getattr(record, name)
        if record.exc_info and not record.exc_text:
            record.exc_text = mask_secrets(self.formatException(record.exc_info))
        if record.exc_text:
            line["exception"] = record.exc_text
        return json.dumps(line, ensure_ascii=False)


def log_handler(log_format: str, stream: IO[str] | None = None) -> logging.Handler:
    """A handler writing ``text`` or ``json`` lines to ``stream`` (stderr by default), each
    with the current turn's fields."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JSONFormatter() if log_format == "json" else TextFormatter())
    handler.addFilter(_TurnFilter())
    return handler

def shown(value: object) -> str:
    """A short, always printable description of a value a provider reported (for logs)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"  # repr() may refuse very long ints
    return reprlib.repr(value[:80] if isinstance(value, str) else value)

