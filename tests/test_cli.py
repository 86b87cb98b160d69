"""The ``cloudybot`` command, run for real in a subprocess (SPEC §8)."""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import aiohttp
import pytest

from gateway.cli.switch import CannotEdit, set_enabled
from tests.conftest import Harness
from tests.helpers import assert_one_line_error, cli_env

StartGateway = Callable[..., Awaitable[Harness]]
CLI_TIMEOUT_SECONDS = 60
SERVE_READY_SECONDS = 10.0




def cloudybot(data_dir: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``cloudybot ARGS`` to completion."""
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", *args], env=cli_env(data_dir, **env),
        cwd=data_dir.parent, capture_output=True, text=True, timeout=CLI_TIMEOUT_SECONDS)


async def acloudybot(data_dir: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``cloudybot`` from a test that also runs a gateway on the event loop."""
    return await asyncio.to_thread(cloudybot, data_dir, *args, **env)


def last_line(result: subprocess.CompletedProcess[str]) -> str:
    return result.stdout.strip().splitlines()[-1]


def free_port() -> int:
    """A TCP port that was free a moment ago."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def credits_with(harness: Harness, token: str) -> aiohttp.ClientResponse:
    return await harness.client.get("/api/user/credits",
                                    headers={"Authorization": f"Bearer {token}"})


# --- users ---------------------------------------------------------------------------------------
@pytest.mark.sqlite_only
async def test_users_add_prints_a_token_that_authenticates(
        data_dir: Path, start_gateway: StartGateway) -> None:
    result = await acloudybot(data_dir, "users", "add", "alice")
    assert result.returncode == 0, result.stderr
    token = last_line(result)

    harness = await start_gateway()
    response = await credits_with(harness, token)

    assert response.status == 200
    body = await response.json()
    assert body["userId"] == "alice"
    assert body["plan"] == "free"
    assert body["credits"] == harness.gateway.settings.plans["free"].credits


@pytest.mark.sqlite_only
async def test_users_add_with_zero_credits_then_chat_is_402(
        data_dir: Path, start_gateway: StartGateway) -> None:
    result = await acloudybot(data_dir, "users", "add", "alice", "--credits", "0")
    assert result.returncode == 0, result.stderr
    auth = {"Authorization": f"Bearer {last_line(result)}"}

    harness = await start_gateway()
    response = await harness.chat(auth, "hello")

    assert response.status == 402
    assert (await response.json())["error"]["code"] == "out_of_credits"


@pytest.mark.sqlite_only
async def test_users_add_with_plan_uses_that_plan(
        data_dir: Path, start_gateway: StartGateway) -> None:
    result = await acloudybot(data_dir, "users", "add", "bob", "--plan", "pro")
    assert result.returncode == 0, result.stderr

    harness = await start_gateway()
    body = await (await credits_with(harness, last_line(result))).json()

    assert body["plan"] == "pro"
    assert body["credits"] == harness.gateway.settings.plans["pro"].credits


def test_users_add_twice_exits_1_with_a_clear_message(data_dir: Path) -> None:
    assert cloudybot(data_dir, "users", "add", "alice").returncode == 0
    result = cloudybot(data_dir, "users", "add", "alice")
    line = assert_one_line_error(result, 1)
    assert "alice" in line
    assert "already exists" in line
    assert result.stdout == ""


@pytest.mark.parametrize("user_id", ["has space", "a--b", "x" * 129, "sl/ash"])
def test_users_add_invalid_user_id_exits_1(data_dir: Path, user_id: str) -> None:
    line = assert_one_line_error(cloudybot(data_dir, "users", "add", user_id), 1)
    assert "user id" in line


@pytest.mark.parametrize("args", [
    pytest.param(("users", "add", "carol", "--plan", "platinum"), id="unknown-plan"),
    pytest.param(("users", "add", "carol", "--credits", "-5"), id="negative-credits"),
    pytest.param(("users", "grant", "nobody", "5"), id="grant-unknown-user"),
    pytest.param(("users", "grant", "alice", "0"), id="grant-zero"),
    pytest.param(("users", "token", "nobody"), id="token-unknown-user"),
])
def test_users_command_errors_exit_1_with_one_line(data_dir: Path, args: tuple[str, ...]) -> None:
    assert cloudybot(data_dir, "users", "add", "alice").returncode == 0
    assert_one_line_error(cloudybot(data_dir, *args), 1)


@pytest.mark.sqlite_only
async def test_users_grant_raises_the_balance(
        data_dir: Path, start_gateway: StartGateway) -> None:
    added = await acloudybot(data_dir, "users", "add", "alice", "--credits", "10")
    assert added.returncode == 0, added.stderr

    granted = await acloudybot(data_dir, "users", "grant", "alice", "50")

    assert granted.returncode == 0, granted.stderr
    assert "60" in granted.stdout
    harness = await start_gateway()
    body = await (await credits_with(harness, last_line(added))).json()
    assert body["credits"] == 60


@pytest.mark.sqlite_only
async def test_users_token_replaces_the_old_token(
        data_dir: Path, start_gateway: StartGateway) -> None:
    added = await acloudybot(data_dir, "users", "add", "alice")
    assert added.returncode == 0, added.stderr
    old_token = last_line(added)

    renewed = await acloudybot(data_dir, "users", "token", "alice")

    assert renewed.returncode == 0, renewed.stderr
    new_token = last_line(renewed)
    assert new_token != old_token
    harness = await start_gateway()
    assert (await credits_with(harness, new_token)).status == 200
    old = await credits_with(harness, old_token)
    assert old.status == 401
    assert (await old.json())["error"]["code"] == "unauthorized"


# --- plugins -------------------------------------------------------------------------------------
def test_plugins_lists_the_builtins(data_dir: Path) -> None:
    result = cloudybot(data_dir, "plugins")
    assert result.returncode == 0, result.stderr
    listed = {line.split()[0] for line in result.stdout.splitlines()
              if line and not line[0].isspace()}
    assert {"dashboard", "offline", "openai"} <= listed
    assert "channels.dashboard" in result.stdout
    assert "plugins.openai" in result.stdout


CONFIG_WITH_COMMENTS = """\
# Production: keep this file in git.
[server]
port = 8081  # behind the proxy

[plugins.telegram]  # our support bot
# the token comes from the environment
group_mode = "all"

[plans.free]
credits = 50
"""


def test_plugins_disable_then_enable_edits_only_the_enabled_line(data_dir: Path,
                                                                 tmp_path: Path) -> None:
    config = tmp_path / "prod.toml"
    config.write_text(CONFIG_WITH_COMMENTS, encoding="utf-8")
    config.chmod(0o600)  # it may hold secrets: the edit keeps the mode

    disabled = cloudybot(data_dir, "plugins", "disable", "telegram", "--config", str(config))

    assert disabled.returncode == 0, disabled.stderr
    assert "a running gateway picks this up when restarted" in disabled.stdout
    assert config.read_text(encoding="utf-8") == CONFIG_WITH_COMMENTS.replace(
        "# our support bot\n", "# our support bot\nenabled = false\n")
    assert config.stat().st_mode & 0o777 == 0o600
    listed = cloudybot(data_dir, "--config", str(config), "plugins")
    assert listed.returncode == 0, listed.stderr
    assert ("disabled: not loaded (cloudybot plugins enable telegram loads it)"
            in listed.stdout)
    assert "channel telegram" not in listed.stdout
    again = cloudybot(data_dir, "--config", str(config), "plugins", "disable", "telegram")
    assert "already disabled" in again.stdout

    enabled = cloudybot(data_dir, "--config", str(config), "plugins", "enable", "telegram")

    assert enabled.returncode == 0, enabled.stderr
    assert config.read_text(encoding="utf-8") == CONFIG_WITH_COMMENTS.replace(
        "# our support bot\n", "# our support bot\nenabled = true\n")
    tools = cloudybot(data_dir, "--config", str(config), "plugins", "disable", "tools")
    assert tools.returncode == 0, tools.stderr
    assert config.read_text(encoding="utf-8").endswith(
        'credits = 50\n\n[plugins.tools]\nenabled = false\n')
    assert config.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize(("args", "code", "expected"), [
    (("plugins", "disable", "telegramm"), 1,
     "cloudybot: no installed plugin is named 'telegramm' (did you mean 'telegram'?"),
    (("plugins", "enable", "pigeon"), 1, "cloudybot: no installed plugin is named 'pigeon'"),
])
def test_plugins_enable_and_disable_refuse_an_unknown_name(
        data_dir: Path, tmp_path: Path, args: tuple[str, ...], code: int,
        expected: str) -> None:
    config = tmp_path / "prod.toml"
    config.write_text(CONFIG_WITH_COMMENTS, encoding="utf-8")
    line = assert_one_line_error(cloudybot(data_dir, "--config", str(config), *args), code)
    assert line.startswith(expected)
    assert config.read_text(encoding="utf-8") == CONFIG_WITH_COMMENTS


def test_plugins_disable_needs_a_config_file_and_valid_toml(data_dir: Path,
                                                            tmp_path: Path) -> None:
    line = assert_one_line_error(cloudybot(data_dir, "plugins", "disable", "telegram"), 1)
    assert "no config file to edit: pass --config FILE" in line
    broken = tmp_path / "broken.toml"
    broken.write_text("[server\n", encoding="utf-8")
    line = assert_one_line_error(
        cloudybot(data_dir, "plugins", "disable", "telegram", CLOUDYBOT_CONFIG=str(broken)), 2)
    assert f"config file {broken} is not valid TOML" in line
    made = tmp_path / "new.toml"
    result = cloudybot(data_dir, "plugins", "disable", "slack", "--config", str(made))
    assert result.returncode == 0, result.stderr
    assert made.read_text(encoding="utf-8") == "[plugins.slack]\nenabled = false\n"


def test_plugins_says_which_variable_disabled_a_plugin(data_dir: Path) -> None:
    result = cloudybot(data_dir, "plugins", CLOUDYBOT_PLUGINS_DISABLED="slack")
    assert result.returncode == 0, result.stderr
    assert "disabled: not loaded (CLOUDYBOT_PLUGINS_DISABLED names it)" in result.stdout
    assert "channel slack" not in result.stdout


@pytest.mark.parametrize(("text", "enabled", "expected"), [
    ("[plugins.slack]\r\nenabled = true  # for now\r\n", False,
     "[plugins.slack]\r\nenabled = false  # for now\r\n"),
    ("[ plugins . 'slack' ] # chat\nbot_token = ''", False,
     "[ plugins . 'slack' ] # chat\nenabled = false\nbot_token = ''"),
    ("[plugins.slack]", False, "[plugins.slack]\nenabled = false\n"),
    ('[plugins.slack]\n"enabled" = "no"\n', True, '[plugins.slack]\n"enabled" = true\n'),
    ("[plugins.slack]\n[plugins.telegram]\nenabled = false\n", False,
     "[plugins.slack]\nenabled = false\n[plugins.telegram]\nenabled = false\n"),
    ("x = 1", False, 'x = 1\n\n[plugins."my.plugin"]\nenabled = false\n'),
])
def test_the_edit_changes_one_line_and_nothing_else(text: str, enabled: bool,
                                                    expected: str) -> None:
    name = "my.plugin" if "x = 1" in text else "slack"
    assert set_enabled(text, name, enabled) == expected


@pytest.mark.parametrize("text", [
    "[plugins]\nslack = { bot_token = '' }\n",  # an inline table
    "plugins.slack.bot_token = ''\n",  # dotted keys
    "[plugins.slack]\nenabled = [\n  true,\n]\n",  # not a one-line value
])
def test_a_table_the_edit_cannot_change_safely_is_left_alone(text: str) -> None:
    with pytest.raises(CannotEdit):
        set_enabled(text, "slack", False)


def test_the_edit_changes_nothing_already_so() -> None:
    assert set_enabled("", "slack", True) is None
    assert set_enabled("[plugins.slack]\nbot_token = ''\n", "slack", True) is None
    assert set_enabled("[plugins.slack]\nenabled = false\n", "slack", False) is None


# --- serve ---------------------------------------------------------------------------------------
def test_serve_with_bad_max_context_exits_2_with_one_line(data_dir: Path) -> None:
    result = cloudybot(data_dir, "serve", MAX_CONTEXT="abc")
    line = assert_one_line_error(result, 2)
    assert "MAX_CONTEXT" in line


def test_serve_with_unknown_provider_exits_2_with_one_line(data_dir: Path) -> None:
    result = cloudybot(data_dir, "serve", CLOUDYBOT_LLM_PROVIDER="no-such-provider",
                       CLOUDYBOT_PORT=str(free_port()))
    line = assert_one_line_error(result, 2)
    assert "no-such-provider" in line


def test_serve_with_the_selected_provider_disabled_exits_2_with_one_line(data_dir: Path) -> None:
    result = cloudybot(data_dir, "serve", CLOUDYBOT_LLM_PROVIDER="anthropic",
                       CLOUDYBOT_PLUGINS_DISABLED="anthropic", CLOUDYBOT_PORT=str(free_port()))
    line = assert_one_line_error(result, 2)
    assert line.startswith("cloudybot: config error: CLOUDYBOT_LLM_PROVIDER is 'anthropic', a "
                           "disabled plugin")


def test_serve_with_missing_config_file_exits_2_with_one_line(data_dir: Path) -> None:
    missing = data_dir.parent / "missing.toml"
    result = cloudybot(data_dir, "serve", "--config", str(missing))
    assert str(missing) in assert_one_line_error(result, 2)


def test_serve_on_a_busy_port_exits_with_one_line(data_dir: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = cloudybot(data_dir, "serve", CLOUDYBOT_PORT=str(port))
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert "Traceback" not in result.stderr
    assert len(lines) == 1
    assert str(port) in lines[0]


async def wait_for_healthz(url: str, server: subprocess.Popen[str]) -> tuple[int, object]:
    """Poll ``url`` until the server answers (connection refused is retried), for a bounded time."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SERVE_READY_SECONDS
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1)) as session:
        while True:
            assert server.poll() is None, f"cloudybot serve exited with {server.returncode}"
            try:
                async with session.get(url) as response:
                    return response.status, await response.json()
            except (aiohttp.ClientConnectionError, TimeoutError):
                if loop.time() > deadline:
                    raise
            await asyncio.sleep(0.05)  # polling interval while the server boots


