"""Webhook endpoints for the benchmark, in their own process: ``python -m bench.webhook_receivers
PORT``. ``/fast`` answers 204 at once, ``/slow`` after SLOW_SECONDS; ``/healthz`` says ready.
A bare asyncio protocol (bench/bare_http.py)."""

from __future__ import annotations

import asyncio
import sys

from bench.bare_http import HEALTHY, KeepAliveRequests, serve_forever

SLOW_SECONDS = 2.0
NO_CONTENT = b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n"


class Endpoint(KeepAliveRequests):
    """``/fast``, ``/slow`` and ``/healthz``."""

    def answer(self, path: bytes, length: int) -> None:
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


if __name__ == "__main__":
    asyncio.run(serve_forever(Endpoint, int(sys.argv[1])))
