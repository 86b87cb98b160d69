"""Plugins' own settings: declared once, read like the core's, shown by ``cloudybot plugins``."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gateway import Channel, Gateway, PluginHost, PluginSettings, hookimpl, setting
from gateway.base.errors import ConfigError, PluginError
from gateway.config import options
from gateway.config.settings import Settings, load_settings
from gateway.plugins.manager import PluginManager, declared_settings, describe_plugins
from tests.helpers import assert_one_line_error, cli_env

SECRET_TOKEN = "pigeon-secret-token-4711"


@dataclass(frozen=True)
class PigeonSettings:
    """A third party's settings, as the README shows them."""

    token: str = setting("", "the loft's API token", secret=True)
    loft: str = setting("home", "which loft the pigeons fly to")
    birds: int = setting(3, "how many birds carry one reply", parse=options.positive_int)
    fast: bool = setting(False, "use racing pigeons")

    def __post_init__(self) -> None:
        if self.fast and self.birds < 2:
            raise ValueError("racing pigeons fly in pairs: birds must be 2 or more")


class PigeonChannel(Channel):
    """Enabled only with a token."""

    name = "pigeon"

    def __init__(self, host: PluginHost) -> None:
        self.settings = host.settings.plugin(PigeonSettings)

    @property
    def enabled(self) -> bool:
        """On with a token."""
        return bool(self.settings.token)

    async def send(self, address: Any, text: str) -> None:
        """Nowhere to send in these tests."""


class PigeonPlugin:
    @hookimpl
    def plugin_settings(self) -> PluginSettings:
        return PluginSettings("pigeon", PigeonSettings)

    @hookimpl
    def register_channels(self, host: PluginHost) -> list[Channel]:
        return [PigeonChannel(host)]


@pytest.fixture
def pigeon_pm(pm: PluginManager) -> PluginManager:
    pm.register(PigeonPlugin(), name="pigeon")
    return pm


def load(pm: PluginManager, text: str = "", tmp_path: Path | None = None,
         **env: str) -> Settings:
    path = None
    if text:
        assert tmp_path is not None
        path = tmp_path / "cloudybot.toml"
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return load_settings(path, env=env, plugins=declared_settings(pm))


def test_defaults_stand_when_nothing_is_configured(pigeon_pm: PluginManager) -> None:
    assert load(pigeon_pm).plugin(PigeonSettings) == PigeonSettings()


def test_the_table_sets_them_and_the_environment_wins(pigeon_pm: PluginManager,
                                                      tmp_path: Path) -> None:
    settings = load(pigeon_pm, """
        [plugins.pigeon]
        loft = "roof"
        birds = 5
        """, tmp_path, CLOUDYBOT_PIGEON_BIRDS="7", CLOUDYBOT_PIGEON_FAST="yes",
                    CLOUDYBOT_PIGEON_LOFT="")
    assert settings.plugin(PigeonSettings) == PigeonSettings(loft="roof", birds=7, fast=True)


@pytest.mark.parametrize(("text", "env", "names"), [
    ("[plugins.pigeon]\nbirdz = 2\n", {}, ("[plugins.pigeon]", "birdz")),
    ("[plugins.pidgeon]\nloft = 'x'\n", {}, ("[plugins.pidgeon]", "pigeon")),
    ("", {"CLOUDYBOT_PIGEON_BIRDS": "0"}, ("CLOUDYBOT_PIGEON_BIRDS", "positive", "'0'")),
    ("[plugins.pigeon]\nbirds = 'many'\n", {}, ("[plugins.pigeon] birds",
                                                "CLOUDYBOT_PIGEON_BIRDS", "'many'")),
    ("", {"CLOUDYBOT_PIGEON_FAST": "true", "CLOUDYBOT_PIGEON_BIRDS": "1"},
     ("[plugins.pigeon]", "in pairs")),
])
def test_mistakes_are_one_line_config_errors_naming_them(
        pigeon_pm: PluginManager, tmp_path: Path, text: str, env: dict[str, str],
        names: tuple[str, ...]) -> None:
    with pytest.raises(ConfigError) as raised:
        load(pigeon_pm, text, tmp_path, **env)
    message = raised.value.message
    assert "\n" not in message
    for name in names:
        assert name in message


