"""The bench's bare HTTP endpoints (bench/webhook_receivers.py, bench/otlp_receiver.py): a
plain asyncio protocol, no framework, since they share the machine's cores with the gateway
under test and should cost as little as they can."""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable

HEALTHY = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 16\r\n\r\n"
           b'{"status": "ok"}')


class KeepAliveRequests(asyncio.Protocol, ABC):
    """Reads keep-alive requests (head, then Content-Length bytes) and hands each one's path
    and body length to :meth:`answer`."""

    def __init__(self) -> None:
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            head, found, rest = self.buffer.partition(b"\r\n\r\n")
            if not found:
                return
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if len(rest) < length:
                return
            self.buffer = rest[length:]
            self.answer(head.split(b" ", 2)[1], length)

    @abstractmethod
    def answer(self, path: bytes, length: int) -> None:
        """Answer one request for ``path`` whose body had ``length`` bytes."""


async def serve_forever(protocol: Callable[[], asyncio.Protocol], port: int) -> None:
    """Serve ``protocol`` on 127.0.0.1:``port`` until killed."""
    server = await asyncio.get_running_loop().create_server(protocol, "127.0.0.1", port)
    async with server:
        await server.serve_forever()
