"""Start-up fails loudly (SPEC §17, issue 13): an installed plugin that does not load, or whose
channel cannot be built, stops ``cloudybot serve`` with exit code 1 and one line naming it; the
start-up line lists what runs."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from gateway import hookimpl
from gateway.base.errors import ConfigError, PluginError
from gateway.config.settings import Settings
from gateway.gateway import Gateway
from gateway.plugins.manager import PluginManager
from gateway.testing.slack import SIGNING_SECRET, FakeSlack
from tests.conftest import PROXY_VARIABLES
from tests.test_plugins import install_distribution

BROKEN_CHANNEL = """\
    from gateway import hookimpl

    class Exploding:
        def __init__(self):
            raise RuntimeError("the pigeon's cage is locked")

    @hookimpl
    def register_channels(host):
        return [Exploding()]
    """


def serve_env(tmp_path: Path, site: Path | None = None, **extra: str) -> dict[str, str]:
    """The environment of a ``cloudybot serve`` on a free port (plugins: the installed ones,
    and those in ``site``); ``extra`` added."""
    env = {key: value for key, value in os.environ.items()
           if key not in PROXY_VARIABLES and not key.startswith("CLOUDYBOT_")}
    env.update({"CLOUDYBOT_DATA_DIR": str(tmp_path / "data"), "CLOUDYBOT_PORT": "0", **extra})
    if site is not None:
        env["PYTHONPATH"] = str(site)
    return env


async def serve_until_exit(tmp_path: Path, site: Path | None = None) -> tuple[int, str]:
    """Run ``cloudybot serve`` (its plugins: the installed ones, and those in ``site``) until
    it exits; (exit code, stderr)."""
    env = serve_env(tmp_path, site)
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway.cli", "serve", env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    _, stderr = await asyncio.wait_for(child.communicate(), 60)
    assert child.returncode is not None
    return child.returncode, stderr.decode()


@pytest.mark.parametrize(("module", "source", "expected"), [
    ("fake_unimportable", 'raise ImportError("no module named pigeons")\n',
     "plugin 'fake_unimportable' failed to load: ImportError: no module named pigeons"),
    ("fake_exploding", BROKEN_CHANNEL,
     "plugin 'fake_exploding' failed in register_channels(): RuntimeError: the pigeon's cage "
     "is locked"),
])
async def test_a_broken_plugin_stops_serve_with_one_line(tmp_path: Path, module: str,
                                                         source: str, expected: str) -> None:
    site = tmp_path / "site"
    site.mkdir()
    install_distribution(site, f"cloudybot-{module}", {module: source})

    code, stderr = await serve_until_exit(tmp_path, site)

    assert code == 1
    assert stderr.strip().splitlines()[-1] == f"cloudybot: {expected}"
    assert "serving on" not in stderr


async def test_a_disabled_plugin_that_fails_to_import_does_not_stop_serve(
        tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    install_distribution(site, "cloudybot-fake-off", {
        "fake_unimportable_off": 'raise ImportError("no module named pigeons")\n'})
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway.cli", "serve",
        env=serve_env(tmp_path, site, CLOUDYBOT_PLUGINS_DISABLED="fake_unimportable_off"),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    assert child.stdout is not None
    try:
        started = await asyncio.wait_for(child.stdout.readline(), 60)
    finally:
        if child.returncode is None:
            child.terminate()
        _, stderr = await asyncio.wait_for(child.communicate(), 60)
    assert "cloudybot: serving on" in started.decode(), stderr.decode()
    assert "pigeons" not in stderr.decode()


async def test_a_plugin_failing_to_build_its_tool_stops_start(
        start_gateway: object, pm: PluginManager) -> None:
    class BadTools:
        @hookimpl
        def register_tools(self, host: object) -> list[object]:
            raise ValueError("no such API key")

    pm.register(BadTools(), name="bad-tools")
    with pytest.raises(PluginError, match=r"'bad-tools' failed in register_tools\(\): "
                                          r"ValueError: no such API key"):
        await start_gateway()  # type: ignore[operator]


async def test_a_slack_token_slack_refuses_stops_start(
        make_settings: Callable[..., Settings], pm: PluginManager,
        fake_slack: FakeSlack) -> None:
    gateway = Gateway(make_settings(slack_bot_token="xoxb-not-the-fakes-token-000",
                                    slack_signing_secret=SIGNING_SECRET,
                                    slack_api_base=fake_slack.base_url), pm)
    with pytest.raises(ConfigError) as refused:
        await gateway.start()
    assert refused.value.message == ("CLOUDYBOT_SLACK_BOT_TOKEN was refused by Slack "
                                     "(invalid_auth)")
    assert not gateway.accepting


async def test_plugins_lists_a_plugin_that_failed_to_load_and_exits_1(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    install_distribution(site, "cloudybot-fake-broken", {
        "fake_broken_listed": 'raise ImportError("no module named pigeons")\n'})
    env = {key: value for key, value in os.environ.items()
           if key not in PROXY_VARIABLES and not key.startswith("CLOUDYBOT_")}
    env.update({"CLOUDYBOT_DATA_DIR": str(tmp_path / "data"), "PYTHONPATH": str(site)})
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway.cli", "plugins", env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    stdout, _ = await asyncio.wait_for(child.communicate(), 60)
    assert child.returncode == 1
    assert ("fake_broken_listed FAILED TO LOAD: ImportError: no module named pigeons"
            in stdout.decode())
    assert "dashboard" in stdout.decode()  # the rest is still listed

    env["CLOUDYBOT_PLUGINS_DISABLED"] = "fake_broken_listed"  # disabled: never imported
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway.cli", "plugins", env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    stdout, _ = await asyncio.wait_for(child.communicate(), 60)
    assert child.returncode == 0
    assert "FAILED" not in stdout.decode()
    assert ("disabled: not loaded (CLOUDYBOT_PLUGINS_DISABLED names it)"
            in stdout.decode())
