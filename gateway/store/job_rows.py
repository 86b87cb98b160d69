"""What both stores make of scheduled jobs' rows: the same records from the same columns
(:data:`~gateway.store.columns.JOB_COLUMNS`), the same run rows from an outcome."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gateway.store.records import Job, JobOutcome, ThreadRef

RAN = ("sent", "late")  # statuses of a run that posted what it was made to
MISSED = "missed"


def job_of(row: Sequence[Any]) -> Job:
    """A job from a row in JOB_COLUMNS' order."""
    (job_id, user_id, session_key, thread_id, channel, address, max_chars, kind, spec, zone,
     action, text, misfire, state, next_run, runs, misses, last_run, last_status,
     created_at) = row
    return Job(job_id, user_id, ThreadRef(user_id, thread_id, session_key, channel), address,
               int(max_chars), kind, spec, zone, action, text, misfire, state, next_run,
               int(runs), int(misses), last_run, last_status, created_at)


def job_params(job: Job) -> tuple[Any, ...]:
    """A new job's values in JOB_COLUMNS' order."""
    ref = job.ref
    return (job.id, job.user_id, ref.session_key, ref.thread_id, ref.channel, job.address,
            job.max_chars, job.kind, job.spec, job.time_zone, job.action, job.text, job.misfire,
            job.state, job.next_run, 0, 0, None, None, job.created_at)


def run_rows(outcome: JobOutcome, at: float) -> list[tuple[str, float, str, str, float]]:
    """The rows an outcome records, in JOB_RUN_COLUMNS' order: each miss, then the run."""
    return [*((outcome.job_id, due, MISSED, "", at) for due in outcome.missed),
            (outcome.job_id, outcome.due, outcome.status, outcome.detail, at)]


def counts(outcome: JobOutcome) -> tuple[int, int]:
    """What an outcome adds to a job's runs and misses."""
    ran = outcome.status in RAN
    return int(ran), len(outcome.missed) + int(outcome.status == "skipped")
