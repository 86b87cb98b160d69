"""Secrets never reach the logs, whoever logs them (httpx logs Bot API URLs with the token).

Channels register their secrets with :func:`redact_in_logs`; every log record's message is
then checked and rewritten with the secret replaced. Installed once, process-wide.
"""

from __future__ import annotations

import logging
from typing import Any

_secrets: set[str] = set()
_installed = False
MASK = "<redacted>"


def _mask(text: str) -> str:
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
                record.msg, record.args = _mask(message), None
            if record.exc_info:  # a traceback is formatted later: format and mask it now
                record.exc_text = _mask(logging.Formatter().formatException(record.exc_info))
        return record

    logging.setLogRecordFactory(factory)
    _installed = True
