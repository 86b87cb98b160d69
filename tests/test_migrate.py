"""``cloudybot migrate --from-sqlite DATA_DIR --to postgresql://…`` (SPEC §18): every row of a
SQLite deployment with 1,000 threads arrives, ids kept; a non-empty target is refused without
``--force``; the gateway then runs on the copy."""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from gateway.accounts.secrets import KEY_FILE_NAME, SecretBox, load_or_create_key
from gateway.cli.migrate import CONVERT, TABLES
from gateway.kit.inbound import SEALED_AS
from gateway.memory.sessions import RotationRule, SessionStore
from gateway.store import (
    AuditEntry,
    ChannelMessage,
    Charge,
    InboxEntry,
    JobOutcome,
    NewMessage,
    ThreadRef,
    TurnCommit,
    Webhook,
)
from gateway.store.events import message_created
from gateway.store.sqlite import SQLiteStore
from gateway.webhooks.dispatcher import seal_context
from tests.conftest import Harness
from tests.test_cli import acloudybot
from tests.test_store_contract import job

StartGateway = Callable[..., Awaitable[Harness]]


async def seed(data_dir: Path, threads: int) -> None:
    """A deployment: two users, ``threads`` threads with turns, pinned keys, a specialist, a
    saved login, a summary, the ledger, an inbox message answered into the outbox."""
    store = SQLiteStore(data_dir / "cloudybot.sqlite3")
    box = SecretBox(load_or_create_key("", data_dir))  # sealed as the gateway seals them
    await store.open()
    try:
        await store.create_user("alice", "pro", 100_000, 60, "2026-12")
        await store.create_user("bob", "free", 10, 0, "2026-12")
        await store.replace_token("alice", "token-hash")
        await store.set_flag("alice", "admin", True,
                             AuditEntry("root", "user.promote", "alice", {}, "cli"))
        await store.set_daily_credits("bob", 40, AuditEntry("root", "budget.set", "bob",
                                                            {"dailyCredits": 40}, "cli"))
        await store.put_specialist("alice", "chef", "Cook.")
        await store.put_credential("alice", "example.com", box.seal(
            {"username": "ada", "password": "hunter2"}, "alice"))
        await store.inbox_add(InboxEntry("telegram", "m1", "alice--t0", '{"chat": 1}', 4096,
                                         box.seal({"message": "{}"}, SEALED_AS)))
        await store.create_webhook(Webhook("wh_" + "a" * 24, "alice", "https://example.com/h",
                                           ("message.created",),
                                           box.seal({"secret": "s"}, seal_context("alice")),
                                           "2026-12-01T00:00:00.000000Z"))
        for index in range(threads):
            ref = ThreadRef("alice", f"t{index}", f"alice--t{index}", "dashboard")
            await store.put_pinned(ref, "name", f"Ada {index}", 10)
            await store.commit_turn(TurnCommit(
                ref, "alice", [NewMessage("user", f"q{index} ü", 2),
                               NewMessage("assistant", f"a{index} — ok", 3)],
                [Charge("chat", "m", 10, 5, 1)],
                ChannelMessage("telegram", "m1") if index == 0 else None,
                events=(message_created(ref, f"a{index} — ok", []),)))
        await store.set_title("alice--t1", "Named thread")
        await store.create_web_session("session-hash", "alice", "csrf", 2e9)
        await store.set_time_zone("alice", "Europe/Paris")
        await store.create_job(job("alice", next_run=100.0), 10)
        (lease,) = await store.claim_jobs(100.0, 30, 10)
        await store.finish_job(JobOutcome(lease.job.id, lease.token, 100.0, "skipped",
                                          next_run=200.0))
        await store.create_job(job("alice", job_id="job_b", next_run=300.0), 10)
    finally:
        await store.close()


def sqlite_rows(data_dir: Path) -> dict[str, list[tuple[Any, ...]]]:
    conn = sqlite3.connect(data_dir / "cloudybot.sqlite3")
    try:
        return {table: sorted((CONVERT.get(table, tuple)(row) for row in conn.execute(
            f"SELECT {', '.join(columns)} FROM {table}")), key=repr)
            for table, columns in TABLES}
    finally:
        conn.close()


async def postgres_rows(url: str) -> dict[str, list[tuple[Any, ...]]]:
    conn = await asyncpg.connect(url)
    try:
        found = {}
        for table, columns in TABLES:
            rows = await conn.fetch(f"SELECT {', '.join(columns)} FROM {table}")
            found[table] = sorted((tuple(bytes(v) if isinstance(v, memoryview) else v
                                         for v in row) for row in rows), key=repr)
        return found
    finally:
        await conn.close()


