"""An OTLP/HTTP trace receiver on 127.0.0.1, as strict as an OpenTelemetry Collector.

``POST /v1/traces`` takes an ``ExportTraceServiceRequest`` as protobuf
(``application/x-protobuf``, gzip-compressed or not) and answers an
``ExportTraceServiceResponse``; like the Collector's receiver it refuses another content type
(415) and a body that does not decode (400), and any other path or method is a 404/405. It
keeps every span it received, with its resource's and scope's names.
"""

from __future__ import annotations

import asyncio
import gzip
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from gateway.testing.loopback import LoopbackServer

PROTOBUF = "application/x-protobuf"


def plain(value: AnyValue) -> Any:
    """An OTLP attribute value as Python."""
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return tuple(plain(item) for item in value.array_value.values)
    return getattr(value, kind) if kind is not None else None


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as it arrived: ids as hex, attributes as Python values."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    attributes: dict[str, Any]
    service: str
    scope: str
    trace_state: str
    status_code: int


class OtlpCollector:
    """The receiver: ``spans`` in arrival order; ``wait_for`` blocks until a span matches."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.requests = 0
        self.url = ""
        self._arrived = asyncio.Condition()
        self._server = LoopbackServer()

    async def _traces(self, request: web.Request) -> web.Response:
        if request.content_type != PROTOBUF:
            return web.json_response({"code": 3, "message": "unsupported content type"},
                                     status=415)
        body = await request.read()
        try:
            if request.headers.get("Content-Encoding", "").lower() == "gzip":
                body = gzip.decompress(body)
            export = ExportTraceServiceRequest.FromString(body)
        except (DecodeError, OSError, EOFError):
            return web.json_response({"code": 3, "message": "cannot decode the body"},
                                     status=400)
        async with self._arrived:
            self.requests += 1
            self.spans += [span for resource in export.resource_spans
                           for span in _spans(resource)]
            self._arrived.notify_all()
        return web.Response(body=ExportTraceServiceResponse().SerializeToString(),
                            content_type=PROTOBUF)

    async def wait_for(self, name: str, timeout: float = 20.0) -> ReceivedSpan:
        """The first span named ``name``, once it arrived (bounded)."""
        def found() -> ReceivedSpan | None:
            return next((span for span in self.spans if span.name == name), None)
        async with self._arrived:
            await asyncio.wait_for(self._arrived.wait_for(lambda: found() is not None),
                                   timeout)
        span = found()
        assert span is not None
        return span

    async def start(self) -> None:
        """Listen on a free port of 127.0.0.1; ``url`` is the OTLP endpoint's base."""
        app = web.Application()
        app.router.add_post("/v1/traces", self._traces)
        port = await self._server.serve(app)
        self.url = f"http://127.0.0.1:{port}"

    async def close(self) -> None:
        """Stop listening."""
        await self._server.close()


def _spans(resource: Any) -> list[ReceivedSpan]:
    attributes = {item.key: plain(item.value) for item in resource.resource.attributes}
    service = str(attributes.get("service.name", ""))
    return [ReceivedSpan(span.name, span.trace_id.hex(), span.span_id.hex(),
                         span.parent_span_id.hex(), span.kind,
                         {item.key: plain(item.value) for item in span.attributes},
                         service, scope.scope.name, span.trace_state, span.status.code)
            for scope in resource.scope_spans for span in scope.spans]
