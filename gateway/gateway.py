"""The Gateway: configuration, plugins, store and turn locks, and the operations channels use."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sqlite3
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from . import agent, hooks, retention, validation
from .billing import CreditGuard, RateLimiter, period_of
from .commands import ChatCommand, index_commands
from .config import Settings
from .errors import BadRequest, ConfigError, NotFound, PluginError, Unauthorized, Unavailable
from .inbound import InboundMessage, Inbox
from .interfaces import Channel, Image, Provider, TextSink
from .locks import KeyedLocks, Lease
from .outbox import Outbox
from .plugins import PluginManager, make_plugin_manager
from .secrets import SecretBox, hash_token, load_or_create_key, new_api_token
from .sessions import Rotation, SessionStore
from .store import ChannelMessage, Store, StoredMessage, Thread, ThreadPage, ThreadRef, User
from .store.sqlite import SQLiteStore
from .tokens import TokenCounter
from .tools import Tool

log = logging.getLogger(__name__)

DASHBOARD = "dashboard"
AUTH_CACHE_SECONDS = 10.0
AUTH_CACHE_SIZE = 10_000


def dashboard_session_key(user_id: str, thread_id: str) -> str:
    """The session key of a dashboard / HTTP API thread."""
    return f"{user_id}--{thread_id}"


class Gateway:
    """Owns the plugins, the store, the token counter, sessions and the turn locks.

    Channels and the HTTP API run turns and change threads through its methods (which take the
    thread's lock); plain reads and single-row writes go to ``gateway.store``. Nothing outside
    :mod:`gateway.hooks` calls pluggy.
    """

    def __init__(self, settings: Settings, pm: PluginManager | None = None, *,
                 store: Store | None = None, clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.clock = clock
        self.pm = pm if pm is not None else make_plugin_manager()
        self.store: Store = store if store is not None else SQLiteStore(settings.database_path,
                                                                        clock)
        self.locks = KeyedLocks()
        self._background: set[asyncio.Task[Any]] = set()
        self.inbox = Inbox(self)
        self.outbox = Outbox(self)
        self._started = False
        # Set when stop() begins: waits (delivery backoff, rate limits) end at once, leaving
        # their work in the inbox/outbox for the next start.
        self.stopping = asyncio.Event()
        self._stop_deadline = 0.0
        self._auth_cache: dict[str, tuple[float, User]] = {}
        self._purger: asyncio.Task[None] | None = None
        self.accepting = False
        self.credit_guard = CreditGuard()
        self.rate_limiter = RateLimiter(clock)
        self._provider: Provider | None = None
        self._providers: dict[str, Provider] | None = None
        self.channels: dict[str, Channel] = {}
        self.tools: dict[str, Tool] = {}
        self.commands: dict[str, ChatCommand] = {}  # by every name each answers to
        self.tool_schemas: list[dict[str, Any]] = []
        self.tool_schema_tokens = 0
        self.counter: TokenCounter
        self.sessions: SessionStore
        self.secret_box: SecretBox

    # --- lifecycle ----------------------------------------------------------------------
    async def load_plugins(self) -> None:
        """Collect providers and channels from the plugins (once); no I/O happens here."""
        if self._providers is not None:
            return
        providers: dict[str, Provider] = {}
        for provider in await hooks.collect(self.pm.hook.register_providers, gateway=self):
            if provider.name in providers:
                raise PluginError(f"two providers are named {provider.name!r}")
            providers[provider.name] = provider
        for channel in await hooks.collect(self.pm.hook.register_channels, gateway=self):
            if channel.name in self.channels:
                raise PluginError(f"two channels are named {channel.name!r}")
            self.channels[channel.name] = channel
        for tool in await hooks.collect(self.pm.hook.register_tools, gateway=self):
            if tool.name in self.tools:
                raise PluginError(f"two tools are named {tool.name!r}")
            self.tools[tool.name] = tool
        self.commands = index_commands(
            await hooks.collect(self.pm.hook.register_commands, gateway=self))
        self._providers = providers

    async def start(self) -> None:
        """Open the store, load the tokenizer, pick the provider, start the channels."""
        await self.load_plugins()
        assert self._providers is not None
        wanted = self.settings.llm_provider
        if wanted not in self._providers:
            known = ", ".join(sorted(self._providers)) or "none"
            raise ConfigError(f"CLOUDYBOT_LLM_PROVIDER names no loaded provider: {wanted!r} "
                              f"(loaded: {known})")
        self.counter = TokenCounter.for_encoding(self.settings.tokenizer_encoding)
        self.tool_schemas = [tool.schema() for tool in self.tools.values()]
        # Schemas are sent with every chat call: count them once, against MAX_CONTEXT.
        self.tool_schema_tokens = (self.counter.count(json.dumps(self.tool_schemas))
                                   if self.tool_schemas else 0)
        self.secret_box = SecretBox(load_or_create_key(self.settings.secret_key,
                                                       self.settings.data_dir))
        self.sessions = SessionStore(
            self.settings.sessions_dir, idle_minutes=self.settings.session_idle_minutes,
            max_bytes=self.settings.session_max_file_bytes,
            count_message=self.counter.chat_message, clock=self.clock)
        await self.store.open()
        self.stopping.clear()
        try:
            self._provider = self._providers[wanted]
            await self._provider.start()
            # What a previous run left: its replies first, then its unanswered messages,
            # queued before any new message can arrive, so arrival order holds.
            await self.outbox.recover()
            await self.inbox.recover()
            self.accepting = True
            for channel in self.channels.values():
                if channel.enabled:
                    await channel.start()
            self.outbox.open()
            self._started = True
            if self.settings.purge_interval_minutes > 0:
                self._purger = asyncio.get_running_loop().create_task(
                    retention.purge_periodically(self, self.settings.purge_interval_minutes * 60))
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        """Stop taking messages, finish the work already taken (turns, summaries, replies)
        for at most ``CLOUDYBOT_SHUTDOWN_GRACE_SECONDS``, then close the channels, the
        provider and the store. What is unfinished stays in the inbox and outbox for the next
        start: a cancelled turn was not committed, so it runs again then."""
        self.begin_stop()
        if self._purger is not None:
            self._purger.cancel()
            await asyncio.gather(self._purger, return_exceptions=True)
            self._purger = None
        for channel in self.channels.values():
            try:
                await channel.stop()
            except Exception:
                log.exception("channel %r failed to stop", channel.name)
        grace = max(0.0, self._stop_deadline - asyncio.get_running_loop().time()) \
            if self._started else 0.0
        self._started = False
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
                await channel.close()
            except Exception:
                log.exception("channel %r failed to close", channel.name)
        if self._provider is not None:
            await self._provider.close()
        await self.store.close()

    def begin_stop(self) -> None:
        """Stop taking messages and start the grace period (idempotent): new channel messages
        get 503, waits end. The server calls it first, so that HTTP requests in flight and the
        gateway's own work share one grace period; :meth:`stop` then finishes the job."""
        if self.stopping.is_set():
            return
        self.accepting = False
        self.stopping.set()
        self._stop_deadline = (asyncio.get_running_loop().time()
                               + self.settings.shutdown_grace_seconds)

    async def __aenter__(self) -> Gateway:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    @property
    def provider(self) -> Provider:
        """The LLM provider in use."""
        if self._provider is None:
            raise RuntimeError("the gateway has not started")
        return self._provider

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

    # --- accounts -------------------------------------------------------------------------
    async def authenticate(self, token: str) -> User:
        """The account of an API token; raise Unauthorized.

        Known tokens are remembered for ``AUTH_CACHE_SECONDS`` (a turn then costs no store call
        for auth). A token replaced through this gateway stops working at once; one replaced
        by another process (``cloudybot users token``) within that many seconds.
        """
        if not token:
            raise Unauthorized("missing or invalid API token")
        digest = hash_token(token)
        now = time.monotonic()
        cached = self._auth_cache.get(digest)
        if cached is not None and cached[0] > now:
            return cached[1]
        user = await self.store.user_for_token(digest)
        if user is None:
            raise Unauthorized("missing or invalid API token")
        if len(self._auth_cache) >= AUTH_CACHE_SIZE:
            self._auth_cache.clear()
        self._auth_cache[digest] = (now + AUTH_CACHE_SECONDS, user)
        return user

    async def add_user(self, user_id: str, plan: str | None = None,
                       credits: int | None = None) -> tuple[User, str]:
        """Create an account on a plan and issue its first API token."""
        validation.user_id(user_id)
        plan_name = plan or self.settings.default_plan
        chosen = self.settings.plans.get(plan_name)
        if chosen is None:
            raise BadRequest(f"no plan named {plan_name!r}", code="unknown_plan")
        opening = chosen.credits if credits is None else credits
        if opening < 0:
            raise BadRequest("credits must be >= 0", code="invalid_credits")
        user = await self.store.create_user(user_id, plan_name, opening, chosen.browser_minutes,
                                            period_of(self.clock()))
        return user, await self.issue_token(user_id)

    async def current_user(self, user: User) -> User:
        """The account with this period's monthly grant applied (once per period, on its own:
        no cron needed). An account on a plan the configuration no longer has is left as is."""
        period = period_of(self.clock())
        plan = self.settings.plans.get(user.plan)
        if user.period >= period or plan is None:
            return user
        return await self.store.roll_period(user.user_id, user.period, period, plan.credits,
                                            plan.browser_minutes)

    async def issue_token(self, user_id: str) -> str:
        """A new API token for the account; earlier tokens stop working."""
        token = new_api_token()
        await self.store.replace_token(user_id, hash_token(token))
        self._auth_cache = {digest: entry for digest, entry in self._auth_cache.items()
                            if entry[1].user_id != user_id}
        return token

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
            await self.store.clear_thread(ref.session_key)
            await self.archive_session(ref.session_key, "cleared")

    async def delete_thread(self, ref: ThreadRef) -> None:
        """Remove the conversation, its display transcript and its pinned keys."""
        async with self.locks.hold(ref.session_key):
            await self.existing_thread(ref)
            await self.store.delete_thread(ref.session_key)
            await self.archive_session(ref.session_key, "deleted")

    # --- channels --------------------------------------------------------------------------
    async def receive(self, message: InboundMessage) -> bool:
        """Take a channel message: commit it to the durable inbox, then handle it in the
        background, in order per conversation. Returns once the message is durable (False
        for a redelivery of one already taken): acknowledge the platform only then.

        Raises :class:`Unavailable` (503) once the gateway is stopping, or when the message
        cannot be stored (a locked or full disk), so that a webhook tells its platform to
        deliver the message again later rather than losing it.
        """
        if not self.accepting:
            raise Unavailable("the gateway is shutting down; deliver this again later")
        try:
            return await self.inbox.receive(message)
        except (sqlite3.Error, OSError) as exc:
            log.error("cannot store %s message %s in the inbox: %s", message.channel,
                      message.message_id, exc)
            raise Unavailable("the message cannot be stored right now; deliver it again "
                              "later") from None

    # --- sessions ----------------------------------------------------------------------------
    async def archive_session(self, session_key: str, reason: str) -> Rotation | None:
        """Archive the session now (thread cleared or deleted); observers are told.

        The caller holds the thread's turn lock. Rotation never touches SQLite memory.
        """
        rotation = self.sessions.archive(session_key, reason)
        await self._tell_rotated(rotation)
        return rotation

    async def _tell_rotated(self, rotation: Rotation | None) -> None:
        if rotation is not None:
            await hooks.notify_each(self.pm.hook.session_rotated, gateway=self,
                                    rotation=rotation)

    async def check_session(self, session_key: str) -> tuple[Rotation | None, bool]:
        """Before an agent call: rotate if due (observers told); return the rotation and
        whether an active session file remains."""
        rotation, active = self.sessions.check(session_key)
        await self._tell_rotated(rotation)
        return rotation, active

    async def rotate_session_if_needed(self, user_id: str, thread_id: str) -> bool:
        """Rotate the thread's session if idle or too large; True if it rotated."""
        ref = await self.resolve_thread(user_id, thread_id)
        async with self.locks.hold(ref.session_key):
            rotation, _ = await self.check_session(ref.session_key)
            return rotation is not None

    async def purge_thread(self, session_key: str, last_update: str) -> tuple[bool, int]:
        """Delete an expired thread and all its session files, unless it was updated after
        ``last_update``; return (deleted, files removed)."""
        async with self.locks.hold(session_key):
            thread = await self.store.get_thread(session_key)
            if thread is None or thread.updated_at > last_update:
                return False, 0
            await self.store.delete_thread(session_key)
            files = self.sessions.delete_all(session_key)
            await self._tell_rotated(Rotation(session_key, "purged", None))
            return True, files

    # --- chat ------------------------------------------------------------------------------
    async def chat(self, user_id: str, ref: ThreadRef, message: str,
                   specialist: str | None = None,
                   inbound: ChannelMessage | None = None,
                   on_text: TextSink | None = None,
                   images: Sequence[Image] = ()) -> agent.TurnResult:
        """Run one turn on the thread, after any turn already running there.

        ``user_id`` is billed (in a group chat the sender, not the thread's owner);
        ``inbound`` is the (channel, message id) the turn answers, marked in its commit;
        ``on_text``, when given, is awaited with the reply written so far as the provider
        streams it (redacted, growing; it starts again after a round of tool calls). Streaming
        changes nothing that is stored or billed. ``images`` (pictures the user sent) go to
        the model with the message; only the message's text is stored.
        """
        validation.text(message, "message", self.settings.max_message_chars)
        if specialist is not None:
            validation.name(specialist, "specialist")
        lease = await self.locks.acquire(ref.session_key)
        try:
            result, pending = await agent.run_turn(self, user_id, ref, message, specialist,
                                                   inbound, on_text, images)
        except BaseException:
            lease.release()
            raise
        if pending is None:
            lease.release()
        else:
            self.spawn(self._summarize_then_release(pending, lease))
        return result

    async def _summarize_then_release(self, pending: agent.PendingSummary, lease: Lease) -> None:
        try:
            await agent.summarize(self, pending)
        except Exception:
            log.exception("summarization of %s crashed", pending.ref.session_key)
        finally:
            lease.release()
