"""``loop``: a minimal in-test channel. Its replies land in a list; deliveries can be told to
fail. Register it on the test's plugin manager before the gateway starts (the ``loop``
fixture does)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from gateway import Attachment, Channel, Image, InboundMessage, PluginHost, hookimpl


class LoopChannel(Channel):
    """Replies are recorded as (conversation, message id, text); ``failures[message_id]``
    lists what the next deliveries of that message's reply do: raise the exception, or
    succeed for ``None``."""

    name = "loop"

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, str]] = []
        self.failures: dict[str, list[Exception | None]] = {}
        self.attempts: dict[str, int] = {}
        self.typing_shown = 0
        self.addresses: list[dict[str, Any]] = []  # of every delivered chunk
        self.files: dict[str, bytes] = {}  # pictures by id, for fetch()
        self.fetched: list[str] = []
        self._arrived = asyncio.Condition()
        self.host: PluginHost | None = None  # set when a gateway loads it

    @hookimpl
    def register_channels(self, host: PluginHost) -> list[Channel]:
        """This channel, as a plugin (keeping the host it got, for the tests)."""
        self.host = host
        return [self]

    def message(self, message_id: str, text: str, conversation: str = "loop:c1",
                sender: str = "loop:ada", **extra: Any) -> InboundMessage:
        """An inbound message whose reply comes back here."""
        return InboundMessage(channel="loop", conversation=conversation, sender=sender,
                              message_id=message_id, text=text,
                              address={"conversation": conversation, "id": message_id},
                              **extra)

    async def send(self, address: Mapping[str, Any], text: str) -> None:
        """Record the chunk, or raise the next failure planned for its message."""
        message_id = address["id"]
        self.attempts[message_id] = self.attempts.get(message_id, 0) + 1
        pending = self.failures.get(message_id)
        failure = pending.pop(0) if pending else None
        if failure is not None:
            raise failure
        async with self._arrived:
            self.addresses.append(dict(address))
            self.sent.append((address["conversation"], message_id, text))
            self._arrived.notify_all()

    async def fetch(self, attachment: Attachment, max_bytes: int) -> Image | None:
        """A picture from ``files``; None if unknown or larger than ``max_bytes``."""
        file_id = attachment.ref["id"]
        self.fetched.append(file_id)
        data = self.files.get(file_id)
        if data is None or len(data) > max_bytes:
            return None
        return Image("image/png", data, attachment.name)

    async def typing(self, address: Mapping[str, Any]) -> None:
        """Count typing actions."""
        self.typing_shown += 1

    def texts(self, conversation: str | None = None) -> list[str]:
        """Delivered texts, in order (of one conversation when given)."""
        return [text for conv, _, text in self.sent if conversation in (None, conv)]

    def replies(self) -> list[tuple[str, str]]:
        """(message id, text) of every delivered chunk, in order."""
        return [(message_id, text) for _, message_id, text in self.sent]

    async def wait_for(self, count: int, timeout: float = 5.0) -> list[tuple[str, str]]:
        """Wait until ``count`` chunks were delivered (bounded); return ``replies()``."""
        async with self._arrived:
            await asyncio.wait_for(self._arrived.wait_for(lambda: len(self.sent) >= count),
                                   timeout)
        return self.replies()


class StreamingLoopChannel(LoopChannel):
    """The loop channel showing previews while the model writes (``Channel.stream``)."""

    def __init__(self) -> None:
        super().__init__()
        self.previews: list[tuple[str, str]] = []  # (handle, text) of every preview update

    async def stream(self, address: Mapping[str, Any], text: str, handle: Any) -> Any:
        """Record the preview; its handle names the message it answers."""
        handle = handle or f"preview-of-{address['id']}"
        self.previews.append((handle, text))
        return handle