async def test_every_row_of_a_1000_thread_deployment_arrives(
        data_dir: Path, postgres_url: str, start_gateway: StartGateway) -> None:
    await seed(data_dir, 1000)
    result = await acloudybot(data_dir, "migrate", "--from-sqlite", str(data_dir),
                              "--to", postgres_url)
    assert result.returncode == 0, result.stderr
    assert "every table's count matches" in result.stdout
    assert "threads 1,000" in result.stdout
    expected = sqlite_rows(data_dir)
    assert await postgres_rows(postgres_url) == expected
    assert len(expected["display_messages"]) == 2000 and len(expected["outbox"]) == 1
    assert len(expected["webhook_deliveries"]) == 1000
    assert (len(expected["jobs"]), len(expected["job_runs"])) == (2, 1)
    assert len(expected["audit_log"]) == 2 and {(row[0], row[7], row[9]) for row in
                                                 expected["users"]} == {
        ("alice", True, None), ("bob", False, 40)}  # alice's flag, bob's cap
    assert len(expected["usage_days"]) == 1 and len(expected["usage_hours"]) == 4
    # the rollups copied cover the whole ledger (SQLite folds them in batches: the last
    # bookings are folded by the migration): 1,000 turns of one credit each
    assert expected["usage_days"][0][6] == 1000

    # a second run finds the target full and refuses, changing nothing
    again = await acloudybot(data_dir, "migrate", "--from-sqlite", str(data_dir),
                             "--to", postgres_url)
    assert again.returncode == 1 and "not empty" in again.stderr and "--force" in again.stderr
    forced = await acloudybot(data_dir, "migrate", "--from-sqlite", str(data_dir),
                              "--to", postgres_url, "--force")
    assert forced.returncode == 0, forced.stderr
    assert await postgres_rows(postgres_url) == expected

    # the gateway runs on the copy: new rows take ids after the copied ones
    harness = await start_gateway(database_url=postgres_url)
    token = await harness.gateway.accounts.issue_token("alice")
    auth = {"Authorization": f"Bearer {token}"}
    assert (await harness.chat(auth, "after the move", thread="t5")).status == 200
    thread = await (await harness.client.get("/api/threads/t5", headers=auth)).json()
    assert [m["content"] for m in thread["display_messages"]] == [
        "q5 ü", "a5 — ok", "after the move", "echo: after the move"]
    memory = await (await harness.client.get("/api/user/memory", params={"threadId": "t5"},
                                             headers=auth)).json()
    assert memory["memory"] == {"name": "Ada 5"}
    for q, found in (("named", ["t1"]), ("q999", ["t999"]), ("after move", ["t5"])):
        answer = await (await harness.client.get("/api/threads", params={"q": q},
                                                 headers=auth)).json()
        assert [t["threadId"] for t in answer["threads"]] == found, q  # titles, index too


async def test_migrate_refuses_what_it_cannot_use(data_dir: Path, tmp_path: Path) -> None:
    missing = await acloudybot(data_dir, "migrate", "--from-sqlite", str(tmp_path / "nothing"),
                               "--to", "postgresql://postgres@127.0.0.1/postgres")
    assert missing.returncode == 1 and "no SQLite database" in missing.stderr
    wrong = await acloudybot(data_dir, "migrate", "--from-sqlite", str(data_dir),
                             "--to", "mysql://somewhere")
    assert wrong.returncode == 1 and "postgresql://" in wrong.stderr
    assert "Traceback" not in missing.stderr + wrong.stderr


