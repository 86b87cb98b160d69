"""The admin side of the ``cloudybot`` command, run for real in a subprocess: ``users add
--admin``, ``promote``/``demote``, ``block``/``unblock``, ``budget``, ``grant --reason``, and
``audit`` (list, filters, ``--export`` as JSON lines, 0600), each act in the audit log."""

from __future__ import annotations

import getpass
import json
import stat
from pathlib import Path

import pytest

from tests.conftest import Harness
from tests.helpers import assert_json_error, assert_one_line_error
from tests.test_cli import StartGateway, acloudybot, cloudybot, last_line

ME = getpass.getuser()


def audit_lines(data_dir: Path, *args: str) -> list[str]:
    result = cloudybot(data_dir, "audit", *args)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()


def test_admin_acts_from_the_command_line_are_audited_as_its_user(data_dir: Path) -> None:
    added = cloudybot(data_dir, "users", "add", "root", "--admin")
    assert added.returncode == 0, added.stderr
    assert "created admin user root" in added.stdout
    assert cloudybot(data_dir, "users", "add", "bob").returncode == 0
    for args, said in ((("promote", "bob"), "bob is an admin"),
                       (("demote", "bob"), "bob is no longer an admin"),
                       (("block", "bob"), "bob is blocked"),
                       (("unblock", "bob"), "bob is no longer blocked"),
                       (("budget", "bob", "200"), "bob's daily cap: 200 credits a day"),
                       (("budget", "bob", "plan"), "bob's daily cap: its plan's"),
                       (("grant", "bob", "50", "--reason", "a refund"), "balance 1050")):
        result = cloudybot(data_dir, "users", *args)
        assert result.returncode == 0, result.stderr
        assert said in result.stdout

    listed = cloudybot(data_dir, "users", "list")
    bob_line, root_line = listed.stdout.splitlines()[1:3]
    assert bob_line.split()[2] == "1050" and not bob_line.endswith("admin")
    assert root_line.split()[-1] == "admin"
    shown = cloudybot(data_dir, "users", "show", "root").stdout
    assert "admin        yes" in shown and "blocked      no" in shown

    lines = audit_lines(data_dir)
    assert lines[-1] == "8 audit row(s)"
    assert [line.split()[3] for line in lines[:-1]] == [  # newest first
        "credits.grant", "budget.set", "budget.set", "user.unblock", "user.block",
        "user.demote", "user.promote", "user.promote"]
    assert all(line.split()[1:3] == [ME, "cli"] for line in lines[:-1])
    assert '{"credits": 50, "reason": "a refund"}' in lines[0]
    assert [line.split()[4] for line in audit_lines(data_dir, "--action", "user.promote")
            [:-1]] == ["bob", "root"]
    assert audit_lines(data_dir, "--actor", "someone-else") == ["0 audit row(s)"]
    assert audit_lines(data_dir, "--since", "2999-01-01") == ["0 audit row(s)"]
    assert len(audit_lines(data_dir, "--limit", "2")) == 3


def test_audit_export_writes_json_lines_only_its_owner_may_read(data_dir: Path,
                                                                tmp_path: Path) -> None:
    assert cloudybot(data_dir, "users", "add", "bob").returncode == 0
    for verb in ("block", "unblock", "block"):
        assert cloudybot(data_dir, "users", verb, "bob").returncode == 0
    out = tmp_path / "audit.jsonl"
    result = cloudybot(data_dir, "audit", "--export", str(out), "--action", "user.block")
    assert result.returncode == 0, result.stderr
    assert "2 audit row(s), oldest first" in result.stdout
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["action"], r["target"], r["actor"], r["source"]) for r in rows] == [
        ("user.block", "bob", ME, "cli")] * 2
    assert rows[0]["id"] < rows[1]["id"] and set(rows[0]) == {
        "id", "at", "actor", "action", "target", "details", "source"}
    # the export is itself an audited act
    assert audit_lines(data_dir, "--action", "audit.export")[-1] == "1 audit row(s)"


@pytest.mark.parametrize("args", [
    ("users", "promote", "nobody"), ("users", "block", "nobody"),
    ("users", "budget", "nobody", "5"), ("users", "budget", "bob", "-5"),
    ("users", "budget", "bob", "lots"), ("audit", "--since", "last week"),
    ("users", "grant", "nobody", "5", "--reason", "r")])
def test_admin_command_errors_exit_1_with_one_line(data_dir: Path,
                                                   args: tuple[str, ...]) -> None:
    assert cloudybot(data_dir, "users", "add", "bob").returncode == 0
    line = assert_one_line_error(cloudybot(data_dir, *args), 1)
    assert line.startswith("cloudybot: ")
    assert audit_lines(data_dir) == ["0 audit row(s)"]  # nothing refused was recorded


@pytest.mark.sqlite_only
async def test_an_admin_made_by_the_cli_reaches_the_admin_api_and_a_block_takes_effect(
        data_dir: Path, start_gateway: StartGateway) -> None:
    root = await acloudybot(data_dir, "users", "add", "root", "--admin")
    bob = await acloudybot(data_dir, "users", "add", "bob")
    harness: Harness = await start_gateway()
    as_root = {"Authorization": f"Bearer {last_line(root)}"}
    as_bob = {"Authorization": f"Bearer {last_line(bob)}"}
    assert (await harness.client.get("/api/admin/users", headers=as_root)).status == 200
    await assert_json_error(await harness.client.get("/api/admin/users", headers=as_bob), 403,
                            "admin_only")
    assert (await harness.client.get("/api/user/credits", headers=as_bob)).status == 200
    blocked = await acloudybot(data_dir, "users", "block", "bob")  # another process
    assert blocked.returncode == 0, blocked.stderr
    await assert_json_error(await harness.client.get("/api/user/credits", headers=as_bob),
                            403, "account_blocked")  # from the next request on
