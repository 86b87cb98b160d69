"""The admin's usage view (``GET /api/admin/usage``, :meth:`Store.usage_report`) with 10,000
accounts and 1,000,000 ledger rows: time per report, median of 15 runs, against the 100 ms
goal. ``python -m bench.admin_usage [sqlite|postgresql]`` runs it alone; ``python -m bench``
runs the SQLite one (``--backend postgresql``: both).

The deployment is made as one that predates the rollups: the accounts, their threads (a
channel each) and the ledger are written straight into a database at the migration before
them, then the store is opened, and its migration fills ``usage_hours`` and ``usage_days`` from
the ledger, as an upgraded deployment's are (the same sums a live gateway keeps of its
charges: ``tests/test_admin_store.py``, ``tests/test_store_contract.py``); on PostgreSQL
the hours' shards are then folded, as a running gateway folds the hours that are over. The
ledger spans the year up to now (``--dense``: only the 30 days the reports read, every
account active every day: the worst case), its accounts' activity skewed (a few spend
much); each report reads the 30 days up to now, which crosses a month's edge on most days:

- ``by model, per day`` (the view's default), ``by user, per day`` (the top ten's series) and
  ``by channel, per hour``; each with the range's totals and top ten spenders.
"""

from __future__ import annotations

import asyncio
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg

from bench.postgres import DEFAULT_SERVER, fresh_database
from gateway.store import Store, UsageQuery
from gateway.store.migrations import MIGRATIONS
from gateway.store.postgres import PostgresStore
from gateway.store.postgres_migrations import MIGRATIONS as PG_MIGRATIONS
from gateway.store.sqlite import SQLiteStore, _statements

USERS, ROWS, RUNS = 10_000, 1_000_000, 15
YEAR, DENSE = 365, 30  # the days the ledger spans: a year of use, or only the 30 days viewed
GOAL_MS = 100.0
MODELS = ("gpt-4o-mini", "gpt-4.1", "claude-sonnet-4-5")
CHANNELS = ("dashboard", "telegram", "slack", "discord")
KINDS = ("chat",) * 14 + ("tool_round",) * 4 + ("summarize", "browser")
QUERIES = {"model_day": ("day", "model"), "user_day": ("day", "user"),
           "channel_hour": ("hour", "channel")}


def _accounts(users: int) -> list[tuple[str, ...]]:
    plans = ("free", "free", "free", "pro", "team")
    return [(f"user{n:05d}", plans[n % len(plans)], "2026-01-01T00:00:00.000000Z", "2026-01")
            for n in range(users)]


def _threads(users: int) -> list[tuple[str, ...]]:
    return [(f"user{n:05d}--t", f"user{n:05d}", "t", CHANNELS[n % len(CHANNELS)])
            for n in range(users)]


@dataclass(frozen=True)
class Shape:
    """The deployment: its accounts, its ledger rows and the days up to now they span."""

    users: int = USERS
    rows: int = ROWS
    days: int = YEAR


