"""Sends the webhook outbox: each queued event to its endpoint, signed, retried, apart from turns.

The store queues a delivery in the transaction of the change it reports and tells the
dispatcher once it is committed (``Store.webhooks_queued``); a restart finds what was left
(``Store.webhook_pending``). From there:

1. deliveries wait in a heap, by when they are due; at most ``CLOUDYBOT_WEBHOOKS_CONCURRENCY``
   per endpoint are in flight, the rest queue behind them, so a slow or dead endpoint holds up
   nobody but itself, and never a turn (nothing here runs on a turn's path). An endpoint whose
   attempt failed is left alone until that delivery's retry is due: what is queued for it
   meanwhile waits behind that probe (still pending, its attempts not counted) instead of
   knocking on a door known to be shut, once per event;
2. an attempt POSTs the stored body, signed for this attempt (Standard Webhooks: the same
   ``webhook-id`` every time, the attempt's ``webhook-timestamp``), on a keep-alive client per
   endpoint that connects only to public addresses, checked at each connection (unless
   ``CLOUDYBOT_WEBHOOKS_ALLOW_PRIVATE``), and never follows a redirect;
3. a 2xx within ``CLOUDYBOT_WEBHOOKS_TIMEOUT_SECONDS`` is delivered; anything else is retried
   after the next delay of ``CLOUDYBOT_WEBHOOKS_RETRY_SECONDS`` (±10% jitter, so that many
   failed deliveries do not all come back at once), and fails after the last.

Outcomes are recorded in batches (one transaction for all that ended meanwhile): delivery is
at least once (a crash between an endpoint's 2xx and its record sends that event again, with
the same ``webhook-id``, which is what receivers de-duplicate on).

Each attempt has a span (``POST webhook``), the child of the span whose commit queued the event
(a turn's) when this process queued it, and carries its W3C ``traceparent`` to the endpoint.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import random
import time
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field, replace
from typing import Any, Protocol
from urllib.parse import urlsplit

from gateway.accounts.secrets import SecretBox
from gateway.base.logs import mask_secrets
from gateway.base.metrics import Metrics
from gateway.config.settings import Settings
from gateway.net import destinations
from gateway.net.http_client import Connecting, HTTPClient, HTTPClientError, Limits
from gateway.observe import Span, TraceContext, Tracer, current_span
from gateway.store import DueDelivery, Store, Webhook, WebhookAttempt, WebhookDelivery
from gateway.webhooks import signing as webhook_signing

log = logging.getLogger(__name__)

MAX_RESPONSE_BYTES = 64 * 1024  # an endpoint's answer is read (to keep the connection) and dropped
ENDPOINT_CACHE_SECONDS = 30.0  # how long an endpoint's URL and secret are trusted unchanged
JITTER = 0.1
# Outcomes wait this long to be recorded together: a write per delivery would cost more than
# the delivery (a crash in between sends those deliveries again: at least once, as ever).
RECORD_EVERY_SECONDS = 0.1
KEPT_BODIES = 256  # per endpoint, bodies of deliveries waiting kept in memory
DELIVERED, FAILED, PENDING = "delivered", "failed", "pending"
_OUTCOMES = {DELIVERED: "delivered", FAILED: "failed", PENDING: "retried"}  # metric labels


class WebhooksHost(Protocol):
    """What the dispatcher uses of the gateway."""

    settings: Settings
    store: Store
    stopping: asyncio.Event
    clock: Callable[[], float]
    metrics: Metrics
    tracer: Tracer

    @property
    def secret_box(self) -> SecretBox:
        """Opens the endpoints' sealed secrets."""

    def spawn(self, coroutine: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run background work that shutdown waits for."""

    async def pause(self, seconds: float) -> None:
        """Sleep, or less if the gateway begins to stop."""


def attempt_attributes(webhook: Webhook, delivery: WebhookDelivery) -> dict[str, str | int]:
    """An attempt's span: the endpoint's host (never its path or query: they may hold a
    token), the endpoint, the event and which attempt."""
    url = urlsplit(webhook.url)
    return {"http.request.method": "POST", "server.address": url.hostname or "",
            "server.port": url.port or (443 if url.scheme == "https" else 80),
            "cloudybot.webhook.id": webhook.id, "cloudybot.webhook.event": delivery.event,
            "cloudybot.delivery.attempt": delivery.attempts + 1}


def _traced_outcome(span: Span, status: int | None, error: str | None) -> None:
    """What the endpoint answered, on the attempt's span; anything but a 2xx fails it."""
    if status is not None:
        span.set("http.response.status_code", status)
        if not 200 <= status < 300:
            span.fail(str(status))
    elif error is not None:
        span.fail("refused" if error.startswith("refused") else
                  "timeout" if error.startswith("no answer") else "connection")


def seal_context(user_id: str) -> str:
    """What binds an endpoint's sealed secret to its owner."""
    return f"webhook:{user_id}"


@dataclass
class _Endpoint:
    """A registered endpoint as the dispatcher holds it: its client and secret, what it has
    in flight, what waits for it, and until when it is left alone after a failure."""

    webhook: Webhook
    key: bytes  # the secret's HMAC key
    client: HTTPClient
    loaded: float
    in_flight: int = 0
    waiting: deque[DueDelivery] = field(default_factory=deque)
    resting_until: float = 0.0  # after a failed attempt: when its retry (the probe) is due


class WebhookDispatcher:
    """Delivers the webhook outbox (see the module docstring)."""

    def __init__(self, gateway: WebhooksHost) -> None:
        self.gateway = gateway
        self.resolve: destinations.Resolver = destinations.system_resolver  # tests swap it
        self._due: list[DueDelivery] = []
        # Deliveries held in memory: just queued (no need to read them back) or to be retried.
        self._fresh: dict[int, WebhookDelivery] = {}
        self._known: set[int] = set()  # due, waiting or in flight
        self._endpoints: dict[str, _Endpoint] = {}
        self._wake = asyncio.Event()
        self._loading = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._outcomes: list[WebhookAttempt] = []
        self._recording: asyncio.Task[None] | None = None
        # The trace context of the work that queued each delivery held here (a turn's).
        self._traces: dict[int, TraceContext] = {}

    # --- what the store and the gateway call ----------------------------------------------
    def queued(self, deliveries: list[WebhookDelivery]) -> None:
        """Deliveries a commit just queued: due now (their attempts' spans continue the
        trace of the span the commit was made in)."""
        trace = current_span().context()
        for delivery in deliveries:
            if delivery.id not in self._known:
                if trace is not None:
                    self._traces[delivery.id] = trace
                self._fresh[delivery.id] = delivery
                self._schedule(DueDelivery(delivery.next_attempt, delivery.id,
                                           delivery.webhook_id))

    async def recover(self) -> int:
        """Schedule the pending deliveries a previous run (or a process that died) left;
        return how many were new here."""
        found = 0
        for due in await self.gateway.store.webhook_pending():
            if due.id not in self._known:
                self._schedule(due)
                found += 1
        if found:
            log.info("webhooks: %d delivery(ies) left pending by a stopped run to send", found)
        return found

    def start(self) -> None:
        """Begin sending (the gateway has started)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Stop scheduling (attempts in flight finish with the gateway's other work)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def close(self) -> None:
        """Record the outcomes not recorded yet, then close every endpoint's connections
        (after the attempts in flight ended)."""
        if self._recording is not None:
            await asyncio.gather(self._recording, return_exceptions=True)
        if self._outcomes:
            await self._record_now()
        endpoints, self._endpoints = self._endpoints, {}
        for endpoint in endpoints.values():
            await endpoint.client.close()

    async def endpoint_deleted(self, webhook_id: str) -> None:
        """An endpoint was deleted here: forget it at once (its deliveries went with it)."""
        endpoint = self._endpoints.pop(webhook_id, None)
        if endpoint is not None:
            await endpoint.client.close()

    def idle(self) -> bool:
        """Nothing to send and every outcome recorded (a test waits for it)."""
        return not self._known and not self._outcomes and self._recording is None

    def poke(self) -> None:
        """Look at the schedule again now (the clock moved: a test's, or the system's)."""
        self._wake.set()

    def backoff(self, attempts: int) -> float | None:
        """Seconds to wait after failed attempt number ``attempts``, with jitter; None when the
        schedule is spent."""
        schedule = self.gateway.settings.webhooks_retry_seconds
        if attempts > len(schedule):
            return None
        return float(schedule[attempts - 1] * random.uniform(1 - JITTER, 1 + JITTER))

    # --- scheduling ----------------------------------------------------------------------
    def _schedule(self, due: DueDelivery) -> None:
        self._known.add(due.id)
        heapq.heappush(self._due, due)
        self._wake.set()

    async def _run(self) -> None:
        gw = self.gateway
        while not gw.stopping.is_set():
            now = gw.clock()
            while self._due and self._due[0].next_attempt <= now:
                due = heapq.heappop(self._due)
                endpoint = self._endpoints.get(due.webhook_id)
                if endpoint is not None and now - endpoint.loaded < ENDPOINT_CACHE_SECONDS:
                    self._admit(endpoint, due, now)
                else:
                    gw.spawn(self._load_then_admit(due))
            self._wake.clear()
            wait = self._due[0].next_attempt - now if self._due else None
            try:
                async with asyncio.timeout(wait):
                    await self._wake.wait()
            except TimeoutError:
                pass

    async def _load_then_admit(self, due: DueDelivery) -> None:
        try:
            endpoint = await self._endpoint(due.webhook_id)
        except Exception:
            log.exception("webhooks: cannot read endpoint %s; will try again", due.webhook_id)
            self._later(due, self.gateway.settings.leader_retry_seconds)
            return
        if endpoint is None:  # deleted, and its deliveries with it
            self._forget(due.id)
            return
        self._admit(endpoint, due, self.gateway.clock())

    def _admit(self, endpoint: _Endpoint, due: DueDelivery, now: float) -> None:
        """Send ``due`` now, or let it wait behind the endpoint's deliveries in flight, or
        behind the probe of an endpoint resting after a failure."""
        if (endpoint.resting_until > now and due.next_attempt < endpoint.resting_until) \
                or endpoint.in_flight >= self.gateway.settings.webhooks_concurrency:
            endpoint.waiting.append(due)
            fresh = self._fresh.get(due.id)
            if len(endpoint.waiting) > KEPT_BODIES and fresh is not None and not fresh.attempts:
                # A long backlog is read back when its turn comes (one tried already is kept:
                # its attempts may not be recorded yet).
                del self._fresh[due.id]
            return
        endpoint.in_flight += 1
        self.gateway.spawn(self._attempt_then_next(endpoint, due))

    def _release(self, endpoint: _Endpoint) -> None:
        """Let waiting deliveries go, as far as the endpoint's state allows."""
        now = self.gateway.clock()
        while (endpoint.waiting and endpoint.resting_until <= now
               and endpoint.in_flight < self.gateway.settings.webhooks_concurrency
               and not self.gateway.stopping.is_set()):
            self._admit(endpoint, endpoint.waiting.popleft(), now)

    async def _attempt_then_next(self, endpoint: _Endpoint, due: DueDelivery) -> None:
        try:
            await self._attempt(endpoint, due)
        except Exception:  # the store failed us: the delivery stays pending, tried again later
            log.exception("webhooks: cannot send delivery %d; will try again", due.id)
            self._later(due, self.gateway.settings.leader_retry_seconds)
        finally:
            endpoint.in_flight -= 1
            self._release(endpoint)

    def _later(self, due: DueDelivery, seconds: float) -> None:
        self._known.discard(due.id)
        self._schedule(due._replace(next_attempt=self.gateway.clock() + seconds))

    def _forget(self, delivery_id: int) -> None:
        self._known.discard(delivery_id)
        self._fresh.pop(delivery_id, None)
        self._traces.pop(delivery_id, None)

    async def _endpoint(self, webhook_id: str) -> _Endpoint | None:
        """The endpoint, read again once its cached copy is ENDPOINT_CACHE_SECONDS old (another
        process may have deleted it); None if it is gone."""
        endpoint = self._endpoints.get(webhook_id)
        if endpoint is not None and self.gateway.clock() - endpoint.loaded < ENDPOINT_CACHE_SECONDS:
            return endpoint
        async with self._loading:  # one read per endpoint, however many deliveries ask
            return await self._load_endpoint(webhook_id)

    async def _load_endpoint(self, webhook_id: str) -> _Endpoint | None:
        gw = self.gateway
        now = gw.clock()
        endpoint = self._endpoints.get(webhook_id)
        if endpoint is not None and now - endpoint.loaded < ENDPOINT_CACHE_SECONDS:
            return endpoint
        webhook = await gw.store.get_webhook(webhook_id)
        if webhook is None:
            if endpoint is not None:
                del self._endpoints[webhook_id]
                await endpoint.client.close()
            return None
        if endpoint is not None:  # endpoints never change: only their deletion matters
            endpoint.loaded = now
            return endpoint
        opened = gw.secret_box.open(webhook.secret, seal_context(webhook.user_id))
        if opened is None:
            log.error("webhooks: the secret of endpoint %s does not open with this key; its "
                      "deliveries wait", webhook_id)
            return None
        client = HTTPClient(webhook.url, limits=Limits(
            idle_connections=gw.settings.webhooks_concurrency, body=MAX_RESPONSE_BYTES),
            connecting=Connecting(address=self._connect_address))
        self._endpoints[webhook_id] = endpoint = _Endpoint(
            webhook, webhook_signing.signing_key(opened["secret"]), client, now)
        return endpoint

    async def _connect_address(self, host: str, port: int) -> str:
        """The address a new connection goes to: the first of the host's, all of them
        public unless private ones are allowed (checked now, at each connection)."""
        found = await destinations.addresses(
            host, port, self.gateway.settings.webhooks_allow_private, self.resolve)
        return found[0]

    # --- one attempt ---------------------------------------------------------------------
    async def _attempt(self, endpoint: _Endpoint, due: DueDelivery) -> None:
        gw = self.gateway
        held = self._fresh.pop(due.id, None)
        delivery = held if held is not None and not held.attempts \
            else await gw.store.webhook_delivery(due.id)  # a retry: is it still wanted?
        if delivery is not None and held is not None and held.attempts > delivery.attempts:
            delivery = held  # its last outcome is not recorded yet
        if delivery is None or delivery.state != PENDING:
            self._forget(due.id)
            return
        tracer = self.gateway.tracer
        with tracer.root("POST webhook", attempt_attributes(endpoint.webhook, delivery)
                         if tracer.on else None, kind="client",
                         origin=self._traces.get(delivery.id)) as span:
            status, error = await self._post(endpoint, delivery, span)
            if span.recording:
                _traced_outcome(span, status, error)
        attempts = delivery.attempts + 1
        now = gw.clock()
        if status is not None and 200 <= status < 300:
            if endpoint.resting_until:
                log.info("webhooks: endpoint %s answers again", endpoint.webhook.id)
                endpoint.resting_until = 0.0
            self._record(WebhookAttempt(delivery.id, DELIVERED, attempts, status, now, None))
            self._forget(delivery.id)
            return
        reason = error or f"the endpoint answered {status}"
        wait = self.backoff(attempts)
        if wait is None:
            log.error("webhooks: gave up on %s %s to %s after %d attempts: %s", delivery.event,
                      delivery.message_id, endpoint.webhook.id, attempts, reason)
            endpoint.resting_until = 0.0  # what waited behind it gets its own tries
            self._record(WebhookAttempt(delivery.id, FAILED, attempts, status, now, reason))
            self._forget(delivery.id)
            return
        retry = now + wait
        if not endpoint.resting_until:
            log.warning("webhooks: endpoint %s failed (%s); its deliveries wait %.0f s for the "
                        "next attempt", endpoint.webhook.id, reason, wait)
        endpoint.resting_until = max(endpoint.resting_until, retry) if endpoint.resting_until \
            else retry
        self._record(WebhookAttempt(delivery.id, PENDING, attempts, status, retry, reason))
        # Held here until retried: the store may not have its attempts yet.
        self._fresh[delivery.id] = replace(delivery, attempts=attempts)
        self._known.discard(delivery.id)
        self._schedule(DueDelivery(retry, delivery.id, delivery.webhook_id))

    def _record(self, outcome: WebhookAttempt) -> None:
        """Queue an outcome for the store: RECORD_EVERY_SECONDS after the first, one
        transaction records all those queued meanwhile."""
        self._outcomes.append(outcome)
        self.gateway.metrics.webhook_deliveries.labels(_OUTCOMES[outcome.state]).inc()
        if self._recording is None:
            self._recording = self.gateway.spawn(self._record_all())

    async def _record_all(self) -> None:
        try:
            await self.gateway.pause(RECORD_EVERY_SECONDS)  # cut short when stopping
            while self._outcomes:
                await self._record_now()
        finally:
            self._recording = None

    async def _record_now(self) -> None:
        batch, self._outcomes = self._outcomes, []
        try:
            await self.gateway.store.webhook_attempts(batch)
        except Exception:
            # Not recorded: those delivered will be sent again after a restart (at least
            # once); those to retry are retried from memory meanwhile.
            log.exception("webhooks: cannot record %d delivery outcome(s)", len(batch))

    async def _post(self, endpoint: _Endpoint, delivery: WebhookDelivery,
                    span: Span) -> tuple[int | None, str | None]:
        """One signed POST (carrying ``span``'s trace context): (the status, or None) and
        what went wrong, if anything."""
        body = delivery.body.encode()
        # The wall clock, not the gateway's: a receiver compares it with its own to refuse
        # replays (standardwebhooks allows five minutes either way).
        headers = webhook_signing.headers(endpoint.key, delivery.message_id,
                                          int(time.time()), body)
        trace = span.context()
        if trace is not None:
            headers.update(trace.headers)
        try:
            async with asyncio.timeout(self.gateway.settings.webhooks_timeout_seconds):
                async with endpoint.client.post("", body, headers) as response:
                    await response.read()
                    return response.status, None
        except destinations.DestinationRefused as exc:
            return None, f"refused: {exc}"
        except TimeoutError:
            return None, (f"no answer within {self.gateway.settings.webhooks_timeout_seconds:g}"
                          " s")
        except HTTPClientError as exc:
            return None, mask_secrets(str(exc))[:300]
