"""Scheduled jobs in PostgreSQL: the ``jobs`` and ``job_runs`` tables (migration 10).

Several processes claim due runs from the same table: a claim is one statement that locks
the due rows ``FOR UPDATE SKIP LOCKED`` (a row another process is claiming is passed over,
never waited for) and leases them to this claim's token. A run's result is committed only
while that token still holds its job (:meth:`PostgresJobs._finish_in`, which the turn's
commit runs in its own transaction), and ``job_runs`` has one row per job and due time: a
process killed mid-run leaves its lease to end, another process then runs it, and whichever
commits second changes nothing.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from gateway.base.errors import Conflict
from gateway.store.columns import JOB_COLUMNS, JOB_RUN_COLUMNS
from gateway.store.job_rows import counts, job_of, job_params, run_rows
from gateway.store.records import Job, JobLease, JobOutcome, JobRun

T = TypeVar("T")
Connection = Any  # an asyncpg.Connection (asyncpg ships no type hints)
_SLOTS = ", ".join(f"${n}" for n in range(1, len(JOB_COLUMNS.split(",")) + 1))
_PREFIXED = ", ".join(f"j.{column.strip()}" for column in JOB_COLUMNS.split(","))

_CLAIM = f"""
WITH due AS (
  SELECT id FROM jobs WHERE state = 'active' AND wake_at <= $1
  ORDER BY wake_at LIMIT $2 FOR UPDATE SKIP LOCKED)
