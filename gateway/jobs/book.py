"""A user's jobs: made (under their plan's limits), listed, paused, resumed and deleted.

The ``schedule`` tool, the ``/remind`` and ``/jobs`` commands and ``/api/jobs`` all go through
one :class:`JobBook`, so a job is checked alike wherever it is made.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable

from gateway.base.errors import BadRequest, Forbidden, NotFound
from gateway.base.times import iso_utc
from gateway.config.settings import Settings
from gateway.jobs import timing
from gateway.jobs.timing import When, interval_text, zone
from gateway.store import Job, JobRequest, Store, ThreadRef

ACTIONS = ("message", "prompt")
MISFIRES = ("run_once", "skip")
MAX_TEXT_CHARS = 4000
MAX_CHARS = 4000  # a channel message's longest, when the conversation has no message yet
JOB_ID = re.compile(r"job_[0-9a-f]{16}")
DASHBOARD = "dashboard"


class JobBook:
    """Every way to change a user's jobs (see the module docstring)."""

    def __init__(self, settings: Settings, store: Store, clock: Callable[[], float],
                 changed: Callable[[], None]) -> None:
        self.settings = settings
        self.store = store
        self.clock = clock
        self.changed = changed  # the scheduler's wake-up: the next due time may have moved

    async def time_zone(self, user_id: str) -> str:
        """The user's time zone, or the gateway's default (``CLOUDYBOT_JOBS_TIME_ZONE``)."""
        return await self.store.time_zone(user_id) or self.settings.jobs_time_zone

    async def set_time_zone(self, user_id: str, name: str) -> str:
        """Make ``name`` the user's time zone (400 if unknown)."""
        zone(name)
        if not await self.store.set_time_zone(user_id, name):
            raise NotFound("no such user", code="user_not_found")
        return name

    async def create(self, plan: str, ref: ThreadRef, request: JobRequest) -> Job:
        """Make a job of ``ref.user_id`` (on ``plan``) in the thread ``ref``: 400 for a time
        already past, an unknown action or misfire rule, or an interval shorter than the
        plan allows; 403 ``too_many_jobs`` past the plan's ``max_jobs``."""
        limits = self.settings.plans.get(plan)
        if limits is None:
            raise Forbidden(f"plan {plan!r} is not configured", code="unknown_plan")
        if request.action not in ACTIONS:
            raise BadRequest(f"action must be one of {', '.join(ACTIONS)}", code="invalid_job")
        if request.misfire not in MISFIRES:
            raise BadRequest(f"misfire must be one of {', '.join(MISFIRES)}", code="invalid_job")
        text = request.text.strip()
        if not text or len(text) > MAX_TEXT_CHARS or "\x00" in text:
            raise BadRequest(f"a job needs text (at most {MAX_TEXT_CHARS} characters, no NUL)",
                             code="invalid_job")
        when = timing.of(request.kind, request.spec, request.time_zone)
        shortest = limits.min_job_interval_minutes * 60
        if when.shortest_gap() < shortest:
            raise BadRequest(f"plan {plan} runs a job at most every "
                             f"{interval_text(shortest)}", code="interval_too_short")
        now = self.clock()
        first = when.first(now)
        if first is None:
            raise BadRequest("that time is past", code="time_past")
        job = Job(f"job_{secrets.token_hex(8)}", ref.user_id, ref, "", MAX_CHARS,
                  when.kind, when.spec, when.time_zone, request.action,
                  text, request.misfire, "active", first, created_at=iso_utc(now))
        made = await self.store.create_job(job, limits.max_jobs)
        if made is None:
            raise Forbidden(f"plan {plan} holds at most {limits.max_jobs} jobs; delete one "
                            "first", code="too_many_jobs")
        self.changed()
        return made

    async def create_in(self, user_id: str, conversation: str, request: JobRequest) -> Job:
        """Make a job of ``user_id`` (on their plan) in the thread whose session key is
        ``conversation`` (a channel's ``telegram:42``, a dashboard thread's ``alice--t1``),
        even before anything is stored there; 404 for no such user."""
        user = await self.store.get_user(user_id)
        if user is None:
            raise NotFound("no such user", code="user_not_found")
        thread = await self.store.get_thread(conversation)
        if thread is not None:
            ref = ThreadRef(user_id, thread.ref.thread_id, conversation, thread.ref.channel)
        elif conversation.startswith(f"{user_id}--"):
            ref = ThreadRef(user_id, conversation.removeprefix(f"{user_id}--"), conversation,
                            DASHBOARD)
        else:
            ref = ThreadRef(user_id, conversation, conversation, conversation.partition(":")[0])
        return await self.create(user.plan, ref, request)

    async def list(self, user_id: str) -> list[Job]:
        """The user's jobs, oldest first."""
        return await self.store.list_jobs(user_id)

    async def owned(self, user_id: str, job_id: str) -> Job:
        """The user's job; 404 for anybody else's or none."""
        job = await self.store.get_job(job_id)
        if job is None or job.user_id != user_id:
            raise NotFound("no such job", code="job_not_found")
        return job

    async def pause(self, user_id: str, job_id: str) -> Job:
        """Stop the job's runs until it is resumed (404 if none such, or done)."""
        await self.owned(user_id, job_id)
        paused = await self.store.set_job_state(user_id, job_id, "paused", None)
        if paused is None:
            raise NotFound("no such job (or it is done)", code="job_not_found")
        return paused

    async def resume(self, user_id: str, job_id: str) -> Job:
        """Run the job again from its next time after now (a one-time job whose time passed
        while paused runs at once)."""
        job = await self.owned(user_id, job_id)
        now = self.clock()
        when = When(job.kind, job.spec, job.time_zone)
        resumed = await self.store.set_job_state(user_id, job_id, "active",
                                                 when.first(now) or now)
        if resumed is None:
            raise NotFound("no such job (or it is done)", code="job_not_found")
        self.changed()
        return resumed

    async def delete(self, user_id: str, job_id: str) -> None:
        """Delete the job and its record (404 if none such)."""
        if not await self.store.delete_job(user_id, job_id):
            raise NotFound("no such job", code="job_not_found")
