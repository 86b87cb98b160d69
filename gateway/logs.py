"""Secrets never reach the logs, whoever logs them (httpx logs Bot API URLs with the token).

Channels register their secrets with :func:`redact_in_logs`; every log record's message is
then checked and rewritten with the secret replaced. Installed once, process-wide.
:func:`quiet_malformed_requests` keeps the raw bytes of requests aiohttp's parser refused (a
token with a NUL byte in it) out of the log as well.
"""

from __future__ import annotations

import logging
from typing import Any

from aiohttp.http_exceptions import HttpProcessingError

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
    global _installed
    _secrets.update(secret for secret in secrets if secret)
    if _installed:
        return
    make_record = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make_record(*args, **kwargs)
        if _secrets:
            message = record.getMessage()
            if any(secret in message for secret in _secrets):
                record.msg, record.args = mask_secrets(message), None
            if record.exc_info:  # a traceback is formatted later: format and mask it now
                record.exc_text = mask_secrets(logging.Formatter().formatException(record.exc_info))
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
