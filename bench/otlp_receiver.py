"""An OTLP/HTTP trace receiver for the benchmark, in its own process: ``python -m
bench.otlp_receiver PORT``. ``POST /v1/traces`` is answered 200 with an empty
``ExportTraceServiceResponse`` (zero bytes of protobuf), its body counted, not decoded;
``GET /count`` says how many exports and bytes arrived; ``/healthz`` says ready. A bare asyncio
protocol, like bench/webhook_receivers.py: it shares the machine's cores with the gateway under
test, so it costs as little as it can."""

from __future__ import annotations

import asyncio
import json
import sys

OK = (b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\n"
      b"Content-Length: 0\r\n\r\n")
HEALTHY = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 16\r\n\r\n"
           b'{"status": "ok"}')
received = {"exports": 0, "bytes": 0}


class Receiver(asyncio.Protocol):
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
            self.answer(head.split(b" ", 2)[1], length)

    def answer(self, path: bytes, length: int) -> None:
        assert self.transport is not None
        if path == b"/v1/traces":
            received["exports"] += 1
            received["bytes"] += length
            self.transport.write(OK)
        elif path == b"/count":
            body = json.dumps(received).encode()
            self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                 b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        else:
            self.transport.write(HEALTHY)


async def main(port: int) -> None:
    """Serve until killed."""
    server = await asyncio.get_running_loop().create_server(Receiver, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
