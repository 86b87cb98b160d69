"""``/api/user/memory``: a thread's pinned keys."""

from __future__ import annotations

from aiohttp import web

from gateway.accounts.secrets import refuse_saved_passwords
from gateway.api.context import caller, thread_from_query
from gateway.api.middleware import read_json_object
from gateway.base import validation
from gateway.store import ThreadRef


def _memory(ref: ThreadRef, memory: dict[str, str]) -> web.Response:
    return web.json_response({"threadId": ref.thread_id, "memory": memory})


async def get_memory(request: web.Request) -> web.Response:
    """All pinned keys of the thread (``{}`` for a thread not used yet)."""
    gateway, _ = caller(request)
    ref = await thread_from_query(request)
    return _memory(ref, await gateway.store.get_pinned(ref))


async def put_memory(request: web.Request) -> web.Response:
    """Set one pinned key; answer with the whole memory. 400 ``contains_secret`` if the key or
    value holds one of the caller's saved passwords."""
    gateway, user = caller(request)
    ref = await thread_from_query(request)
    body = await read_json_object(request)
    key = validation.memory_key(body.get("key"))
    value = validation.memory_value(body.get("value"))
    await refuse_saved_passwords(gateway.store, gateway.secret_box, user.user_id,
                                 {"key": key, "value": value})
    memory = await gateway.store.put_pinned(ref, key, value, gateway.settings.max_pinned_keys)
    return _memory(ref, memory)


async def delete_memory(request: web.Request) -> web.Response:
    """Delete one pinned key, or all of the thread's keys when no ``key`` is given."""
    gateway, _ = caller(request)
    ref = await thread_from_query(request)
    key = request.query.get("key")
    if key is not None:
        validation.memory_key(key)
    return _memory(ref, await gateway.store.delete_pinned(ref, key))
