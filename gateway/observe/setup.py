"""Whether tracing is on, read from the standard OpenTelemetry variables, and the tracer.

Tracing is on when ``OTEL_TRACES_EXPORTER`` names exporters (``otlp``, ``console``; ``none``
is off), or, without it, when ``OTEL_EXPORTER_OTLP_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set; ``OTEL_SDK_DISABLED=true`` turns it off
whatever else is set. The OTLP exporter speaks HTTP with protobuf: another
``OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL`` is a configuration error, as is an exporter this
gateway does not ship, or tracing asked for without the ``cloudybot[tracing]`` extra. Deciding
imports nothing of OpenTelemetry; only a tracer that is on does.
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway.base.errors import ConfigError
from gateway.observe.spans import NO_TRACER, Tracer

EXPORTERS = ("otlp", "console")
PROTOCOL = "http/protobuf"
ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
PROTOCOLS = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")


def _set(environ: Mapping[str, str], name: str) -> str:
    return environ.get(name, "").strip()


def wanted_exporters(environ: Mapping[str, str]) -> tuple[str, ...]:
    """The span exporters the variables ask for, in order; () when tracing is off."""
    if _set(environ, "OTEL_SDK_DISABLED").lower() == "true":
        return ()
    listed = _set(environ, "OTEL_TRACES_EXPORTER").lower()
    if listed:
        names = tuple(dict.fromkeys(name.strip() for name in listed.split(",") if name.strip()))
        if "none" in names:
            return ()
        unknown = [name for name in names if name not in EXPORTERS]
        if unknown:
            raise ConfigError(f"OTEL_TRACES_EXPORTER names {', '.join(unknown)}: this gateway "
                              f"exports traces with {' or '.join(EXPORTERS)} (or none)")
    elif any(_set(environ, name) for name in ENDPOINTS):
        names = ("otlp",)
    else:
        return ()
    if "otlp" in names:
        protocol = next((_set(environ, name) for name in PROTOCOLS if _set(environ, name)),
                        PROTOCOL)
        if protocol != PROTOCOL:
            raise ConfigError(f"OTLP protocol {protocol!r}: this gateway exports traces over "
                              f"{PROTOCOL} only (OTEL_EXPORTER_OTLP_PROTOCOL)")
    return names


def tracer_from_environment(environ: Mapping[str, str]) -> Tracer:
    """The tracer the variables ask for: the no-op one when tracing is off."""
    exporters = wanted_exporters(environ)
    if not exporters:
        return NO_TRACER
    try:
        from gateway.observe import otel
    except ImportError as exc:
        raise ConfigError(f"tracing is on (OTEL_* variables) but OpenTelemetry cannot be "
                          f"imported ({exc}): pip install 'cloudybot[tracing]'") from None
    return otel.from_environment(exporters)
