"""Retention (SPEC §3, §9; issue 5): threads inactive longer than their owner's plan allows are
deleted with everything they hold; a dry run changes nothing; serve purges on its own."""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import Awaitable, Callable
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gateway import hookimpl
from gateway.config.settings import Settings
from gateway.memory.sessions import Rotation
from gateway.plugins.manager import PluginManager
from gateway.store import ExpiredThread, InboxEntry
from gateway.testing.fake_llm import FakeLLM, Scripted, completion
from tests.conftest import Harness
from tests.fakes.loop import LoopChannel
from tests.helpers import Clock

StartGateway = Callable[..., Awaitable[Harness]]

AuthHeaders = dict[str, str]
StartClocked = Callable[..., Awaitable[Harness]]
pytestmark = pytest.mark.sqlite_only  # it uses the CLI or the SQLite file

DAY = 24 * 3600.0
WAIT_SECONDS = 10.0


def last_active(settings: Settings, session_key: str, days_ago: float) -> None:
    """Make a thread look untouched for ``days_ago`` days (of the wall clock).

    Test set-up only: the store stamps ``updated_at`` with the wall clock and offers no call to
    backdate it, so it is written directly, as an old row would have been.
    """
    moment = datetime.now(UTC) - timedelta(days=days_ago)
    stamp = moment.isoformat(timespec="microseconds").replace("+00:00", "Z")
    with closing(sqlite3.connect(settings.database_path, timeout=5)) as conn:
        changed = conn.execute("UPDATE threads SET updated_at = ? WHERE session_key = ?",
                               (stamp, session_key)).rowcount
        conn.commit()
    assert changed == 1, session_key


def session_files(settings: Settings, session_key: str) -> list[Path]:
    """The active and archived session files of a dashboard thread (short keys only)."""
    active = settings.sessions_dir / f"{session_key}.jsonl"
    archived = sorted((settings.sessions_dir / "archive").glob(f"{session_key}.2*.jsonl"))
    return ([active] if active.exists() else []) + archived


async def chat_ok(harness: Harness, auth: AuthHeaders, message: str, thread: str) -> None:
    response = await harness.chat(auth, message, thread=thread)
    assert response.status == 200, await response.text()


async def full_thread(harness: Harness, auth: AuthHeaders, thread: str,
                      archived: bool = True) -> None:
    """A thread with everything a purge must remove: rolling memory, a display transcript,
    a pinned key, an archived session file (``archived``) and an active one."""
    await chat_ok(harness, auth, "first", thread)
    response = await harness.client.put(f"/api/user/memory?threadId={thread}",
                                        json={"key": "name", "value": "Ada"}, headers=auth)
    assert response.status == 200
    if archived:
        clear = await harness.client.post(f"/api/threads/{thread}/clear", headers=auth)
        assert clear.status == 200
    await chat_ok(harness, auth, "second", thread)


async def assert_gone(harness: Harness, auth: AuthHeaders, thread: str) -> None:
    """Conversation, display transcript, pinned keys and session files: all gone."""
    user_id = (await (await harness.client.get("/api/user/credits", headers=auth)).json())[
        "userId"]
    key = f"{user_id}--{thread}"
    assert (await harness.client.get(f"/api/threads/{thread}", headers=auth)).status == 404
    memory = await harness.client.get(f"/api/user/memory?threadId={thread}", headers=auth)
    assert (await memory.json())["memory"] == {}
    assert await harness.gateway.store.get_thread(key) is None
    assert (await harness.gateway.store.display_page(key, 100, None)).messages == []
    assert (await harness.gateway.store.rolling_memory(key)) == (None, [])
    assert session_files(harness.gateway.settings, key) == []


async def assert_kept(harness: Harness, auth: AuthHeaders, thread: str) -> None:
    response = await harness.client.get(f"/api/threads/{thread}", headers=auth)
    assert response.status == 200
    assert (await response.json())["display_messages"]


async def test_purge_removes_an_expired_thread_with_everything_and_keeps_a_recent_one(
        start_clocked: StartClocked) -> None:
    harness = await start_clocked()
    settings = harness.gateway.settings
    auth = await harness.user("alice")  # free: 30 days
    await full_thread(harness, auth, "old")
    await full_thread(harness, auth, "recent")
    await full_thread(harness, auth, "old.x")  # its file names start like old's
    assert len(session_files(settings, "alice--old")) == 2
    last_active(settings, "alice--old", days_ago=31)
    last_active(settings, "alice--recent", days_ago=29)
    kept_files = session_files(settings, "alice--recent") + session_files(settings,
                                                                           "alice--old.x")

    report = await harness.gateway.retention.purge()

    assert [t.session_key for t in report.threads] == ["alice--old"]
    assert report.files == 2 and not report.dry_run
    await assert_gone(harness, auth, "old")
    await assert_kept(harness, auth, "recent")
    await assert_kept(harness, auth, "old.x")
    assert all(path.exists() for path in kept_files)
    memory = await harness.client.get("/api/user/memory?threadId=recent", headers=auth)
    assert (await memory.json())["memory"] == {"name": "Ada"}
    assert (await harness.gateway.retention.purge()).threads == []  # nothing left to purge


