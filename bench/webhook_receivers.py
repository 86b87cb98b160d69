"""Webhook endpoints for the benchmark, in their own process: ``python -m bench.webhook_receivers
PORT``. ``/fast`` answers 204 at once, ``/slow`` after SLOW_SECONDS; ``/healthz`` says ready.
A bare asyncio protocol (no framework): the endpoints share the machine's cores with the
gateway under test, so they should cost as little as they can."""

from __future__ import annotations

import asyncio
import sys

SLOW_SECONDS = 2.0
NO_CONTENT = b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n"
HEALTHY = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 16\r\n\r\n"
           b'{"status": "ok"}')


class Endpoint(asyncio.Protocol):
    """Reads keep-alive requests (head, then Content-Length bytes) and answers each."""

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
            path = head.split(b" ", 2)[1]
            self.answer(path)

    def answer(self, path: bytes) -> None:
        assert self.transport is not None
        if path == b"/healthz":
            self.transport.write(HEALTHY)
        elif path == b"/slow":
            asyncio.get_running_loop().call_later(SLOW_SECONDS, self.late)
        else:
            self.transport.write(NO_CONTENT)

    def late(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(NO_CONTENT)


async def main(port: int) -> None:
    """Serve until killed."""
    server = await asyncio.get_running_loop().create_server(Endpoint, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
