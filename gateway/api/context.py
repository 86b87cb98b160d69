"""Helpers every handler uses: who is calling, and which thread they mean."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from gateway.api.keys import gateway_key, user_key
from gateway.base import jsonio
from gateway.base.errors import BadRequest
from gateway.gateway import Gateway
from gateway.observe import TraceContext
from gateway.store import ThreadRef, User


def caller(request: web.Request) -> tuple[Gateway, User]:
    """The gateway and the authenticated account."""
    return request.app[gateway_key], request[user_key]


def json_answer(value: Any) -> web.Response:
    """``value`` as a 200 JSON response, written by :func:`jsonio.dumps` (a turn's answer:
    ``web.json_response``'s ``json.dumps`` costs several times as much)."""
    return web.Response(body=jsonio.dumps(value), content_type="application/json")


async def thread_from_query(request: web.Request) -> ThreadRef:
    """The thread named by ``?threadId=``."""
    gateway, user = caller(request)
    if "threadId" not in request.query:
        raise BadRequest("the threadId query parameter is required", code="invalid_thread_id")
    return await gateway.resolve_thread(user.user_id, request.query["threadId"])


async def thread_from_path(request: web.Request) -> ThreadRef:
    """The thread named by ``/api/threads/{threadId}``."""
    gateway, user = caller(request)
    return await gateway.resolve_thread(user.user_id, request.match_info["thread_id"])


def int_param(request: web.Request, name: str, default: int | None, *, low: int,
              high: int) -> int | None:
    """An optional integer query parameter within [low, high]; 400 otherwise."""
    raw = request.query.get(name)
    if raw is None:
        return default
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 19:
        raise BadRequest(f"{name} must be a whole number", code=f"invalid_{name}")
    value = int(raw)
    if not low <= value <= high:
        raise BadRequest(f"{name} must be between {low} and {high}", code=f"invalid_{name}")
    return value


def trace_of(request: web.Request) -> TraceContext | None:
    """The request's W3C Trace Context (``traceparent``, and ``tracestate`` with it) when
    well formed: the turn's span becomes its child. A malformed one, or more than one
    ``traceparent``, is ignored, as the Trace Context specification asks."""
    parents = request.headers.getall("traceparent", ())
    if len(parents) != 1:
        return None
    return TraceContext.from_headers(parents[0],
                                     ",".join(request.headers.getall("tracestate", ())))
