"""Tracing on: the facade's spans, recorded here and handed to OpenTelemetry SDK span
processors (batched, exported with OTLP over HTTP) as finished ``ReadableSpan`` objects.

Imported only when tracing is on (:mod:`gateway.observe.setup`): this module is the one place
that imports OpenTelemetry. The SDK's sampler (``OTEL_TRACES_SAMPLER``), id generator and
resource (``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``) decide what a span is; its span
processors and exporters send it. The gateway keeps the span while it runs, though, rather than
the SDK's own ``Span``, which costs four times as much to start and end (a lock, attribute
validation, self-observability metrics: ~40 µs a span in a turn, measured): a turn makes four
spans, and ``bench/tracing.py`` holds tracing to a tenth of a turn's CPU. Parents are set
explicitly from the facade's current span, so OpenTelemetry's context is never attached and a
span's place in its tree is what the gateway's code said it is. A span's children follow its
sampling decision (as the SDK's parent-based samplers do); a span that starts a trace, or
continues a remote one, asks the sampler.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import (
    Event,
    ReadableSpan,
    SpanProcessor,
    SynchronousMultiSpanProcessor,
    TracerProvider,
)
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SpanExporter,
)
from opentelemetry.sdk.trace.sampling import Decision
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from gateway.observe.spans import (
    CURRENT,
    Attributes,
    AttributeValue,
    Described,
    Kind,
    Scope,
    Span,
    TraceContext,
    Tracer,
    error_type,
)

DEFAULT_SERVICE_NAME = "cloudybot"
SCOPE = InstrumentationScope("cloudybot.gateway")
_KINDS = {"internal": SpanKind.INTERNAL, "server": SpanKind.SERVER, "client": SpanKind.CLIENT,
          "producer": SpanKind.PRODUCER, "consumer": SpanKind.CONSUMER}
_PROPAGATOR = TraceContextTextMapPropagator()
_UNSET = Status(StatusCode.UNSET)


class OtelSpan(Span):
    """A facade span while it runs, and its own ``with`` block (current inside, ended on the
    way out, failed when an exception leaves it unless already marked); once ended, a
    ``ReadableSpan`` for the span processor (unless it was not sampled: ``recording`` False,
    its context still travelling on)."""

    __slots__ = ("_attributes", "_context", "_events", "_failed", "_kind", "_links", "_name",
                 "_parent", "_start", "_status", "_token", "_tracer", "recording")

    def __init__(self, tracer: OtelTracer, name: str, kind: Kind,
                 place: tuple[SpanContext, SpanContext | None, Sequence[Link]]) -> None:
        self._tracer = tracer
        self._name = name
        self._kind = kind
        self._context, self._parent, self._links = place
        self.recording = self._context.trace_flags.sampled
        self._attributes: dict[str, AttributeValue] = {}
        self._events: list[Event] | None = None
        self._status = _UNSET
        self._failed = False
        self._start = 0

    def begin(self, attributes: Described | None, start_ns: int | None) -> OtelSpan:
        """Begin now (or at ``start_ns``) with ``attributes`` (made now if they are a
        function, when the span records); the span, as its scope."""
        if callable(attributes):
            attributes = attributes() if self.recording else None
        if attributes:
            self._attributes.update(attributes)
        self._start = start_ns if start_ns is not None else time.time_ns()
        return self

    def __enter__(self) -> Span:
        self._token = CURRENT.set(self)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: object) -> None:
        CURRENT.reset(self._token)
        if error is not None and not self._failed:
            self.fail(error_type(error))
        self.end()

    def set(self, key: str, value: AttributeValue) -> None:
        """Set one attribute."""
        self._attributes[key] = value

    def update(self, attributes: Attributes) -> None:
        """Set these attributes."""
        self._attributes.update(attributes)

    def event(self, name: str, attributes: Attributes | None = None) -> None:
        """Add an event, timed now."""
        if self.recording:
            if self._events is None:
                self._events = []
            self._events.append(Event(name, attributes, time.time_ns()))

    def count(self, key: str) -> None:
        """Add one to the integer attribute ``key``."""
        counted = self._attributes.get(key, 0)
        self._attributes[key] = (counted if isinstance(counted, int) else 0) + 1

    def fail(self, error_type: str) -> None:
        """``error.type`` and an error status, described by the type alone."""
        self._failed = True
        self._attributes["error.type"] = error_type
        self._status = Status(StatusCode.ERROR, error_type)

    def context(self) -> TraceContext | None:
        """This span's W3C context."""
        context = self._context
        state = context.trace_state.to_header() if context.trace_state else ""
        return TraceContext(f"00-{context.trace_id:032x}-{context.span_id:016x}-"
                            f"{context.trace_flags:02x}", state)

    def child(self, name: str, attributes: Described | None = None,
              kind: Kind = "internal", start_ns: int | None = None) -> Scope:
        """A span inside this one, sampled as this one is."""
        parent = self._context
        context = SpanContext(parent.trace_id, self._tracer.ids.generate_span_id(), False,
                              parent.trace_flags, parent.trace_state)
        return OtelSpan(self._tracer, name, kind, (context, parent, ())).begin(attributes,
                                                                              start_ns)

    def end(self) -> None:
        """Hand the finished span to the span processor (when it is sampled)."""
        if not self.recording:
            return
        self._tracer.processor.on_end(ReadableSpan(
            name=self._name, context=self._context, parent=self._parent,
            resource=self._tracer.resource, attributes=self._attributes,
            events=tuple(self._events or ()), links=tuple(self._links),
            kind=_KINDS[self._kind],
            status=self._status, start_time=self._start, end_time=time.time_ns(),
            instrumentation_scope=SCOPE))


