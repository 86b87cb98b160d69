"""HTTP errors are mapped once, here, to the SPEC's JSON error object; auth is checked here."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Awaitable, Callable

from aiohttp import web

from ..errors import BadRequest, GatewayError, RateLimited
from .keys import gateway_key, user_key

log = logging.getLogger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# Statuses aiohttp raises by itself, as SPEC error codes.
_HTTP_CODES = {400: "bad_request", 401: "unauthorized", 404: "not_found",
               405: "method_not_allowed", 413: "too_large", 415: "unsupported_media_type"}
AUTHENTICATED_PREFIXES = ("/chat", "/api/")


def error_response(status: int, code: str, message: str,
                   headers: dict[str, str] | None = None) -> web.Response:
    """The SPEC's error body: ``{"error": {"code", "message"}}``."""
    return web.json_response({"error": {"code": code, "message": message}}, status=status,
                             headers=headers)


@web.middleware
async def errors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Turn every failure into a JSON error; never a traceback, never a bare 500 page."""
    try:
        return await handler(request)
    except GatewayError as exc:
        headers = None
        if isinstance(exc, RateLimited):
            headers = {"Retry-After": str(max(1, math.ceil(exc.retry_after)))}
        if exc.status >= 500:
            log.error("%s %s failed: %s", request.method, request.path, exc.message)
        return error_response(exc.status, exc.code, exc.message, headers)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code = _HTTP_CODES.get(exc.status, "http_error")
        message = exc.reason if exc.status != 413 else "request body too large"
        return error_response(exc.status, code, message)
    except Exception:
        log.exception("unhandled error in %s %s", request.method, request.path)
        return error_response(500, "internal_error", "internal error")


def _is_protected(path: str) -> bool:
    return path == "/chat" or path.startswith(AUTHENTICATED_PREFIXES)


@web.middleware
async def auth_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """``/chat`` and ``/api/*`` need ``Authorization: Bearer <token>``."""
    if _is_protected(request.path):
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        token = token.strip() if scheme.lower() == "bearer" else ""
        request[user_key] = await request.app[gateway_key].authenticate(token)
    return await handler(request)


async def read_json_object(request: web.Request) -> dict[str, object]:
    """The request body as a JSON object; 400 otherwise (413 if too large)."""
    raw = await request.read()
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise BadRequest("the body is not valid JSON", code="invalid_json") from None
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object", code="invalid_json")
    return body
