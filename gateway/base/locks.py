"""Per-key turn locks: turns on one thread run one after another, different threads in parallel.

In one process an asyncio lock per key orders them. With a store several processes share
(PostgreSQL), each lock is also taken in the store (``shared``), after the local one: a turn
waits for the thread's turns in other processes too, and one process holds at most one store
lock per thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Protocol


class Leadership(Protocol):
    """Being the one process that plays a role; it ends when released or when the process
    (or its database connection) dies."""

    async def alive(self) -> bool:
        """Whether it still holds (checked before each round of the role's work)."""

    async def release(self) -> None:
        """Step down."""


class Alone:
    """The leadership of a store only one process uses: always held."""

    async def alive(self) -> bool:
        """Always."""
        return True

    async def release(self) -> None:
        """Nothing to give up."""


class SharedLock(Protocol):
    """A lock held in the store for another process to see; it dies with its holder."""

    async def release(self) -> None:
        """Let the next holder in (whatever happens, the lock is no longer held)."""


@dataclass
class _Entry:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


class Lease:
    """A held key lock. Release it exactly once; it may be handed to another task first."""

    def __init__(self, locks: KeyedLocks, key: str, shared: SharedLock | None) -> None:
        self._locks = locks
        self.key = key
        self._shared = shared
        self._released = False

    async def release(self) -> None:
        """Release the lock, in the store first (idempotent)."""
        if self._released:
            return
        self._released = True
        try:
            if self._shared is not None:
                await self._shared.release()
        finally:
            self._locks._release(self.key)


class KeyedLocks:
    """A FIFO asyncio lock per key, and the store's lock of the key when ``shared`` is given;
    entries disappear when nobody holds or awaits them."""

    def __init__(self, shared: Callable[[str], Awaitable[SharedLock | None]] | None = None,
                 ) -> None:
        self._entries: dict[str, _Entry] = {}
        self._shared = shared

    async def acquire(self, key: str) -> Lease:
        """Wait for the key's lock (here, then in the store) and hold it."""
        entry = self._entries.setdefault(key, _Entry())
        entry.users += 1
        try:
            await entry.lock.acquire()
        except BaseException:
            self._forget(key, entry)
            raise
        try:
            shared = await self._shared(key) if self._shared is not None else None
        except BaseException:
            self._release(key)
            raise
        return Lease(self, key, shared)

    @asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        """Hold the key's lock for the block."""
        lease = await self.acquire(key)
        try:
            yield
        finally:
            await lease.release()

    def _release(self, key: str) -> None:
        entry = self._entries[key]
        entry.lock.release()
        self._forget(key, entry)

    def _forget(self, key: str, entry: _Entry) -> None:
        entry.users -= 1
        if entry.users == 0:
            del self._entries[key]
