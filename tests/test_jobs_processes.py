"""Scheduled jobs run by two ``cloudybot serve`` processes on one PostgreSQL database, one of
them killed with SIGKILL three times while 1,000 jobs fall due in the same minute: every job
runs exactly once (none lost, none posted twice) and no run is recorded twice.

The speed-up is only in the settings: a 3 s lease (a killed process's claims are taken over
3 s after it claimed them) and a 1 s bound on the scheduler's sleep; the clock is the real one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.base.times import iso_utc
from gateway.store import Job, ThreadRef
from gateway.store.postgres import PostgresStore
from tests.process import ServeProcess

JOBS = 1000
THREADS = 20
SECRET = "one-secret-key-for-every-process"


@pytest.fixture
async def store(postgres_url: str) -> AsyncIterator[PostgresStore]:
    opened = PostgresStore(postgres_url)
    await opened.open()
    try:
        yield opened
    finally:
        await opened.close()


def message_job(number: int, due: float) -> Job:
    thread = f"t{number % THREADS}"
    return Job(f"job_{number:016x}", "alice", ThreadRef("alice", thread, f"alice--{thread}",
                                                        "dashboard"),
               "{}", 4000, "at", iso_utc(due), "UTC", "message", f"reminder {number}",
               "run_once", "active", due, created_at=iso_utc(time.time()))


async def test_a_thousand_jobs_run_once_across_processes_killed_three_times(
        tmp_path: Path, postgres_url: str, store: PostgresStore) -> None:
    env = {"CLOUDYBOT_DATABASE_URL": postgres_url, "CLOUDYBOT_SECRET_KEY": SECRET,
           "CLOUDYBOT_LLM_PROVIDER": "offline", "CLOUDYBOT_JOBS_LEASE_SECONDS": "3",
           "CLOUDYBOT_LEADER_RETRY_SECONDS": "1"}
    processes = [ServeProcess(tmp_path / f"gateway-{index}", env) for index in range(2)]
    try:
        await asyncio.gather(*(process.start() for process in processes))
        await store.create_user("alice", "team", 0, 0)
        start = time.time() + 5
        await asyncio.gather(*(store.create_job(message_job(n, start + 30 * n / JOBS), JOBS)
                               for n in range(JOBS)))
        for kill in range(3):  # during the minute: at 8, 16 and 24 s in
            await asyncio.sleep(max(0.0, start + 8 * (kill + 1) - time.time()))
            victim = kill % 2
            await processes[victim].kill()
            processes[victim] = processes[victim].again()
            await processes[victim].start()
        deadline = time.time() + 90
        while await store.next_job_wake() is not None:  # an external process's progress
            assert time.time() < deadline, "jobs still due 90 s after the last one"
            await asyncio.sleep(0.2)
    finally:
        for process in processes:
            await process.ensure_stopped()
    posted: list[str] = []
    for thread in range(THREADS):
        page = await store.display_page(f"alice--t{thread}", 10 * JOBS, None)
        posted += [message.content for message in page.messages]
    texts = {n: f"reminder {n}" for n in range(JOBS)}
    lost = [text for text in texts.values() if text not in posted]
    duplicated = len(posted) - len(set(posted))
    assert (lost, duplicated) == ([], 0)
    late = [m for m in posted if m.startswith("(late")]
    jobs = await store.list_jobs("alice")
    assert {job.state for job in jobs} == {"done"} and sum(job.runs for job in jobs) == JOBS
    runs = [run for job in jobs for run in await store.job_runs(job.id, 10)]
    assert len(runs) == JOBS and {r.status for r in runs} <= {"sent", "late"}
    assert len(late) == sum(r.status == "late" for r in runs)  # each late run says so
