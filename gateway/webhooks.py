"""Sends the webhook outbox: each queued event to its endpoint, signed, retried, apart from turns.

The store queues a delivery in the transaction of the change it reports and tells the
dispatcher once it is committed (``Store.webhooks_queued``); a restart finds what was left
(``Store.webhook_pending``). From there:

1. deliveries wait in a heap, by when they are due; at most ``CLOUDYBOT_WEBHOOKS_CONCURRENCY``
   per endpoint are in flight, the rest queue behind them, so a slow or dead endpoint holds up
   nobody but itself, and never a turn (nothing here runs on a turn's path);
2. an attempt POSTs the stored body, signed for this attempt (Standard Webhooks: the same
   ``webhook-id`` every time, the attempt's ``webhook-timestamp``), on a keep-alive client per
   endpoint that connects only to public addresses, checked at each connection (unless
   ``CLOUDYBOT_WEBHOOKS_ALLOW_PRIVATE``), and never follows a redirect;
3. a 2xx within ``CLOUDYBOT_WEBHOOKS_TIMEOUT_SECONDS`` is delivered; anything else is retried
   after the next delay of ``CLOUDYBOT_WEBHOOKS_RETRY_SECONDS`` (±10% jitter, so that many
   failed deliveries do not all come back at once), and fails after the last.

Every outcome is recorded before the next attempt is scheduled: delivery is at least once (a
crash between an endpoint's 2xx and its record sends that event again, with the same
``webhook-id``, which is what receivers de-duplicate on).
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import random
import time
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol

from . import destinations, webhook_signing
from .config import Settings
from .http_client import HTTPClient, HTTPClientError
from .logs import mask_secrets
from .secrets import SecretBox
from .store import DueDelivery, Store, Webhook, WebhookDelivery

log = logging.getLogger(__name__)

MAX_RESPONSE_BYTES = 64 * 1024  # an endpoint's answer is read (to keep the connection) and dropped
ENDPOINT_CACHE_SECONDS = 30.0  # how long an endpoint's URL and secret are trusted unchanged
JITTER = 0.1
DELIVERED, FAILED, PENDING = "delivered", "failed", "pending"


class WebhooksHost(Protocol):
    """What the dispatcher uses of the gateway."""

    settings: Settings
    store: Store
    stopping: asyncio.Event
    clock: Callable[[], float]

    @property
    def secret_box(self) -> SecretBox:
        """Opens the endpoints' sealed secrets."""

    def spawn(self, coroutine: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run background work that shutdown waits for."""


def seal_context(user_id: str) -> str:
    """What binds an endpoint's sealed secret to its owner."""
    return f"webhook:{user_id}"


@dataclass
class _Endpoint:
    """A registered endpoint as the dispatcher holds it: its client, its secret, its load."""

    webhook: Webhook
    secret: str
    client: HTTPClient
    loaded: float
    in_flight: int = 0
    waiting: deque[DueDelivery] | None = None


class WebhookDispatcher:
    """Delivers the webhook outbox (see the module docstring)."""

    def __init__(self, gateway: WebhooksHost) -> None:
        self.gateway = gateway
        self.resolve: destinations.Resolver = destinations.system_resolver  # tests swap it
        self._due: list[DueDelivery] = []
        self._fresh: dict[int, WebhookDelivery] = {}  # just queued: no need to read them back
        self._known: set[int] = set()  # due, waiting or in flight
        self._endpoints: dict[str, _Endpoint] = {}
        self._wake = asyncio.Event()
        self._loading = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None

    # --- what the store and the gateway call ----------------------------------------------
    def queued(self, deliveries: list[WebhookDelivery]) -> None:
        """Deliveries a commit just queued: due now."""
        for delivery in deliveries:
            if delivery.id not in self._known:
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
        """Stop scheduling (attempts in flight finish with the gateway's other work), and
        close the endpoints' connections."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def close(self) -> None:
        """Close every endpoint's connections (after the attempts in flight ended)."""
        endpoints, self._endpoints = self._endpoints, {}
        for endpoint in endpoints.values():
            await endpoint.client.close()

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
                self.gateway.spawn(self._dispatch(heapq.heappop(self._due)))
            self._wake.clear()
            wait = self._due[0].next_attempt - now if self._due else None
            try:
                async with asyncio.timeout(wait):
                    await self._wake.wait()
            except TimeoutError:
                pass

    async def _dispatch(self, due: DueDelivery) -> None:
        """Send ``due`` now, or queue it behind its endpoint's deliveries in flight."""
        try:
            endpoint = await self._endpoint(due.webhook_id)
        except Exception:
            log.exception("webhooks: cannot read endpoint %s; will try again", due.webhook_id)
            self._retry_later(due)
            return
        if endpoint is None:  # deleted, and its deliveries with it
            self._forget(due.id)
            return
        if endpoint.in_flight >= self.gateway.settings.webhooks_concurrency:
            if endpoint.waiting is None:
                endpoint.waiting = deque()
            endpoint.waiting.append(due)
            return
        endpoint.in_flight += 1
        try:
            await self._attempt(endpoint, due)
        except Exception:  # the store failed us: the delivery stays pending, tried again later
            log.exception("webhooks: cannot record delivery %d; will try again", due.id)
            self._retry_later(due)
        finally:
            endpoint.in_flight -= 1
            if endpoint.waiting and not self.gateway.stopping.is_set():
                self.gateway.spawn(self._dispatch(endpoint.waiting.popleft()))

    def _retry_later(self, due: DueDelivery) -> None:
        self._known.discard(due.id)
        self._schedule(due._replace(next_attempt=self.gateway.clock()
                                    + self.gateway.settings.leader_retry_seconds))

    def _forget(self, delivery_id: int) -> None:
        self._known.discard(delivery_id)
        self._fresh.pop(delivery_id, None)

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
        client = HTTPClient(webhook.url, max_idle=gw.settings.webhooks_concurrency,
                            max_body_bytes=MAX_RESPONSE_BYTES,
                            connect_address=self._connect_address)
        self._endpoints[webhook_id] = endpoint = _Endpoint(webhook, opened["secret"], client, now)
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
        delivery = self._fresh.pop(due.id, None) or await gw.store.webhook_delivery(due.id)
        if delivery is None or delivery.state != PENDING:
            self._forget(due.id)
            return
        status, error = await self._post(endpoint, delivery)
        attempts = delivery.attempts + 1
        if status is not None and 200 <= status < 300:
            await gw.store.webhook_attempted(delivery.id, DELIVERED, attempts, status,
                                             gw.clock(), None)
            self._forget(delivery.id)
            return
        reason = error or f"the endpoint answered {status}"
        wait = self.backoff(attempts)
        if wait is None:
            log.error("webhooks: gave up on %s to %s after %d attempts: %s", delivery.event,
                      endpoint.webhook.id, attempts, reason)
            await gw.store.webhook_attempted(delivery.id, FAILED, attempts, status, gw.clock(),
                                             reason)
            self._forget(delivery.id)
            return
        log.warning("webhooks: %s to %s failed (%s); attempt %d in %.0f s", delivery.event,
                    endpoint.webhook.id, reason, attempts + 1, wait)
        due = DueDelivery(gw.clock() + wait, delivery.id, delivery.webhook_id)
        await gw.store.webhook_attempted(delivery.id, PENDING, attempts, status,
                                         due.next_attempt, reason)
        self._known.discard(delivery.id)
        self._schedule(due)

    async def _post(self, endpoint: _Endpoint,
                    delivery: WebhookDelivery) -> tuple[int | None, str | None]:
        """One signed POST: (the status, or None) and what went wrong, if anything."""
        body = delivery.body.encode()
        # The wall clock, not the gateway's: a receiver compares it with its own to refuse
        # replays (standardwebhooks allows five minutes either way).
        headers = webhook_signing.headers(endpoint.secret, delivery.message_id,
                                          int(time.time()), body)
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
