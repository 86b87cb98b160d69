"""Scheduled jobs (issue 31): a due job starts on time and an idle scheduler costs nothing.

1. 1,000 ``message`` jobs (200 with ``--quick``) fall due spread over a minute (10 s) in a
   gateway on SQLite, in-process, its scheduler running on the wall clock: how long after its
   due time each run was committed (posted in its thread, recorded), p50, p99 and the worst;
   the target is p99 <= 1 s.
2. Idle: with 1,000 jobs due in an hour, the gateway's process CPU over 5 s (2 s) of waiting,
   and how many times the scheduler read the store meanwhile (it sleeps until the next due
   time: none).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path
from typing import Any

from gateway.base.times import iso_utc
from gateway.config.settings import load_settings
from gateway.gateway import Gateway
from gateway.store import Job, ThreadRef

THREADS = 50


def _job(number: int, due: float) -> Job:
    thread = f"t{number % THREADS}"
    return Job(f"job_{number:016x}", "bench", ThreadRef("bench", thread, f"bench--{thread}",
                                                        "dashboard"),
               "{}", 4000, "at", iso_utc(due), "UTC", "message", f"reminder {number}",
               "run_once", "active", due, created_at=iso_utc(time.time()))


async def run(quick: bool, tmp: Path) -> dict[str, Any]:
    """The start latency of due runs, and the idle scheduler's cost."""
    jobs, spread, idle = (200, 10.0, 2.0) if quick else (1000, 60.0, 5.0)
    settings = load_settings(env={"CLOUDYBOT_DATA_DIR": str(tmp / "scheduling"),
                                  "CLOUDYBOT_LLM_PROVIDER": "offline",
                                  "CLOUDYBOT_PURGE_INTERVAL_MINUTES": "0"})
    async with Gateway(settings) as gateway:
        store = gateway.store
        await store.create_user("bench", "team", 0, 0)
        reads = {"count": 0}
        for name in ("next_job_wake", "claim_jobs"):
            method = getattr(store, name)

            async def counted(*args: Any, _method: Any = method) -> Any:
                reads["count"] += 1
                return await _method(*args)
            setattr(store, name, counted)
        # idle: everything due in an hour
        later = time.time() + 3600
        for number in range(jobs):
            await store.create_job(_job(number, later + number), jobs)
        gateway.scheduler.changed()
        await asyncio.sleep(0.1)  # the scheduler reads its next due time once
        reads["count"] = 0
        cpu, began = time.process_time(), time.perf_counter()
        await asyncio.sleep(idle)  # the measured wait itself
        idle_cpu_ms = (time.process_time() - cpu) * 1000 / (time.perf_counter() - began)
        idle_reads = reads["count"]
        for number in range(jobs):
            await store.delete_job("bench", f"job_{number:016x}")
        # due: spread over the window, starting shortly
        start = time.time() + 1.0
        for number in range(jobs):
            await store.create_job(_job(number, start + spread * number / jobs), jobs)
        gateway.scheduler.changed()
        while await store.next_job_wake() is not None:
            await asyncio.sleep(0.1)  # an outside observer's poll of the runs' progress
        lags = []
        for number in range(jobs):
            (ran,) = await store.job_runs(f"job_{number:016x}", 1)
            lags.append((ran.at - ran.due) * 1000)
    lags.sort()
    return {"jobs_due": jobs, "jobs_spread_s": spread,
            "jobs_start_p50_ms": statistics.median(lags),
            "jobs_start_p99_ms": lags[int(len(lags) * 0.99) - 1],
            "jobs_start_max_ms": lags[-1],
            "jobs_idle_cpu_ms_per_s": idle_cpu_ms, "jobs_idle_store_reads": idle_reads}
