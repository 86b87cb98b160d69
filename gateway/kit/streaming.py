"""Showing a channel reply growing while the model writes it.

A :class:`Preview` takes the whole text so far as often as the provider streams and passes it
to ``channel.stream(address, text, handle)`` at most once per interval, never waiting on the
platform in the provider's path. The first call creates the preview (a message, a draft) and
returns its handle; later calls update it. The final reply is not the preview's job: it is
stored and goes through the outbox, whose first chunk carries ``address["preview"]`` so the
channel turns the preview into the final message instead of sending another.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from gateway.interfaces import Channel

log = logging.getLogger(__name__)

PREVIEW_INTERVAL_SECONDS = 1.0  # platforms throttle edits; about one a second per chat is safe


class Preview:
    """The growing reply of one turn in one chat (see the module docstring)."""

    def __init__(self, channel: Channel, address: Mapping[str, Any],
                 interval: float = PREVIEW_INTERVAL_SECONDS) -> None:
        self.channel = channel
        self.address = address
        self.interval = interval
        self.handle: Any = None
        self.updates = 0
        self._latest = ""
        self._shown = ""
        self._closed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def update(self, text: str) -> None:
        """The reply so far. Returns at once; the platform sees it within the interval (the
        first time one interval after the first piece: a reply written faster than that is
        simply sent, with no preview and no extra platform call)."""
        self._latest = text
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def close(self) -> Any:
        """Stop updating (an update in flight is let finish, so its handle is known); return
        the preview's handle, or None if nothing was shown."""
        self._closed.set()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
        return self.handle

    async def _run(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._closed.wait(), self.interval)
                return
            except TimeoutError:
                pass
            text = self._latest
            if text.strip() and text != self._shown:
                try:
                    self.handle = await self.channel.stream(self.address, text, self.handle)
                    self._shown = text
                    self.updates += 1
                except Exception as exc:  # a preview is best effort: the reply still comes
                    log.debug("preview in %s failed: %s", self.channel.name, exc)
