"""The events outbound webhooks report (SPEC §15), and the body each delivery signs.

An event is about one user's thread or account and goes to that user's endpoints subscribed to
its type. The store writes it to the webhook outbox in the transaction of the change it
reports (a turn's commit, a summary's, a clear, a delete), so that a change committed is an
event delivered, at least once, whatever crashes in between.
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Sequence

from gateway.base import jsonio
from gateway.store.records import Charge, ThreadRef, WebhookEvent

MESSAGE_CREATED = "message.created"
THREAD_SUMMARIZED = "thread.summarized"
SESSION_ROTATED = "session.rotated"
THREAD_CLEARED = "thread.cleared"
THREAD_DELETED = "thread.deleted"
CREDITS_LOW = "credits.low"
WEBHOOK_TEST = "webhook.test"
EVENT_TYPES = (MESSAGE_CREATED, THREAD_SUMMARIZED, SESSION_ROTATED, THREAD_CLEARED,
               THREAD_DELETED, CREDITS_LOW, WEBHOOK_TEST)
LOW_CREDITS_SHARE = 0.10  # credits.low: the balance fell under this share of the plan's grant


_PROCESS = secrets.token_hex(8)  # with the counter: unique across processes and restarts
_sequence = itertools.count()


def new_message_id() -> str:
    """A delivery's ``webhook-id``: ``msg_``, this process's random 64 bits and a counter
    (no system call per id, as a random one would make)."""
    return f"msg_{_PROCESS}{next(_sequence):08x}"


def body(event_type: str, timestamp: str, data: object) -> str:
    """A delivery's body, as Standard Webhooks shapes it: ``{"type", "timestamp", "data"}``."""
    return jsonio.dumps({"type": event_type, "timestamp": timestamp, "data": data}).decode()


def _thread(ref: ThreadRef) -> dict[str, object]:
    return {"threadId": ref.thread_id, "channel": ref.channel, "sessionKey": ref.session_key}


def message_created(ref: ThreadRef, reply: str, charges: Sequence[Charge]) -> WebhookEvent:
    """A reply was stored: the thread, the reply and what its calls used."""
    usage = {"promptTokens": sum(c.prompt_tokens for c in charges),
             "completionTokens": sum(c.completion_tokens for c in charges),
             "credits": sum(c.credits for c in charges)}
    return WebhookEvent(MESSAGE_CREATED, {**_thread(ref), "reply": reply, "usage": usage})


def thread_summarized(ref: ThreadRef, summary: str, folded: int) -> WebhookEvent:
    """Older messages of the thread were folded into its rolling summary."""
    return WebhookEvent(THREAD_SUMMARIZED, {**_thread(ref), "summary": summary,
                                            "messagesFolded": folded})


def session_rotated(ref: ThreadRef, reason: str, archive: str | None) -> WebhookEvent:
    """The thread's agent session ended (``idle``, ``size``, ``manual``) and was archived."""
    return WebhookEvent(SESSION_ROTATED, {**_thread(ref), "reason": reason, "archive": archive})


def thread_cleared(ref: ThreadRef) -> WebhookEvent:
    """The thread's summary and rolling messages were emptied."""
    return WebhookEvent(THREAD_CLEARED, _thread(ref))


def thread_deleted(ref: ThreadRef, reason: str = "request") -> WebhookEvent:
    """The thread is gone (``request``, or ``retention`` when its plan's period ran out)."""
    return WebhookEvent(THREAD_DELETED, {**_thread(ref), "reason": reason})


def webhook_test(webhook_id: str) -> WebhookEvent:
    """What ``POST /api/webhooks/{id}/test`` sends."""
    return WebhookEvent(WEBHOOK_TEST, {"webhookId": webhook_id})


def credits_low_data(balance: int, threshold: int) -> dict[str, object]:
    """``credits.low``'s data (the store writes the event, knowing the balance after the
    charges that made it fall under ``threshold``)."""
    return {"credits": balance, "threshold": threshold}


def low_credits_threshold(grant: int) -> int | None:
    """The balance under which an account's credits are low: a tenth of its plan's monthly
    grant (None for a plan that grants nothing)."""
    return int(grant * LOW_CREDITS_SHARE) if grant > 0 else None


def fell_under(threshold: int | None, after: int, spent: int) -> bool:
    """Whether charges of ``spent`` credits took the balance from ``threshold`` or more to
    ``after``, under it (each fall is told once)."""
    return threshold is not None and spent > 0 and after < threshold <= after + spent