def _ledger(shape: Shape, now: datetime) -> Iterator[tuple[Any, ...]]:
    """The ledger's rows over the days up to ``now``, oldest first."""
    rng = random.Random(32)
    users, rows = shape.users, shape.rows
    first = now - timedelta(days=shape.days)
    seconds = shape.days * 86_400
    stamps = sorted(rng.randrange(seconds) for _ in range(rows))
    for offset in stamps:
        user = int(rng.paretovariate(1.1)) % users if rng.random() < 0.3 \
            else rng.randrange(users)
        kind = rng.choice(KINDS)
        at = (first + timedelta(seconds=offset)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        if kind == "browser":
            yield (f"user{user:05d}", f"user{user:05d}--t", kind, "", 0, 0, 0,
                   rng.randint(1, 5), at)
        else:
            prompt, completion = rng.randint(200, 8000), rng.randint(20, 800)
            yield (f"user{user:05d}", f"user{user:05d}--t", kind, rng.choice(MODELS), prompt,
                   completion, (prompt + 3 * completion) // 1000 + 1, 0, at)


_USER = ("INSERT INTO users (user_id, plan, credits, browser_minutes, created_at, period)"
         " VALUES ({}, 1000000, 0, {}, {})")
_THREAD = ("INSERT INTO threads (session_key, user_id, thread_id, channel, created_at,"
           " updated_at) VALUES ({}, {}, {}, {}, '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z')")
_LEDGER = ("INSERT INTO ledger (user_id, thread_key, kind, model, prompt_tokens,"
           " completion_tokens, credits, minutes, created_at) VALUES ({})")


def fill_sqlite(path: Path, shape: Shape, now: datetime) -> None:
    """A SQLite database at migration 11 holding the accounts, threads and ledger."""
    users = shape.users
    conn = sqlite3.connect(path)
    with conn:
        for script in MIGRATIONS[:11]:
            for statement in _statements(script):
                conn.execute(statement)
        conn.execute("PRAGMA user_version = 11")
        conn.executemany(_USER.format("?, ?", "?", "?"), _accounts(users))
        conn.executemany(_THREAD.format("?", "?", "?", "?"), _threads(users))
        conn.executemany(_LEDGER.format(", ".join("?" * 9)), _ledger(shape, now))
    conn.close()


async def fill_postgres(url: str, shape: Shape, now: datetime) -> None:
    """A PostgreSQL database at migration 10 holding the same (by COPY)."""
    users = shape.users
    conn = await asyncpg.connect(url)
    try:
        async with conn.transaction():
            await conn.execute("CREATE TABLE schema_version (version BIGINT NOT NULL)")
            for number, script in enumerate(PG_MIGRATIONS[:10], start=1):
                await conn.execute(script)
                await conn.execute("INSERT INTO schema_version VALUES ($1)", number)
            await conn.copy_records_to_table(
                "users", columns=["user_id", "plan", "credits", "browser_minutes",
                                  "created_at", "period"],
                records=[(user, plan, 1_000_000, 0, created, period)
                         for user, plan, created, period in _accounts(users)])
            await conn.copy_records_to_table(
                "threads", columns=["session_key", "user_id", "thread_id", "channel",
                                    "created_at", "updated_at"],
                records=[(*row, "2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z")
                         for row in _threads(users)])
            await conn.copy_records_to_table(
                "ledger", columns=["user_id", "thread_key", "kind", "model", "prompt_tokens",
                                   "completion_tokens", "credits", "minutes", "created_at"],
                records=list(_ledger(shape, now)))
    finally:
        await conn.close()


def queries(now: datetime) -> dict[str, UsageQuery]:
    """The reports timed: the 30 days up to now (the view's default), three ways."""
    end_day = (now + timedelta(days=1)).strftime("%Y-%m-%d")
    start_day = (now - timedelta(days=29)).strftime("%Y-%m-%d")
    end_hour = (now + timedelta(hours=1)).strftime("%Y-%m-%dT%H")
    start_hour = (now - timedelta(days=30)).strftime("%Y-%m-%dT%H")
    return {name: UsageQuery(start_day if bucket == "day" else start_hour,
                             end_day if bucket == "day" else end_hour, bucket, group, 10)
            for name, (bucket, group) in QUERIES.items()}


async def measure(store: Store, now: datetime, runs: int) -> dict[str, float]:
    """Each report ``runs`` times (after one to warm up), interleaved; medians in ms."""
    asked = queries(now)
    times: dict[str, list[float]] = {name: [] for name in asked}
    for name, query in asked.items():
        report = await store.usage_report(query)
        assert report.rows and len(report.spenders) == 10, name
    for _ in range(runs):
        for name, query in asked.items():
            started = time.perf_counter()
            await store.usage_report(query)
            times[name].append((time.perf_counter() - started) * 1000)
    return {name: statistics.median(values) for name, values in times.items()}


def _figures(prefix: str, medians: dict[str, float], filled: float) -> dict[str, Any]:
    figures: dict[str, Any] = {f"{prefix}_{name}_ms": value for name, value in medians.items()}
    figures[f"{prefix}_ms"] = max(medians.values())
    figures[f"{prefix}_fill_s"] = filled
    return figures


async def run_sqlite(quick: bool, tmp: Path, days: int = YEAR) -> dict[str, Any]:
    """The SQLite figures (``--quick``: a tenth of the ledger, indicative only)."""
    shape = Shape(rows=ROWS // 10 if quick else ROWS, days=days)
    now = datetime.now(UTC)
    path = tmp / "admin-usage.sqlite3"
    began = time.perf_counter()
    fill_sqlite(path, shape, now)
    store = SQLiteStore(path)
    await store.open()  # the migration fills the rollups
    filled = time.perf_counter() - began
    try:
        medians = await measure(store, now, 5 if quick else RUNS)
    finally:
        await store.close()
    return {**_figures("admin_usage", medians, filled), "admin_usage_rows": shape.rows,
            "admin_usage_users": shape.users, "admin_usage_days": shape.days}


async def run_postgres(quick: bool, server: str, days: int = YEAR) -> dict[str, Any]:
    """The PostgreSQL figures, on a database of their own (analysed after the fill)."""
    shape = Shape(rows=ROWS // 10 if quick else ROWS, days=days)
    now = datetime.now(UTC)
    async with fresh_database(server) as url:
        began = time.perf_counter()
        await fill_postgres(url, shape, now)
        store = PostgresStore(url)
        await store.open()
        # what a running gateway does to the hours that are over, once an hour
        await store.compact_usage((now - timedelta(days=days + 1)).strftime("%Y-%m-%dT%H"),
                                  now.strftime("%Y-%m-%dT%H"))
        conn = await asyncpg.connect(url)
        await conn.execute("VACUUM ANALYZE")
        await conn.close()
        filled = time.perf_counter() - began
        try:
            medians = await measure(store, now, 5 if quick else RUNS)
        finally:
            await store.close()
    return _figures("admin_usage_pg", medians, filled)


async def main(backend: str, days: int) -> None:
    """One backend's figures, printed."""
    if backend == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            figures = await run_sqlite(False, Path(tmp), days)
        prefix = "admin_usage"
    else:
        figures = await run_postgres(False, os.environ.get("CLOUDYBOT_TEST_DATABASE_URL",
                                                           DEFAULT_SERVER), days)
        prefix = "admin_usage_pg"
    print(f"{backend}: {USERS:,} accounts, {ROWS:,} ledger rows over {days} days (filled and "
          f"migrated in {figures[prefix + '_fill_s']:.1f} s); median of {RUNS} runs, goal <= "
          f"{GOAL_MS:g} ms")
    for name in QUERIES:
        print(f"  {name:<14} {figures[f'{prefix}_{name}_ms']:7.1f} ms")
    worst = figures[f"{prefix}_ms"]
    print(f"  worst          {worst:7.1f} ms  {'ok' if worst <= GOAL_MS else 'MISSED'}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "sqlite",
                     DENSE if "--dense" in sys.argv else YEAR))
