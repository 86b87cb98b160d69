"""Runs scheduled jobs on time, exactly once, across processes and crashes.

The scheduler sleeps until the earliest due time the store knows (one indexed read,
:meth:`Store.next_job_wake`), or until a job changes in this process; it never polls the
table while nothing is due. With several processes (PostgreSQL) it also wakes every
``CLOUDYBOT_LEADER_RETRY_SECONDS`` at the latest, to see jobs another process made and the
leases of processes that died.

Awake, it claims the due runs (:meth:`Store.claim_jobs`: a lease, in one transaction; other
processes skip rows being claimed) and runs each: a ``message`` job posts its text (no model
call), a ``prompt`` job runs an agent turn in its thread, billed as any turn. The result is
committed with the claim's end (``TurnCommit.job``): recorded once per due time, the reply
stored in the transcript and rolling memory, queued in the thread's channel outbox and told
to webhooks (``job.completed``). A process that dies mid-run leaves its lease to end; another
then runs it, and a commit under a lost claim writes nothing, so nothing is sent twice.

A run found later than ``CLOUDYBOT_JOBS_LATE_SECONDS`` (the gateway was down) follows its
job's ``misfire`` rule: ``run_once`` (one run, marked late) or ``skip``; never a burst of
catch-up runs. Each time missed is recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import replace
from typing import Any, Protocol

from gateway.base.errors import Conflict, GatewayError, PaymentRequired
from gateway.base.locks import KeyedLocks
from gateway.base.times import iso_utc
from gateway.base.tokens import TokenCounter
from gateway.config.settings import Settings
from gateway.interfaces import Channel
from gateway.jobs.timing import When, local
from gateway.store import InboxEntry, Job, JobLease, JobOutcome, NewMessage, Store, TurnCommit
from gateway.store import events as webhook_events
from gateway.turn.agent import TurnResult
from gateway.turn.request import Turn

log = logging.getLogger(__name__)

CLAIM_BATCH = 100  # runs claimed in one statement at most
MAX_RUNNING = 64  # runs at once per process; due runs beyond wait, unclaimed, for a slot
RETRY_SECONDS = 5.0  # after the store failed
NO_CREDITS = "Scheduled job {job} did not run: no AI credits are left. It runs again next time."
FAILED = "Scheduled job {job} could not run: {reason}"


class Deliveries(Protocol):
    """The channel outbox, as the scheduler uses it."""

    def queue(self, entry: InboxEntry, text: str) -> None:
        """Deliver ``text``, just committed to the outbox under ``entry``'s channel and id."""