async def test_purge_removes_the_files_of_channel_threads_and_of_long_keys(
        loop: LoopChannel, start_clocked: StartClocked) -> None:
    harness = await start_clocked()
    gateway = harness.gateway
    sessions_dir = gateway.settings.sessions_dir
    auth = await harness.user("alice")
    long_thread = "x" + ":" * 100  # its session file name is shortened and hashed
    await full_thread(harness, auth, long_thread)
    await gateway.receive(loop.message("m1", "hello"))
    await loop.wait_for(1, WAIT_SECONDS)
    await gateway.drain()
    names = sorted(path.name for path in sessions_dir.rglob("*.jsonl"))
    assert "loop%3Ac1.jsonl" in names
    assert sum("~" in name for name in names) == 2  # the long thread: active and archived
    last_active(gateway.settings, f"alice--{long_thread}", days_ago=31)
    last_active(gateway.settings, "loop:c1", days_ago=31)

    report = await gateway.retention.purge()

    assert sorted(t.session_key for t in report.threads) == [f"alice--{long_thread}",
                                                             "loop:c1"]
    assert report.files == 3
    assert list(sessions_dir.rglob("*.jsonl")) == []
    assert await gateway.store.get_thread("loop:c1") is None


async def test_retention_follows_each_owners_plan(
        start_clocked: StartClocked, clock: Clock) -> None:
    harness = await start_clocked()
    settings = harness.gateway.settings
    free = await harness.user("alice", plan="free")  # 30 days
    pro = await harness.user("bob", plan="pro")  # 365 days
    await full_thread(harness, free, "t1", archived=False)
    await full_thread(harness, pro, "t1", archived=False)
    last_active(settings, "alice--t1", days_ago=40)
    last_active(settings, "bob--t1", days_ago=40)

    first = await harness.gateway.retention.purge()
    assert [(t.session_key, t.plan) for t in first.threads] == [("alice--t1", "free")]
    await assert_gone(harness, free, "t1")
    await assert_kept(harness, pro, "t1")

    clock.advance(330 * DAY)  # bob's thread is 370 days old now
    second = await harness.gateway.retention.purge()
    assert [(t.session_key, t.plan) for t in second.threads] == [("bob--t1", "pro")]
    await assert_gone(harness, pro, "t1")


async def test_dry_run_changes_nothing_and_lists_what_a_purge_removes(
        start_clocked: StartClocked, clock: Clock) -> None:
    harness = await start_clocked()
    settings = harness.gateway.settings
    auth = await harness.user("alice")
    for thread in ("a", "b", "c"):
        await full_thread(harness, auth, thread)
    last_active(settings, "alice--a", days_ago=45)
    last_active(settings, "alice--b", days_ago=35)
    files_before = sorted(settings.sessions_dir.rglob("*.jsonl"))
    seen: list[tuple[int, int, str]] = []

    def progress(done: int, total: int, thread: ExpiredThread) -> None:
        seen.append((done, total, thread.session_key))

    dry = await harness.gateway.retention.purge(dry_run=True, progress=progress)

    assert dry.dry_run and dry.files == 0 and dry.inbound_ids == 0
    listed = [t.session_key for t in dry.threads]
    assert sorted(listed) == ["alice--a", "alice--b"]
    assert seen == [(1, 2, listed[0]), (2, 2, listed[1])]
    assert sorted(settings.sessions_dir.rglob("*.jsonl")) == files_before
    for thread in ("a", "b", "c"):
        await assert_kept(harness, auth, thread)

    seen.clear()
    real = await harness.gateway.retention.purge(progress=progress)
    assert [t.session_key for t in real.threads] == listed
    assert [done for done, _, _ in seen] == [1, 2]
    assert real.files == 4
    await assert_gone(harness, auth, "a")
    await assert_gone(harness, auth, "b")
    await assert_kept(harness, auth, "c")


async def test_a_thread_used_after_it_was_listed_is_not_purged(
        start_clocked: StartClocked) -> None:
    harness = await start_clocked()
    gateway = harness.gateway
    auth = await harness.user("alice")
    await full_thread(harness, auth, "t1")
    last_active(gateway.settings, "alice--t1", days_ago=31)
    [listed] = await gateway.store.expired_threads(gateway.retention.cutoffs())

    await chat_ok(harness, auth, "still here", "t1")  # between listing and deleting
    assert await gateway.retention.purge_thread(listed.session_key, listed.updated_at) == (False, 0)

    await assert_kept(harness, auth, "t1")
    assert len(session_files(gateway.settings, "alice--t1")) == 2
    assert (await gateway.retention.purge()).threads == []


