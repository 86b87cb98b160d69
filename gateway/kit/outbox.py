"""The durable outbox: every stored channel reply is retried until its platform accepts it.

A reply is written to the outbox in the same transaction that marks its inbound message
answered (:mod:`gateway.inbound`). From there, per conversation and in order:

1. the reply is split into chunks of the channel's ``max_chars``;
2. each chunk goes to ``channel.send(address, chunk)``; a chunk that arrived is recorded and
   never sent again;
3. a passing failure (network, 429, 5xx: any exception but :class:`DeliveryFailed`) is retried
   with exponential backoff and jitter (``Retry-After`` honoured) for
   ``CLOUDYBOT_DELIVERY_RETRY_HOURS``, across restarts; a permanent refusal
   (:class:`DeliveryFailed`) ends it at once. Either end is recorded with its reason.

Delivered replies are deleted from the outbox; failed ones stay, for ``cloudybot deliveries``
and the thread's API answer. Delivery is at least once: a send that timed out after the platform
took it, or a crash between the platform's "OK" and our record of it, sends that chunk again.

Each ``channel.send`` has a span (``send {channel}``): the child of the turn that wrote the
reply when this process queued it, or, when the reply is taken up from the outbox after a
restart or from a process that died, in a trace of its own with a span link to that turn (its
row keeps the turn's trace context).
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any, Protocol

from gateway.base.errors import one_line
from gateway.base.logs import mask_secrets
from gateway.base.text import split_text
from gateway.interfaces import Channel, DeliveryFailed, DeliveryRetry
from gateway.kit.queues import ConversationQueues, KitHost
from gateway.observe import TraceContext
from gateway.plugins.hooks import PluginHooks
from gateway.store import Delivery, InboxEntry

log = logging.getLogger(__name__)

FIRST_BACKOFF_SECONDS = 1.0
MAX_BACKOFF_SECONDS = 600.0


def send_attributes(delivery: Delivery,
                    progress: tuple[int, int, int]) -> dict[str, str | int]:
    """A send's span: the channel, conversation and message answered, which chunk of how
    many, which attempt (``progress``: chunks sent before, chunks, failed attempts); never
    the reply's words."""
    sent, chunks, attempts = progress
    return {"cloudybot.channel": delivery.channel, "messaging.system": delivery.channel,
            "messaging.operation.name": "send", "messaging.operation.type": "send",
            "messaging.destination.name": delivery.conversation,
            "messaging.message.id": delivery.message_id,
            "cloudybot.delivery.chunk": sent + 1,
            "cloudybot.delivery.chunks": chunks,
            "cloudybot.delivery.attempt": attempts + 1}


def describe(error: BaseException) -> str:
    """A one-line reason for the delivery record: no traceback, no bot token."""
    return mask_secrets(one_line(error))[:300]


class OutboxHost(KitHost, Protocol):
    """What the outbox uses of the gateway, and nothing more."""

    hooks: PluginHooks


