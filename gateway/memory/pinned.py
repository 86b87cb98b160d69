"""A conversation's pinned facts as plugins and the API change them: checked, and never a saved
password.

Every writer goes through :class:`ThreadPins` (the ``/api/user/memory`` routes, the chat
commands, a plugin's ``host.pinned(conversation)``), so the rules are stated once: keys and
values pass :mod:`gateway.base.validation`, a thread keeps at most ``max_keys`` of them, and a
key or value that holds one of the user's saved passwords is refused (400 ``contains_secret``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from gateway.base import validation
from gateway.store import Store, ThreadRef

# Raises 400 ``contains_secret`` when a field holds one of the user's saved passwords.
SecretCheck = Callable[[Mapping[str, str]], Awaitable[None]]


class ThreadPins:
    """The pinned memory of one thread (a :class:`gateway.PinnedMemory`)."""

    def __init__(self, store: Store, ref: ThreadRef, refuse_secrets: SecretCheck,
                 max_keys: int) -> None:
        self._store = store
        self._ref = ref
        self._refuse_secrets = refuse_secrets
        self._max_keys = max_keys

    async def get(self) -> dict[str, str]:
        """Every pinned key and its value (``{}`` for a thread not used yet)."""
        return await self._store.get_pinned(self._ref)

    async def put(self, key: object, value: object) -> dict[str, str]:
        """Pin ``value`` under ``key`` (400 on a bad key or value, or a saved password);
        return every pinned key."""
        key = validation.memory_key(key)
        value = validation.memory_value(value)
        await self._refuse_secrets({"key": key, "value": value})
        return await self._store.put_pinned(self._ref, key, value, self._max_keys)

    async def delete(self, key: object) -> dict[str, str]:
        """Unpin ``key``; return what remains."""
        return await self._store.delete_pinned(self._ref, validation.memory_key(key))

    async def delete_all(self) -> dict[str, str]:
        """Unpin every key (``{}``)."""
        return await self._store.delete_pinned(self._ref, None)
