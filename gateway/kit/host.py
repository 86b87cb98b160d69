"""The host each plugin gets: :class:`Host`, the gateway's :class:`gateway.PluginHost`.

One host per plugin and gateway, made on first use and kept. It knows its plugin's name, and
through the gateway which channels that plugin registered, so that a plugin's messages, sends
and pinned memory stay inside the conversations of its own channels.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client import CollectorRegistry, Counter

from gateway.base.errors import BadRequest, Forbidden, NotFound, Unavailable
from gateway.host import OutboundMessage, PinnedMemory
from gateway.store import InboxEntry, Store, ThreadRef, User

if TYPE_CHECKING:
    from gateway.base.locks import Leadership
    from gateway.config.settings import Settings
    from gateway.host import ChatCommand, ScheduledJobs
    from gateway.interfaces import Channel, InboundMessage

METRIC_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")
# A channel's name prefixes its conversations' keys (``telegram:42``): no colon in it, and no
# ``--``, which only the dashboard's ``{userId}--{threadId}`` keys have.
CHANNEL_NAME = re.compile(r"(?!.*--)[a-z][a-z0-9_-]{0,31}")
log = logging.getLogger(__name__)


def check_keys(channels: Mapping[str, Channel], channel: str, conversation: str) -> None:
    """Refuse (403) a message of a channel no loaded plugin registered, or one whose
    conversation is outside that channel's keys: ``{channel}:…``, never with ``--`` in it
    (the dashboard's ``{userId}--{threadId}`` keys are the HTTP API's alone)."""
    found = channels.get(channel)
    if found is None or not found.prefixed_keys:
        raise Forbidden(f"no channel plugin takes messages as {channel[:40]!r}",
                        code="not_your_channel")
    if not conversation.startswith(f"{channel}:") or len(conversation) == len(channel) + 1 \
            or "--" in conversation:
        raise Forbidden(f"conversation {conversation[:80]!r} is not one of channel "
                        f"{channel!r}'s ({channel}:…, without --)",
                        code="not_your_conversation")


class HostedBy(Protocol):
    """What a host uses of its gateway, and nothing more."""

    settings: Settings
    store: Store
    accepting: bool

    @property
    def commands(self) -> Mapping[str, ChatCommand]:
        """Every registered chat command by every name it answers to."""

    def clock(self) -> float:
        """Epoch seconds."""

    @property
    def jobs(self) -> ScheduledJobs:
        """Users' scheduled jobs."""

    @property
    def channels(self) -> Mapping[str, Channel]:
        """The loaded channels by name."""

    def channel_owner(self, channel: str) -> str | None:
        """The plugin that registered ``channel``."""

    def metrics_registry(self) -> CollectorRegistry:
        """Where ``GET /metrics`` reads from."""

    async def receive(self, message: InboundMessage) -> bool:
        """Take a channel message durably."""

    async def answer_now(self, message: InboundMessage) -> str | None:
        """Run a command at once and return its answer."""

    async def queue_message(self, entry: InboxEntry, text: str) -> bool:
        """Commit a message of a plugin's own to the outbox and deliver it."""

    def pins(self, ref: ThreadRef, user_id: str) -> PinnedMemory:
        """A thread's pinned memory; ``user_id``'s saved passwords are refused in it."""

    async def account(self, user_id: str) -> User | None:
        """A user's account as it is now."""

    def spawn(self, coroutine: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Background work that shutdown waits for."""

    async def lead(self, role: str) -> Leadership:
        """Wait for a role only one process plays."""

    async def pause(self, seconds: float) -> None:
        """Sleep, or less if the gateway begins to stop."""


class Host:
    """A plugin's view of one gateway (see :class:`gateway.PluginHost`)."""

    def __init__(self, name: str, gateway: HostedBy) -> None:
        self._name = name
        self._gateway = gateway
        self._log = logging.getLogger(f"cloudybot.plugin.{name}")
        self._metrics = Metrics(name, gateway.metrics_registry())
        self._refused: set[str] = set()  # what this plugin was refused, each logged once

    def __repr__(self) -> str:
        return f"<PluginHost of {self._name!r}>"

    @property
    def name(self) -> str:
        """The plugin's name."""
        return self._name

    @property
    def settings(self) -> Settings:
        """The gateway's settings (a plugin's own: ``settings.plugin(TheDataclass)``)."""
        return self._gateway.settings

    @property
    def log(self) -> logging.Logger:
        """The plugin's logger."""
        return self._log

    @property
    def metrics(self) -> Metrics:
        """The plugin's counters."""
        return self._metrics

    @property
    def commands(self) -> Mapping[str, ChatCommand]:
        """Every registered chat command by every name it answers to."""
        return self._gateway.commands

    @property
    def accepting(self) -> bool:
        """Whether the gateway takes messages now."""
        return self._gateway.accepting

    def now(self) -> float:
        """The gateway's clock."""
        return self._gateway.clock()

    @property
    def jobs(self) -> ScheduledJobs:
        """Users' scheduled jobs."""
        return self._gateway.jobs

    @contextmanager
    def _refusals(self) -> Iterator[None]:
        """Let a refusal (403) through, logging the first of each kind, naming the plugin."""
        try:
            yield
        except Forbidden as refusal:
            if refusal.code not in self._refused:
                self._refused.add(refusal.code)
                log.warning("plugin %r was refused: %s (logged once)", self._name,
                            refusal.message)
            raise

    def _own(self, channel: str) -> None:
        """Refuse a channel this plugin did not register."""
        if self._gateway.channel_owner(channel) != self._name:
            raise Forbidden(f"plugin {self._name!r} has no channel named {channel[:40]!r}",
                            code="not_your_channel")

    def _check(self, channel: str, conversation: str) -> None:
        """Refuse a channel this plugin did not register, or a conversation not of it."""
        self._own(channel)
        check_keys(self._gateway.channels, channel, conversation)

    async def receive(self, message: InboundMessage) -> bool:
        """Take a message of one of the plugin's channels (see :class:`gateway.PluginHost`);
        the gateway's intake checks its keys."""
        with self._refusals():
            self._own(message.channel)
            return await self._gateway.receive(message)

    async def answer_now(self, message: InboundMessage) -> str | None:
        """Run a command of one of the plugin's channels at once; its answer."""
        with self._refusals():
            self._own(message.channel)
            return await self._gateway.answer_now(message)

    async def send(self, message: OutboundMessage) -> None:
        """Commit a message of the plugin's own to the outbox; its channel delivers it."""
        with self._refusals():
            self._check(message.channel, message.conversation)
        if not isinstance(message.text, str) or not message.text.strip():
            raise BadRequest("an outbound message needs text", code="empty_message")
        entry = InboxEntry(message.channel, f"out-{uuid.uuid4().hex}", message.conversation,
                           json.dumps(dict(message.address)), message.max_chars, b"")
        await self._gateway.queue_message(entry, message.text)

    async def pinned(self, conversation: str) -> PinnedMemory:
        """The pinned memory of one of the plugin's conversations."""
        with self._refusals():
            self._check(conversation.partition(":")[0], conversation)
        thread = await self._gateway.store.get_thread(conversation)
        if thread is None:
            raise NotFound(f"no conversation {conversation[:80]!r} yet",
                           code="thread_not_found")
        return self._gateway.pins(thread.ref, thread.ref.user_id)

    async def account(self, user_id: str) -> User | None:
        """A user's account as it is now."""
        return await self._gateway.account(user_id)

    async def take_browser_minutes(self, user_id: str, conversation: str | None,
                                   minutes: int) -> int:
        """Charge up to ``minutes`` browser minutes; how many were charged."""
        return await self._gateway.store.take_minutes(user_id, conversation, minutes)

    def spawn(self, coroutine: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Background work the gateway waits for when it stops."""
        return self._gateway.spawn(coroutine)

    async def lead(self, role: str) -> Leadership:
        """Wait until this process plays ``role``."""
        return await self._gateway.lead(role)

    async def play(self, role: str, work: Callable[[Leadership], Awaitable[bool]]) -> None:
        """Play ``role`` while the gateway runs (see :class:`gateway.PluginHost`)."""
        while True:
            try:
                leadership = await self._gateway.lead(role)
            except Unavailable:
                return  # stopping
            try:
                if not await work(leadership):
                    return
            finally:
                await leadership.release()
            self._log.warning("lost the %s role (database connection); asking again", role)

    async def pause(self, seconds: float) -> None:
        """Sleep, or less if the gateway begins to stop."""
        await self._gateway.pause(seconds)


class Metrics:
    """A plugin's counters (see :class:`gateway.PluginMetrics`)."""

    def __init__(self, plugin: str, registry: CollectorRegistry) -> None:
        self._prefix = "cloudybot_plugin_" + re.sub(r"[^a-z0-9_]", "_", plugin.lower())
        self._registry = registry
        self._counters: dict[str, Counter] = {}

    def count(self, name: str, amount: float = 1.0, **labels: str) -> None:
        """Add ``amount`` to the counter ``name`` with these label values."""
        counter = self._counters.get(name)
        if counter is None:
            if not METRIC_NAME.fullmatch(name):
                raise ValueError(f"metric name {name!r} is not 1-64 of a-z 0-9 _")
            counter = self._counters[name] = Counter(
                f"{self._prefix}_{name}", f"counted by the {self._prefix[17:]} plugin",
                sorted(labels), registry=self._registry)
        (counter.labels(**labels) if labels else counter).inc(amount)