@pytest.mark.parametrize("port_from", ["env", "config-file"])
async def test_serve_answers_healthz(data_dir: Path, port_from: str) -> None:
    port = free_port()
    args = ["serve"]
    env = {}
    if port_from == "env":
        env["CLOUDYBOT_PORT"] = str(port)
    else:
        config = data_dir.parent / "serve.toml"
        config.write_text(f"[server]\nport = {port}\n", encoding="utf-8")
        args += ["--config", str(config)]
    server = subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", *args],
        env=cli_env(data_dir, **env), cwd=data_dir.parent,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        status, body = await wait_for_healthz(f"http://127.0.0.1:{port}/healthz", server)
        assert status == 200
        assert body == {"status": "ok"}
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            _, stderr = await asyncio.to_thread(server.communicate, timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            await asyncio.to_thread(server.communicate)
            raise
    assert server.returncode == 0, stderr
    assert "Traceback" not in stderr


# --- config through the CLI ----------------------------------------------------------------------
@pytest.mark.sqlite_only
async def test_users_add_reads_plans_from_config_file(
        data_dir: Path, start_gateway: StartGateway) -> None:
    config = data_dir.parent / "plans.toml"
    config.write_text("[plans.gold]\ncredits = 777\n", encoding="utf-8")

    by_flag = await acloudybot(data_dir, "users", "add", "bob", "--plan", "gold",
                               "--config", str(config))
    by_env = await acloudybot(data_dir, "users", "add", "carol", "--plan", "gold",
                              CLOUDYBOT_CONFIG=str(config))

    assert by_flag.returncode == 0, by_flag.stderr
    assert by_env.returncode == 0, by_env.stderr
    harness = await start_gateway()
    for result in (by_flag, by_env):
        body = await (await credits_with(harness, last_line(result))).json()
        assert (body["plan"], body["credits"]) == ("gold", 777)


def test_purge_command_exists_and_exits_0(data_dir: Path) -> None:
    assert cloudybot(data_dir, "users", "add", "alice").returncode == 0
    result = cloudybot(data_dir, "purge")
    assert result.returncode == 0, result.stderr


def test_serve_logging_keeps_httpx_request_lines_out() -> None:
    import logging

    from gateway.cli.main import configure_logging
    from gateway.config.settings import Settings

    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        configure_logging(Settings())
        # One INFO line per Bot API request (python-telegram-bot's httpx) is noise and CPU.
        assert not logging.getLogger("httpx").isEnabledFor(logging.INFO)
        assert logging.getLogger("httpx").isEnabledFor(logging.WARNING)
    finally:
        root.handlers[:], root.level = handlers, level


# --- global options (issue 13) --------------------------------------------------------------
def test_version_is_the_installed_one(data_dir: Path) -> None:
    from gateway import __version__

    result = cloudybot(data_dir, "--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"cloudybot {__version__}" and __version__ != "0+unknown"


@pytest.mark.parametrize("before", [True, False])
def test_config_is_honoured_before_or_after_the_subcommand(data_dir: Path, tmp_path: Path,
                                                           before: bool) -> None:
    config = tmp_path / "elsewhere.toml"
    config.write_text('[accounts]\ndefault_plan = "pro"\n', encoding="utf-8")
    args = ["--config", str(config), "users", "add", "alice"] if before \
        else ["users", "add", "alice", "--config", str(config)]
    result = cloudybot(data_dir, *args)
    assert result.returncode == 0, result.stderr
    assert "created user alice on plan pro" in result.stdout  # the file's default plan


@pytest.mark.parametrize("command", [["plugins"], ["users", "add", "bob"], ["usage", "bob"]])
def test_a_bad_config_file_is_one_line_naming_it_and_exit_2(data_dir: Path, tmp_path: Path,
                                                             command: list[str]) -> None:
    config = tmp_path / "typo.toml"
    config.write_text("[srever]\nport = 1\n", encoding="utf-8")
    for args in (["--config", str(config), *command], [*command, "--config", str(config)],
                 ["--config", str(tmp_path / "missing.toml"), *command]):
        result = cloudybot(data_dir, *args)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        [line] = result.stderr.strip().splitlines()
        assert line.startswith("cloudybot: config error: config file ")
        assert "typo.toml: unknown section(s): srever" in line or "missing.toml does not " \
            "exist" in line


# --- users list|show|revoke, plans (issue 13) -----------------------------------------------
def test_users_list_show_and_revoke(data_dir: Path) -> None:
    assert cloudybot(data_dir, "users", "add", "alice").returncode == 0
    assert cloudybot(data_dir, "users", "add", "bob", "--plan", "pro").returncode == 0

    listed = cloudybot(data_dir, "users", "list")
    assert listed.returncode == 0
    rows = listed.stdout.strip().splitlines()
    assert [row.split()[:3] for row in rows[1:3]] == [["alice", "free", "1000"],
                                                      ["bob", "pro", "20000"]]
    assert rows[-1] == "2 account(s)"
    assert cloudybot(data_dir, "users", "list", "--limit", "1").stdout.strip().endswith(
        "1 account(s)")

    shown = cloudybot(data_dir, "users", "show", "bob")
    fields = dict(line.split(maxsplit=1) for line in shown.stdout.strip().splitlines())
    assert (fields["plan"], fields["credits"], fields["tokens"], fields["threads"]) == (
        "pro", "20000", "1", "0")

    revoked = cloudybot(data_dir, "users", "revoke", "bob")
    assert revoked.returncode == 0 and "revoked 1 token(s)" in revoked.stdout
    after = dict(line.split(maxsplit=1) for line in cloudybot(
        data_dir, "users", "show", "bob").stdout.strip().splitlines())
    assert after["tokens"] == "0"
    for command in ("show", "revoke"):
        missing = cloudybot(data_dir, "users", command, "nobody")
        assert missing.returncode == 1 and missing.stderr.strip() == "cloudybot: no user 'nobody'"


async def test_a_revoked_token_is_refused(harness: Harness, data_dir: Path) -> None:
    alice = await harness.user("alice")  # not used yet: not remembered by the gateway either
    database = harness.gateway.settings.database_url
    revoked = await acloudybot(data_dir, "users", "revoke", "alice",
                               **({"CLOUDYBOT_DATABASE_URL": database} if database else {}))
    assert revoked.returncode == 0, revoked.stderr
    response = await harness.client.get("/api/threads", headers=alice)
    assert response.status == 401


async def test_users_token_says_what_it_ends_and_ends_sessions_when_asked(
        harness: Harness, data_dir: Path) -> None:
    auth = await harness.user("alice")
    token = auth["Authorization"].removeprefix("Bearer ")
    database = harness.gateway.settings.database_url
    env = {"CLOUDYBOT_DATABASE_URL": database} if database else {}
    signed_in = await harness.client.post("/auth/session", json={"token": token})
    assert signed_in.status == 200, await signed_in.text()
    link = await acloudybot(data_dir, "users", "login-link", "alice", **env)
    code = parse_qs(urlsplit(last_line(link)).query)["code"][0]

    renewed = await acloudybot(data_dir, "users", "token", "alice", **env)
    assert renewed.returncode == 0, renewed.stderr
    assert "dashboard sessions and unused sign-in links still do" in renewed.stdout
    assert (await harness.client.get("/api/threads")).status == 200  # the cookie still works

    ended = await acloudybot(data_dir, "users", "token", "alice", "--revoke-sessions", **env)
    assert ended.returncode == 0, ended.stderr
    assert "ended 3 earlier token(s), dashboard session(s) and sign-in link(s)" in ended.stdout
    assert (await harness.client.get("/api/threads")).status == 401
    harness.client.session.cookie_jar.clear()
    refused = await harness.client.post("/auth/login", json={"code": code})
    assert refused.status == 401
    newest = {"Authorization": f"Bearer {last_line(ended)}"}
    assert (await harness.client.get("/api/threads", headers=newest)).status == 200


def test_plans_lists_the_configured_plans(data_dir: Path, tmp_path: Path) -> None:
    config = tmp_path / "plans.toml"
    config.write_text("[plans.starter]\ncredits = 50\nbrowser_minutes = 0\nretention_days = 7\n"
                      "requests_per_minute = 5\n", encoding="utf-8")
    result = cloudybot(data_dir, "plans", "--config", str(config))
    assert result.returncode == 0
    rows = {row.split()[0]: row.split()[1:] for row in result.stdout.strip().splitlines()[1:]}
    assert rows["starter"] == ["50", "0", "7d", "5"]
    assert rows["free"][-1] == "(default)" and rows["team"][3] == "none"


@pytest.mark.parametrize(("line", "expected"), [
    ("cloudybot us", {"users", "usage"}),
    ("cloudybot users ex", {"export"}),
    ("cloudybot --config prod.toml users d", {"delete", "demote"}),
    ("cloudybot serve --p", {"--port"}),
    ("cloudybot sessions ", {"list", "show", "export", "rotate", "--help"}),
])
def test_bash_completion_comes_from_the_parser(data_dir: Path, tmp_path: Path, line: str,
                                               expected: set[str]) -> None:
    script = cloudybot(data_dir, "completion", "bash")
    assert script.returncode == 0
    (tmp_path / "completion.sh").write_text(script.stdout, encoding="utf-8")
    words = line.split() + ([""] if line.endswith(" ") else [])
    probe = (f"source {tmp_path / 'completion.sh'}; COMP_WORDS=({' '.join(map(repr, words))});"
             f" COMP_CWORD={len(words) - 1}; _cloudybot; echo \"${{COMPREPLY[*]}}\"")
    answered = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, check=True)
    assert set(answered.stdout.split()) == expected