def test_a_bad_secret_is_named_but_its_value_never_shown(pigeon_pm: PluginManager,
                                                       tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as raised:
        load(pigeon_pm, "[plugins.pigeon]\ntoken = ['hunter2']\n", tmp_path)
    assert "token" in raised.value.message
    assert "hunter2" not in raised.value.message


def test_two_plugins_declaring_one_name_is_a_config_error(pigeon_pm: PluginManager) -> None:
    class Impostor:
        @hookimpl
        def plugin_settings(self) -> PluginSettings:
            return PluginSettings("pigeon", PigeonSettings)

    pigeon_pm.register(Impostor(), name="impostor")
    with pytest.raises(ConfigError, match="two plugins declare settings named 'pigeon'"):
        load(pigeon_pm)


def test_an_async_or_wrong_declaration_is_a_plugin_error(pm: PluginManager) -> None:
    class Async:
        @hookimpl
        async def plugin_settings(self) -> PluginSettings:
            return PluginSettings("later", PigeonSettings)

    pm.register(Async(), name="async-settings")
    with pytest.raises(PluginError, match="must not be async"):
        declared_settings(pm)
    pm.unregister(name="async-settings")

    class Wrong:
        @hookimpl
        def plugin_settings(self) -> dict[str, str]:
            return {"name": "wrong"}

    pm.register(Wrong(), name="wrong-settings")
    with pytest.raises(PluginError, match="not a PluginSettings"):
        declared_settings(pm)


async def test_the_channel_reads_them_and_describe_shows_state_and_masked_secret(
        pigeon_pm: PluginManager) -> None:
    settings = load(pigeon_pm, CLOUDYBOT_PIGEON_TOKEN=SECRET_TOKEN)
    infos = {info.name: info for info in await describe_plugins(Gateway(settings, pigeon_pm))}
    pigeon = infos["pigeon"]
    assert pigeon.channels == (("pigeon", True),)
    assert "[plugins.pigeon] token = (set, not shown)  (CLOUDYBOT_PIGEON_TOKEN)" in \
        pigeon.settings
    assert "[plugins.pigeon] birds = 3  (CLOUDYBOT_PIGEON_BIRDS)" in pigeon.settings
    assert SECRET_TOKEN not in repr(infos)

    off = load(pigeon_pm)
    infos = {info.name: info for info in await describe_plugins(Gateway(off, pigeon_pm))}
    assert infos["pigeon"].channels == (("pigeon", False),)
    assert "[plugins.pigeon] token = (not set)  (CLOUDYBOT_PIGEON_TOKEN)" in \
        infos["pigeon"].settings


def plugins_cli(data_dir: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway.cli", "plugins", *args],
                          env=cli_env(data_dir, **env), capture_output=True, text=True,
                          timeout=60)


def test_cloudybot_plugins_reads_the_file_and_masks_secrets(tmp_path: Path) -> None:
    config = tmp_path / "cloudybot.toml"
    config.write_text('[plugins.telegram]\ngroup_mode = "all"\n', encoding="utf-8")
    result = plugins_cli(tmp_path / "data", "--config", str(config),
                         CLOUDYBOT_TELEGRAM_TOKEN="123456:" + "A" * 35)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "channel telegram: enabled" in out
    assert "channel slack: off" in out
    assert "[plugins.telegram] group_mode = 'all'  (CLOUDYBOT_TELEGRAM_GROUP_MODE)" in out
    assert "[plugins.telegram] token = (set, not shown)" in out
    assert "A" * 35 not in out


def test_cloudybot_plugins_refuses_a_file_with_an_unknown_plugin_table(tmp_path: Path) -> None:
    config = tmp_path / "cloudybot.toml"
    config.write_text('[plugins.telegramm]\ntoken = "x"\n', encoding="utf-8")
    line = assert_one_line_error(plugins_cli(tmp_path / "data", "--config", str(config)), 2)
    assert "[plugins.telegramm]" in line


def test_a_declaration_the_gateway_cannot_read_is_a_plugin_error(pm: PluginManager) -> None:
    @dataclass(frozen=True)
    class Odd:
        when: complex = setting(0j, "a type no parser reads")

    class OddPlugin:
        @hookimpl
        def plugin_settings(self) -> PluginSettings:
            return PluginSettings("odd", Odd)

    pm.register(OddPlugin(), name="odd")
    with pytest.raises(PluginError, match=r"plugin settings 'odd': .*no parser"):
        load(pm)
