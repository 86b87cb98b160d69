"""The channel kit: what every channel shares between "a message arrived" and "reply stored".

A channel turns a platform event into an :class:`InboundMessage` and awaits
``gateway.receive(message)``, which commits it to the durable inbox (or recognises a
redelivery) and returns: only then does the channel acknowledge its platform. Then, per
conversation and in arrival order:

1. the sender is mapped to an account (created on the default plan when auto-provisioning);
2. a command (``/new``, ``/remember`` ...) runs, or the message becomes a chat turn;
3. the answer is committed to the outbox in the same transaction that marks the message
   answered, and :mod:`gateway.outbox` delivers it — delivery never re-runs the agent.

Each message taken has a span (``receive {channel}``) whose trace context is kept with its
inbox row: the turn that answers it is that span's child, or, when the message is answered
after a restart or by another process, links to it; the answer's outbox row keeps the turn's
context in turn (:mod:`gateway.kit.outbox`).

After a crash, the next start answers every message the inbox holds unanswered, in arrival
order, before taking new ones. A command is run again if the crash fell between the command
and its answer's commit (every command is safe to repeat).

With several processes (PostgreSQL), a conversation's messages are answered in the order they
arrived across a takeover too: a message that arrives while earlier ones of its conversation
are pending with another process waits, in its conversation's queue, until those are answered
— taken over and answered here first if their process died, or answered by it if it lives
(for at most ``EARLIER_WAIT_SECONDS``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import TYPE_CHECKING, Protocol

from gateway.accounts.secrets import SecretBox
from gateway.base import validation
from gateway.base.errors import (
    AccountBlocked,
    BadRequest,
    EmptyReply,
    GatewayError,
    PayloadTooLarge,
    PaymentRequired,
    ProviderError,
    RateLimited,
)
from gateway.base.pictures import Image
from gateway.base.times import epoch_of
from gateway.billing.credits import DailyCapReached, RateLimiter, period_of
from gateway.interfaces import Attachment, Channel, Command, InboundMessage
from gateway.kit.queues import ConversationQueues, KitHost
from gateway.kit.streaming import PREVIEW_INTERVAL_SECONDS, Preview
from gateway.observe import TraceContext
from gateway.observe.spans import stored_text
from gateway.store import ChannelMessage, InboxEntry, Thread, ThreadRef, User
from gateway.turn.request import Turn

if TYPE_CHECKING:
    from gateway.kit.outbox import Outbox
    from gateway.turn.agent import TurnResult

log = logging.getLogger(__name__)

TYPING_INTERVAL_SECONDS = 4.0
# A reply that comes this fast needs no "typing…" (a platform call as costly as the reply).
TYPING_DELAY_SECONDS = 1.0
SEALED_AS = "inbox"  # the associated data of sealed inbox payloads
FETCH_TIMEOUT_SECONDS = 30.0  # one attachment's download
# How long a message waits for earlier ones of its conversation that a live process answers
# (beyond it, a stuck process does not stop the conversation), and how often it looks.
EARLIER_WAIT_SECONDS = 120.0
EARLIER_POLL_SECONDS = 0.2

NOT_PROVISIONED = ("Hello! This assistant is available to registered accounts only. "
                   "Ask its operator to create an account for you.")
OUT_OF_CREDITS = "You have no AI credits left. Ask the operator for more, or wait for next month."
DAILY_CAP = ("You reached today's limit of {cap} AI credits. It resets at 00:00 UTC, in "
             "{hours} h {minutes:02d} min.")
BLOCKED = ("This account is blocked, so I cannot answer. Ask the operator if you think it "
           "should not be.")
PROVIDER_APOLOGY = ("Sorry, I could not reach the language model just now, so I could not "
                    "answer. Nothing was charged; please try again in a moment.")
EMPTY_REPLY = ("The model answered with nothing at all, so I have nothing to show. Nothing was "
               "charged; ask again, perhaps in other words.")
TOO_LONG = "Sorry, that message is too long for me to handle. Could you shorten it?"
SOMETHING_BROKE = "Sorry, something went wrong on my side. Please try again in a moment."
BAD_SENDER = "Sorry, I cannot take messages from this sender id."
SLOW_DOWN = ("You are sending messages faster than your plan allows. "
             "Please wait {seconds} s and send that again.")




def receive_attributes(message: InboundMessage) -> dict[str, str]:
    """A message's intake span: its channel, conversation and id (never its words)."""
    return {"cloudybot.channel": message.channel, "messaging.system": message.channel,
            "messaging.operation.name": "receive", "messaging.operation.type": "receive",
            "messaging.destination.name": message.conversation,
            "messaging.message.id": message.message_id}