UPDATE jobs j SET lease_token = $3, lease_until = $4, wake_at = $4, claims = j.claims + 1
FROM due WHERE j.id = due.id
RETURNING {_PREFIXED}
"""


class PostgresJobs:
    """The scheduled-jobs part of :class:`~gateway.store.postgres.PostgresStore` (a mixin: it
    uses the store's connections and clock)."""

    clock: Callable[[], float]

    if TYPE_CHECKING:  # the store's own
        async def _query(self, work: Callable[[Connection], Awaitable[T]]) -> T: ...

        async def _transaction(self, work: Callable[[Connection], Awaitable[T]]) -> T: ...

    async def _finish_in(self, conn: Connection, outcome: JobOutcome, at: float) -> Job:
        """End a claimed run inside the caller's transaction (see the SQLite store's
        ``finish_in``): the job as it was; Conflict when the claim is lost or the run was
        recorded already, and then nothing of the transaction may stand."""
        row = await conn.fetchrow(
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = $1 AND lease_token = $2 FOR UPDATE",
            outcome.job_id, outcome.token)
        if row is None:
            raise Conflict(f"the run of job {outcome.job_id} is no longer this claim's",
                           code="job_claim_lost")
        rows = run_rows(outcome, at)
        columns = list(zip(*rows, strict=True))
        recorded = await conn.fetch(
            f"INSERT INTO job_runs ({JOB_RUN_COLUMNS}) SELECT * FROM unnest($1::text[],"
            " $2::float8[], $3::text[], $4::text[], $5::float8[])"
            " ON CONFLICT (job_id, due) DO NOTHING RETURNING due", *map(list, columns))
        if outcome.due not in {r["due"] for r in recorded}:
            raise Conflict(f"the run of job {outcome.job_id} due at {outcome.due} was recorded "
                           "already", code="job_run_recorded")
        ran, missed = counts(outcome)
        await conn.execute(
            "UPDATE jobs SET next_run = $1, wake_at = $1,"
            " state = CASE WHEN $1::float8 IS NULL THEN 'done' ELSE state END,"
            " lease_token = NULL, lease_until = 0, runs = runs + $2, misses = misses + $3,"
            " last_run = $4, last_status = $5 WHERE id = $6",
            outcome.next_run, ran, missed, at, outcome.status, outcome.job_id)
        return job_of(row)

    async def create_job(self, job: Job, max_jobs: int) -> Job | None:
        """Store a new job, with the address of its conversation's latest channel message
        when it has none; None if the owner has ``max_jobs`` active or paused jobs (counted
        under the owner's row lock, so concurrent creations cannot pass it)."""
        async def run(conn: Connection) -> Job | None:
            await conn.execute("SELECT 1 FROM users WHERE user_id = $1 FOR UPDATE",
                               job.user_id)
            held = await conn.fetchval("SELECT count(*) FROM jobs WHERE user_id = $1"
                                       " AND state != 'done'", job.user_id)
            if held >= max_jobs:
                return None
            params: list[Any] = list(job_params(job))
            if not job.address:
                found = await conn.fetchrow(
                    "SELECT address, max_chars FROM inbox WHERE conversation = $1"
                    " ORDER BY id DESC LIMIT 1", job.ref.session_key)
                params[5], params[6] = (found[0], found[1]) if found else ("{}", job.max_chars)
            await conn.execute(f"INSERT INTO jobs ({JOB_COLUMNS}, wake_at) VALUES ({_SLOTS},"
                               f" ${len(params) + 1})", *params, job.next_run)
            return job_of(params)
        return await self._transaction(run)

    async def list_jobs(self, user_id: str) -> list[Job]:
        """The user's jobs, oldest first."""
        async def run(conn: Connection) -> list[Job]:
            return [job_of(row) for row in await conn.fetch(
                f"SELECT {JOB_COLUMNS} FROM jobs WHERE user_id = $1 ORDER BY created_at, id",
                user_id)]
        return await self._query(run)

    async def get_job(self, job_id: str) -> Job | None:
        """A job by id, or None."""
        async def run(conn: Connection) -> Job | None:
            row = await conn.fetchrow(f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = $1", job_id)
            return job_of(row) if row else None
        return await self._query(run)

    async def set_job_state(self, user_id: str, job_id: str, state: str,
                            next_run: float | None) -> Job | None:
        """Pause or resume the user's job that is not done; the job now, or None."""
        async def run(conn: Connection) -> Job | None:
            row = await conn.fetchrow(
                "UPDATE jobs SET state = $1, next_run = $2, wake_at = greatest($2, lease_until)"
                f" WHERE id = $3 AND user_id = $4 AND state != 'done' RETURNING {JOB_COLUMNS}",
                state, next_run, job_id, user_id)
            return job_of(row) if row else None
        return await self._query(run)

    async def delete_job(self, user_id: str, job_id: str) -> bool:
        """Remove the user's job and its record; False if the user has none such."""
        async def run(conn: Connection) -> bool:
            return str(await conn.execute("DELETE FROM jobs WHERE id = $1 AND user_id = $2",
                                          job_id, user_id)) == "DELETE 1"
        return await self._query(run)

    async def job_runs(self, job_id: str, limit: int) -> list[JobRun]:
        """The job's recorded runs and misses, latest due first."""
        async def run(conn: Connection) -> list[JobRun]:
            return [JobRun(*row) for row in await conn.fetch(
                f"SELECT {JOB_RUN_COLUMNS} FROM job_runs WHERE job_id = $1"
                " ORDER BY due DESC LIMIT $2", job_id, limit)]
        return await self._query(run)

    async def next_job_wake(self) -> float | None:
        """When the earliest active job is due (or its claim's lease ends), or None."""
        async def run(conn: Connection) -> float | None:
            value = await conn.fetchval("SELECT min(wake_at) FROM jobs WHERE state = 'active'")
            return float(value) if value is not None else None
        return await self._query(run)

    async def claim_jobs(self, now: float, lease_seconds: float,
                         limit: int) -> list[JobLease]:
        """Claim up to ``limit`` due runs (earliest first) until ``now + lease_seconds``, in
        one statement; rows other processes are claiming are skipped."""
        token, until = secrets.token_hex(8), now + lease_seconds

        async def run(conn: Connection) -> list[JobLease]:
            rows = await conn.fetch(_CLAIM, now, limit, token, until)
            leases = [JobLease(job_of(row), row[14], token, until) for row in rows]
            return sorted(leases, key=lambda lease: lease.due)
        return await self._query(run)

    async def finish_job(self, outcome: JobOutcome) -> bool:
        """End a claimed run that wrote no turn (skipped); False if the claim was lost."""
        try:
            await self._transaction(lambda conn: self._finish_in(conn, outcome, self.clock()))
        except Conflict:
            return False
        return True

    async def time_zone(self, user_id: str) -> str | None:
        """The user's time zone (an IANA name), None if not set."""
        async def run(conn: Connection) -> str | None:
            value = await conn.fetchval("SELECT time_zone FROM users WHERE user_id = $1",
                                        user_id)
            return str(value) if value is not None else None
        return await self._query(run)

    async def set_time_zone(self, user_id: str, zone: str) -> bool:
        """Set the user's time zone; False if no such user."""
        async def run(conn: Connection) -> bool:
            return str(await conn.execute("UPDATE users SET time_zone = $1 WHERE user_id = $2",
                                          zone, user_id)) == "UPDATE 1"
        return await self._query(run)
