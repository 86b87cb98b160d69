"""``/api/threads``: list and search, read (with display-transcript paging), rename, clear
and delete."""

from __future__ import annotations

import re

from aiohttp import web

from gateway.accounts.secrets import refuse_saved_passwords
from gateway.api.context import caller, int_param, thread_from_path
from gateway.api.middleware import read_json_object
from gateway.base.errors import BadRequest
from gateway.base.search_text import search_terms, snippet
from gateway.base.times import iso_utc
from gateway.base.titles import checked_title
from gateway.gateway import DASHBOARD
from gateway.store import Delivery, Thread, ThreadHit

DEFAULT_PAGE = 50
MAX_PAGE = 500
DEFAULT_THREADS = 100
# A page's nextBefore: the last thread's updatedAt and row id ("2026-12-03T10:00:00.5Z~42")
THREAD_CURSOR_PATTERN = (r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,6})?Z"
                         r"~[0-9]{1,18}")
THREAD_CURSOR = re.compile(THREAD_CURSOR_PATTERN)
MAX_CURSOR_CHARS = 46
MAX_DELIVERIES = 20


def _delivery(delivery: Delivery) -> dict[str, object]:
    """A channel reply not delivered (yet): pending with its next attempt, or failed."""
    return {"messageId": delivery.message_id, "state": delivery.state,
            "attempts": delivery.attempts, "createdAt": iso_utc(delivery.created),
            "nextAttemptAt": iso_utc(delivery.next_attempt)
            if delivery.state == "pending" else None,
            "lastError": delivery.last_error}


def _summary(thread: Thread) -> dict[str, object]:
    return {"threadId": thread.ref.thread_id, "title": thread.title,
            "titleSet": thread.named, "channel": thread.ref.channel,
            "sessionKey": thread.ref.session_key, "createdAt": thread.created_at,
            "updatedAt": thread.updated_at}


def _hit(hit: ThreadHit, terms: tuple[str, ...]) -> dict[str, object]:
    """A thread search found, with where it matched: its newest matching message (its id and
    a snippet around the match), or ``messageId`` null and ``""`` when only its title did."""
    return {**_summary(hit.thread),
            "match": {"messageId": hit.message_id, "snippet": snippet(hit.text, terms)}}


def _next(cursor: tuple[str, int] | None) -> str | None:
    return f"{cursor[0]}~{cursor[1]}" if cursor else None


async def list_threads(request: web.Request) -> web.Response:
    """The caller's threads, most recently updated first, a page at a time (``?limit=`` up to
    500, default 100; ``?before=`` the ``nextBefore`` of the previous page). With ``?q=``
    only those whose title or one of whose messages holds a word starting with each word of
    ``q``, in the same order and pages, each with its ``match``."""
    gateway, user = caller(request)
    limit = int_param(request, "limit", DEFAULT_THREADS, low=1, high=MAX_PAGE)
    assert limit is not None
    before = _thread_cursor(request)
    if "q" in request.query:
        terms = search_terms(request.query["q"])
        hits, cursor = (await gateway.store.search_threads(user.user_id, terms, limit, before)
                        if terms else ([], None))
        return web.json_response({"threads": [_hit(h, terms) for h in hits],
                                  "nextBefore": _next(cursor), "terms": list(terms)})
    threads, cursor = await gateway.store.list_threads(user.user_id, limit, before)
    return web.json_response({"threads": [_summary(t) for t in threads],
                              "nextBefore": _next(cursor)})


def _thread_cursor(request: web.Request) -> tuple[str, int] | None:
    """``before`` as (updated_at, row id); 400 if it is not a cursor this API gave out."""
    raw = request.query.get("before")
    if raw is None:
        return None
    if not THREAD_CURSOR.fullmatch(raw):
        raise BadRequest("before must be the nextBefore of an earlier page",
                         code="invalid_before")
    stamp, _, pk = raw.rpartition("~")
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


async def get_thread_session(request: web.Request) -> web.Response:
    """``GET /api/threads/{threadId}/session``: the thread's session on disk: the active
    file's size and last write, the last rotation, and the archives (oldest first).

    Any valid thread id answers, used or not (none yet for a new one); 404 only for someone
    else's channel thread."""
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


async def rename_thread(request: web.Request) -> web.Response:
    """Set the thread's title (``{"title": "..."}``), or with ``{"title": null}`` go back to
    the one its first message gives; answer with the thread's summary. 400 ``invalid_title``
    for a title that is empty, too long or not one plain line, ``contains_secret`` for one
    holding a saved password; 404 for a thread the caller has not used."""
    gateway, user = caller(request)
    ref = await thread_from_path(request)
    body = await read_json_object(request)
    if "title" not in body:
        raise BadRequest("title is required: a string, or null for the first message's",
                         code="invalid_title")
    title = None if body["title"] is None else checked_title(body["title"])
    await gateway.existing_thread(ref)
    if title is not None:
        await refuse_saved_passwords(gateway.store, gateway.secret_box, user.user_id,
                                     {"title": title})
    await gateway.store.set_title(ref.session_key, title)
    return web.json_response(_summary(await gateway.existing_thread(ref)))


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
