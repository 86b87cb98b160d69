"""``/api/threads``: list, read (with display-transcript paging), clear and delete."""

from __future__ import annotations

import re

from aiohttp import web

from gateway.api.context import caller, int_param, thread_from_path
from gateway.base.errors import BadRequest
from gateway.base.times import iso_utc
from gateway.gateway import DASHBOARD
from gateway.store import Delivery, Thread

DEFAULT_PAGE = 50
MAX_PAGE = 500
DEFAULT_THREADS = 100
THREAD_CURSOR = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?Z")
MAX_DELIVERIES = 20


def _delivery(delivery: Delivery) -> dict[str, object]:
    """A channel reply not delivered (yet): pending with its next attempt, or failed."""
    return {"messageId": delivery.message_id, "state": delivery.state,
            "attempts": delivery.attempts, "createdAt": iso_utc(delivery.created),
            "nextAttemptAt": iso_utc(delivery.next_attempt)
            if delivery.state == "pending" else None,
            "lastError": delivery.last_error}


def _summary(thread: Thread) -> dict[str, object]:
    return {"threadId": thread.ref.thread_id, "channel": thread.ref.channel,
            "sessionKey": thread.ref.session_key, "createdAt": thread.created_at,
            "updatedAt": thread.updated_at}


async def list_threads(request: web.Request) -> web.Response:
    """The caller's threads, most recently updated first, a page at a time (``?limit=`` up to
    500, default 100; ``?before=`` the ``nextBefore`` of the previous page)."""
    gateway, user = caller(request)
    limit = int_param(request, "limit", DEFAULT_THREADS, low=1, high=MAX_PAGE)
    assert limit is not None
    threads, cursor = await gateway.store.list_threads(user.user_id, limit,
                                                       _thread_cursor(request))
    return web.json_response({"threads": [_summary(t) for t in threads],
                              "nextBefore": f"{cursor[0]}~{cursor[1]}" if cursor else None})


def _thread_cursor(request: web.Request) -> tuple[str, int] | None:
    """``before`` as (updated_at, row id); 400 if it is not a cursor this API gave out."""
    raw = request.query.get("before")
    if raw is None:
        return None
    stamp, _, pk = raw.rpartition("~")
    if not (THREAD_CURSOR.fullmatch(stamp) and pk.isascii() and pk.isdigit()
            and len(pk) <= 18):
        raise BadRequest("before must be the nextBefore of an earlier page",
                         code="invalid_before")
    return stamp, int(pk)


async def get_thread(request: web.Request) -> web.Response:
    """Summary, rolling messages, a page of the display transcript (``?limit=&before=``) and,
    for a channel thread, its replies still pending or failed (``deliveries``)."""
    gateway, _ = caller(request)
    ref = await thread_from_path(request)
    limit = int_param(request, "limit", DEFAULT_PAGE, low=1, high=MAX_PAGE)
    before = int_param(request, "before", None, low=1, high=2**62)
    assert limit is not None
    thread, messages, page = await gateway.thread_page(ref, limit, before)
    return web.json_response({
        **_summary(thread),
        "summary": thread.summary,
        "messages": [{"role": m.role, "content": m.content} for m in messages],
        "display_messages": [{"id": m.id, "role": m.role, "content": m.content,
                              "createdAt": m.created_at} for m in page.messages],
        "nextBefore": page.next_before,
        "deliveries": [_delivery(d) for d in
                       await gateway.store.deliveries(ref.session_key, MAX_DELIVERIES)]
        if ref.channel != DASHBOARD else [],
    })


async def get_session(request: web.Request) -> web.Response:
    """``GET /api/threads/{threadId}/session``: the thread's session on disk: the active
    file's size and last write, the last rotation, and the archives (oldest first)."""
    gateway, _ = caller(request)
    ref = await thread_from_path(request)
    status = await gateway.sessions.session_status(ref.session_key)
    archives = [{"name": a.name, "bytes": a.size, "archivedAt": a.archived_at}
                for a in status.archives]
    return web.json_response({
        "threadId": ref.thread_id,
        "sessionKey": ref.session_key,
        "active": {"bytes": status.active[0], "updatedAt": iso_utc(status.active[1])}
        if status.active else None,
        "maxBytes": gateway.settings.session_max_file_bytes,
        "idleMinutes": gateway.settings.session_idle_minutes,
        "lastRotation": archives[-1]["archivedAt"] if archives else None,
        "archives": archives,
    })


async def clear_thread(request: web.Request) -> web.Response:
    """Empty summary and messages; pinned keys and the display transcript stay."""
    gateway, _ = caller(request)
    ref = await thread_from_path(request)
    await gateway.clear_thread(ref)
    return web.json_response({"threadId": ref.thread_id, "cleared": True})


async def delete_thread(request: web.Request) -> web.Response:
    """Delete the conversation, its display transcript and its pinned keys."""
    gateway, _ = caller(request)
    ref = await thread_from_path(request)
    await gateway.delete_thread(ref)
    return web.Response(status=204)
