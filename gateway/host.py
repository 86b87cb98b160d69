"""What a plugin may do with the running gateway: :class:`PluginHost`, handed to hooks as ``host``;
and the chat commands a plugin adds (:class:`ChatCommand`), run with a :class:`CommandContext`.

A plugin sees this and nothing more: the store, the agent, the accounts and the other plugins
stay the gateway's. Each plugin gets a host of its own, which knows the channels that plugin
registered: a channel takes messages for, sends to and reads the pinned memory of its own
conversations only (``telegram:…`` for the ``telegram`` channel), so a third-party plugin can
never reach a dashboard thread or another channel's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from gateway.base.locks import Leadership
    from gateway.config.settings import Settings
    from gateway.interfaces import InboundMessage
    from gateway.store.records import Job, JobRequest, ThreadRef, User


@dataclass(frozen=True)
class OutboundMessage:
    """A message a plugin sends on its own (not the answer to an inbound one): it goes through
    the durable outbox, so it is retried until the platform takes it, also after a restart.

    :param channel: the plugin's channel that delivers it.
    :param conversation: the conversation (session key) it belongs to, one of the channel's.
    :param address: what the channel's ``send(address, text)`` needs (JSON-serialisable).
    :param text: the message; longer than ``max_chars`` it is split.
    :param max_chars: the platform's longest message.
    """

    channel: str
    conversation: str
    address: Mapping[str, Any]
    text: str
    max_chars: int = 4000


@dataclass(frozen=True)
class ChatCommand:
    """A command a plugin offers (``register_commands``).

    :param name: lowercase ``[a-z0-9_]``, at most 32 characters (Telegram's rule).
    :param usage: how it is written after its name, for the help text (``"KEY VALUE"``).
    :param help: one line on what it does.
    :param run: awaited with a :class:`CommandContext`; returns the answer's text.
    :param per_conversation: it acts on the conversation it is sent in (pinned facts, a
        fresh start), so a channel where a command is not sent in a conversation (Slack's
        slash commands in a channel) refuses it.
    :param aliases: other names that run it (``start`` for ``help``).
    """

    name: str
    usage: str
    help: str
    run: Callable[[CommandContext], Awaitable[str]]
    per_conversation: bool = False
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class CommandContext:
    """What a command runs against and may do.

    :param host: the host of the plugin that registered the command.
    :param user: the sender's account (as it was when the message was taken).
    :param ref: the conversation's thread (owned by whoever started it).
    :param argument: what followed the command's name, stripped.
    :param memory: the conversation's pinned facts.
    :param start_over: empties the conversation's rolling memory and ends its session (pinned
        facts and the display transcript stay); nothing happens where nobody talked yet.
    """

    host: PluginHost
    user: User
    ref: ThreadRef
    argument: str
    memory: PinnedMemory
    start_over: Callable[[], Awaitable[None]]


class PinnedMemory(Protocol):
    """The pinned key/value facts of one conversation (always in its prompt, never
    summarized). Keys and values are checked as the API checks them, and a value holding one
    of the user's saved passwords is refused (400 ``contains_secret``)."""

    async def get(self) -> dict[str, str]:
        """Every pinned key and its value."""

    async def put(self, key: str, value: str) -> dict[str, str]:
        """Pin ``value`` under ``key``; return every pinned key."""

    async def delete(self, key: str) -> dict[str, str]:
        """Unpin ``key``; return what remains."""


class ScheduledJobs(Protocol):
    """Users' scheduled jobs (``host.jobs``), under their plans' limits; the gateway reads
    the times (``gateway.job_timing``) and runs the jobs."""

    async def time_zone(self, user_id: str) -> str:
        """The user's time zone, or the gateway's default."""

    async def set_time_zone(self, user_id: str, name: str) -> str:
        """Make ``name`` (an IANA zone) the user's time zone."""

    async def create_in(self, user_id: str, conversation: str, request: JobRequest) -> Job:
        """Make a job of ``user_id`` posting in ``conversation`` (a session key).

        :raises gateway.BadRequest: a time past or unreadable, an interval under the plan's.
        :raises gateway.Forbidden: the plan's ``max_jobs`` reached.
        """

    async def list(self, user_id: str) -> list[Job]:
        """The user's jobs, oldest first."""

    async def pause(self, user_id: str, job_id: str) -> Job:
        """Stop the job's runs until resumed (NotFound if not the user's)."""

    async def resume(self, user_id: str, job_id: str) -> Job:
        """Run the job again from its next time after now."""

    async def delete(self, user_id: str, job_id: str) -> None:
        """Delete the job and its record."""