class Outbox:
    """Delivers stored replies through their channels (see the module docstring)."""

    def __init__(self, gateway: OutboxHost) -> None:
        self.gateway = gateway
        self.queues: ConversationQueues[Delivery] = ConversationQueues(
            self._deliver, gateway.spawn, key=lambda d: d.conversation, what="delivery")
        self.backoff_seconds = FIRST_BACKOFF_SECONDS
        self.max_backoff_seconds = MAX_BACKOFF_SECONDS
        # How a delivery waits for its next attempt (cut short when the gateway stops); tests
        # swap in one that moves their clock.
        self.wait: Callable[[float], Awaitable[None]] = gateway.pause
        self._open = asyncio.Event()
        # The trace each reply queued by this process continues, as its child (by channel and
        # message id); one taken up from the outbox links to its row's instead.
        self._parents: dict[tuple[str, str], TraceContext] = {}

    def queue(self, entry: InboxEntry, text: str) -> None:
        """Deliver ``text``, just committed to the outbox under ``entry``'s channel and id
        (the message it answers, or a plugin's own message's)."""
        now = self.gateway.clock()
        parent = TraceContext.stored(entry.trace, linked=False)
        if parent is not None:
            self._parents[(entry.channel, entry.message_id)] = parent
        self.submit(Delivery(
            id=0, channel=entry.channel, message_id=entry.message_id,
            conversation=entry.conversation, address=entry.address, text=text,
            max_chars=entry.max_chars, state="pending", chunks_sent=0, attempts=0,
            next_attempt=now, created=now, last_error=None, trace=entry.trace))

    def submit(self, delivery: Delivery) -> None:
        """Deliver ``delivery`` (already committed to the outbox) after those queued before it
        in its conversation."""
        self.queues.submit(delivery)

    async def recover(self) -> int:
        """Queue every reply a previous run (or, with several processes, one that died) left
        undelivered; return how many. They are sent once :meth:`open` is called (when the
        channels have started)."""
        pending = await self.gateway.store.pending_deliveries()
        for delivery in pending:
            self.submit(delivery)
        if pending:
            log.info("outbox: %d reply(ies) left undelivered by a stopped run to deliver",
                     len(pending))
        return len(pending)

    def open(self) -> None:
        """The channels are running: deliveries may go out."""
        self._open.set()

    def backoff(self, attempts: int) -> float:
        """Seconds before attempt ``attempts + 1``: doubling, capped, with jitter (half to all
        of it), so that many stalled replies do not all retry at the same moment."""
        ceiling = min(self.max_backoff_seconds, self.backoff_seconds * 2 ** (attempts - 1))
        return float(ceiling * random.uniform(0.5, 1.0))

    async def _deliver(self, delivery: Delivery) -> None:
        try:
            await self._deliver_chunks(delivery)
        finally:
            self._parents.pop((delivery.channel, delivery.message_id), None)

    async def _send(self, channel: Channel, delivery: Delivery,
                    chunk: tuple[Mapping[str, Any], str], progress: tuple[int, int, int]) -> None:
        """One chunk to its platform, in its span (``progress``: the chunks sent before it,
        how many there are, the failed attempts so far); what ``channel.send`` raises fails
        the span."""
        tracer = self.gateway.tracer
        origin = self._parents.get((delivery.channel, delivery.message_id)) \
            or TraceContext.stored(delivery.trace)
        with tracer.root(f"send {delivery.channel}",
                         send_attributes(delivery, progress) if tracer.on else None,
                         kind="producer", origin=origin):
            await channel.send(*chunk)

    async def _deliver_chunks(self, delivery: Delivery) -> None:
        await self._open.wait()
        gw = self.gateway
        channel = gw.channels.get(delivery.channel)
        if channel is None or not channel.enabled:
            log.warning("outbox: channel %r is not running; the reply to %s waits for the next "
                        "start", delivery.channel, delivery.message_id)
            return
        address = json.loads(delivery.address)
        later_chunks = {key: value for key, value in address.items() if key != "preview"}
        chunks = split_text(delivery.text, delivery.max_chars)
        sent, attempts = delivery.chunks_sent, delivery.attempts
        deadline = delivery.created + gw.settings.delivery_retry_hours * 3600
        wait = delivery.next_attempt - gw.clock()
        while sent < len(chunks):
            if wait > 0:
                await self.wait(wait)
                if gw.stopping.is_set():
                    return  # stays in the outbox, due at its next attempt, for the next start
            try:
                # Only the first chunk may replace a preview shown while the model wrote.
                await self._send(channel, delivery,
                                 (address if sent == 0 else later_chunks, chunks[sent]),
                                 (sent, len(chunks), attempts))
            except DeliveryFailed as exc:
                log.error("outbox: %s refused the reply to %s for good: %s", delivery.channel,
                          delivery.message_id, describe(exc))
                await gw.store.delivery_finished(delivery.channel, delivery.message_id,
                                                 describe(exc))
                return
            except Exception as exc:
                attempts += 1
                reason = describe(exc)
                if gw.clock() >= deadline:
                    log.error("outbox: gave up on the reply to %s %s after %d attempts: %s",
                              delivery.channel, delivery.message_id, attempts, reason)
                    await gw.store.delivery_finished(
                        delivery.channel, delivery.message_id,
                        f"gave up after {attempts} attempts: {reason}")
                    return
                wait = (exc.after * random.uniform(1.0, 1.1) if isinstance(exc, DeliveryRetry)
                        else self.backoff(attempts))
                log.warning("outbox: delivery to %s failed (%s); attempt %d in %.1f s",
                            delivery.conversation, reason, attempts + 1, wait)
                await gw.store.delivery_retry(delivery.channel, delivery.message_id, attempts,
                                              gw.clock() + wait, reason)
                continue
            sent += 1
            wait = 0
            if sent < len(chunks):
                await gw.store.delivery_progress(delivery.channel, delivery.message_id, sent)
        await gw.store.delivery_finished(delivery.channel, delivery.message_id)
        await gw.hooks.reply_sent(replace(delivery, chunks_sent=sent, attempts=attempts),
                                  delivery.text)
