"""First-run traps of the ``cloudybot`` command: where the data lives is said as an absolute
path, and a command that would make a new, empty database says so."""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.config.settings import load_settings
from gateway.gateway import Gateway
from gateway.plugins.manager import (
    declared_settings,
    make_plugin_manager,
    plugin_names,
    registered_names,
)
from tests.helpers import assert_one_line_error, cli_env
from tests.test_cli import CLI_TIMEOUT_SECONDS, acloudybot, cloudybot, free_port, last_line
from tests.test_docs import built_in_plugin_settings, code_spans, documented_setting


@pytest.mark.sqlite_only
def test_users_add_names_the_data_folder_and_warns_when_it_makes_the_database(
        data_dir: Path) -> None:
    first = cloudybot(data_dir, "users", "add", "alice", CLOUDYBOT_DATA_DIR="data")
    assert first.returncode == 0, first.stderr
    folder = data_dir.resolve()  # `data`, relative to where the command ran
    assert f"(data: {folder})" in first.stdout
    assert last_line(first).startswith("cb_")  # the token stays the last line
    warning, = first.stderr.strip().splitlines()
    assert warning.startswith(f"cloudybot: warning: no database in {folder} yet")
    assert "CLOUDYBOT_DATA_DIR" in warning and "--config" in warning

    second = cloudybot(data_dir, "users", "add", "bob", CLOUDYBOT_DATA_DIR="data")
    assert second.returncode == 0 and second.stderr == ""  # the database is there now


@pytest.mark.sqlite_only
def test_a_command_run_from_another_folder_warns_of_the_empty_database_it_makes(
        data_dir: Path) -> None:
    assert cloudybot(data_dir, "users", "add", "alice").returncode == 0
    elsewhere = data_dir.parent / "elsewhere"
    elsewhere.mkdir()
    listed = cloudybot(elsewhere / "data", "users", "list", CLOUDYBOT_DATA_DIR="data")
    assert "0 account(s)" in listed.stdout
    assert f"no database in {(elsewhere / 'data').resolve()} yet" in listed.stderr


async def test_serve_names_the_data_folder_by_its_absolute_path(data_dir: Path) -> None:
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway.cli", "serve",
        env=cli_env(data_dir, CLOUDYBOT_DATA_DIR="data", CLOUDYBOT_PORT=str(free_port())),
        cwd=data_dir.parent, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    assert child.stdout is not None
    try:
        started = (await asyncio.wait_for(child.stdout.readline(), 60)).decode()
    finally:
        if child.returncode is None:
            child.terminate()
        _, stderr = await asyncio.wait_for(child.communicate(), 60)
    assert started.startswith("cloudybot: serving on"), stderr.decode()
    assert f"data: {data_dir.resolve()})" in started
    assert "warning" not in stderr.decode()  # serve makes its database without a word


async def test_users_add_names_the_postgresql_database_without_its_password(
        data_dir: Path, postgres_url: str) -> None:
    url = postgres_url.replace("postgresql://postgres@", "postgresql://postgres:hunter2@")
    added = await acloudybot(data_dir, "users", "add", "alice", CLOUDYBOT_DATABASE_URL=url)
    assert added.returncode == 0, added.stderr
    assert "(data: PostgreSQL 127.0.0.1" in added.stdout and "hunter2" not in added.stdout
    assert f"secret key in {data_dir.resolve()})" in added.stdout
    assert added.stderr == ""  # nothing is made in the data folder's database


# --- users delete asks first -------------------------------------------------------------------
def delete_on_a_terminal(data_dir: Path, answer: str) -> subprocess.CompletedProcess[str]:
    """``users delete alice`` with a pseudo-terminal as its stdin, ``answer`` typed into it
    (the terminal holds it until the command reads)."""
    main, terminal = os.openpty()
    try:
        os.write(main, answer.encode())
        return subprocess.run(
            [sys.executable, "-m", "gateway.cli", "users", "delete", "alice"],
            env=cli_env(data_dir), cwd=data_dir.parent, stdin=terminal,
            capture_output=True, text=True, timeout=CLI_TIMEOUT_SECONDS)
    finally:
        os.close(terminal)
        os.close(main)


