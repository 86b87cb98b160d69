"""``python -m bench.traced_serve``: ``cloudybot serve`` exactly as users run it, with tracing
on and every span batched (the SDK's ``BatchSpanProcessor``, as with OTLP) to an exporter that
drops the batch: what tracing costs the gateway itself, without an exporter's encoding or its
network. bench/tracing.py runs it beside plain ``serve`` and ``serve`` exporting over OTLP."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

import gateway.gateway
from gateway.cli.main import main
from gateway.observe import Tracer
from gateway.observe.otel import OtelTracer, service_resource


class Dropping(SpanExporter):
    """Takes every batch and keeps nothing."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Drop the batch."""
        return SpanExportResult.SUCCESS


def dropping_tracer(environ: Mapping[str, str]) -> Tracer:
    """Tracing on, whatever the variables say, its batches dropped."""
    return OtelTracer(TracerProvider(resource=service_resource(), shutdown_on_exit=False),
                      BatchSpanProcessor(Dropping()))


if __name__ == "__main__":
    gateway.gateway.tracer_from_environment = dropping_tracer  # what Gateway.start() asks
    sys.exit(main(["serve", *sys.argv[1:]]))
