"""The channel kit: what every channel shares between "a message arrived" and "reply delivered".

A channel turns a platform event into an :class:`InboundMessage` and calls
``gateway.receive(message)``, which returns at once (webhooks answer fast). Then, per
conversation and in arrival order:

1. a message already answered (same channel and id, also before a restart) is dropped;
2. the sender is mapped to an account (created on the default plan when auto-provisioning);
3. a command (``/new``, ``/remember`` ...) runs, or the message becomes a chat turn;
4. the reply is delivered with retries and backoff — delivery never re-runs the agent.

A turn marks its message as answered in the same transaction that stores it.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import hooks, validation
from .billing import RateLimiter, period_of
from .commands import run_command
from .errors import (
    BadRequest,
    GatewayError,
    PayloadTooLarge,
    PaymentRequired,
    ProviderError,
    RateLimited,
)
from .store import ThreadRef, User

if TYPE_CHECKING:
    from .gateway import Gateway

log = logging.getLogger(__name__)

DELIVERY_ATTEMPTS = 5
DELIVERY_BACKOFF_SECONDS = 1.0
MAX_DELIVERY_WAIT_SECONDS = 60.0
TYPING_INTERVAL_SECONDS = 4.0

NOT_PROVISIONED = ("Hello! This assistant is available to registered accounts only. "
                   "Ask its operator to create an account for you.")
OUT_OF_CREDITS = "You have no AI credits left. Ask the operator for more, or wait for next month."
PROVIDER_APOLOGY = ("Sorry, I could not reach the language model just now, so I could not "
                    "answer. Nothing was charged; please try again in a moment.")
TOO_LONG = "Sorry, that message is too long for me to handle. Could you shorten it?"
SOMETHING_BROKE = "Sorry, something went wrong on my side. Please try again in a moment."
BAD_SENDER = "Sorry, I cannot take messages from this sender id."
SLOW_DOWN = ("You are sending messages faster than your plan allows. "
             "Please wait {seconds} s and send that again.")


@dataclass(frozen=True)
class Command:
    """A chat command: ``/remember name Ada`` is ``Command("remember", "name Ada")``."""

    name: str
    argument: str = ""


@dataclass(frozen=True)
class InboundMessage:
    """One message from a channel, mapped to the gateway's identities.

    :param channel: the channel's name (``telegram``).
    :param conversation: the session key (``telegram:42``, ``slack:T1:C1:1700.1``).
    :param sender: the sender's account id (``telegram:777``).
    :param message_id: unique within the channel; a redelivery carries the same id.
    :param text: what the sender wrote (empty for a command without argument).
    :param reply: delivers one reply chunk back to where the message came from; raise
        :class:`DeliveryRetry` for rate limits, :class:`DeliveryFailed` when retrying is futile.
    :param typing: optional; shows "typing…" while the agent works.
    :param command: set when the message is a command rather than a chat turn.
    :param notice: set to answer with this text instead of a turn (an unsupported message).
    :param only_known: handle it only if the conversation already exists (a thread reply
        that does not address the bot).
    :param max_chars: the platform's longest message; longer replies are split.
    """

    channel: str
    conversation: str
    sender: str
    message_id: str
    text: str
    reply: Callable[[str], Awaitable[None]]
    typing: Callable[[], Awaitable[None]] | None = None
    command: Command | None = None
    notice: str | None = None
    only_known: bool = False
    max_chars: int = 4000


class DeliveryRetry(Exception):
    """The platform asked us to wait ``after`` seconds before sending again."""

    def __init__(self, after: float) -> None:
        super().__init__(f"retry after {after:g} s")
        self.after = after


class DeliveryFailed(Exception):
    """Delivery cannot succeed (the bot was blocked, the chat is gone): do not retry."""


class ConversationQueues:
    """One FIFO worker per conversation: messages of a conversation are handled one at a time,
    in arrival order; different conversations run in parallel. Nothing is dropped."""

    def __init__(self, handle: Callable[[InboundMessage], Awaitable[None]],
                 spawn: Callable[[Coroutine[Any, Any, None]], object]) -> None:
        self._handle = handle
        self._spawn = spawn
        self._queues: dict[str, deque[InboundMessage]] = {}

    def submit(self, message: InboundMessage) -> None:
        """Queue the message; starts the conversation's worker if it is idle. Never blocks."""
        queue = self._queues.get(message.conversation)
        if queue is None:
            queue = self._queues[message.conversation] = deque()
            self._spawn(self._work(message.conversation, queue))
        queue.append(message)

    async def _work(self, key: str, queue: deque[InboundMessage]) -> None:
        try:
            while queue:
                message = queue.popleft()
                try:
                    await self._handle(message)
                except Exception:
                    log.exception("handling %s message %s failed", message.channel,
                                  message.message_id)
        finally:
            del self._queues[key]

    def pending(self) -> int:
        """Conversations with queued or running work."""
        return len(self._queues)


def split_text(text: str, limit: int) -> list[str]:
    """Split ``text`` into chunks of at most ``limit`` characters, at paragraph, line or word
    boundaries when possible."""
    chunks: list[str] = []
    rest = text
    while len(rest) > limit:
        window = rest[:limit]
        cut = max(window.rfind("\n\n"), window.rfind("\n"), window.rfind(" "))
        if cut < limit // 2:
            cut = limit
        chunks.append(rest[:cut].rstrip())
        rest = rest[cut:].lstrip()
    if rest or not chunks:
        chunks.append(rest)
    return chunks


