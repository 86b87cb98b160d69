"""The tracing facade: spans as the gateway's code makes them, free while tracing is off.

Two ways to make a span:

- :meth:`Tracer.root`, for work that starts a span tree of its own (a turn, a channel send, a
  webhook delivery, a message taken into the inbox): its parent is only the
  :class:`TraceContext` it is given (a request's ``traceparent``, a row's stored context),
  never whatever span happens to be current, so work queued by one turn and run by a worker
  task is never filed under that turn by accident;
- :func:`span`, for a step inside the current one (prompt assembly, a provider or tool call):
  a child of the current span, made by that span's tracer, so nothing needs the tracer passed
  down. Outside a recording span it is a shared no-op object.

A :class:`TraceContext` is a W3C Trace Context (``traceparent`` and ``tracestate``) of a span
elsewhere. ``linked`` says how work continues it: as a child (the same process, right after),
or, when it was stored and is taken up later or by another process, in a trace of its own
with a span link back to it.

Spans never hold an exception's message or traceback: a failure is recorded as ``error.type``
(the error's code or class name) and an error status, so that no text of a message, a saved
password or a token can reach a span through an error.
"""

from __future__ import annotations

import contextvars
import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

# What a span attribute may hold (OpenTelemetry's AttributeValue).
AttributeValue = (str | bool | int | float | Sequence[str] | Sequence[bool] | Sequence[int]
                  | Sequence[float])
Attributes = Mapping[str, AttributeValue]
# A child span's attributes, or what makes them: called only when the span records.
Described = Attributes | Callable[[], Attributes]
Kind = Literal["internal", "server", "client", "producer", "consumer"]

# W3C Trace Context: version (not ff), trace id and parent id (not all zeros), flags.
TRACEPARENT = re.compile(
    r"(?!ff)[0-9a-f]{2}-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}")
TRACESTATE_MAX_CHARS = 512
_TRACESTATE = re.compile(r"[\x20-\x7e]*")
_STORED_SEPARATOR = "\n"  # between traceparent and tracestate in a row (never in a header)


@dataclass(frozen=True)
class TraceContext:
    """A W3C Trace Context of a span elsewhere: its ``traceparent`` and ``tracestate``
    headers. ``linked``: continue it in a trace of one's own with a span link to it (work
    taken up later, or by another process), rather than as its child."""

    traceparent: str
    tracestate: str = ""
    linked: bool = False

    @classmethod
    def from_headers(cls, traceparent: str | None,
                     tracestate: str | None = None) -> TraceContext | None:
        """The context of a request's headers; None when ``traceparent`` is absent or not
        well formed (ignored, as the Trace Context specification asks). A ``tracestate``
        that is too long or not printable is dropped, the ``traceparent`` kept."""
        parent = (traceparent or "").strip().lower()
        if not TRACEPARENT.fullmatch(parent):
            return None
        state = (tracestate or "").strip()
        if len(state) > TRACESTATE_MAX_CHARS or not _TRACESTATE.fullmatch(state):
            state = ""
        return cls(parent, state)

    @classmethod
    def stored(cls, text: str | None, linked: bool = True) -> TraceContext | None:
        """A context read back from a row (see :attr:`text`), by default ``linked``: the
        work it started is taken up later or elsewhere. None when there is none."""
        if not text:
            return None
        parent, _, state = text.partition(_STORED_SEPARATOR)
        found = cls.from_headers(parent, state)
        return dataclasses.replace(found, linked=linked) if found is not None else None

    @property
    def text(self) -> str:
        """The context as a row stores it (read back with :meth:`stored`)."""
        if not self.tracestate:
            return self.traceparent
        return f"{self.traceparent}{_STORED_SEPARATOR}{self.tracestate}"

    @property
    def headers(self) -> dict[str, str]:
        """The context as W3C headers (to send it on)."""
        headers = {"traceparent": self.traceparent}
        if self.tracestate:
            headers["tracestate"] = self.tracestate
        return headers


def stored_text(context: TraceContext | None) -> str | None:
    """What a row stores of ``context`` (None for none)."""
    return context.text if context is not None else None


class Scope(Protocol):
    """A span's lifetime as a ``with`` block: entering gives the span (the current one
    inside), leaving ends it (an exception on the way out marks it failed)."""

    def __enter__(self) -> Span:
        """The span, current until the block ends."""

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: object) -> None:
        """End the span."""


class Span:
    """A span as the gateway's code uses it. This one records nothing: tracing is off, or
    the work is outside any recording span. :mod:`gateway.observe.otel` records."""

    __slots__ = ()
    recording = False

    def set(self, key: str, value: AttributeValue) -> None:
        """Set one attribute."""

    def update(self, attributes: Attributes) -> None:
        """Set these attributes."""

    def event(self, name: str, attributes: Attributes | None = None) -> None:
        """Add a timestamped event (a retry, a fallback)."""

    def count(self, key: str) -> None:
        """Add one to the integer attribute ``key`` (0 before the first)."""

    def fail(self, error_type: str) -> None:
        """Mark the span failed: ``error.type`` and an error status (no message)."""

    def context(self) -> TraceContext | None:
        """This span's W3C context (to store or send on); None when it records nothing."""
        return None

    def child(self, name: str, attributes: Described | None = None,
              kind: Kind = "internal", start_ns: int | None = None) -> Scope:
        """A span inside this one, begun now (or at ``start_ns``, epoch nanoseconds, for
        work measured before it was known to be worth a span); ``attributes`` may be a
        function that makes them, called only if the span records."""
        return _NOOP_SCOPE


class _NoopScope:
    """The scope of a span that records nothing: one shared object, no allocation."""

    __slots__ = ()

    def __enter__(self) -> Span:
        return NO_SPAN

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: object) -> None:
        return None


NO_SPAN = Span()
_NOOP_SCOPE = _NoopScope()
# The span the running code is in (copied into the tasks it spawns, like any context variable).
CURRENT: contextvars.ContextVar[Span] = contextvars.ContextVar("cloudybot_span",
                                                                default=NO_SPAN)


def current_span() -> Span:
    """The span the running code is in (one that records nothing when there is none): a
    plugin's provider or tool may add attributes and events to the span of its call."""
    return CURRENT.get()


def span(name: str, attributes: Described | None = None, kind: Kind = "internal",
         start_ns: int | None = None) -> Scope:
    """A span for a step of the current span's work (see :meth:`Span.child`); nothing when
    no span is recording."""
    return CURRENT.get().child(name, attributes, kind, start_ns)


class Tracer:
    """Tracing off: :meth:`root` makes no span. :class:`gateway.observe.otel.OtelTracer`
    records and exports."""

    on = False

    def root(self, name: str, attributes: Attributes | None = None, kind: Kind = "internal",
             origin: TraceContext | None = None) -> Scope:
        """A span that starts work of its own: a child of ``origin`` (a link to it when
        ``origin.linked``), else a new trace; never of the current span."""
        return _NOOP_SCOPE

    async def close(self, timeout: float) -> None:
        """Export what is left (within ``timeout`` seconds) and stop exporting."""


NO_TRACER = Tracer()


def error_type(error: BaseException) -> str:
    """What a span records of a failure: the gateway error's code, else the class name."""
    code = getattr(error, "code", None)
    return code if isinstance(code, str) and code else type(error).__name__
