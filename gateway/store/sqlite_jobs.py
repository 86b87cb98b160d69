"""Scheduled jobs in SQLite: the ``jobs`` and ``job_runs`` tables (migration 11).

One process uses a SQLite database, so a claim is one ``UPDATE … RETURNING`` of the due rows;
the lease still matters across a crash: a run claimed before it is taken again once its lease
ends, and its result is committed only under the claim's token (:func:`finish_in`, also
called by ``commit_turn`` for a run that is a turn), so a run is recorded, and its reply
queued, once.
"""

from __future__ import annotations

import secrets
import sqlite3
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from gateway.base.errors import Conflict
from gateway.store.columns import JOB_COLUMNS, JOB_RUN_COLUMNS
from gateway.store.job_rows import counts, job_of, job_params, run_rows
from gateway.store.records import Job, JobLease, JobOutcome, JobRun

T = TypeVar("T")
_JOB_SLOTS = ", ".join("?" * len(JOB_COLUMNS.split(",")))


def finish_in(conn: sqlite3.Connection, outcome: JobOutcome, at: float) -> Job:
    """End a claimed run inside the caller's transaction: record it (and its misses), move
    the job to its next run and release the claim; the job as it was. Conflict when the claim
    is no longer held (taken over after its lease ended, the job deleted) or the run was
    recorded already: then nothing of the caller's transaction may stand."""
    row = conn.execute(f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = ? AND lease_token = ?",
                       (outcome.job_id, outcome.token)).fetchone()
    if row is None:
        raise Conflict(f"the run of job {outcome.job_id} is no longer this claim's",
                       code="job_claim_lost")
    rows = run_rows(outcome, at)
    conn.executemany(f"INSERT INTO job_runs ({JOB_RUN_COLUMNS}) VALUES (?, ?, ?, ?, ?)"
                     " ON CONFLICT (job_id, due) DO NOTHING", rows[:-1])
    try:
        conn.execute(f"INSERT INTO job_runs ({JOB_RUN_COLUMNS}) VALUES (?, ?, ?, ?, ?)",
                     rows[-1])
    except sqlite3.IntegrityError:
        raise Conflict(f"the run of job {outcome.job_id} due at {outcome.due} was recorded "
                       "already", code="job_run_recorded") from None
    ran, missed = counts(outcome)
    conn.execute(
        "UPDATE jobs SET next_run = ?1, wake_at = ?1,"
        " state = CASE WHEN ?1 IS NULL THEN 'done' ELSE state END,"
        " lease_token = NULL, lease_until = 0, runs = runs + ?2, misses = misses + ?3,"
        " last_run = ?4, last_status = ?5 WHERE id = ?6",
        (outcome.next_run, ran, missed, at, outcome.status, outcome.job_id))
    return job_of(row)


