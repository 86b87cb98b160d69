"""Per-key turn locks: turns on one thread run one after another, different threads in parallel."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field


@dataclass
class _Entry:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


class Lease:
    """A held key lock. Release it exactly once; it may be handed to another task first."""

    def __init__(self, locks: KeyedLocks, key: str) -> None:
        self._locks = locks
        self.key = key
        self._released = False

    def release(self) -> None:
        """Release the lock (idempotent)."""
        if not self._released:
            self._released = True
            self._locks._release(self.key)


class KeyedLocks:
    """A FIFO asyncio lock per key; entries disappear when nobody holds or awaits them."""

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}

    async def acquire(self, key: str) -> Lease:
        """Wait for the key's lock and hold it."""
        entry = self._entries.setdefault(key, _Entry())
        entry.users += 1
        try:
            await entry.lock.acquire()
        except BaseException:
            self._forget(key, entry)
            raise
        return Lease(self, key)

    @asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        """Hold the key's lock for the block."""
        lease = await self.acquire(key)
        try:
            yield
        finally:
            lease.release()

    def _release(self, key: str) -> None:
        entry = self._entries[key]
        entry.lock.release()
        self._forget(key, entry)

    def _forget(self, key: str, entry: _Entry) -> None:
        entry.users -= 1
        if entry.users == 0:
            del self._entries[key]
