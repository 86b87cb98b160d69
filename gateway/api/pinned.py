"""``/api/user/memory``: a thread's pinned keys."""

from __future__ import annotations

from aiohttp import web

from gateway.api.context import caller, thread_from_query
from gateway.api.middleware import read_json_object
from gateway.store import ThreadRef


def _memory(ref: ThreadRef, memory: dict[str, str]) -> web.Response:
    return web.json_response({"threadId": ref.thread_id, "memory": memory})


async def get_memory(request: web.Request) -> web.Response:
    """All pinned keys of the thread (``{}`` for a thread not used yet)."""
    gateway, user = caller(request)
    ref = await thread_from_query(request)
    return _memory(ref, await gateway.pins(ref, user.user_id).get())


async def put_memory(request: web.Request) -> web.Response:
    """Set one pinned key; answer with the whole memory. 400 ``contains_secret`` if the key or
    value holds one of the caller's saved passwords."""
    gateway, user = caller(request)
    ref = await thread_from_query(request)
    body = await read_json_object(request)
    memory = gateway.pins(ref, user.user_id)
    return _memory(ref, await memory.put(body.get("key"), body.get("value")))


async def delete_memory(request: web.Request) -> web.Response:
    """Delete one pinned key, or all of the thread's keys when no ``key`` is given."""
    gateway, user = caller(request)
    ref = await thread_from_query(request)
    memory = gateway.pins(ref, user.user_id)
    key = request.query.get("key")
    return _memory(ref, await (memory.delete(key) if key is not None else memory.delete_all()))
