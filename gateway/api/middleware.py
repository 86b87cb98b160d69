"""HTTP errors are mapped once, here, to the JSON error object
``{"error": {"code", "message"}}``; auth is checked here, and every request's headers and body
are made safe to read before a handler sees them."""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import math
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from multidict import CIMultiDict

from gateway.api.keys import gateway_key, user_key, web_session_key
from gateway.api.openai_errors import openai_error
from gateway.base.errors import BadRequest, Forbidden, GatewayError, RateLimited, Unauthorized

log = logging.getLogger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# Statuses aiohttp raises by itself, as the API's error codes.
_HTTP_CODES = {400: "bad_request", 401: "unauthorized", 404: "not_found",
               405: "method_not_allowed", 413: "too_large", 415: "unsupported_media_type"}
AUTHENTICATED_PREFIXES = ("/chat", "/api/", "/v1/")
OPENAI_PREFIX = "/v1/"  # errors there are worded as the OpenAI API words them
SESSION_COOKIE = "cloudybot_session"
CSRF_HEADER = "X-CSRF-Token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def error_response(status: int, code: str, message: str,
                   headers: dict[str, str] | None = None, openai: bool = False) -> web.Response:
    """The API's error body: ``{"error": {"code", "message"}}``; with ``openai``, the OpenAI
    API's (``{"error": {"message", "type", "code", "param"}}``)."""
    body = openai_error(status, code, message) if openai \
        else {"error": {"code": code, "message": message}}
    return web.json_response(body, status=status, headers=headers)


@web.middleware
async def errors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Turn every failure into a JSON error; never a traceback, never a bare 500 page."""
    openai = request.path.startswith(OPENAI_PREFIX)
    try:
        return await handler(request)
    except GatewayError as exc:
        headers = None
        if isinstance(exc, RateLimited):
            headers = {"Retry-After": str(max(1, math.ceil(exc.retry_after)))}
        if exc.status >= 500:
            log.error("%s %s failed: %s", request.method, request.path, exc.message)
        return error_response(exc.status, exc.code, exc.message, headers, openai)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code = _HTTP_CODES.get(exc.status, "http_error")
        message = exc.reason if exc.status != 413 else "request body too large"
        return error_response(exc.status, code, message, openai=openai)
    except (HttpProcessingError, web.RequestPayloadError):
        # A body aiohttp could not decode (bad chunking, bad gzip): the rest of the stream
        # cannot be trusted.
        return await _answer_and_close(
            request, error_response(400, "invalid_body", "the request body is malformed",
                                    openai=openai))
    except UnicodeError as exc:
        # Text from the request that is not UTF-8 reached code that encodes or decodes it.
        log.warning("%s %s: %s", request.method, request.path, exc)
        return error_response(400, "invalid_encoding", "the request holds text that is not "
                              "valid UTF-8", openai=openai)
    except Exception:
        log.exception("unhandled error in %s %s", request.method, request.path)
        return error_response(500, "internal_error", "internal error", openai=openai)


def _is_text(value: str) -> bool:
    """False for a header aiohttp decoded with ``surrogateescape`` (bytes not UTF-8)."""
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@web.middleware
async def headers_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A header whose bytes are not UTF-8 is treated as absent.

    Such a value can never equal a token, secret or signature, and as ``str`` it holds lone
    surrogates that fail the first ``.encode()``. Without it, ``Authorization`` is no token
    (401) and a webhook's secret header is no secret (403), in every handler alike.
    """
    headers = request.headers
    if not all(_is_text(name) and _is_text(value) for name, value in headers.items()):
        request = request.clone(headers=CIMultiDict(
            (name, value) for name, value in headers.items()
            if _is_text(name) and _is_text(value)))
    return await handler(request)


@web.middleware
async def body_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Read the whole body within ``body_timeout_seconds`` before any handler runs.

    ``request.read()`` keeps what it read, so handlers (channels included) get it at once;
    a body that stalls is answered 408 and its connection closed, however the route reads.
    """
    # An unknown path or method is answered at once, without waiting for its body.
    if request.body_exists and request.match_info.http_exception is None:
        timeout = request.app[gateway_key].settings.body_timeout_seconds
        try:
            async with asyncio.timeout(timeout):
                await request.read()
        except TimeoutError:
            return await _answer_and_close(request, error_response(
                408, "body_timeout", f"the request body did not arrive within {timeout:g} "
                "seconds"))
    return await handler(request)


async def _answer_and_close(request: web.Request,
                            response: web.StreamResponse) -> web.StreamResponse:
    """Send ``response`` and close the connection at once.

    aiohttp would otherwise linger, reading the rest of an unread body for up to ten seconds
    before closing: the very wait a stalled or broken body must not cause.
    """
    response.force_close()
    await response.prepare(request)
    await response.write_eof()
    if request.protocol is not None:
        request.protocol.force_close()  # the transport sends what was written, then closes
    return response


def _is_protected(path: str) -> bool:
    return path == "/chat" or path.startswith(AUTHENTICATED_PREFIXES)


@web.middleware
async def auth_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """``/chat`` and ``/api/*`` need ``Authorization: Bearer <token>`` or a dashboard session
    cookie; with only the cookie, a request that changes state must carry the session's CSRF
    token in ``X-CSRF-Token`` (403 ``csrf_failed`` otherwise)."""
    if _is_protected(request.path):
        accounts = request.app[gateway_key].accounts
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        token = token.strip() if scheme.lower() == "bearer" else ""
        cookie = request.cookies.get(SESSION_COOKIE, "")
        if token or not cookie:
            request[user_key] = await accounts.authenticate(token)
        else:
            session = await accounts.web_session(cookie)
            if session is None:
                raise Unauthorized("the dashboard session has ended; sign in again",
                                   code="session_expired")
            if request.method not in SAFE_METHODS and not hmac.compare_digest(
                    request.headers.get(CSRF_HEADER, "").encode(), session.csrf.encode()):
                raise Forbidden("this request needs the session's CSRF token in "
                                f"{CSRF_HEADER}", code="csrf_failed")
            request[user_key] = session.user
            request[web_session_key] = session
    return await handler(request)


async def read_json_object(request: web.Request) -> dict[str, object]:
    """The request body as a JSON object; 400 otherwise (413 if too large)."""
    raw = await request.read()
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):  # also an integer longer than Python will parse
        raise BadRequest("the body is not valid JSON", code="invalid_json") from None
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object", code="invalid_json")
    return body
