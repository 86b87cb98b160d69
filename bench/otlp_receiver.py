"""An OTLP/HTTP trace receiver for the benchmark, in its own process: ``python -m
bench.otlp_receiver PORT``. ``POST /v1/traces`` is answered 200 with an empty
``ExportTraceServiceResponse`` (zero bytes of protobuf), its body counted, not decoded;
``GET /count`` says how many exports and bytes arrived; ``/healthz`` says ready. A bare asyncio
protocol (bench/bare_http.py)."""

from __future__ import annotations

import asyncio
import json
import sys

from bench.bare_http import HEALTHY, KeepAliveRequests, serve_forever

OK = (b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\n"
      b"Content-Length: 0\r\n\r\n")
received = {"exports": 0, "bytes": 0}


class Receiver(KeepAliveRequests):
    """Counts each export and answers it."""

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


if __name__ == "__main__":
    asyncio.run(serve_forever(Receiver, int(sys.argv[1])))