@pytest.mark.sqlite_only
def test_users_delete_asks_on_a_terminal_and_keeps_the_account_unless_told_yes(
        data_dir: Path) -> None:
    assert cloudybot(data_dir, "users", "add", "alice").returncode == 0
    kept = delete_on_a_terminal(data_dir, "n\n")
    assert kept.returncode == 1
    assert f"delete alice (1 token(s)) from {data_dir.resolve()}, for good? [y/N]" in kept.stdout
    assert kept.stderr.strip() == "cloudybot: not deleted: alice is kept"
    assert "alice" in cloudybot(data_dir, "users", "list").stdout

    deleted = delete_on_a_terminal(data_dir, "y\n")
    assert deleted.returncode == 0, deleted.stderr
    assert "deleted alice" in deleted.stdout
    assert "0 account(s)" in cloudybot(data_dir, "users", "list").stdout


@pytest.mark.sqlite_only
def test_users_delete_without_a_terminal_needs_yes(data_dir: Path) -> None:
    assert cloudybot(data_dir, "users", "add", "alice").returncode == 0
    refused = cloudybot(data_dir, "users", "delete", "alice")  # stdin: not a terminal
    line = assert_one_line_error(refused, 1)
    assert "stdin is not a terminal" in line and "--yes" in line
    assert "alice" in cloudybot(data_dir, "users", "list").stdout

    deleted = cloudybot(data_dir, "users", "delete", "alice", "--yes")
    assert deleted.returncode == 0, deleted.stderr
    assert "0 account(s)" in cloudybot(data_dir, "users", "list").stdout


# --- one wording for a plan that is not there ---------------------------------------------------
@pytest.mark.sqlite_only
def test_an_unknown_plan_is_worded_alike_by_users_add_users_plan_and_the_configuration(
        data_dir: Path) -> None:
    wording = "no plan named 'gold' (plans: free, pro, team)"
    added = assert_one_line_error(cloudybot(data_dir, "users", "add", "alice", "--plan", "gold"),
                                  1)
    assert added == f"cloudybot: {wording}"
    assert cloudybot(data_dir, "users", "add", "alice").returncode == 0
    moved = assert_one_line_error(cloudybot(data_dir, "users", "plan", "alice", "gold"), 1)
    assert moved == f"cloudybot: {wording}"
    configured = assert_one_line_error(cloudybot(data_dir, "plans",
                                                 CLOUDYBOT_DEFAULT_PLAN="gold"), 2)
    assert configured == ("cloudybot: config error: [accounts] default_plan "
                          f"(CLOUDYBOT_DEFAULT_PLAN): {wording}")


# --- zsh and fish completion ---------------------------------------------------------------------
LINES = [  # what is typed, and what completes it (the same table as bash's test)
    ("cloudybot us", {"users", "usage"}),
    ("cloudybot users ex", {"export"}),
    ("cloudybot --config prod.toml users d", {"delete", "demote"}),
    ("cloudybot serve --p", {"--port"}),
    ("cloudybot sessions ", {"list", "show", "export", "rotate", "--help"}),
    ("cloudybot completion ", {"bash", "fish", "zsh", "--help"}),
    ("cloudybot users delete alice --y", {"--yes"}),
]


