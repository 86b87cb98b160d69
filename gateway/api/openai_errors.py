"""Errors as the OpenAI API words them, for the OpenAI-compatible endpoint (``/v1/*``)."""

from __future__ import annotations

from typing import Any

_TYPES = {400: "invalid_request_error", 401: "authentication_error", 402: "insufficient_quota",
          403: "permission_error", 404: "invalid_request_error", 408: "invalid_request_error",
          409: "invalid_request_error", 413: "invalid_request_error",
          429: "rate_limit_error"}


def openai_error(status: int, code: str, message: str,
                 param: str | None = None) -> dict[str, Any]:
    """An error as the OpenAI API words it (``type`` from the status; ``param``: the request
    field at fault, if one is)."""
    kind = _TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "code": code, "param": param}}