class OtelTracer(Tracer):
    """Spans sampled, identified and described by ``provider``'s sampler, id generator and
    resource (a provider made with its defaults reads them from the ``OTEL_*`` variables),
    and handed to ``processor`` once finished (see the module docstring)."""

    on = True

    def __init__(self, provider: TracerProvider, processor: SpanProcessor) -> None:
        self.sampler = provider.sampler
        self.ids = provider.id_generator
        self.resource = provider.resource
        self.processor = processor
        self._random = TraceFlags.RANDOM_TRACE_ID if self.ids.is_trace_id_random() else 0

    def root(self, name: str, attributes: Attributes | None = None, kind: Kind = "internal",
             origin: TraceContext | None = None) -> Scope:
        """A span of its own work: ``origin``'s child, or a new trace (linked to it)."""
        remote = _PROPAGATOR.extract(origin.headers) if origin is not None else Context()
        found = trace.get_current_span(remote).get_span_context()
        parent = found if found.is_valid and origin is not None and not origin.linked else None
        links = (Link(found),) if found.is_valid and parent is None else ()
        if parent is not None:
            trace_id, flags = parent.trace_id, parent.trace_flags & TraceFlags.RANDOM_TRACE_ID
            context = remote
        else:
            trace_id, flags, context = self.ids.generate_trace_id(), self._random, Context()
        decided = self.sampler.should_sample(context, trace_id, name, _KINDS[kind], attributes,
                                             links)
        if decided.decision is Decision.RECORD_AND_SAMPLE:
            flags |= TraceFlags.SAMPLED
        span_context = SpanContext(trace_id, self.ids.generate_span_id(), False,
                                   TraceFlags(flags), decided.trace_state)
        return OtelSpan(self, name, kind, (span_context, parent, links)).begin(attributes, None)

    async def close(self, timeout: float) -> None:
        """Shut the processor down, exporting what it holds, waiting for that ``timeout``
        seconds at most: a collector that is down (its exporter retrying) never holds up a
        stop. The export goes on meanwhile in a daemon thread, which the process's exit
        ends."""
        closing = threading.Thread(target=self.processor.shutdown,
                                   name="cloudybot-traces-close", daemon=True)
        closing.start()
        await asyncio.to_thread(closing.join, timeout)


def service_resource() -> Resource:
    """The resource of ``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES``, named
    ``cloudybot`` when they name no service."""
    resource = Resource.create()
    named = resource.attributes.get(SERVICE_NAME)
    if not isinstance(named, str) or named.startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
    return resource


def exporter(name: str) -> SpanExporter:
    """The exporter ``name`` of ``OTEL_TRACES_EXPORTER`` (``otlp``: OTLP over HTTP with
    protobuf, configured by the ``OTEL_EXPORTER_OTLP_*`` variables; ``console``: stdout)."""
    if name == "console":
        return ConsoleSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    return OTLPSpanExporter()


def from_environment(exporters: Sequence[str]) -> OtelTracer:
    """A tracer exporting to ``exporters`` in batches (``OTEL_BSP_*``), sampled as
    ``OTEL_TRACES_SAMPLER`` says, for the service of :func:`service_resource`."""
    # The provider only supplies the sampler, ids and resource (no span goes through it, and
    # close() shuts the processors down: no exit handler of its own).
    provider = TracerProvider(resource=service_resource(), shutdown_on_exit=False)
    processors = [BatchSpanProcessor(exporter(name)) for name in exporters]
    if len(processors) == 1:
        return OtelTracer(provider, processors[0])
    several = SynchronousMultiSpanProcessor()  # type: ignore[no-untyped-call]  # (the SDK's)
    for processor in processors:
        several.add_span_processor(processor)
    return OtelTracer(provider, several)
