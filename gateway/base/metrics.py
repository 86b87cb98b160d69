"""The gateway's Prometheus metrics (SPEC §17), in a registry of its own.

Each gateway has its own :class:`Metrics` (tests run several in one process); the turn path
records into it with plain counter and histogram calls (under a microsecond each: the series it
labels look their children up once, see :class:`Labelled`). The depths of the durable inbox and
outbox are read from the store when ``GET /metrics`` is scraped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Generic, Protocol, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics import MetricWrapperBase

CONTENT_TYPE = CONTENT_TYPE_LATEST
# From a fraction of a millisecond (a chat command, a cached answer) to a minute (the provider's
# timeout): a gateway's turns and provider calls fall in between.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                   5.0, 10.0, 30.0, 60.0)


Series = TypeVar("Series", bound=MetricWrapperBase)


class Labelled(Generic[Series]):
    """A labelled series whose child for each set of label values is looked up once.

    ``prometheus_client``'s ``labels()`` checks and converts the values and takes a lock at
    every call (~0.8 µs, several times a turn); a dict lookup costs a tenth of that. Only for
    series that are never cleared: a child removed from its series would go on counting here.
    """

    def __init__(self, series: Series) -> None:
        self.series = series
        self._children: dict[tuple[str, ...], Series] = {}

    def labels(self, *values: str) -> Series:
        """The child series for ``values`` (created the first time)."""
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = self.series.labels(*values)
        return child


class Billed(Protocol):
    """What metrics read of a charge (a :class:`gateway.store.Charge`)."""

    @property
    def kind(self) -> str: ...
    @property
    def prompt_tokens(self) -> int: ...
    @property
    def completion_tokens(self) -> int: ...
    @property
    def credits(self) -> int: ...


class Metrics:
    """Every series the gateway exports."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.turn_seconds = Labelled(Histogram(
            "cloudybot_turn_seconds", "Time to answer a turn, lock wait included, by channel",
            ["channel"], buckets=LATENCY_BUCKETS, registry=r))
        self.turn_errors = Labelled(Counter(
            "cloudybot_turn_errors_total", "Turns that failed, by channel and HTTP status",
            ["channel", "status"], registry=r))
        self.provider_seconds = Labelled(Histogram(
            "cloudybot_provider_seconds", "Time of one LLM provider call, by provider",
            ["provider"], buckets=LATENCY_BUCKETS, registry=r))
        self.provider_errors = Labelled(Counter(
            "cloudybot_provider_errors_total", "LLM provider calls that failed, by HTTP status "
            "the gateway answered", ["provider", "status"], registry=r))
        self.provider_fallbacks = Labelled(Counter(
            "cloudybot_provider_fallbacks_total", "Calls passed from one provider of the "
            "fallback chain (provider/model) to the next, by reason (the HTTP status, timeout, "
            "connection, circuit_open)", ["from", "to", "reason"], registry=r))
        self.provider_circuit = Labelled(Gauge(
            "cloudybot_provider_circuit_state", "Circuit breaker of each provider of the chain "
            "(provider/model): 0 closed, 1 open (skipped), 2 half-open (one call probes it)",
            ["provider"], registry=r))
        self.tokens = Labelled(Counter(
            "cloudybot_tokens_total", "Tokens billed, by kind of call and direction",
            ["kind", "direction"], registry=r))
        self.credits = Labelled(Counter(
            "cloudybot_credits_total", "Credits charged, by kind of call", ["kind"], registry=r))
        self.summarizations = Labelled(Counter(
            "cloudybot_summarizations_total", "Summarizations, by outcome (applied, "
            "discarded: the thread changed meanwhile, postponed: no credits)", ["outcome"],
            registry=r))
        self.rotations = Labelled(Counter(
            "cloudybot_session_rotations_total", "Agent sessions that ended, by reason",
            ["reason"], registry=r))
        self.connections_refused = Counter(
            "cloudybot_connections_refused_total", "Connections answered 503 because their client "
            "address already held max_connections_per_address", registry=r)
        self.accept_paused = Counter(
            "cloudybot_accept_paused_total", "Times the server stopped accepting connections "
            "for a second because the process had no file descriptor (or memory) left",
            registry=r)
        self.inbox_depth = Gauge("cloudybot_inbox_depth",
                                 "Channel messages committed and not answered yet", ["channel"],
                                 registry=r)
        self.outbox_depth = Gauge("cloudybot_outbox_depth",
                                  "Replies waiting for their platform", ["channel"], registry=r)
        self.webhook_deliveries = Labelled(Counter(
            "cloudybot_webhook_deliveries_total", "Webhook delivery attempts, by outcome "
            "(delivered, retried, failed)", ["outcome"], registry=r))
        self.event_streams = Gauge("cloudybot_event_streams_open",
                                   "Server-Sent Event streams open (/chat, /v1)", registry=r)

    def charged(self, charges: Iterable[Billed]) -> None:
        """Tokens and credits of calls just billed."""
        for charge in charges:
            if charge.prompt_tokens:
                self.tokens.labels(charge.kind, "prompt").inc(charge.prompt_tokens)
            if charge.completion_tokens:
                self.tokens.labels(charge.kind, "completion").inc(charge.completion_tokens)
            if charge.credits > 0:
                self.credits.labels(charge.kind).inc(charge.credits)

    def set_depths(self, depths: Mapping[str, tuple[int, int]]) -> None:
        """The inbox and outbox depth of each channel (``{channel: (inbox, outbox)}``);
        channels no longer listed drop to zero."""
        for gauge in (self.inbox_depth, self.outbox_depth):
            gauge.clear()
        for channel, (inbox, outbox) in depths.items():
            self.inbox_depth.labels(channel).set(inbox)
            self.outbox_depth.labels(channel).set(outbox)

    def exposition(self) -> bytes:
        """The registry in Prometheus text format."""
        return bytes(generate_latest(self.registry))
