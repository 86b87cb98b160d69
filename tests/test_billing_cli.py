"""The billing commands of ``cloudybot``, run for real in a subprocess (SPEC §8, §9; issue 5):
``users plan``, ``users grant``, ``users add --credits 0``, ``usage``, ``purge [--dry-run]``."""

from __future__ import annotations

import asyncio
import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from gateway.testing.fake_llm import FakeLLM, Scripted, completion
from tests.conftest import Harness
from tests.helpers import Clock, assert_one_line_error, cli_env
from tests.test_billing import assert_ledger_matches_balances, credits_body
from tests.test_retention import full_thread, last_active, session_files

StartGateway = Callable[..., Awaitable[Harness]]
pytestmark = pytest.mark.sqlite_only  # it uses the CLI or the SQLite file

CLI_TIMEOUT_SECONDS = 60




async def cloudybot(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``cloudybot ARGS`` to completion without blocking the event loop."""
    return await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "gateway.cli", *args], env=cli_env(data_dir),
        cwd=data_dir.parent, capture_output=True, text=True, timeout=CLI_TIMEOUT_SECONDS)


def ok(result: subprocess.CompletedProcess[str]) -> list[str]:
    """Exit status 0; the lines printed."""
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


async def add_user(data_dir: Path, user_id: str, *options: str) -> dict[str, str]:
    """``cloudybot users add``; the new account's Authorization header."""
    lines = ok(await cloudybot(data_dir, "users", "add", user_id, *options))
    return {"Authorization": f"Bearer {lines[-1]}"}


# --- users plan / grant / add --credits 0 ------------------------------------------------------
async def test_users_plan_moves_the_account_and_tops_it_up_at_once(
        data_dir: Path, start_gateway: StartGateway) -> None:
    auth = await add_user(data_dir, "alice", "--credits", "100")

    lines = ok(await cloudybot(data_dir, "users", "plan", "alice", "pro"))

    assert lines == ["alice is on plan pro: 20000 credits, 600 browser minutes"]
    down = ok(await cloudybot(data_dir, "users", "plan", "alice", "free"))
    assert down == ["alice is on plan free: 20000 credits, 600 browser minutes"]
    harness = await start_gateway()
    body = await credits_body(harness, auth)
    assert (body["plan"], body["credits"], body["browserMinutes"]) == ("free", 20_000, 600)
    ledger = await assert_ledger_matches_balances(harness.gateway, "alice")
    assert [(row.kind, row.credits, row.minutes) for row in ledger] == [
        ("grant", -100, -30), ("plan_grant", -19_900, -570)]


@pytest.mark.parametrize(("args", "says"), [
    (("users", "plan", "alice", "gold"), "gold"),
    (("users", "plan", "nobody", "pro"), "nobody"),
])
async def test_users_plan_errors_exit_1_with_one_line_and_change_nothing(
        data_dir: Path, start_gateway: StartGateway, args: tuple[str, ...], says: str) -> None:
    auth = await add_user(data_dir, "alice", "--credits", "100")

    result = await cloudybot(data_dir, *args)

    assert says in assert_one_line_error(result, 1)
    assert result.stdout == ""
    harness = await start_gateway()
    body = await credits_body(harness, auth)
    assert (body["plan"], body["credits"]) == ("free", 100)
    assert len(await harness.gateway.store.ledger("alice")) == 1


async def test_users_plan_with_an_unknown_plan_names_the_plans_there_are(
        data_dir: Path) -> None:
    await add_user(data_dir, "alice")
    line = assert_one_line_error(await cloudybot(data_dir, "users", "plan", "alice", "gold"), 1)
    assert all(name in line for name in ("free", "pro", "team"))


async def test_users_grant_is_a_ledger_row(data_dir: Path, start_gateway: StartGateway) -> None:
    auth = await add_user(data_dir, "alice", "--credits", "10")

    lines = ok(await cloudybot(data_dir, "users", "grant", "alice", "50"))

    assert lines == ["granted 50 credits to alice; balance 60"]
    harness = await start_gateway()
    assert (await credits_body(harness, auth))["credits"] == 60
    ledger = await assert_ledger_matches_balances(harness.gateway, "alice")
    assert [(row.kind, row.credits) for row in ledger] == [("grant", -10), ("grant", -50)]


async def test_users_added_with_zero_credits_get_the_plan_grant_next_period(
        data_dir: Path, start_clocked: StartGateway, clock: Clock) -> None:
    auth = await add_user(data_dir, "alice", "--plan", "pro", "--credits", "0")
    this_month = await start_clocked()
    assert (await this_month.chat(auth, "hello")).status == 402
    assert (await credits_body(this_month, auth))["credits"] == 0
    await this_month.client.close()

    clock.next_month()
    next_month = await start_clocked()

    assert (await credits_body(next_month, auth))["credits"] == 20_000
    assert (await next_month.chat(auth, "hello")).status == 200


# --- usage --------------------------------------------------------------------------------------
async def test_usage_prints_balances_totals_and_the_latest_rows(
        data_dir: Path, start_gateway: StartGateway, fake_llm: FakeLLM) -> None:
    auth = await add_user(data_dir, "alice", "--credits", "500")
    harness = await start_gateway()
    fake_llm.script += [Scripted(body=completion("a", 1000, 0)),
                        Scripted(body=completion("b", 1500, 1000))]
    assert (await harness.chat(auth, "one", thread="t1")).status == 200
    assert (await harness.chat(auth, "two", thread="t2")).status == 200
    await harness.gateway.store.charge_minutes("alice", "alice--t2", 4)
    period = (await credits_body(harness, auth))["period"]

    lines = ok(await cloudybot(data_dir, "usage", "alice"))

    header = lines[0].split()
    assert header[:8] == ["alice", "plan", "free", "credits", str(500 - 1 - 5), "browser",
                          "minutes", "26"]
    assert f"period {period}-01 to" in lines[0]
    rows = {line.split()[0]: line.split()[1:] for line in lines if line.strip()}
    assert rows["kind"] == ["calls", "prompt", "tok", "compl.", "tok", "credits", "minutes"]
    assert rows["chat"] == ["2", "2500", "1000", "6", "0"]
    assert rows["grant"] == ["1", "0", "0", "-500", "-30"]
    assert rows["browser"] == ["1", "0", "0", "0", "4"]
    latest = [line for line in lines if re.match(r"\d{4}-\d\d-\d\dT", line)]
    assert [line.split()[1] for line in latest] == ["browser", "chat", "chat", "grant"]
    assert latest[1].split()[2:] == ["fake-model", "1500+1000", "5", "alice--t2"]

    limited = ok(await cloudybot(data_dir, "usage", "alice", "--limit", "2"))
    assert len([line for line in limited if re.match(r"\d{4}-\d\d-\d\dT", line)]) == 2


async def test_usage_of_an_unknown_user_exits_1_with_one_line(data_dir: Path) -> None:
    await add_user(data_dir, "alice")
    assert "nobody" in assert_one_line_error(await cloudybot(data_dir, "usage", "nobody"), 1)


# --- purge --------------------------------------------------------------------------------------
async def expired_setup(harness: Harness) -> dict[str, str]:
    """alice (free) with three threads 31+ days old and one recent; bob (pro) with one 40 days
    old. Every thread has an active and an archived session file."""
    settings = harness.gateway.settings
    alice = await harness.user("alice")
    bob = await harness.user("bob", plan="pro")
    for thread in ("a", "b", "c", "recent"):
        await full_thread(harness, alice, thread)
    await full_thread(harness, bob, "a")
    for days, key in ((50, "alice--a"), (40, "alice--b"), (31, "alice--c"), (40, "bob--a")):
        last_active(settings, key, days_ago=days)
    await harness.client.close()  # the CLI works on the data alone
    return alice


async def test_purge_dry_run_lists_and_changes_nothing(
        data_dir: Path, start_clocked: StartGateway) -> None:
    harness = await start_clocked()
    await expired_setup(harness)
    settings = harness.gateway.settings
    files = sorted(settings.sessions_dir.rglob("*.jsonl"))
    database = settings.database_path.read_bytes()

    lines = ok(await cloudybot(data_dir, "purge", "--dry-run"))

    assert [line.split()[:4] for line in lines[:-1]] == [
        ["[1/3]", "would", "purge", "alice--a"], ["[2/3]", "would", "purge", "alice--b"],
        ["[3/3]", "would", "purge", "alice--c"]]
    assert all("(plan free, last active" in line for line in lines[:-1])
    assert lines[-1] == "dry run: 3 thread(s) would be purged (free: 3); nothing was changed"
    assert sorted(settings.sessions_dir.rglob("*.jsonl")) == files
    assert settings.database_path.read_bytes() == database


async def test_purge_prints_progress_and_a_summary_and_removes_the_threads(
        data_dir: Path, start_clocked: StartGateway) -> None:
    harness = await start_clocked()
    alice = await expired_setup(harness)
    settings = harness.gateway.settings

    lines = ok(await cloudybot(data_dir, "purge"))

    # Not on a terminal: one summary line, not a line per thread.
    assert lines == ["purged 3 thread(s) (free: 3), 6 session file(s) (0 of deleted threads), "
                     "0 old message id(s)"]
    for key in ("alice--a", "alice--b", "alice--c"):
        assert session_files(settings, key) == []
    for key in ("alice--recent", "bob--a"):
        assert len(session_files(settings, key)) == 2

    after = await start_clocked()
    threads = await after.client.get("/api/threads", headers=alice)
    assert [t["threadId"] for t in (await threads.json())["threads"]] == ["recent"]
    assert await after.gateway.store.get_thread("bob--a") is not None
    assert await after.gateway.store.get_thread("alice--a") is None

    again = ok(await cloudybot(data_dir, "purge"))
    assert again == ["purged 0 thread(s), 0 session file(s) (0 of deleted threads), "
                     "0 old message id(s)"]


async def test_purge_on_a_terminal_draws_a_progress_bar(
        data_dir: Path, start_clocked: StartGateway) -> None:
    harness = await start_clocked()
    await expired_setup(harness)
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # 100 cols
    try:
        done = await asyncio.to_thread(
            subprocess.run, [sys.executable, "-m", "gateway.cli", "purge"],
            env=cli_env(data_dir), cwd=data_dir.parent, stdout=subprocess.PIPE,
            stderr=terminal, text=True, timeout=60)
        os.close(terminal)
        terminal = -1
        drawn = b""
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # the terminal's other end is closed: all was read
                break
            if not chunk:
                break
            drawn += chunk
    finally:
        if terminal != -1:
            os.close(terminal)
        os.close(controller)
    assert done.returncode == 0
    assert done.stdout.strip().startswith("purged 3 thread(s)")
    assert b"purge" in drawn and b"100%" in drawn and b"3/3" in drawn
