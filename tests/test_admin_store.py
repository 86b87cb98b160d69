"""The administration migration on a deployment that already has a ledger (SQLite's 12,
PostgreSQL's 11): the usage rollups are filled from the ledger as it stood (grants left out,
each row's channel its thread's), accounts keep their balances, nobody is an admin, and the
last time each was charged is known. The same data, both backends."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from gateway.store import Store, UsageQuery
from gateway.store.migrations import MIGRATIONS
from gateway.store.postgres import PostgresStore
from gateway.store.postgres_migrations import MIGRATIONS as PG_MIGRATIONS
from gateway.store.records import Charge
from gateway.store.sqlite import SQLiteStore, _statements

USERS = [("alice", "free", 990, 28, "2026-01-01T00:00:00.000000Z", "2026-01"),
         ("bob", "pro", 499, 0, "2026-01-01T00:00:00.000000Z", "2026-01")]
THREADS = [("alice--t1", "alice", "t1", "dashboard"), ("telegram:1", "alice", "telegram:1",
                                                       "telegram")]
LEDGER = [  # user, thread, kind, model, prompt, completion, credits, minutes, time
    ("alice", None, "grant", "", 0, 0, -1000, -30, "2026-01-01T00:00:00.000000Z"),
    ("alice", "alice--t1", "chat", "m1", 10, 5, 3, 0, "2026-01-01T00:10:00.000000Z"),
    ("alice", "alice--t1", "tool_round", "m1", 20, 5, 4, 0, "2026-01-01T00:20:00.000000Z"),
    ("alice", "telegram:1", "chat", "m2", 10, 5, 3, 0, "2026-01-01T01:00:00.000000Z"),
    ("alice", "telegram:1", "browser", "", 0, 0, 0, 2, "2026-01-01T01:05:00.000000Z"),
    ("bob", None, "grant", "", 0, 0, -500, 0, "2026-01-01T00:00:00.000000Z"),
    ("bob", "gone--t9", "chat", "m1", 10, 5, 1, 0, "2026-01-02T09:00:00.000000Z"),
]
USER_INSERT = ("INSERT INTO users (user_id, plan, credits, browser_minutes, created_at, period)"
               " VALUES ({})")
THREAD_INSERT = ("INSERT INTO threads (session_key, user_id, thread_id, channel, created_at,"
                 " updated_at) VALUES ({}, '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z')")
LEDGER_INSERT = ("INSERT INTO ledger (user_id, thread_key, kind, model, prompt_tokens,"
                 " completion_tokens, credits, minutes, created_at) VALUES ({})")


def _sqlite_before(path: Path) -> None:
    conn = sqlite3.connect(path)
    with conn:
        for script in MIGRATIONS[:11]:
            for statement in _statements(script):
                conn.execute(statement)
        conn.execute("PRAGMA user_version = 11")
        for sql, rows in ((USER_INSERT, USERS), (THREAD_INSERT, THREADS),
                          (LEDGER_INSERT, LEDGER)):
            conn.executemany(sql.format(", ".join("?" * len(rows[0]))), rows)
    conn.close()


async def _postgres_before(url: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        async with conn.transaction():
            await conn.execute("CREATE TABLE schema_version (version BIGINT NOT NULL)")
            for number, script in enumerate(PG_MIGRATIONS[:10], start=1):
                await conn.execute(script)
                await conn.execute("INSERT INTO schema_version VALUES ($1)", number)
            for sql, rows in ((USER_INSERT, USERS), (THREAD_INSERT, THREADS),
                              (LEDGER_INSERT, LEDGER)):
                marks = ", ".join(f"${n}" for n in range(1, len(rows[0]) + 1))
                await conn.executemany(sql.format(marks), rows)
    finally:
        await conn.close()


@pytest.fixture(params=["sqlite", "postgresql"])
async def migrated(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """A store opened on a deployment from before the migration (which it applies)."""
    store: Store
    if request.param == "sqlite":
        _sqlite_before(tmp_path / "gateway.sqlite3")
        store = SQLiteStore(tmp_path / "gateway.sqlite3")
    else:
        url = request.getfixturevalue("postgres_url")
        await _postgres_before(url)
        store = PostgresStore(url)
    await store.open()
    yield store
    await store.close()


async def test_the_migration_fills_the_rollups_from_the_ledger(migrated: Store) -> None:
    async def by(group: str, bucket: str = "day") -> dict[tuple[str, str], tuple[int, ...]]:
        start, end = ("2026-01-01", "2026-01-03") if bucket == "day" else ("2026-01-01T00",
                                                                           "2026-01-03T00")
        report = await migrated.usage_report(UsageQuery(start, end, bucket, group, 10))
        return {(row.bucket, row.group): (row.spend.calls, row.spend.credits,
                                          row.spend.minutes) for row in report.rows}

    assert await by("channel") == {("2026-01-01", "dashboard"): (2, 7, 0),
                                   ("2026-01-01", "telegram"): (1, 3, 2),
                                   ("2026-01-02", ""): (1, 1, 0)}  # its thread is gone
    assert await by("tool") == {("2026-01-01", ""): (3, 10, 0),
                                ("2026-01-01", "browser"): (0, 0, 2),
                                ("2026-01-02", ""): (1, 1, 0)}
    assert await by("plan", "hour") == {("2026-01-01T00", "free"): (2, 7, 0),
                                        ("2026-01-01T01", "free"): (1, 3, 2),
                                        ("2026-01-02T09", "pro"): (1, 1, 0)}
    report = await migrated.usage_report(UsageQuery("2026-01-01", "2026-01-03", "day", "user",
                                                    10))
    assert [(user, spend.credits) for user, spend in report.spenders] == [("alice", 10),
                                                                          ("bob", 1)]
    assert report.total.credits == 11 and report.total.minutes == 2
    alice, bob = await migrated.get_user("alice"), await migrated.get_user("bob")
    assert alice is not None and bob is not None
    assert (alice.credits, alice.admin, alice.blocked, alice.daily_credits) == (
        990, False, False, None)
    assert (alice.active_at, bob.active_at) == ("2026-01-01T01:05:00.000000Z",
                                                "2026-01-02T09:00:00.000000Z")


async def test_a_booking_after_the_migration_adds_to_the_rollups_once(migrated: Store) -> None:
    """What the migration filled is not counted again, and what is booked after it counts
    (SQLite folds the ledger into the rollups later: its older rows must not be folded)."""
    year = UsageQuery("2026-01-01", "2027-01-01", "day", "plan", 10)
    assert (await migrated.usage_report(year)).total.credits == 11
    await migrated.record_charges("alice", "alice--t1", [Charge("chat", "m1", 1, 1, 5)])
    after = await migrated.usage_report(year)
    assert after.total.credits == 16 and after.total.calls == 5