@asynccontextmanager
async def typing_indicator(show: Callable[[], Awaitable[None]] | None,
                           delay: float = TYPING_DELAY_SECONDS) -> AsyncIterator[None]:
    """Call ``show`` every few seconds while the body runs, from ``delay`` seconds on (best
    effort)."""
    if show is None:
        yield
        return

    async def keep_typing(show: Callable[[], Awaitable[None]]) -> None:
        await asyncio.sleep(delay)
        while True:
            try:
                await show()
            except Exception as exc:  # a failed typing action never affects the turn
                log.debug("typing action failed: %s", exc)
            await asyncio.sleep(TYPING_INTERVAL_SECONDS)

    task = asyncio.get_running_loop().create_task(keep_typing(show))
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


class InboxHost(KitHost, Protocol):
    """What the inbox uses of the gateway, and nothing more."""

    outbox: Outbox

    @property
    def secret_box(self) -> SecretBox:
        """Encryption of the inbox's payloads."""

    async def run(self, turn: Turn) -> TurnResult:
        """Run one turn on its thread."""

    async def run_command(self, command: Command, user: User, ref: ThreadRef) -> str:
        """Run a chat command; return its answer."""


class Inbox:
    """Takes channel messages durably and sees each through to a stored answer."""

    def __init__(self, gateway: InboxHost) -> None:
        self.gateway = gateway
        self.queues: ConversationQueues[InboundMessage] = ConversationQueues(
            self._handle, gateway.spawn, key=lambda m: m.conversation, what="inbound message")
        # How a message over its plan's rate waits (cut short when the gateway stops); tests
        # swap in one that moves their clock.
        self.wait_for_rate: Callable[[float], Awaitable[None]] = gateway.pause
        self.typing_delay_seconds = TYPING_DELAY_SECONDS
        self.preview_interval_seconds = PREVIEW_INTERVAL_SECONDS
        # Messages that arrived behind earlier ones pending with another process: their inbox
        # ids. Messages recover() queued, and those of them answered ahead of their place.
        self._behind: dict[tuple[str, str], int] = {}
        self._recovered: set[tuple[str, str]] = set()
        self._answered_early: set[tuple[str, str]] = set()
        # The trace context each queued message continues (its intake's, or the row's when
        # taken up later), then its turn's (what its answer's delivery continues).
        self._traces: dict[tuple[str, str], TraceContext] = {}

    # --- intake -------------------------------------------------------------------------
    async def receive(self, message: InboundMessage) -> bool:
        """Commit the message to the inbox and queue it; False for a redelivery (nothing
        done). Once this returns, the message survives a crash."""
        key = (message.channel, message.message_id)
        tracer = self.gateway.tracer
        with tracer.root(f"receive {message.channel}",
                         receive_attributes(message) if tracer.on else None,
                         kind="consumer") as span:
            trace = span.context()
            intake = await self.gateway.store.inbox_add(self._entry(message, trace))
            if intake is None:
                span.set("cloudybot.message.redelivered", True)
                log.info("%s message %s arrived again; already taken", message.channel,
                         message.message_id)
                return False
        if trace is not None:
            self._traces[key] = trace
        if intake.behind_others:
            self._behind[key] = intake.id
        self.queues.submit(message)
        return True

    async def recover(self) -> int:
        """Queue every message a previous run (or, with several processes, one that died) took
        but did not answer, in arrival order; return how many."""
        pending = await self.gateway.store.inbox_pending()
        for entry in pending:
            message = self._restore(entry)
            if message is None:
                log.error("%s message %s in the inbox cannot be read (was the secret key "
                          "changed?); dropped", entry.channel, entry.message_id)
                await self.gateway.store.drop_inbox(entry.channel, entry.message_id)
                continue
            self._recovered.add((entry.channel, entry.message_id))
            self._taken_up(entry)
            self.queues.submit(message)
        if pending:
            log.info("inbox: %d message(s) left unanswered by a stopped run to answer",
                     len(pending))
        return len(pending)

    def _taken_up(self, entry: InboxEntry) -> None:
        """A message taken from the inbox after its intake (a restart, another process's):
        its turn links to the intake's trace."""
        trace = TraceContext.stored(entry.trace)
        if trace is not None:
            self._traces[(entry.channel, entry.message_id)] = trace

    def _entry(self, message: InboundMessage, trace: TraceContext | None = None) -> InboxEntry:
        return InboxEntry(message.channel, message.message_id, message.conversation,
                          json.dumps(dict(message.address)), message.max_chars,
                          self._seal(message), trace=stored_text(trace))

    def _seal(self, message: InboundMessage) -> bytes:
        """The message's words and options, encrypted: they are not redacted yet."""
        command = message.command
        payload = {"sender": message.sender, "text": message.text,
                   "command": [command.name, command.argument] if command else None,
                   "notice": message.notice, "only_known": message.only_known,
                   "attachments": [[a.kind, a.name, dict(a.ref)] for a in message.attachments]}
        return self.gateway.secret_box.seal({"message": json.dumps(payload)}, SEALED_AS)

    def _restore(self, entry: InboxEntry) -> InboundMessage | None:
        document = self.gateway.secret_box.open(entry.payload or b"", SEALED_AS)
        if document is None:
            return None
        payload = json.loads(document["message"])
        command = payload["command"]
        return InboundMessage(
            channel=entry.channel, conversation=entry.conversation, sender=payload["sender"],
            message_id=entry.message_id, text=payload["text"],
            address=json.loads(entry.address),
            command=Command(command[0], command[1]) if command else None,
            notice=payload["notice"], only_known=payload["only_known"],
            max_chars=entry.max_chars,
            attachments=tuple(Attachment(kind, name, ref)
                              for kind, name, ref in payload.get("attachments", ())))

    # --- answering ------------------------------------------------------------------------
    async def _handle(self, message: InboundMessage) -> None:
        key = (message.channel, message.message_id)
        self._recovered.discard(key)
        if key in self._answered_early:  # taken over and answered before a later message
            self._answered_early.discard(key)
            return
        position = self._behind.pop(key, None)
        if position is not None:
            await self._answer_earlier(message, position)
        await self._see_through(message)

    async def _answer_earlier(self, message: InboundMessage, position: int) -> None:
        """Answer first the messages of ``message``'s conversation that arrived before it and
        were pending with another process: take over a dead one's, wait for a live one's."""
        store, entry = self.gateway.store, self._entry(message)
        answered: set[tuple[str, str]] = set()
        waited = 0.0
        while True:
            earlier = await store.inbox_take_earlier(dataclasses.replace(entry, id=position))
            for taken in earlier.taken:
                key = (taken.channel, taken.message_id)
                restored = self._restore(taken)
                if key in answered or restored is None:
                    continue  # tried here already; unreadable ones are recover()'s to drop
                answered.add(key)
                if key in self._recovered:  # queued behind this one too: skipped there
                    self._answered_early.add(key)
                log.info("%s message %s arrived before %s: answered first", taken.channel,
                         taken.message_id, message.message_id)
                self._taken_up(taken)
                await self._see_through(restored)
            if not earlier.elsewhere or waited >= EARLIER_WAIT_SECONDS:
                if earlier.elsewhere:
                    log.warning("%s message %s: %d earlier message(s) still pending with another "
                                "process after %.0f s; answering it anyway", message.channel,
                                message.message_id, earlier.elsewhere, waited)
                return
            await self.gateway.pause(EARLIER_POLL_SECONDS)
            waited += EARLIER_POLL_SECONDS

    async def _see_through(self, message: InboundMessage) -> None:
        """Answer the message and queue its stored reply for delivery."""
        preview = self._preview(message)
        try:
            text = await self._answer(message, preview)
        finally:
            handle = await preview.close() if preview is not None else None
            trace = self._traces.pop((message.channel, message.message_id), None)
        if text is not None:
            # The stored reply goes out through the outbox; the preview's handle rides along
            # in memory only (after a crash the reply is sent anew, the preview stays), and so
            # does the trace its delivery continues (its row has it too).
            address = {**message.address, "preview": handle} if handle is not None \
                else message.address
            self.gateway.outbox.queue(InboxEntry(
                message.channel, message.message_id, message.conversation,
                json.dumps(dict(address)), message.max_chars, b"",
                trace=stored_text(trace)), text)

    def _preview(self, message: InboundMessage) -> Preview | None:
        """A preview of the reply as it is written, for channels that can show one."""
        channel = self.gateway.channels.get(message.channel)
        if channel is None or message.command is not None or message.notice is not None \
                or not self.gateway.settings.channel_streaming \
                or type(channel).stream is Channel.stream:
            return None
        return Preview(channel, message.address, self.preview_interval_seconds)

    async def _images(self, message: InboundMessage) -> list[Image]:
        """The message's pictures, downloaded through its channel for a vision model; one that
        cannot be had is left out (the text already names it)."""
        gw = self.gateway
        channel = gw.channels.get(message.channel)
        if not gw.settings.llm_vision or channel is None:
            return []
        images = []
        for attachment in message.attachments:
            if attachment.kind != "image":
                continue
            try:
                image = await asyncio.wait_for(
                    channel.fetch(attachment, gw.settings.llm_max_image_bytes),
                    FETCH_TIMEOUT_SECONDS)
            except Exception as exc:
                log.warning("%s: cannot fetch %s (%s: %s)", message.channel, attachment.name,
                            type(exc).__name__, exc)
                continue
            if image is not None:
                images.append(image)
        return images

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

    def _daily_cap_note(self, refusal: DailyCapReached) -> str:
        """The in-channel note of a turn past the daily cap: when the allowance is whole
        again."""
        left = max(0, math.ceil((epoch_of(refusal.resets_at) - self.gateway.clock()) / 60))
        return DAILY_CAP.format(cap=refusal.daily.cap, hours=left // 60, minutes=left % 60)

    async def _reply(self, message: InboundMessage, text: str) -> str | None:
        """Store ``text`` as the message's answer (outbox and inbox in one commit)."""
        trace = self._traces.get((message.channel, message.message_id))
        answered = await self.gateway.store.answer_inbox(message.channel, message.message_id,
                                                         text, stored_text(trace))
        return text if answered else None

    async def answer_inline(self, message: InboundMessage) -> str | None:
        """Run a command here and now and return its answer (None for a redelivery): for
        platforms that take the answer in their acknowledgement (Slack's slash commands). Its
        id is recorded as answered first: a command runs at most once."""
        if await self.gateway.store.inbox_add(self._entry(message), answered=True) is None:
            return None
        found = await self._identify(message,
                                     await self.gateway.store.get_thread(message.conversation))
        if isinstance(found, str):
            return found
        if message.command is None:
            raise ValueError("answer_inline runs commands only")
        return await self.gateway.run_command(message.command, *found)

    async def _identify(self, message: InboundMessage,
                        thread: Thread | None) -> tuple[User, ThreadRef] | str:
        """The sender's account and the conversation's thread (``thread`` as stored, owned by
        whoever started it; else the sender's, who would start it), or the refusal to send
        when the sender cannot be served."""
        try:
            user = await self._account(message.sender)
        except BadRequest:
            log.warning("%s sender id %r is not a valid account id; refused", message.channel,
                        message.sender)
            return BAD_SENDER
        if user is None:
            return NOT_PROVISIONED
        if user.blocked:
            return BLOCKED
        if thread is not None:
            return user, thread.ref
        return user, ThreadRef(user.user_id, message.conversation, message.conversation,
                               message.channel)

    async def _answer(self, message: InboundMessage,
                      preview: Preview | None = None) -> str | None:
        """Answer the message and store the answer; None when there is nothing to send."""
        gw = self.gateway
        # The thread is read here only where it decides something; a chat turn reads it with
        # the rest of its state (the agent keeps the stored owner).
        thread = await gw.store.get_thread(message.conversation) \
            if message.only_known or message.command is not None else None
        if message.only_known and thread is None:
            await gw.store.drop_inbox(message.channel, message.message_id)
            return None
        found = await self._identify(message, thread)
        if isinstance(found, str):
            return await self._reply(message, found)
        user, ref = found
        if message.notice is not None:
            return await self._reply(message, message.notice)
        if message.command is not None:
            return await self._reply(message,
                                     await gw.run_command(message.command, user, ref))
        return await self._chat(message, user, ref, preview)

    async def _chat(self, message: InboundMessage, user: User, ref: ThreadRef,
                    preview: Preview | None) -> str | None:
        gw = self.gateway
        key = (message.channel, message.message_id)
        turn = Turn(user.user_id, ref, message.text, images=tuple(await self._images(message)),
                    answers=ChannelMessage(message.channel, message.message_id),
                    on_text=preview.update if preview else None, trace=self._traces.get(key))
        channel = gw.channels.get(message.channel)
        show_typing = None
        if channel is not None and type(channel).typing is not Channel.typing:
            show_typing = partial(channel.typing, message.address)
        for attempt in range(2):
            try:
                async with typing_indicator(show_typing, self.typing_delay_seconds):
                    result = await gw.run(turn)
                if result.trace is not None:  # what its reply's delivery continues
                    self._traces[key] = result.trace
                return result.reply
            except RateLimited as exc:
                if attempt == 0 and exc.retry_after <= RateLimiter.WINDOW_SECONDS:
                    # A channel message is not refused for speed: it waits (its conversation
                    # waits behind it, in order) until the plan's window has room.
                    await self.wait_for_rate(exc.retry_after)
                    if gw.stopping.is_set():
                        return None  # stays in the inbox for the next start
                    continue
                text = SLOW_DOWN.format(seconds=max(1, math.ceil(exc.retry_after)))
            except DailyCapReached as exc:
                text = self._daily_cap_note(exc)
            except PaymentRequired:
                text = OUT_OF_CREDITS
            except AccountBlocked:
                text = BLOCKED
            except EmptyReply:
                text = EMPTY_REPLY
            except ProviderError as exc:
                log.warning("turn of %s failed at the provider: %s", ref.session_key,
                            exc.message)
                text = PROVIDER_APOLOGY
            except PayloadTooLarge:
                text = TOO_LONG
            except GatewayError as exc:
                text = f"Sorry, I could not handle that: {exc.message}"
            except Exception:
                log.exception("turn of %s failed", ref.session_key)
                text = SOMETHING_BROKE
            break
        return await self._reply(message, text)