class PluginMetrics(Protocol):
    """Counters a plugin adds to ``GET /metrics``, named ``cloudybot_plugin_{plugin}_{name}``."""

    def count(self, name: str, amount: float = 1.0, **labels: str) -> None:
        """Add ``amount`` to the counter ``name`` with these label values (made at first use;
        later uses must give the same label names)."""


class PluginHost(Protocol):
    """The few things a plugin may do with the running gateway.

    Every hook that needs the gateway receives one as ``host``: receive a channel message,
    send through the outbox, read settings, read and write the pinned memory of a conversation
    the plugin owns, run background work, log and count. A channel owns the conversations
    whose key starts with its name and a colon (``telegram:42``).
    """

    @property
    def name(self) -> str:
        """The plugin's name (its entry point's)."""

    @property
    def settings(self) -> Settings:
        """The gateway's settings, read-only; a plugin's own are
        ``host.settings.plugin(TheDataclass)``."""

    @property
    def log(self) -> logging.Logger:
        """A logger named for the plugin (``cloudybot.plugin.NAME``)."""

    @property
    def metrics(self) -> PluginMetrics:
        """The plugin's counters on ``GET /metrics``."""

    @property
    def commands(self) -> Mapping[str, ChatCommand]:
        """The chat commands every plugin registered, by every name each answers to (to list
        them in a platform's command menu, say)."""

    @property
    def accepting(self) -> bool:
        """Whether the gateway takes messages now (False before it started and once it
        stops)."""

    def now(self) -> float:
        """The gateway's clock, epoch seconds (tests move it)."""

    @property
    def jobs(self) -> ScheduledJobs:
        """Users' scheduled jobs: make one in a conversation (``create_in``), list, pause,
        resume and delete them, under their plans' limits; read and set a user's time
        zone. What runs them is the gateway's."""

    async def receive(self, message: InboundMessage) -> bool:
        """Commit a message from one of the plugin's channels to the durable inbox and answer
        it in the background, in order per conversation; False for a redelivery. Returns once
        the message is durable: acknowledge the platform only then.

        :raises gateway.Forbidden: the message names a channel this plugin did not register,
            or a conversation that is not that channel's.
        :raises gateway.Unavailable: the gateway is stopping, or the message cannot be stored
            now (tell the platform to deliver it again later).
        """

    async def answer_now(self, message: InboundMessage) -> str | None:
        """Run a chat command here and now and return its answer (None for a redelivery), for
        platforms that take the answer in their acknowledgement (Slack's slash commands)."""

    async def send(self, message: OutboundMessage) -> None:
        """Queue a message of the plugin's own in the durable outbox (committed when this
        returns); the channel's ``send`` delivers it, retried with backoff."""

    async def pinned(self, conversation: str) -> PinnedMemory:
        """The pinned memory of one of the plugin's conversations.

        :raises gateway.Forbidden: not a conversation of the plugin's channels.
        :raises gateway.NotFound: nobody has talked there yet.
        """

    async def account(self, user_id: str) -> User | None:
        """A user's account as it is now (plan, credits, browser minutes), None if there is
        none."""

    async def take_browser_minutes(self, user_id: str, conversation: str | None,
                                   minutes: int) -> int:
        """Charge up to ``minutes`` browser minutes to ``user_id`` (only as far as the
        balance holds, atomically) and return how many were charged."""

    def spawn(self, coroutine: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run background work that the gateway waits for when it stops."""

    async def lead(self, role: str) -> Leadership:
        """Wait until this process is the one playing ``role`` (long polling a platform,
        say): at once with one process; with several, when no live one plays it. Check
        ``alive()`` before each round of the role's work and release it when done.

        :raises gateway.Unavailable: the gateway stopped meanwhile.
        """

    async def play(self, role: str, work: Callable[[Leadership], Awaitable[bool]]) -> None:
        """Play ``role`` as the one process that does, for as long as the gateway runs: wait
        to lead it (:meth:`lead`), run ``work(leadership)`` while held, release it, and ask
        again when the leadership was lost (``work`` returned True: a database connection
        dropped). Returns when ``work`` returns False (the role's work ended for good) or the
        gateway stops."""

    async def pause(self, seconds: float) -> None:
        """Sleep ``seconds``, or less if the gateway begins to stop."""


__all__ = ["ChatCommand", "CommandContext", "OutboundMessage", "PinnedMemory", "PluginHost",
           "PluginMetrics", "ScheduledJobs"]
