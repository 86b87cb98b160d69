"""The Gateway: builds the parts (store, plugins and their hosts, agent, inbox, outbox) and runs
them; the thread operations the HTTP API uses."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import sqlite3
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from prometheus_client import CollectorRegistry

from gateway.accounts.access import Accounts
from gateway.accounts.admin import Administration
from gateway.accounts.retention import Retention
from gateway.accounts.secrets import SecretBox, load_or_create_key, refuse_saved_passwords
from gateway.base import validation
from gateway.base.breaker import CircuitBreaker
from gateway.base.errors import (
    ConfigError,
    GatewayError,
    NotFound,
    PluginError,
    TurnStopped,
    Unavailable,
)
from gateway.base.locks import KeyedLocks, Leadership, Lease
from gateway.base.logs import turn_context
from gateway.base.metrics import Metrics
from gateway.base.times import iso_utc
from gateway.base.tokens import TokenCounter
from gateway.billing import quotas_for
from gateway.billing.quotas import Quotas
from gateway.commands import index_commands, run_command
from gateway.config.fallback import FallbackEntry
from gateway.config.settings import Settings
from gateway.host import ChatCommand, CommandContext
from gateway.interfaces import Channel, Command, InboundMessage, Provider
from gateway.jobs.book import JobBook
from gateway.jobs.scheduler import Scheduler
from gateway.kit.host import CHANNEL_NAME, Host, check_keys
from gateway.kit.inbound import Inbox
from gateway.kit.outbox import Outbox
from gateway.memory import sessions_for
from gateway.memory.pinned import ThreadPins
from gateway.memory.sessions import Rotation, Sessions
from gateway.observe import NO_TRACER, Tracer, current_span
from gateway.observe.setup import tracer_from_environment
from gateway.plugins import hooks
from gateway.plugins.hooks import PerPlugin, PluginHooks
from gateway.plugins.manager import PluginManager, make_plugin_manager
from gateway.plugins.providers import fallback_providers
from gateway.store import (
    InboxEntry,
    Store,
    StoredMessage,
    Thread,
    ThreadPage,
    ThreadRef,
    User,
    usage,
)
from gateway.store import events as webhook_events
from gateway.store.backends import store_for
from gateway.tools import Tool, Toolbox, ToolSet
from gateway.turn.agent import Agent, PendingSummary, TurnResult
from gateway.turn.fallback import Link, ProviderChain
from gateway.turn.request import Turn
from gateway.turn.traces import OUTCOME, TURN_SPAN, outcome_attributes, turn_attributes
from gateway.webhooks.dispatcher import WebhookDispatcher

log = logging.getLogger(__name__)

DASHBOARD = "dashboard"
# Of the shutdown grace period, what closing (channels, Chromium, the provider, the store) and
# the process's exit are allowed after the work in flight: a second, or a fifth of a short one.
CLOSING_SECONDS = 1.0
CLOSING_SHARE = 0.2
# What the tracer may take at shutdown to export the spans it holds (within the closing time).
TRACE_FLUSH_SECONDS = 0.5
COMPACT_AFTER_SECONDS = 2 * 3600  # an hour's usage rollups are folded this long after


def dashboard_session_key(user_id: str, thread_id: str) -> str:
    """The session key of a dashboard / HTTP API thread."""
    return f"{user_id}--{thread_id}"


@dataclass(frozen=True)
class _Running:
    """What exists only while the gateway runs: built by ``start()``, in one piece."""

    providers: ProviderChain
    counter: TokenCounter
    secret_box: SecretBox
    sessions: Sessions
    agent: Agent
    retention: Retention


class NotStarted(RuntimeError):
    """A part of the gateway that exists only while it runs was asked for before start()."""


class Gateway:
    """Owns the plugins, the store, the token counter, sessions and the turn locks.

    The HTTP API runs turns (:meth:`run`, one :class:`~gateway.turn.request.Turn` each) and
    changes threads through its methods (which take the thread's lock); plain reads and
    single-row writes go to ``gateway.store``. Plugins never see it: each gets a
    :class:`gateway.PluginHost` of its own (:meth:`host_for`). Nothing outside
    :mod:`gateway.plugins.hooks` calls pluggy.

    A gateway lives in two phases. Built, it has its settings, store, accounts and, after
    :meth:`load_plugins`, its channels, tools and commands (an HTTP app needs the channels'
    routes before it starts). Started, it also has what ``start()`` builds in one piece: the
    provider, the token counter, the secret box, the session files and the :class:`Agent`;
    asking for one of those before then raises :class:`NotStarted`. The plugins its settings
    disable are blocked in its plugin manager (unregistered if it had loaded them).
    """

    def __init__(self, settings: Settings, pm: PluginManager | None = None, *,
                 store: Store | None = None, clock: Callable[[], float] = time.time,
                 tracer: Tracer | None = None) -> None:
        self.settings = settings
        self.clock = clock
        # Spans (gateway.observe): the tracer given, else the one the OTEL_* variables ask for
        # from start() to stop(); the no-op one until then, and whenever tracing is off.
        self.tracer: Tracer = tracer if tracer is not None else NO_TRACER
        self._traces_from_environment = tracer is None
        self.pm = pm if pm is not None else make_plugin_manager(
            disabled=settings.disabled_plugins)
        for name in settings.disabled_plugins:  # unregistered, if the caller had loaded it
            self.pm.set_blocked(name)
        self.store: Store = store if store is not None else store_for(settings, clock)
        self.accounts = Accounts(settings, self.store, clock)
        self.hooks = PluginHooks(self.pm, self.host_for)
        self._hosts: dict[str, Host] = {}
        self._channel_owners: dict[str, str] = {}  # channel name: the plugin that registered it
        self._command_owners: dict[str, str] = {}  # command name: the plugin that registered it
        self.locks = KeyedLocks(self.store.lock_thread)
        self._background: set[asyncio.Task[Any]] = set()
        self.inbox = Inbox(self)
        self.outbox = Outbox(self)
        self.metrics = Metrics()
        self.webhooks = WebhookDispatcher(self)
        self.store.webhooks_queued = self.webhooks.queued
        self.scheduler = Scheduler(self)
        self.jobs = JobBook(settings, self.store, clock, self.scheduler.changed)
        self.admin = Administration(self.store)
        self._started = False
        # Set when stop() begins: waits (delivery backoff, rate limits) end at once, leaving
        # their work in the inbox/outbox for the next start.
        self.stopping = asyncio.Event()
        self._stop_deadline = 0.0  # the end of the grace period's share for the work
        self._grace_end = 0.0  # the end of the whole grace period (closing included)
        self._periodic: list[asyncio.Task[None]] = []  # the purge; the takeover (shared stores)
        self._compacted = ""  # the hour the usage rollups are compacted up to (shared stores)
        self.accepting = False
        # Rate limits and credit holds: in this process's memory unless the store shares them.
        self.quotas: Quotas = quotas_for(self.store, settings, clock)
        self._providers: dict[str, Provider] | None = None
        self._provider_owners: dict[str, str] = {}  # provider name: the plugin that registered it
        self._running: _Running | None = None
        self.channels: dict[str, Channel] = {}
        self.tools: dict[str, Tool] = {}
        self.tool_sets: list[ToolSet] = []  # tools that depend on who asks (MCP servers')
        self.commands: dict[str, ChatCommand] = {}  # by every name each answers to

    # --- lifecycle ----------------------------------------------------------------------
    async def load_plugins(self) -> None:
        """Collect providers and channels from the plugins (once); no I/O happens here.

        Raises :class:`PluginError` (one line naming the plugin) if an installed plugin did
        not load or fails to build what it registers: a gateway never runs with part of its
        configuration silently missing.
        """
        if self._providers is not None:
            return
        for name, error in self.pm.load_failures.items():
            raise PluginError(f"plugin {name!r} failed to load: {error}")
        host = PerPlugin(self.host_for)
        providers: dict[str, Provider] = {}
        for plugin, registered in await hooks.collect_by_plugin(
                self.pm.hook.register_providers, strict=True, host=host):
            for provider in registered:
                if provider.name in providers:
                    raise PluginError(f"two providers are named {provider.name!r}")
                providers[provider.name] = provider
                self._provider_owners[provider.name] = plugin
        for plugin, channels in await hooks.collect_by_plugin(
                self.pm.hook.register_channels, strict=True, host=host):
            for channel in channels:
                if not isinstance(channel.name, str) or not CHANNEL_NAME.fullmatch(channel.name):
                    raise PluginError(f"plugin {plugin!r}: channel name {channel.name!r} is not "
                                      "1-32 of a-z 0-9 _ - (a letter first, no --)")
                if channel.name in self.channels:
                    raise PluginError(f"two channels are named {channel.name!r}")
                self.channels[channel.name] = channel
                self._channel_owners[channel.name] = plugin
        for tool in await hooks.collect(self.pm.hook.register_tools, strict=True, host=host):
            if isinstance(tool, ToolSet) and not isinstance(tool, Tool):
                self.tool_sets.append(tool)
                continue
            if tool.name in self.tools:
                raise PluginError(f"two tools are named {tool.name!r}")
            self.tools[tool.name] = tool
        by_plugin = await hooks.collect_by_plugin(self.pm.hook.register_commands, strict=True,
                                                  host=host)
        self.commands = index_commands(command for _, commands in by_plugin
                                       for command in commands)
        self._command_owners = {command.name: plugin for plugin, commands in by_plugin
                                for command in commands}
        self._providers = providers

    async def start(self) -> None:
        """Open the store, build what runs (provider, tokenizer, sessions, agent), recover
        what a previous run left, start the channels."""
        await self.load_plugins()
        if self._traces_from_environment:
            self.tracer = tracer_from_environment(os.environ)
        await self.store.open()
        self.stopping.clear()
        try:
            fallbacks = await fallback_providers(self.pm, self.host_for, self.settings,
                                                 self._provider_owners)
            self._running = self._build_running(fallbacks)
            await self._running.providers.start()
            await self._running.agent.toolbox.start()
            # What a previous run left: its replies first, then its unanswered messages,
            # queued before any new message can arrive, so arrival order holds.
            await self.outbox.recover()
            await self.inbox.recover()
            await self.webhooks.recover()
            self.accepting = True
            for channel in self.channels.values():
                if channel.enabled:
                    await channel.start()
            self.outbox.open()
            self.webhooks.start()
            self._started = True
            loop = asyncio.get_running_loop()
            if self.settings.purge_interval_minutes > 0:
                self._periodic.append(loop.create_task(self.retention.purge_periodically(
                    self.settings.purge_interval_minutes * 60)))
            if self.store.shared:
                self._periodic.append(loop.create_task(self._take_over_periodically()))
            if self.settings.jobs_run:
                self._periodic.append(loop.create_task(self.scheduler.serve()))
        except BaseException:
            await self.stop()
            raise

    def _build_running(self, fallbacks: list[tuple[FallbackEntry, Provider]]) -> _Running:
        """The providers (the one named by the settings, then ``fallbacks``), the token
        counter, the secret box, the session files and the agent that uses them."""
        assert self._providers is not None
        wanted = self.settings.llm_provider
        if wanted not in self._providers and wanted in self.settings.disabled_plugins:
            raise ConfigError(f"CLOUDYBOT_LLM_PROVIDER is {wanted!r}, a disabled plugin: "
                              f"enable it (cloudybot plugins enable {wanted}, or leave it out "
                              "of CLOUDYBOT_PLUGINS_DISABLED) or choose another provider")
        if wanted not in self._providers:
            known = ", ".join(sorted(self._providers)) or "none"
            raise ConfigError(f"CLOUDYBOT_LLM_PROVIDER names no loaded provider: {wanted!r} "
                              f"(loaded: {known})")
        settings = self.settings
        providers = self._chain(self._providers[wanted], fallbacks)
        counter = TokenCounter.for_encoding(settings.tokenizer_encoding)
        secret_box = SecretBox(load_or_create_key(settings.secret_key, settings.data_dir))
        sessions = sessions_for(self.store, settings, counter.chat_message, self.clock,
                                self._session_rotated)
        agent = Agent(settings=settings, store=self.store, providers=providers, counter=counter,
                      sessions=sessions, secret_box=secret_box,
                      toolbox=Toolbox.of(self.tools, counter.count, self.tool_sets),
                      hooks=self.hooks,
                      accounts=self.accounts, quotas=self.quotas, metrics=self.metrics)
        retention = Retention(settings, self.store, sessions, self.locks, self.clock,
                              self.quotas)
        return _Running(providers, counter, secret_box, sessions, agent, retention)

    def _chain(self, primary: Provider,
               fallbacks: list[tuple[FallbackEntry, Provider]]) -> ProviderChain:
        """The configured provider and model, then the fallbacks, each under a breaker."""
        settings = self.settings
        pairs = [(f"{primary.name}/{settings.llm_model}", primary, settings.llm_model),
                 *((entry.name, provider, entry.model) for entry, provider in fallbacks)]
        links, names = [], set()
        for number, (name, provider, model) in enumerate(pairs, 1):
            unique = name if name not in names else f"{name}#{number}"
            names.add(unique)
            links.append(Link(unique, provider, model, CircuitBreaker(
                settings.llm_breaker_failures, settings.llm_breaker_cooldown_seconds,
                self.clock)))
        return ProviderChain(links, self.metrics)

    async def _session_rotated(self, rotation: Rotation) -> None:
        """A session ended: counted, and the plugins told."""
        self.metrics.rotations.labels(rotation.reason).inc()
        await self.hooks.session_rotated(rotation)

    async def stop(self) -> None:
        """Stop taking messages, finish the work already taken (turns, summaries, replies),
        then close the channels, the provider and the store, all within
        ``CLOUDYBOT_SHUTDOWN_GRACE_SECONDS``: the work gets the grace period less what closing
        is allowed (``CLOSING_SECONDS``, or ``CLOSING_SHARE`` of a short grace). What is
        unfinished stays in the inbox and outbox for the next start: a cancelled turn was not
        committed, so it runs again then."""
        self.begin_stop()
        periodic, self._periodic = self._periodic, []
        for task in periodic:
            task.cancel()
        await asyncio.gather(*periodic, return_exceptions=True)
        await self.webhooks.stop()
        for channel in self.channels.values():
            try:
                await channel.stop()
            except Exception:
                log.exception("channel %r failed to stop", channel.name)
        grace = max(0.0, self._stop_deadline - asyncio.get_running_loop().time()) \
            if self._started else 0.0
        started, self._started = self._started, False
        try:
            if self._background:
                await asyncio.wait_for(self.drain(), grace)
        except TimeoutError:
            left = self.inbox.queues.queued() + self.outbox.queues.queued()
            if left:
                log.warning("shutdown: the %g s grace period is over; %d message(s) and "
                            "reply(ies) wait in the inbox and outbox for the next start",
                            grace, left)
            await self._cancel_background()
        for channel in self.channels.values():
            try:
                await self._within_grace(f"closing the channel {channel.name!r}",
                                         channel.close())
            except Exception:
                log.exception("channel %r failed to close", channel.name)
        await self._within_grace("closing the webhook deliveries", self.webhooks.close())
        await self.hooks.gateway_stopping(self._grace_left())
        if self._running is not None:
            await self._within_grace("closing the tools", self._running.agent.toolbox.close())
            await self._within_grace("closing the provider", self._running.providers.close())
        await self.store.close()  # never cut off: it commits what was written
        if self._traces_from_environment and self.tracer.on:
            tracer, self.tracer = self.tracer, NO_TRACER
            await tracer.close(TRACE_FLUSH_SECONDS)
        if started:
            log.debug("stopped")

    def _grace_left(self) -> float:
        """Seconds left of the shutdown grace period (all of it when the stop has not begun)."""
        if not self.stopping.is_set():
            return self.settings.shutdown_grace_seconds
        return max(0.0, self._grace_end - asyncio.get_running_loop().time())

    async def _within_grace(self, what: str, closing: Awaitable[None]) -> None:
        """Await ``closing``, cut off (and logged) when the grace period ends first."""
        try:
            await asyncio.wait_for(closing, self._grace_left())
        except TimeoutError:
            log.warning("shutdown: %s did not finish within the grace period; cut off", what)

    def begin_stop(self) -> float:
        """Stop taking messages and start the grace period (idempotent): new channel messages
        get 503, waits end. The server calls it first, so that HTTP requests in flight and the
        gateway's own work share one grace period; :meth:`stop` then finishes the job. Returns
        when the grace period ends (the event loop's time)."""
        if not self.stopping.is_set():
            self.accepting = False
            self.stopping.set()
            grace = self.settings.shutdown_grace_seconds
            work = grace - min(CLOSING_SECONDS, grace * CLOSING_SHARE)
            now = asyncio.get_running_loop().time()
            self._stop_deadline, self._grace_end = now + work, now + grace
            if self._started:  # (a start that failed has nothing to stop)
                log.debug("stopping: %.3g s for the work in flight, %g s in all", work, grace)
        return self._stop_deadline

    async def __aenter__(self) -> Gateway:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    def _run(self) -> _Running:
        if self._running is None:
            raise NotStarted("the gateway has not started")
        return self._running

    @property
    def provider(self) -> Provider:
        """The configured LLM provider (the first of the fallback chain)."""
        return self._run().providers.primary

    @property
    def providers(self) -> ProviderChain:
        """The providers a call may go to: the configured one, then the fallbacks."""
        return self._run().providers

    @property
    def counter(self) -> TokenCounter:
        """The token counter of the configured encoding."""
        return self._run().counter

    @property
    def secret_box(self) -> SecretBox:
        """Encryption of secrets at rest (saved logins, the inbox's payloads)."""
        return self._run().secret_box

    @property
    def sessions(self) -> Sessions:
        """The session files."""
        return self._run().sessions

    @property
    def agent(self) -> Agent:
        """What runs turns and summarizations."""
        return self._run().agent

    @property
    def retention(self) -> Retention:
        """What purges expired threads."""
        return self._run().retention

    def spawn(self, coroutine: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run background work that ``drain()`` and ``stop()`` wait for."""
        task = asyncio.get_running_loop().create_task(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def drain(self) -> None:
        """Wait until all background work (turns of channel messages, deliveries,
        summarizations) has finished."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)

    async def lead(self, role: str) -> Leadership:
        """Wait until this is the one process playing ``role`` (long polling a platform): at
        once with SQLite; with PostgreSQL when no live process plays it, asking every
        ``CLOUDYBOT_LEADER_RETRY_SECONDS``. Raises :class:`Unavailable` once the gateway
        stops. Check ``alive()`` before each round of the role's work; release it when done."""
        while not self.stopping.is_set():
            leadership = await self.store.try_lead(role)
            if leadership is not None:
                return leadership
            await self.pause(self.settings.leader_retry_seconds)
        raise Unavailable("the gateway is stopping")

    async def _take_over_periodically(self) -> None:
        """With several processes: every ``CLOUDYBOT_LEADER_RETRY_SECONDS``, take over the
        replies, unanswered messages and webhook deliveries of processes that died (the store
        knows)."""
        while not self.stopping.is_set():
            await self.pause(self.settings.leader_retry_seconds)
            if self.stopping.is_set():
                return
            try:
                await self.outbox.recover()
                await self.inbox.recover()
                await self.webhooks.recover()
            except Exception:
                log.exception("cannot take over the work of stopped processes; will try again")
            try:
                await self._compact_usage()
            except Exception:
                log.exception("cannot compact the usage rollups; will try again")

    async def _compact_usage(self) -> None:
        """Once an hour, fold the usage rollups' shards of the hours over (those of the last
        31 days, up to two hours ago: no commit writes them any more) into one row each
        (``Store.compact_usage``), so that reports read as few rows as with one process."""
        end = usage.hour_key(iso_utc(self.clock() - COMPACT_AFTER_SECONDS))
        if end == self._compacted:
            return
        await self.store.compact_usage(usage.hour_key(iso_utc(self.clock() - 31 * 86_400)),
                                       end)
        self._compacted = end

    async def pause(self, seconds: float) -> None:
        """Sleep ``seconds``, or less if the gateway begins to stop (check ``stopping``)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), seconds)

    async def _cancel_background(self) -> None:
        while self._background:
            tasks = list(self._background)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    # --- threads ----------------------------------------------------------------------------
    def channel_prefix(self, thread_id: str) -> str | None:
        """The loaded channel whose threads ``thread_id`` names (``telegram:42``), if any."""
        prefix, sep, _ = thread_id.partition(":")
        if sep and prefix in self.channels and self.channels[prefix].prefixed_keys:
            return prefix
        return None

    async def resolve_thread(self, user_id: str, thread_id: object) -> ThreadRef:
        """Map an API ``threadId`` to its thread; channel threads only for their owner (404)."""
        thread_id = validation.thread_id(thread_id)
        channel = self.channel_prefix(thread_id)
        if channel is None:
            return ThreadRef(user_id, thread_id, dashboard_session_key(user_id, thread_id),
                             DASHBOARD)
        thread = await self.store.get_thread(thread_id)
        if thread is None or thread.ref.user_id != user_id:
            raise NotFound(f"no thread {thread_id!r}", code="thread_not_found")
        return thread.ref

    async def existing_thread(self, ref: ThreadRef) -> Thread:
        """The stored thread; 404 if the user has not used it."""
        thread = await self.store.get_thread(ref.session_key)
        if thread is None or thread.ref.user_id != ref.user_id:
            raise NotFound(f"no thread {ref.thread_id!r}", code="thread_not_found")
        return thread

    async def thread_page(self, ref: ThreadRef, limit: int,
                          before: int | None) -> tuple[Thread, list[StoredMessage], ThreadPage]:
        """A thread with its rolling memory and one page of its display transcript."""
        thread = await self.existing_thread(ref)
        _, messages = await self.store.rolling_memory(ref.session_key)
        page = await self.store.display_page(ref.session_key, limit, before)
        return thread, messages, page

    async def clear_thread(self, ref: ThreadRef) -> None:
        """Empty the summary and messages; pinned keys and the display transcript stay."""
        async with self.locks.hold(ref.session_key):
            await self.existing_thread(ref)
            await self.store.clear_thread(ref.session_key, (webhook_events.thread_cleared(ref),))
            await self.sessions.end(ref.session_key, "cleared")

    async def delete_thread(self, ref: ThreadRef) -> None:
        """Remove the conversation, its display transcript and its pinned keys."""
        async with self.locks.hold(ref.session_key):
            await self.existing_thread(ref)
            await self.store.delete_thread(ref.session_key, (webhook_events.thread_deleted(ref),))
            await self.sessions.end(ref.session_key, "deleted")

    # --- channels --------------------------------------------------------------------------
    async def receive(self, message: InboundMessage) -> bool:
        """Take a channel message: commit it to the durable inbox, then handle it in the
        background, in order per conversation. Returns once the message is durable (False
        for a redelivery of one already taken): acknowledge the platform only then.

        Raises :class:`Unavailable` (503) once the gateway is stopping, or when the message
        cannot be stored (a locked or full disk), so that a webhook tells its platform to
        deliver the message again later rather than losing it; :class:`Forbidden` (403) for a
        channel no plugin registered or a conversation outside its keys (nothing is stored).
        """
        check_keys(self.channels, message.channel, message.conversation)
        if not self.accepting:
            raise Unavailable("the gateway is shutting down; deliver this again later")
        try:
            return await self.inbox.receive(message)
        except (sqlite3.Error, OSError) as exc:
            log.error("cannot store %s message %s in the inbox: %s", message.channel,
                      message.message_id, exc)
            raise Unavailable("the message cannot be stored right now; deliver it again "
                              "later") from None

    async def run_command(self, command: Command, user: User, ref: ThreadRef) -> str:
        """Run a chat command for ``user`` in the conversation ``ref``; return its answer."""
        def context_for(found: ChatCommand, argument: str) -> CommandContext:
            return CommandContext(
                host=self.host_for(self._command_owners.get(found.name, "")), user=user,
                ref=ref, argument=argument, memory=self.pins(ref, user.user_id),
                start_over=partial(self._start_over, ref))
        return await run_command(self.commands, command, context_for)

    async def _start_over(self, ref: ThreadRef) -> None:
        with contextlib.suppress(NotFound):  # nobody talked there yet: nothing to clear
            await self.clear_thread(ref)

    async def answer_now(self, message: InboundMessage) -> str | None:
        """Run a chat command at once and return its answer (None for a redelivery): for
        platforms that take the answer in their acknowledgement (Slack's slash commands)."""
        check_keys(self.channels, message.channel, message.conversation)
        if not self.accepting:
            raise Unavailable("the gateway is shutting down; deliver this again later")
        return await self.inbox.answer_inline(message)

    async def queue_message(self, entry: InboxEntry, text: str) -> bool:
        """Commit a message that answers no inbound one to the outbox and deliver it (its
        send continues the trace of the span it was queued in, if any); False if ``entry``'s
        id was used already. 503 when it cannot be stored now."""
        if entry.trace is None:
            queued_in = current_span().context()
            if queued_in is not None:
                entry = dataclasses.replace(entry, trace=queued_in.text)
        try:
            queued = await self.store.queue_message(entry, text)
        except (sqlite3.Error, OSError) as exc:
            log.error("cannot store a %s message in the outbox: %s", entry.channel, exc)
            raise Unavailable("the message cannot be stored right now") from None
        if queued:
            self.outbox.queue(entry, text)
        return queued

    # --- plugins ---------------------------------------------------------------------------
    def host_for(self, plugin: str) -> Host:
        """The host of ``plugin`` (made once): what that plugin may do with this gateway."""
        host = self._hosts.get(plugin)
        if host is None:
            host = self._hosts[plugin] = Host(plugin, self)
        return host

    def channel_owner(self, channel: str) -> str | None:
        """The plugin that registered ``channel`` (None for no loaded channel)."""
        return self._channel_owners.get(channel)

    def metrics_registry(self) -> CollectorRegistry:
        """The registry ``GET /metrics`` exports (plugins' counters included)."""
        return self.metrics.registry

    def pins(self, ref: ThreadRef, user_id: str) -> ThreadPins:
        """The thread's pinned memory, refusing ``user_id``'s saved passwords in it."""
        async def refuse_secrets(fields: Mapping[str, str]) -> None:
            await refuse_saved_passwords(self.store, self.secret_box, user_id, fields)
        return ThreadPins(self.store, ref, refuse_secrets, self.settings.max_pinned_keys)

    async def account(self, user_id: str) -> User | None:
        """``user_id``'s account as it is now (a new month's credits applied), or None."""
        stored = await self.store.get_user(user_id)
        return await self.accounts.current_user(stored) if stored is not None else None

    # --- sessions ----------------------------------------------------------------------------
    async def rotate_session_if_needed(self, user_id: str, thread_id: str) -> bool:
        """Rotate the thread's session if idle or too large; True if it rotated."""
        ref = await self.resolve_thread(user_id, thread_id)
        async with self.locks.hold(ref.session_key):
            rotation, _ = await self.sessions.begin_turn(ref.session_key)
            return rotation is not None

    # --- chat ------------------------------------------------------------------------------
    async def chat(self, user_id: str, ref: ThreadRef, message: str,
                   specialist: str | None = None) -> TurnResult:
        """Run one plain turn (no streaming, no pictures) for ``user_id`` on the thread: see
        :meth:`run`."""
        return await self.run(Turn(user_id, ref, message, specialist))

    async def run(self, turn: Turn) -> TurnResult:
        """Run one turn on its thread, after any turn already running there.

        ``turn.user_id`` is billed (in a group chat the sender, not the thread's owner);
        ``turn.answers`` is the (channel, message id) the turn answers, marked in its commit;
        ``turn.on_text``, when given, is awaited with the reply written so far as the provider
        streams it (redacted, growing; it starts again after a round of tool calls). Streaming
        changes nothing that is stored or billed. ``turn.images`` (pictures the user sent) go
        to the model with the message; only the message's text is stored.
        """
        validation.text(turn.message, "message", self.settings.max_message_chars)
        if turn.specialist is not None:
            validation.name(turn.specialist, "specialist")
        ref = turn.ref
        attributes = turn_attributes(turn) if self.tracer.on else None
        # on its every log line; its span, the parent of its steps' (its summarization's too)
        with turn_context(turn.user_id, ref.thread_id, ref.channel), \
                self.tracer.root(TURN_SPAN, attributes, origin=turn.trace) as span:
            started = time.perf_counter()
            lease = await self.locks.acquire(ref.session_key)
            try:
                result, pending = await self.agent.run_turn(turn)
            except BaseException as exc:
                await lease.release()
                span.set(OUTCOME, "stopped" if isinstance(exc, TurnStopped) else "error")
                if not isinstance(exc, asyncio.CancelledError):  # a stop, not a failure
                    status = exc.status if isinstance(exc, GatewayError) else 500
                    self.metrics.turn_errors.labels(ref.channel, str(status)).inc()
                raise
            if span.recording:
                span.update(outcome_attributes(result))
            self.metrics.turn_seconds.labels(ref.channel).observe(time.perf_counter() - started)
            if pending is None:
                await lease.release()
            else:  # its summarization's lines are the turn's too (the task copies the context)
                self.spawn(self._summarize_then_release(pending, lease))
            return result

    async def _summarize_then_release(self, pending: PendingSummary, lease: Lease) -> None:
        try:
            await self.agent.summarize(pending)
        except Exception:
            log.exception("summarization of %s crashed", pending.ref.session_key)
        finally:
            await lease.release()