async def test_session_files_become_the_databases_sessions_line_for_line(
        data_dir: Path, postgres_url: str, start_gateway: StartGateway) -> None:
    await seed(data_dir, 2)
    files = SessionStore(data_dir / "sessions", rule=RotationRule(30, 200_000),
                         count_message=lambda message: 1)
    files.append("alice--t1", "alice", "t1", [{"type": "user", "content": "old", "messageId": 1}])
    archive = files.archive("alice--t1", "manual")
    assert archive is not None and archive.archive is not None
    files.append("alice--t1", "alice", "t1", [
        {"type": "user", "content": "2+3?", "messageId": 3},
        {"type": "tool_calls", "replyId": 4, "round": 1, "content": None,
         "calls": [{"id": "c1", "name": "calculator", "arguments": "{}"}]},
        {"type": "tool_result", "replyId": 4, "round": 1, "toolCallId": "c1", "content": "5"},
        {"type": "assistant", "content": "5", "messageId": 4, "toolTokens": 12}])
    active = files.path_for("alice--t1").read_bytes()

    result = await acloudybot(data_dir, "migrate", "--from-sqlite", str(data_dir),
                              "--to", postgres_url)
    assert result.returncode == 0, result.stderr
    assert "sessions 2" in result.stdout

    harness = await start_gateway(database_url=postgres_url)
    sessions = harness.gateway.sessions
    assert await sessions.export("alice--t1") == active
    status = await sessions.session_status("alice--t1")
    assert status.active is not None and status.active[0] == len(active)
    assert [a.name for a in status.archives] == [archive.archive.name]
    conn = await asyncpg.connect(postgres_url)
    try:  # the exchange's lines (and its reply) are the replay window of reply 4
        replay = await conn.fetchval("SELECT count(*) FROM session_lines WHERE reply_id = 4")
    finally:
        await conn.close()
    assert replay == 3


async def saved_logins(harness: Harness) -> list[dict[str, Any]]:
    token = await harness.gateway.accounts.issue_token("alice")
    response = await harness.client.get("/api/user/browser-credentials",
                                        headers={"Authorization": f"Bearer {token}"})
    assert response.status == 200
    listed: list[dict[str, Any]] = await response.json()
    return listed


async def test_the_secret_key_comes_along_and_saved_logins_open_on_postgresql(
        tmp_path: Path, postgres_url: str, start_gateway: StartGateway) -> None:
    source, target = tmp_path / "sqlite-data", tmp_path / "data"  # the gateway's is `data`
    await seed(source, 1)
    result = await acloudybot(target, "migrate", "--from-sqlite", str(source),
                              "--to", postgres_url)
    assert result.returncode == 0, result.stderr
    assert f"copied the secret key {source / KEY_FILE_NAME} to {target / KEY_FILE_NAME}" \
        in result.stdout
    assert (target / KEY_FILE_NAME).read_bytes() == (source / KEY_FILE_NAME).read_bytes()
    assert (target / KEY_FILE_NAME).stat().st_mode & 0o777 == 0o600

    harness = await start_gateway(database_url=postgres_url)  # on `target`
    assert await saved_logins(harness) == [{"site": "example.com", "username": "ada"}]


async def test_a_key_that_does_not_open_the_saved_logins_is_refused_before_any_copy(
        tmp_path: Path, postgres_url: str) -> None:
    source, target = tmp_path / "sqlite-data", tmp_path / "data"
    await seed(source, 1)
    result = await acloudybot(target, "migrate", "--from-sqlite", str(source),
                              "--to", postgres_url, CLOUDYBOT_SECRET_KEY="another key")
    assert result.returncode == 1
    assert "a saved login of" in result.stderr and "CLOUDYBOT_SECRET_KEY" in result.stderr
    assert str(source / KEY_FILE_NAME) in result.stderr and "Nothing was copied" in result.stderr
    assert not (target / KEY_FILE_NAME).exists()
    conn = await asyncpg.connect(postgres_url)
    try:
        assert await conn.fetchval("SELECT to_regclass('users')") is None  # not even a schema
    finally:
        await conn.close()

    (source / KEY_FILE_NAME).unlink()  # sealed with a key migrate cannot know
    lost = await acloudybot(target, "migrate", "--from-sqlite", str(source),
                            "--to", postgres_url)
    assert lost.returncode == 1 and "the same for migrate and for the PostgreSQL" \
        in lost.stderr


@pytest.mark.sqlite_only
async def test_migrating_from_the_folder_of_a_running_gateway_is_refused(
        data_dir: Path, postgres_url: str, start_gateway: StartGateway) -> None:
    await seed(data_dir, 1)
    harness = await start_gateway()  # a gateway on the SQLite folder
    refused = await acloudybot(data_dir, "migrate", "--from-sqlite", str(data_dir),
                               "--to", postgres_url)
    assert refused.returncode == 1, refused.stdout
    assert f"{data_dir} is in use: a running gateway" in refused.stderr
    assert "Traceback" not in refused.stderr

    await harness.client.close()  # the gateway stops: the folder is free
    moved = await acloudybot(data_dir, "migrate", "--from-sqlite", str(data_dir),
                             "--to", postgres_url)
    assert moved.returncode == 0, moved.stderr
