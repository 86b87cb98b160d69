"""A user's data (SPEC §17): exported whole as an archive a person can read (the API for
oneself, the CLI for an operator), and deleted so that no byte of it stays in the data dir."""

from __future__ import annotations

import io
import json
import stat
import zipfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from tests.conftest import ON_POSTGRES, Harness
from tests.test_cli import acloudybot, cloudybot

MARKER = "zebra-quartz-7731"  # in alice's words: found nowhere after her deletion


async def seed(harness: Harness) -> dict[str, str]:
    """alice: turns on two threads (a summary folds some), pinned memory, a specialist, a
    saved login, a webhook; bob: one turn."""
    alice, bob = await harness.user("alice"), await harness.user("bob")
    for n in range(5):
        assert (await harness.chat(alice, f"{MARKER} note {n}")).status == 200
    assert (await harness.chat(alice, f"{MARKER} elsewhere", thread="t2")).status == 200
    await harness.gateway.drain()  # the summary
    assert (await harness.client.put("/api/user/memory", params={"threadId": "t1"},
                                     headers=alice,
                                     json={"key": "code", "value": MARKER})).status == 200
    assert (await harness.client.put("/api/specialists/chef", headers=alice,
                                     json={"instructions": f"cook {MARKER}"})).status == 200
    assert (await harness.client.put("/api/user/browser-credentials", headers=alice, json={
        "site": "shop.example", "username": "ada", "password": "hunter2-secret"})).status == 200
    assert (await harness.client.post("/api/jobs", headers=alice, json={
        "threadId": "t1", "kind": "cron", "when": "0 9 * * 1-5", "timeZone": "Europe/Paris",
        "text": f"standup {MARKER}"})).status == 201
    assert (await harness.chat(bob, "bob stays")).status == 200
    return alice


async def test_the_export_holds_everything_about_the_caller_and_nothing_else(
        start_gateway: Callable[..., Awaitable[Harness]]) -> None:
    harness = await start_gateway(summarize_at=4, keep_recent=2)
    alice = await seed(harness)
    response = await harness.client.get("/api/user/export", headers=alice)
    assert response.status == 200 and response.content_type == "application/zip"
    assert "alice-export.zip" in response.headers["Content-Disposition"]
    archive = zipfile.ZipFile(io.BytesIO(await response.read()))
    names = set(archive.namelist())

    def read(name: str) -> Any:
        return json.loads(archive.read(f"alice/{name}"))
    assert {"alice/account.json", "alice/threads/t1.json", "alice/threads/t2.json",
            "alice/specialists.json", "alice/usage.json", "alice/browser-credentials.json",
            "alice/webhooks.json", "alice/jobs.json", "alice/sessions/t1/active.jsonl"} <= names
    thread = read("threads/t1.json")
    assert [m["content"] for m in thread["transcript"] if m["role"] == "user"] == [
        f"{MARKER} note {n}" for n in range(5)]
    assert thread["summary"] and thread["pinned"] == {"code": MARKER}
    assert read("account.json")["holds"]["threads"] == 2
    assert read("account.json")["admin"] is False and read("account.json")["lastActive"]
    assert read("specialists.json") == {"chef": f"cook {MARKER}"}
    assert read("browser-credentials.json") == [{"site": "shop.example", "username": "ada"}]
    assert {row["kind"] for row in read("usage.json")} >= {"chat", "summarize"}
    assert [(job["threadId"], job["spec"], job["text"]) for job in read("jobs.json")] == [
        ("t1", "0 9 * * 1-5", f"standup {MARKER}")]
    everything = b"".join(archive.read(name) for name in names)
    assert b"hunter2-secret" not in everything and b"bob stays" not in everything
    assert MARKER.encode() in archive.read("alice/sessions/t1/active.jsonl")
    await_missing = await harness.client.get("/api/user/export")
    assert await_missing.status == 401


def _files_bytes(root: Path) -> bytes:
    return b"".join(path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file())


async def test_deleting_a_user_leaves_no_byte_of_them(
        start_gateway: Callable[..., Awaitable[Harness]], data_dir: Path) -> None:
    harness = await start_gateway(summarize_at=4, keep_recent=2)
    alice = await seed(harness)
    await harness.client.post("/api/threads/t2/clear", headers=alice)  # an archive as well
    database = harness.gateway.settings.database_url
    await harness.client.close()  # the gateway stops: the operator deletes offline
    env = {"CLOUDYBOT_DATABASE_URL": database} if database else {}
    assert MARKER.encode() in _files_bytes(data_dir) or ON_POSTGRES

    exported = await acloudybot(data_dir, "users", "export", "alice", "--out",
                                str(data_dir.parent / "alice.zip"), **env)
    assert exported.returncode == 0, exported.stderr
    deleted = await acloudybot(data_dir, "users", "delete", "alice", "--yes", **env)
    assert deleted.returncode == 0, deleted.stderr
    assert "deleted alice: 2 thread(s)" in deleted.stdout

    assert MARKER.encode() not in _files_bytes(data_dir)  # database, WAL, sessions, archives
    assert b"bob stays" in _files_bytes(data_dir) or ON_POSTGRES
    shown = await acloudybot(data_dir, "users", "show", "alice", **env)
    assert shown.returncode == 1
    again = await acloudybot(data_dir, "users", "delete", "alice", "--yes", **env)
    assert again.returncode == 1 and "no user 'alice'" in again.stderr
    assert zipfile.ZipFile(data_dir.parent / "alice.zip").namelist()


def test_the_cli_export_is_readable_by_its_owner_only(data_dir: Path) -> None:
    """0600 like the data files, whether ``--out`` is new or an older export (0644) is there."""
    assert cloudybot(data_dir, "users", "add", "alice").returncode == 0
    fresh, older = data_dir.parent / "fresh.zip", data_dir.parent / "older.zip"
    older.write_bytes(b"an older export, longer than the new one " * 1000)
    older.chmod(0o644)
    for out in (fresh, older):
        exported = cloudybot(data_dir, "users", "export", "alice", "--out", str(out))
        assert exported.returncode == 0, exported.stderr
        assert stat.S_IMODE(out.stat().st_mode) == 0o600
        assert zipfile.ZipFile(out).namelist()  # the whole file is the new archive