async def test_a_purge_during_a_turn_on_an_expired_thread_keeps_it(
        start_clocked: StartClocked, fake_llm: FakeLLM) -> None:
    harness = await start_clocked()
    gateway = harness.gateway
    auth = await harness.user("alice")
    await full_thread(harness, auth, "t1")
    last_active(gateway.settings, "alice--t1", days_ago=31)
    fake_llm.script.append(Scripted(body=completion("slow answer"), delay=0.3))
    turn = asyncio.ensure_future(harness.chat(auth, "are you there?", thread="t1"))

    async def provider_called() -> None:
        while len(fake_llm.requests) < 3:
            await asyncio.sleep(0.01)
    await asyncio.wait_for(provider_called(), WAIT_SECONDS)  # the turn holds the thread now
    report = await gateway.retention.purge()

    assert (await asyncio.wait_for(turn, WAIT_SECONDS)).status == 200
    assert report.threads == []
    await assert_kept(harness, auth, "t1")
    assert len(session_files(gateway.settings, "alice--t1")) == 2


async def test_purge_thread_deletes_when_the_thread_is_as_listed(
        start_clocked: StartClocked) -> None:
    harness = await start_clocked()
    gateway = harness.gateway
    auth = await harness.user("alice")
    await full_thread(harness, auth, "t1")
    last_active(gateway.settings, "alice--t1", days_ago=31)
    [listed] = await gateway.store.expired_threads(gateway.retention.cutoffs())

    assert await gateway.retention.purge_thread(listed.session_key, listed.updated_at) == (True, 2)

    await assert_gone(harness, auth, "t1")


async def test_purge_forgets_channel_message_ids_older_than_thirty_days(
        loop: LoopChannel, start_clocked: StartClocked, clock: Clock) -> None:
    harness = await start_clocked(default_plan="pro")  # the thread itself stays a year
    gateway = harness.gateway
    await gateway.receive(loop.message("m1", "hello"))
    await loop.wait_for(1, WAIT_SECONDS)
    await gateway.drain()

    async def remembered() -> bool:
        return await gateway.store.inbox_add(InboxEntry(
            "loop", "m1", "loop:c1", "{}", 100, b"")) is None

    assert await remembered()
    clock.advance(29 * DAY)
    assert (await gateway.retention.purge()).inbound_ids == 0
    assert await remembered()

    clock.advance(2 * DAY)
    assert (await gateway.retention.purge(dry_run=True)).inbound_ids == 0
    assert await remembered()
    report = await gateway.retention.purge()
    assert report.inbound_ids == 1 and report.threads == []
    assert not await remembered()
    assert await gateway.store.get_thread("loop:c1") is not None


async def test_serve_purges_expired_threads_on_its_own(
        start_clocked: StartClocked, clock: Clock) -> None:
    harness = await start_clocked(purge_interval_minutes=0.002)  # every 0.12 s
    auth = await harness.user("alice")
    await full_thread(harness, auth, "t1")
    key = "alice--t1"

    clock.advance(31 * DAY)  # nothing else happens: no request, no command

    async def until_purged() -> None:
        while await harness.gateway.store.get_thread(key) is not None:
            await asyncio.sleep(0.02)
    await asyncio.wait_for(until_purged(), WAIT_SECONDS)
    await assert_gone(harness, auth, "t1")


async def test_purge_tells_session_observers_and_sweeps_archives_of_deleted_threads(
        start_clocked: StartGateway, pm: PluginManager, clock: Clock) -> None:
    rotations: list[Rotation] = []

    class Observer:
        @hookimpl
        def session_rotated(self, rotation: Rotation) -> None:
            rotations.append(rotation)

    pm.register(Observer(), name="observer")
    harness = await start_clocked()
    auth = await harness.user()
    for thread in ("old", "gone"):
        assert (await harness.chat(auth, "hi", thread=thread)).status == 200
    assert (await harness.client.delete("/api/threads/gone", headers=auth)).status == 204
    archived = list(harness.gateway.settings.sessions_dir.glob("archive/alice--gone.*"))
    assert archived  # a delete archives the session
    clock.advance(31 * 86400)  # past the free plan's 30 days, for both
    for path in archived:  # the archive's age comes from the file, like the thread's
        os.utime(path, (clock() - 31 * 86400, clock() - 31 * 86400))
    report = await harness.gateway.retention.purge()
    assert [t.session_key for t in report.threads] == ["alice--old"]
    assert report.orphans == 1
    assert not any(path.exists() for path in archived)
    assert [(r.key, r.reason) for r in rotations][-1] == ("alice--old", "purged")