@asynccontextmanager
async def typing_indicator(message: InboundMessage) -> AsyncIterator[None]:
    """Show "typing…" every few seconds while the body runs (best effort)."""
    if message.typing is None:
        yield
        return

    async def keep_typing(show: Callable[[], Awaitable[None]]) -> None:
        while True:
            try:
                await show()
            except Exception as exc:  # a failed typing action never affects the turn
                log.debug("typing action failed: %s", exc)
            await asyncio.sleep(TYPING_INTERVAL_SECONDS)

    task = asyncio.get_running_loop().create_task(keep_typing(message.typing))
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


class Inbox:
    """Receives channel messages for a gateway and sees each through to a delivered reply."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.queues = ConversationQueues(self._handle, gateway.spawn)
        self.backoff_seconds = DELIVERY_BACKOFF_SECONDS
        # How a message over its plan's rate waits; tests swap in one that moves their clock.
        self.wait_for_rate: Callable[[float], Awaitable[None]] = asyncio.sleep

    def receive(self, message: InboundMessage) -> None:
        """Accept a message; it is handled in the background, in order per conversation."""
        self.queues.submit(message)

    async def _account(self, sender: str) -> User | None:
        gw = self.gateway
        validation.user_id(sender)  # channel ids become account ids, and key dashboard threads
        if not gw.settings.auto_provision:
            return await gw.store.get_user(sender)
        plan = gw.settings.plans[gw.settings.default_plan]
        user, created = await gw.store.ensure_user(sender, plan.name, plan.credits,
                                                   plan.browser_minutes, period_of(gw.clock()))
        if created:
            log.info("created account %s on plan %s", sender, plan.name)
        return user

    async def _handle(self, message: InboundMessage) -> None:
        text = await self.answer_now(message)
        if text is not None:
            await self.deliver(message, text)

    async def answer_now(self, message: InboundMessage) -> str | None:
        """Handle the message here and now and return the answer to deliver, or None when
        there is nothing to say (already answered, or a thread we are not in). Channels call
        it directly only for commands answered inline (Slack's slash-command ack)."""
        gw = self.gateway
        if await gw.store.inbound_seen(message.channel, message.message_id):
            log.info("%s message %s was already answered; dropped", message.channel,
                     message.message_id)
            return None
        thread = await gw.store.get_thread(message.conversation)
        if thread is None and message.only_known:
            return None
        try:
            user = await self._account(message.sender)
        except BadRequest:
            log.warning("%s sender id %r is not a valid account id; refused", message.channel,
                        message.sender)
            await gw.store.mark_inbound(message.channel, message.message_id)
            return BAD_SENDER
        if user is None:
            await gw.store.mark_inbound(message.channel, message.message_id)
            return NOT_PROVISIONED
        owner = thread.ref.user_id if thread is not None else user.user_id
        ref = ThreadRef(owner, message.conversation, message.conversation, message.channel)
        if message.notice is not None:
            await gw.store.mark_inbound(message.channel, message.message_id)
            return message.notice
        if message.command is not None:
            text = await run_command(gw, message.command, user, ref)
            await gw.store.mark_inbound(message.channel, message.message_id)
            return text
        return await self._chat(message, user, ref)

    async def _chat(self, message: InboundMessage, user: User, ref: ThreadRef) -> str:
        gw = self.gateway
        for attempt in range(2):
            try:
                async with typing_indicator(message):
                    result = await gw.chat(user.user_id, ref, message.text,
                                           inbound=(message.channel, message.message_id))
                return result.reply
            except RateLimited as exc:
                if attempt == 0 and exc.retry_after <= RateLimiter.WINDOW_SECONDS:
                    # A channel message is not refused for speed: it waits (its conversation
                    # waits behind it, in order) until the plan's window has room.
                    await self.wait_for_rate(exc.retry_after)
                    continue
                text = SLOW_DOWN.format(seconds=max(1, math.ceil(exc.retry_after)))
            except PaymentRequired:
                text = OUT_OF_CREDITS
            except ProviderError as exc:
                log.warning("turn of %s failed at the provider: %s", ref.session_key,
                            exc.message)
                text = PROVIDER_APOLOGY
            except PayloadTooLarge:
                text = TOO_LONG
            except GatewayError as exc:
                text = f"Sorry, I could not handle that: {exc.message}"
            except Exception:
                # Not the user's fault and maybe passing (a locked database): apologise, and
                # leave the message unmarked so that a redelivery is tried again.
                log.exception("turn of %s failed", ref.session_key)
                return SOMETHING_BROKE
            break
        await gw.store.mark_inbound(message.channel, message.message_id)
        return text

    async def deliver(self, message: InboundMessage, text: str) -> bool:
        """Send the reply in chunks of at most ``max_chars``, each retried with backoff.

        A chunk that was delivered is never sent again. True if every chunk arrived.
        """
        for chunk in split_text(text, message.max_chars):
            if not await self._deliver_chunk(message, chunk):
                return False
        await hooks.notify_each(self.gateway.pm.hook.reply_sent, gateway=self.gateway,
                                message=message, text=text)
        return True

    async def _deliver_chunk(self, message: InboundMessage, chunk: str) -> bool:
        for attempt in range(DELIVERY_ATTEMPTS):
            try:
                await message.reply(chunk)
                return True
            except DeliveryFailed as exc:
                log.error("cannot deliver to %s: %s", message.conversation, exc)
                return False
            except DeliveryRetry as exc:
                wait = exc.after
            except Exception as exc:
                wait = self.backoff_seconds * 2**attempt
                log.warning("delivery to %s failed (%s: %s)", message.conversation,
                            type(exc).__name__, exc)
            if attempt + 1 < DELIVERY_ATTEMPTS:
                await asyncio.sleep(min(wait, MAX_DELIVERY_WAIT_SECONDS))
        log.error("gave up delivering a reply to %s after %d attempts", message.conversation,
                  DELIVERY_ATTEMPTS)
        return False