class SchedulerHost(Protocol):
    """What the scheduler uses of the gateway, and nothing more."""

    settings: Settings
    store: Store
    stopping: asyncio.Event
    locks: KeyedLocks

    @property
    def outbox(self) -> Deliveries:
        """The channel outbox."""

    def clock(self) -> float:
        """Epoch seconds."""

    @property
    def channels(self) -> Mapping[str, Channel]:
        """The loaded channels by name."""

    @property
    def counter(self) -> TokenCounter:
        """The token counter."""

    async def run(self, turn: Turn) -> TurnResult:
        """Run one turn on its thread."""

    def spawn(self, coroutine: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Background work that shutdown waits for."""


class Scheduler:
    """Claims and runs due jobs (see the module docstring)."""

    def __init__(self, host: SchedulerHost) -> None:
        self.host = host
        self._wake = asyncio.Event()
        self._running: set[asyncio.Task[None]] = set()
        # Told (user id, event) after a run posted: the dashboard's event streams.
        self.listeners: set[Callable[[str, dict[str, object]], None]] = set()

    def changed(self) -> None:
        """A job was made or resumed here: look at the next due time again."""
        self._wake.set()

    async def serve(self) -> None:
        """Run due jobs until the gateway stops, sleeping between due times."""
        host = self.host
        while not host.stopping.is_set():
            self._wake.clear()
            try:
                await self.claim_due()
                wake = await host.store.next_job_wake()
            except Exception:
                log.exception("scheduled jobs: cannot read the store; trying again")
                wake = host.clock() + RETRY_SECONDS
            await self._sleep_until(wake)

    async def _sleep_until(self, wake: float | None) -> None:
        """Sleep until ``wake`` (epoch s; None: until woken), a change, or the stop; with
        several processes at most ``CLOUDYBOT_LEADER_RETRY_SECONDS``."""
        host = self.host
        delay = None if wake is None else max(0.0, wake - host.clock())
        if host.store.shared:
            bound = host.settings.leader_retry_seconds
            delay = bound if delay is None else min(delay, bound)
        if delay == 0.0:
            return
        waits = [asyncio.ensure_future(self._wake.wait()),
                 asyncio.ensure_future(host.stopping.wait())]
        try:
            await asyncio.wait(waits, timeout=delay, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()
            await asyncio.gather(*waits, return_exceptions=True)

    async def claim_due(self) -> list[asyncio.Task[None]]:
        """Claim every run due now, as slots free up (at most MAX_RUNNING at once), and
        start each; the runs started."""
        host, started = self.host, []
        while not host.stopping.is_set():
            free = MAX_RUNNING - len(self._running)
            if free <= 0:
                await asyncio.wait(set(self._running), return_when=asyncio.FIRST_COMPLETED)
                continue
            leases = await host.store.claim_jobs(host.clock(), host.settings.jobs_lease_seconds,
                                                 min(free, CLAIM_BATCH))
            for lease in leases:
                task = host.spawn(self._run(lease))
                self._running.add(task)
                task.add_done_callback(self._finished)
                started.append(task)
            if len(leases) < min(free, CLAIM_BATCH):
                break
        return started

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        self._wake.set()  # the job's next due time moved

    async def run_due(self) -> int:
        """Claim and run every run due now, waiting for them: how many ran (tests move their
        clock and call this)."""
        started = await self.claim_due()
        await asyncio.gather(*started)
        return len(started)

    # --- one run ------------------------------------------------------------------------
    async def _run(self, lease: JobLease) -> None:
        try:
            await self._run_one(lease)
        except Exception:
            log.exception("scheduled job %s: the run due at %s failed; its lease will end and "
                          "it runs again", lease.job.id, iso_utc(lease.due))

    def outcome(self, lease: JobLease) -> JobOutcome:
        """What the run of ``lease`` is, now: on time or late (with the times it missed),
        and the next due time."""
        job, due, now = lease.job, lease.due, self.host.clock()
        when = When(job.kind, job.spec, job.time_zone)
        late = now - due > self.host.settings.jobs_late_seconds
        missed = tuple(when.between(due, now)) if late else ()
        next_run = when.following(due, now if late else due)
        deliver = self._delivers(job)
        if late and job.misfire == "skip":
            return JobOutcome(job.id, lease.token, due, "skipped",
                              f"missed: due {local(due, job.time_zone)}", missed, next_run)
        if late:
            return JobOutcome(job.id, lease.token, due, "late",
                              f"late: due {local(due, job.time_zone)}", missed, next_run,
                              deliver)
        return JobOutcome(job.id, lease.token, due, "sent", "", (), next_run, deliver)

    def _delivers(self, job: Job) -> bool:
        """Whether the job's thread is a channel's conversation (its outbox delivers)."""
        channel = self.host.channels.get(job.ref.channel)
        return channel is not None and channel.prefixed_keys

    async def _run_one(self, lease: JobLease) -> None:
        job = lease.job
        outcome = self.outcome(lease)
        owner = await self.host.store.get_user(job.user_id)
        if owner is not None and owner.blocked:  # an admin blocked the account: none of its
            outcome = replace(outcome, status="refused", detail="account blocked",  # jobs run
                              deliver=False)
        if outcome.status in ("skipped", "refused"):
            if not await self.host.store.finish_job(outcome):
                log.info("scheduled job %s: the claim was lost; another process has it", job.id)
            return
        if job.action == "message":
            note = f"({outcome.detail}) " if outcome.status == "late" else ""
            await self.post(job, note + job.text, outcome)
            return
        when = When(job.kind, job.spec, job.time_zone)
        message = (f"(Scheduled job {job.id}, {when.describe()}, due "
                   f"{local(lease.due, job.time_zone)}) {job.text}")
        try:
            result = await self.host.run(Turn(job.user_id, job.ref, message, job=outcome))
        except Conflict as exc:
            log.info("scheduled job %s: %s", job.id, exc.message)
            return
        except PaymentRequired as exc:
            spent = exc.code == PaymentRequired.code  # else the daily cap: it says when
            await self.post(job, NO_CREDITS.format(job=job.id) if spent
                            else FAILED.format(job=job.id, reason=exc.message),
                            replace(outcome, status="refused",
                                    detail="no credits left" if spent else exc.message[:300]))
            return
        except GatewayError as exc:
            await self.post(job, FAILED.format(job=job.id, reason=exc.message),
                            replace(outcome, status="failed", detail=exc.message[:300]))
            return
        self._delivered(job, outcome, result.reply,
                        result.trace.text if result.trace is not None else None)

    async def post(self, job: Job, text: str, outcome: JobOutcome) -> None:
        """Store ``text`` as the job's reply in its thread (transcript and rolling memory,
        no model call, no charge) with the claim's end, then deliver it."""
        host = self.host
        async with host.locks.hold(job.ref.session_key):
            thread = await host.store.get_thread(job.ref.session_key)
            ref = thread.ref if thread is not None else job.ref
            events = (webhook_events.message_created(ref, text, ()),
                      webhook_events.job_completed(ref, job.id, iso_utc(outcome.due),
                                                   outcome.status, text))
            try:
                await host.store.commit_turn(TurnCommit(
                    ref=ref, billed_user=job.user_id,
                    messages=[NewMessage("assistant", text, host.counter.count(text))],
                    charges=[], events=events, job=outcome))
            except Conflict as exc:
                log.info("scheduled job %s: %s", job.id, exc.message)
                return
        self._delivered(job, outcome, text)

    def _delivered(self, job: Job, outcome: JobOutcome, text: str,
                   trace: str | None = None) -> None:
        """The run is committed: send its reply through the outbox (continuing its turn's
        ``trace``, if any), tell the listeners."""
        if outcome.deliver:
            self.host.outbox.queue(InboxEntry(job.ref.channel, outcome.message_id,
                                              job.ref.session_key, job.address, job.max_chars,
                                              b"", trace=trace), text)
        event: dict[str, object] = {"jobId": job.id, "threadId": job.ref.thread_id,
                                    "status": outcome.status, "due": iso_utc(outcome.due)}
        for listener in list(self.listeners):
            with contextlib.suppress(Exception):
                listener(job.user_id, event)
