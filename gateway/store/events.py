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
from gateway.store import policy
from gateway.store.records import Charge, ThreadRef, WebhookEvent

MESSAGE_CREATED = "message.created"
THREAD_SUMMARIZED = "thread.summarized"
SESSION_ROTATED = "session.rotated"
THREAD_CLEARED = "thread.cleared"
THREAD_DELETED = "thread.deleted"
CREDITS_LOW = "credits.low"
WEBHOOK_TEST = "webhook.test"
JOB_COMPLETED = "job.completed"
EVENT_TYPES = (MESSAGE_CREATED, THREAD_SUMMARIZED, SESSION_ROTATED, THREAD_CLEARED,
               THREAD_DELETED, CREDITS_LOW, JOB_COMPLETED, WEBHOOK_TEST)
# credits.low's balance (or spending today) in a body rendered before it is known
_BALANCE_SLOT = '"credits":-1'
_SPENT_SLOT = '"spentToday":-1'


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


def credits_low(balance: int, threshold: int) -> WebhookEvent:
    """The balance fell under ``threshold`` (:func:`gateway.store.policy.fell_under`):
    ``balance`` is what the charges that made it fall left."""
    return WebhookEvent(CREDITS_LOW, {"reason": "balance", "credits": balance,
                                      "threshold": threshold})


def daily_credits_low(spent_today: int, cap: int, day: str) -> WebhookEvent:
    """Today's spending reached 80% of the daily ``cap`` (:func:`gateway.store.policy.
    reached`): ``spent_today`` is what the charges that made it so brought it to."""
    threshold = policy.daily_low_threshold(cap)
    return WebhookEvent(CREDITS_LOW, {"reason": "daily_cap", "spentToday": spent_today,
                                      "threshold": threshold, "dailyCredits": cap, "day": day,
                                      "resetsAt": policy.resets_at(day)})


def _around(event: WebhookEvent, timestamp: str, slot: str) -> tuple[str, str]:
    text = body(event.type, timestamp, event.data)
    head, tail = text.split(slot)  # one slot: it is one key of the data
    return head + slot[:-2], tail


def credits_low_around(timestamp: str, threshold: int) -> tuple[str, str]:
    """The body of :func:`credits_low` at ``timestamp``, cut where the balance goes: what comes
    before its digits and what comes after, for a store that learns the balance only in the
    statement that queues the event (its body is then the one :func:`body` writes)."""
    return _around(credits_low(-1, threshold), timestamp, _BALANCE_SLOT)


def daily_credits_low_around(timestamp: str, cap: int, day: str) -> tuple[str, str]:
    """The body of :func:`daily_credits_low` at ``timestamp``, cut where the spending goes
    (as :func:`credits_low_around` cuts its)."""
    return _around(daily_credits_low(-1, cap, day), timestamp, _SPENT_SLOT)


def job_completed(ref: ThreadRef, job_id: str, due: str, status: str,
                  reply: str) -> WebhookEvent:
    """A scheduled job's run ended (``sent``, ``late``, ``refused``, ``failed``): the thread,
    the job, the time it was due and what it posted."""
    return WebhookEvent(JOB_COMPLETED, {**_thread(ref), "jobId": job_id, "due": due,
                                        "status": status, "reply": reply})
