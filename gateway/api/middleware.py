"""HTTP errors are mapped once, here, to the JSON error object
``{"error": {"code", "message"}}``; auth and CSRF are checked here, and every request's headers
and body are made safe to read before a handler sees them."""

from __future__ import annotations

import asyncio
import hmac
import logging
import math
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from multidict import CIMultiDict
from yarl import URL

from gateway.api.keys import gateway_key, user_key, web_session_key
from gateway.api.openai_errors import openai_error
from gateway.base import jsonio
from gateway.base.errors import (
    AccountBlocked,
    AdminOnly,
    BadRequest,
    Forbidden,
    GatewayError,
    RateLimited,
    Unauthorized,
    UnsupportedMediaType,
)

log = logging.getLogger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# Statuses aiohttp raises by itself, as the API's error codes.
_HTTP_CODES = {400: "bad_request", 401: "unauthorized", 404: "not_found",
               405: "method_not_allowed", 413: "too_large", 415: "unsupported_media_type"}
AUTHENTICATED_PREFIXES = ("/chat", "/api/", "/v1/")
ADMIN_PREFIX = "/api/admin/"  # admin accounts only (403 admin_only)
OPENAI_PREFIX = "/v1/"  # errors there are worded as the OpenAI API words them
SESSION_COOKIE = "cloudybot_session"
CSRF_HEADER = "X-CSRF-Token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def error_response(status: int, code: str, message: str, openai: bool = False,
                   param: str | None = None) -> web.Response:
    """The API's error body: ``{"error": {"code", "message"}}``; with ``openai``, the OpenAI
    API's (``{"error": {"message", "type", "code", "param"}}``)."""
    body = openai_error(status, code, message, param) if openai \
        else {"error": {"code": code, "message": message}}
    return web.json_response(body, status=status)


@web.middleware
async def errors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Turn every failure into a JSON error; never a traceback, never a bare 500 page."""
    openai = request.path.startswith(OPENAI_PREFIX)
    try:
        return await handler(request)
    except GatewayError as exc:
        if exc.status >= 500:
            log.error("%s %s failed: %s", request.method, request.path, exc.message)
        response = error_response(exc.status, exc.code, exc.message, openai, exc.param)
        if isinstance(exc, RateLimited):
            response.headers["Retry-After"] = str(max(1, math.ceil(exc.retry_after)))
        return response
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code = _HTTP_CODES.get(exc.status, "http_error")
        message = exc.reason if exc.status != 413 else "request body too large"
        response = error_response(exc.status, code, message, openai=openai)
        if "Allow" in exc.headers:  # a 405 names the methods the path takes (RFC 9110)
            response.headers["Allow"] = exc.headers["Allow"]
        return response
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
    token in ``X-CSRF-Token`` (403 ``csrf_failed`` otherwise). A blocked account is refused
    (403 ``account_blocked``), and ``/api/admin/*`` answers admin accounts only (403
    ``admin_only``)."""
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
        user = request[user_key]
        if user.blocked:
            raise AccountBlocked()
        if request.path.startswith(ADMIN_PREFIX) and not user.admin:
            raise AdminOnly()
    return await handler(request)


def _from_own_page(request: web.Request) -> bool:
    """Whether a browser sent ``request`` from one of the gateway's own pages.

    ``Sec-Fetch-Site`` (set by the browser, never by a page's script, and unchanged by a proxy
    in front) says so when present; else ``Origin`` must be the gateway's own. A request with
    neither comes from no web page (curl, an SDK), which no other site can make a browser send.
    """
    site = request.headers.get("Sec-Fetch-Site")
    if site is not None:
        return site == "same-origin"
    origin = request.headers.get("Origin")
    if origin is None:
        return True
    try:
        url = URL(origin)
        return (url.scheme, url.host, url.port) == (
            request.scheme, request.url.host, request.url.port)
    except ValueError:  # "null" (a sandboxed or redirected page) or no URL at all
        return False


def require_own_page(request: web.Request) -> None:
    """A route that sets or clears the session cookie answers only the gateway's own pages:
    403 ``cross_site`` for a request another site's page made (login CSRF: signing a
    browser into someone else's account)."""
    if not _from_own_page(request):
        raise Forbidden("the session cookie is set only for the gateway's own pages "
                        "(Origin or Sec-Fetch-Site says this request came from another site)",
                        code="cross_site")


async def read_sign_in(request: web.Request) -> dict[str, object]:
    """The body of a sign-in: a JSON object from the gateway's own page. 403 from another
    site's page, 415 unless ``Content-Type: application/json`` (which a plain cross-site form
    cannot send), 400 if not a JSON object."""
    require_own_page(request)
    if request.content_type != "application/json":
        raise UnsupportedMediaType("sign in with Content-Type: application/json",
                                   code="unsupported_media_type")
    return await read_json_object(request)


async def read_json_object(request: web.Request) -> dict[str, object]:
    """The request body as a JSON object; 400 otherwise (413 if too large)."""
    raw = await request.read()
    try:
        body = jsonio.loads(raw)
    except (ValueError, RecursionError):  # also an integer longer than Python will parse
        raise BadRequest("the body is not valid JSON", code="invalid_json") from None
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object", code="invalid_json")
    return body
