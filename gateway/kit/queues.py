"""Per-conversation FIFO workers, shared by the inbox (turns) and the outbox (deliveries)."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

if TYPE_CHECKING:
    from gateway.config.settings import Settings
    from gateway.interfaces import Channel
    from gateway.observe import Tracer
    from gateway.store import Store

log = logging.getLogger(__name__)

Item = TypeVar("Item")


class KitHost(Protocol):
    """What the inbox and the outbox both use of the gateway (each adds its own needs)."""

    settings: Settings
    store: Store
    clock: Callable[[], float]
    stopping: asyncio.Event
    tracer: Tracer

    @property
    def channels(self) -> Mapping[str, Channel]:
        """The loaded channels by name."""

    def spawn(self, coroutine: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run background work that shutdown waits for."""

    async def pause(self, seconds: float) -> None:
        """Sleep, or less if the gateway begins to stop."""


class ConversationQueues(Generic[Item]):
    """One FIFO worker per conversation: a conversation's items are handled one at a time, in
    the order they were submitted; different conversations run in parallel. Nothing is
    dropped: a failing item is logged and the next one runs."""

    def __init__(self, handle: Callable[[Item], Awaitable[None]],
                 spawn: Callable[[Coroutine[Any, Any, None]], object],
                 key: Callable[[Item], str], what: str) -> None:
        self._handle = handle
        self._spawn = spawn
        self._key = key
        self._what = what
        self._queues: dict[str, deque[Item]] = {}

    def submit(self, item: Item) -> None:
        """Queue the item; starts the conversation's worker if it is idle. Never blocks."""
        key = self._key(item)
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = deque()
            self._spawn(self._work(key, queue))
        queue.append(item)

    async def _work(self, key: str, queue: deque[Item]) -> None:
        try:
            while queue:
                item = queue[0]
                try:
                    await self._handle(item)
                except Exception:
                    log.exception("%s of %s failed", self._what, key)
                queue.popleft()
        finally:
            del self._queues[key]

    def pending(self) -> int:
        """Conversations with queued or running work."""
        return len(self._queues)

    def queued(self) -> int:
        """Items queued or running, over all conversations."""
        return sum(len(queue) for queue in self._queues.values())
