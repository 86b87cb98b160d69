"""The SQLite store's write path: on the event loop while the write lock is free, on the
worker thread when it is not (or when the work may be large), the WAL kept checkpointed, and
the usage rollups folded from the ledger in batches."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.base.errors import BadRequest
from gateway.store.records import Charge
from gateway.store.sqlite import SQLiteStore
from gateway.store.sqlite_rollups import FOLD_BATCH


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    opened = SQLiteStore(tmp_path / "gateway.sqlite3")
    await opened.open()
    try:
        yield opened
    finally:
        await opened.close()


def thread_of_write(store: SQLiteStore, off_loop: bool = False) -> asyncio.Future[int]:
    """The id of the thread that ran a write (a private call: which thread is the point)."""
    def run(conn: sqlite3.Connection) -> int:
        conn.execute("UPDATE users SET credits = credits WHERE user_id = 'nobody'")
        return threading.get_ident()
    return asyncio.ensure_future(store._transaction(run, off_loop=off_loop))


async def test_a_write_runs_on_the_event_loops_thread_when_the_lock_is_free(
        store: SQLiteStore) -> None:
    assert await thread_of_write(store) == threading.get_ident()


async def test_large_work_runs_on_the_worker_thread(store: SQLiteStore) -> None:
    assert await thread_of_write(store, off_loop=True) != threading.get_ident()


async def test_a_write_waits_for_a_lock_held_elsewhere_without_blocking_the_loop(
        store: SQLiteStore) -> None:
    other = sqlite3.connect(store.path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process writing, say `cloudybot users grant`
    other.execute("INSERT INTO users (user_id, plan, credits, browser_minutes, created_at,"
                  " period) VALUES ('bob', 'free', 0, 0, '2026-12-01T00:00:00Z', '2026-12')")
    try:
        writing = asyncio.ensure_future(store.create_user("alice", "free", 100, 0))
        # The event loop still serves others meanwhile: a read completes while the write waits.
        assert await store.get_user("bob") is None  # not committed yet
        assert not writing.done()
    finally:
        other.execute("COMMIT")
        other.close()

    user = await writing
    assert user.user_id == "alice" and user.credits == 100
    assert await store.get_user("bob") is not None


async def test_a_failing_write_alone_in_its_batch_leaves_nothing_behind(
        store: SQLiteStore) -> None:
    await store.create_user("alice", "free", 100, 0)

    with pytest.raises(BadRequest):
        await store.create_user("alice", "free", 5, 0)

    user = await store.get_user("alice")
    assert user is not None and user.credits == 100
    assert [row.credits for row in await store.ledger("alice")] == [-100]


async def test_concurrent_writes_share_a_batch_and_a_failure_stays_alone(
        store: SQLiteStore) -> None:
    await store.create_user("taken", "free", 1, 0)

    outcomes = await asyncio.gather(
        *(store.create_user(name, "free", 10, 0) for name in ("a", "taken", "b", "c")),
        return_exceptions=True)

    assert isinstance(outcomes[1], BadRequest)
    for name in ("a", "b", "c"):
        user = await store.get_user(name)
        assert user is not None and user.credits == 10


async def test_the_wal_is_checkpointed_so_it_stops_growing(store: SQLiteStore) -> None:
    await store.create_user("alice", "free", 10**9, 0)
    wal = store.path.with_name(store.path.name + "-wal")
    value = "x" * 3000  # about a page a write
    for round_number in range(40):
        for index in range(100):
            await store.grant_credits("alice", 1)
            await store.put_specialist("alice", f"s{index % 50}", f"{value}{round_number}")
    # Unchecked, this WAL would pass 60 MB; checkpoints let it start over.
    assert wal.stat().st_size < 20 * 1024 * 1024


def rolled_up(store: SQLiteStore) -> tuple[int, int, int]:
    """Read beside the store: the credits in the rollups (the plan dimension's hours), the
    ledger id they were folded through, and the newest ledger id."""
    conn = sqlite3.connect(store.path)
    try:
        (credits,) = conn.execute("SELECT coalesce(sum(credits), 0) FROM usage_hours"
                                  " WHERE dim = 'plan'").fetchone()
        (through,) = conn.execute("SELECT through FROM usage_folded").fetchone()
        (newest,) = conn.execute("SELECT max(id) FROM ledger").fetchone()
        return credits, through, newest
    finally:
        conn.close()


async def test_bookings_are_folded_into_the_rollups_every_fold_batch_without_a_report(
        store: SQLiteStore) -> None:
    await store.create_user("alice", "free", 10**9, 0)
    for _ in range(FOLD_BATCH - 1):
        await store.record_charges("alice", "alice--t", [Charge("chat", "m", 1, 1, 2)])
    credits, through, newest = rolled_up(store)
    assert credits == 0 and through < newest
    await store.record_charges("alice", "alice--t", [Charge("chat", "m", 1, 1, 2)])
    credits, through, newest = rolled_up(store)
    assert credits == 2 * FOLD_BATCH and through == newest