class SQLiteJobs:
    """The scheduled-jobs half of :class:`~gateway.store.sqlite.SQLiteStore` (a mixin: it
    uses the store's connections and clock)."""

    clock: Callable[[], float]

    if TYPE_CHECKING:  # the store's own
        async def _transaction(self, fn: Callable[[sqlite3.Connection], T],
                               off_loop: bool = False) -> T: ...

        async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T: ...

    async def create_job(self, job: Job, max_jobs: int) -> Job | None:
        """Store a new job, with the address of its conversation's latest channel message
        when it has none; None if the owner has ``max_jobs`` active or paused jobs."""
        def run(conn: sqlite3.Connection) -> Job | None:
            (held,) = conn.execute("SELECT count(*) FROM jobs WHERE user_id = ?"
                                   " AND state != 'done'", (job.user_id,)).fetchone()
            if held >= max_jobs:
                return None
            params: list[Any] = list(job_params(job))
            if not job.address:
                found = conn.execute(
                    "SELECT address, max_chars FROM inbox WHERE conversation = ?"
                    " ORDER BY id DESC LIMIT 1", (job.ref.session_key,)).fetchone()
                params[5], params[6] = found if found else ("{}", job.max_chars)
            conn.execute(f"INSERT INTO jobs ({JOB_COLUMNS}, wake_at) VALUES ({_JOB_SLOTS}, ?)",
                         (*params, job.next_run))
            return job_of(params)
        return await self._transaction(run)

    async def list_jobs(self, user_id: str) -> list[Job]:
        """The user's jobs, oldest first."""
        return await self._read(lambda conn: [job_of(row) for row in conn.execute(
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE user_id = ? ORDER BY created_at, id",
            (user_id,))])

    async def get_job(self, job_id: str) -> Job | None:
        """A job by id, or None."""
        def run(conn: sqlite3.Connection) -> Job | None:
            row = conn.execute(f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?",
                               (job_id,)).fetchone()
            return job_of(row) if row else None
        return await self._read(run)

    async def set_job_state(self, user_id: str, job_id: str, state: str,
                            next_run: float | None) -> Job | None:
        """Pause (``paused``) or resume (``active``, due at ``next_run``) the user's job that
        is not done; the job as it is now, or None."""
        def run(conn: sqlite3.Connection) -> Job | None:
            row = conn.execute(
                "UPDATE jobs SET state = ?1, next_run = ?2, wake_at = max(?2, lease_until)"
                f" WHERE id = ?3 AND user_id = ?4 AND state != 'done' RETURNING {JOB_COLUMNS}",
                (state, next_run, job_id, user_id)).fetchone()
            return job_of(row) if row else None
        return await self._transaction(run)

    async def delete_job(self, user_id: str, job_id: str) -> bool:
        """Remove the user's job and its record; False if the user has none such."""
        return await self._transaction(lambda conn: conn.execute(
            "DELETE FROM jobs WHERE id = ? AND user_id = ?", (job_id, user_id)).rowcount == 1)

    async def job_runs(self, job_id: str, limit: int) -> list[JobRun]:
        """The job's recorded runs and misses, latest due first."""
        return await self._read(lambda conn: [JobRun(*row) for row in conn.execute(
            f"SELECT {JOB_RUN_COLUMNS} FROM job_runs WHERE job_id = ?"
            " ORDER BY due DESC LIMIT ?", (job_id, limit))])

    async def next_job_wake(self) -> float | None:
        """When the earliest active job is due (or its claim's lease ends), or None."""
        return await self._read(lambda conn: conn.execute(
            "SELECT min(wake_at) FROM jobs WHERE state = 'active'").fetchone()[0])

    async def claim_jobs(self, now: float, lease_seconds: float,
                         limit: int) -> list[JobLease]:
        """Claim up to ``limit`` due runs (earliest first) until ``now + lease_seconds``."""
        token, until = secrets.token_hex(8), now + lease_seconds

        def run(conn: sqlite3.Connection) -> list[JobLease]:
            rows = conn.execute(
                "UPDATE jobs SET lease_token = ?1, lease_until = ?2, wake_at = ?2,"
                " claims = claims + 1 WHERE id IN (SELECT id FROM jobs WHERE state = 'active'"
                " AND wake_at <= ?3 ORDER BY wake_at LIMIT ?4)"
                f" RETURNING {JOB_COLUMNS}", (token, until, now, limit)).fetchall()
            leases = [JobLease(job_of(row), row[14], token, until) for row in rows]
            return sorted(leases, key=lambda lease: lease.due)
        return await self._transaction(run)

    async def finish_job(self, outcome: JobOutcome) -> bool:
        """End a claimed run that wrote no turn (skipped): recorded, the job moved on; False
        if the claim was lost meanwhile (nothing written)."""
        try:
            await self._transaction(lambda conn: finish_in(conn, outcome, self.clock()))
        except Conflict:
            return False
        return True

    async def time_zone(self, user_id: str) -> str | None:
        """The user's time zone (an IANA name), None if not set."""
        def run(conn: sqlite3.Connection) -> str | None:
            row = conn.execute("SELECT time_zone FROM users WHERE user_id = ?",
                               (user_id,)).fetchone()
            return row[0] if row else None
        return await self._read(run)

    async def set_time_zone(self, user_id: str, zone: str) -> bool:
        """Set the user's time zone; False if no such user."""
        return await self._transaction(lambda conn: conn.execute(
            "UPDATE users SET time_zone = ? WHERE user_id = ?", (zone, user_id)).rowcount == 1)