def completion_script(data_dir: Path, tmp_path: Path, shell: str) -> Path:
    script = cloudybot(data_dir, "completion", shell)
    assert script.returncode == 0, script.stderr
    path = tmp_path / f"completion.{shell}"
    path.write_text(script.stdout, encoding="utf-8")
    return path


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed")
@pytest.mark.parametrize(("line", "expected"), LINES)
def test_fish_completion_comes_from_the_parser(data_dir: Path, tmp_path: Path, line: str,
                                               expected: set[str]) -> None:
    script = completion_script(data_dir, tmp_path, "fish")
    answered = subprocess.run(  # fish's own completion machinery, on the typed line
        ["fish", "--no-config", "-c", f"source {script}; complete -C {shlex.quote(line)}"],
        capture_output=True, text=True, check=True)
    assert set(answered.stdout.split()) == expected


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
@pytest.mark.parametrize(("line", "expected"), LINES)
def test_zsh_completion_comes_from_the_parser(data_dir: Path, tmp_path: Path, line: str,
                                              expected: set[str]) -> None:
    script = completion_script(data_dir, tmp_path, "zsh")
    words = line.split() + ([""] if line.endswith(" ") else [])
    # Outside a completion widget, zsh's compadd and compdef are stand-ins that print what
    # they are given; the candidates are then matched against the word as compadd would.
    probe = (f"compdef() {{ :; }}; compadd() {{ shift; print -l -- \"$@\"; }}; source {script};"
             f" words=({' '.join(map(shlex.quote, words))}); CURRENT={len(words)}; _cloudybot")
    answered = subprocess.run(["zsh", "-f", "-c", probe], capture_output=True, text=True,
                              check=True)
    assert {word for word in answered.stdout.split() if word.startswith(words[-1])} == expected


# --- cloudybot plugins writes values as the docs do ---------------------------------------------
def test_cloudybot_plugins_shows_every_built_in_default_as_the_configuration_page_does(
        data_dir: Path) -> None:
    listed = cloudybot(data_dir, "plugins")
    assert listed.returncode == 0, listed.stderr
    shown: dict[tuple[str, str], tuple[str, str]] = {}  # (section, key) -> (value, after)
    for line in listed.stdout.splitlines():
        found = re.match(r"\s*\[(\S+)\] (\w+) = (.*?)  \((\w+)\)(.*)$", line)
        if found:
            section, key, value, _, tail = found.groups()
            shown[(section, key)] = (value, tail)
    checked = 0
    for item in built_in_plugin_settings():
        if item.secret:
            assert shown[(item.section, item.key)] == ("(not set)", "")
            continue
        value, tail = shown[(item.section, item.key)]
        assert tail == ", the default"
        cell = documented_setting(item).default  # docs/configuration.md's default cell
        assert value == ("empty" if cell.startswith("empty") else code_spans(cell)[0]), (
            item.section, item.key, value, cell)
        checked += 1
    assert checked >= 15


def test_cloudybot_plugins_says_the_default_of_a_setting_that_differs(data_dir: Path) -> None:
    listed = cloudybot(data_dir, "plugins", CLOUDYBOT_BROWSER_IDLE_MINUTES="2.5",
                       CLOUDYBOT_DISCORD_GUILDS="1,2")
    assert "[plugins.browser] idle_minutes = 2.5  (CLOUDYBOT_BROWSER_IDLE_MINUTES), default 5" \
        in listed.stdout
    assert "[plugins.discord] guilds = 1,2  (CLOUDYBOT_DISCORD_GUILDS), default empty" \
        in listed.stdout


# --- new-plugin and the names the built-ins use ------------------------------------------------
def test_new_plugin_refuses_a_name_a_built_in_registers(data_dir: Path, tmp_path: Path) -> None:
    pm = make_plugin_manager()
    gateway = Gateway(load_settings(None, plugins=declared_settings(pm),
                                    installed=plugin_names(pm)), pm)
    tools = {name for name, what in asyncio.run(registered_names(gateway)).items()
             if what.startswith("the tool ") and name not in plugin_names(pm)}
    assert {"calculator", "current_time"} <= tools  # the built-ins', as loaded
    for tool in sorted(tools):
        given = tool.replace("_", "-")
        refused = cloudybot(data_dir, "new-plugin", given, "--kind", "tool",
                            "--dir", str(tmp_path))
        line = assert_one_line_error(refused, 1)
        assert f"the tool {tool!r} of plugin " in line and "choose another name" in line
        assert not (tmp_path / f"cloudybot-{given}").exists()
