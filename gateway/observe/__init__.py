"""Tracing: OpenTelemetry spans of turns, prompt assembly, provider and tool calls,
summarization, session rotation, channel sends and webhook deliveries, following the GenAI
semantic conventions.

The gateway's code calls only the facade (:mod:`gateway.observe.spans`): with tracing off (the
default) it makes no span, costs a context-variable read and imports no OpenTelemetry package.
:func:`gateway.observe.setup.tracer_from_environment` turns it on from the standard ``OTEL_*``
variables, loading :mod:`gateway.observe.otel` (the SDK and its OTLP/HTTP exporter, the
``cloudybot[tracing]`` extra) only then. :mod:`gateway.observe.genai` names the attributes and
writes a call's messages in the conventions' shape (only with ``CLOUDYBOT_TRACE_CONTENT``).

May import: ``gateway.base``; nothing else of the package.
"""

from __future__ import annotations

from gateway.observe.spans import (
    NO_SPAN,
    NO_TRACER,
    Span,
    TraceContext,
    Tracer,
    current_span,
    span,
)

__all__ = ["NO_SPAN", "NO_TRACER", "Span", "TraceContext", "Tracer", "current_span", "span"]
