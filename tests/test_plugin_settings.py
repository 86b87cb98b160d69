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
from gateway.config.settings import Settings, load_settings, plugins_disabled
from gateway.plugins.manager import (
    PluginManager,
    declared_settings,
    describe_plugins,
    make_plugin_manager,
    plugin_names,
)
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
    assert "[plugins.pigeon] birds = 3  (CLOUDYBOT_PIGEON_BIRDS), the default" in \
        pigeon.settings
    assert SECRET_TOKEN not in repr(infos)

    off = load(pigeon_pm)
    infos = {info.name: info for info in await describe_plugins(Gateway(off, pigeon_pm))}
    assert infos["pigeon"].channels == (("pigeon", False),)
    assert "[plugins.pigeon] token = (not set)  (CLOUDYBOT_PIGEON_TOKEN)" in \
        infos["pigeon"].settings


# --- [plugins.NAME] enabled: switching a plugin off ---------------------------------------------
def load_all(pm: PluginManager, text: str = "", tmp_path: Path | None = None,
             **env: str) -> Settings:
    """As ``cloudybot`` loads them: every plugin ``pm`` knows may be named."""
    path = None
    if text:
        assert tmp_path is not None
        path = tmp_path / "cloudybot.toml"
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return load_settings(path, env=env, plugins=declared_settings(pm),
                         installed=plugin_names(pm))


def test_enabled_is_accepted_in_every_plugin_table(pigeon_pm: PluginManager,
                                                   tmp_path: Path) -> None:
    settings = load_all(pigeon_pm, """
        [plugins.pigeon]
        enabled = true
        birds = 5
        [plugins.tools]  # declares no settings
        enabled = true
        """, tmp_path)
    assert settings.plugin(PigeonSettings).birds == 5
    assert settings.disabled_plugins == frozenset()


def test_a_disabled_plugins_table_is_kept_but_not_read(pigeon_pm: PluginManager,
                                                       tmp_path: Path) -> None:
    text = """
        [plugins.pigeon]
        enabled = false
        birdz = "a typo: never read while the plugin is off"
        birds = 0
        """
    settings = load_all(pigeon_pm, text, tmp_path, CLOUDYBOT_PIGEON_FAST="not even a flag")
    assert settings.disabled_plugins == {"pigeon"}
    assert "pigeon" not in settings.plugins
    assert plugins_disabled(tmp_path / "cloudybot.toml", {}) == {"pigeon"}


def test_the_environment_disables_too_with_a_comma_separated_list(
        pigeon_pm: PluginManager, tmp_path: Path) -> None:
    env = {"CLOUDYBOT_PLUGINS_DISABLED": " pigeon , tools,,"}
    settings = load_all(pigeon_pm, "[plugins.slack]\nenabled = false\n", tmp_path, **env)
    assert settings.disabled_plugins == {"pigeon", "tools", "slack"}
    assert plugins_disabled(tmp_path / "cloudybot.toml", env) == {"pigeon", "tools", "slack"}
    assert load_all(pigeon_pm, CLOUDYBOT_PLUGINS_DISABLED="").disabled_plugins == frozenset()


def test_the_default_provider_is_never_a_disabled_openai(pm: PluginManager) -> None:
    assert load_all(pm, OPENAI_API_KEY="sk-x").llm_provider == "openai"
    assert load_all(pm, OPENAI_API_KEY="sk-x",
                    CLOUDYBOT_PLUGINS_DISABLED="openai").llm_provider == "offline"


@pytest.mark.parametrize(("text", "env", "names"), [
    ("[plugins.tools]\nenabled = true\ncolour = 'red'\n", {},
     ("[plugins.tools]", "colour", "plugin 'tools' declares no settings", "only enabled")),
    ("[plugins.pigeon]\nenabled = 'maybe'\n", {},
     ("[plugins.pigeon] enabled", "true or false", "'maybe'")),
    ("[plugins.pidgeon]\nenabled = false\n", {},
     ("[plugins.pidgeon]", "no installed plugin is named 'pidgeon'", "did you mean 'pigeon'",
      "remove the table")),
    ("", {"CLOUDYBOT_PLUGINS_DISABLED": "tools,pidgeon"},
     ("CLOUDYBOT_PLUGINS_DISABLED", "'pidgeon'", "did you mean 'pigeon'", "take it out")),
])
def test_switch_mistakes_are_one_line_config_errors_saying_what_to_do(
        pigeon_pm: PluginManager, tmp_path: Path, text: str, env: dict[str, str],
        names: tuple[str, ...]) -> None:
    with pytest.raises(ConfigError) as raised:
        load_all(pigeon_pm, text, tmp_path, **env)
    message = raised.value.message
    assert "\n" not in message
    for name in names:
        assert name in message


@pytest.mark.parametrize(("text", "env", "loaded", "tool_setting"), [
    ("", {}, True, True),
    ("[plugins.browser]\nenabled = false\n", {}, False, None),
    # the plugin-level switch wins: the browser's own variable cannot load it
    ("[plugins.browser]\nenabled = false\n", {"CLOUDYBOT_BROWSER_ENABLED": "true"}, False,
     None),
    # the browser's own setting: loaded, its tool not offered
    ("", {"CLOUDYBOT_BROWSER_ENABLED": "false"}, True, False),
    ("[plugins.browser]\nenabled = true\n", {"CLOUDYBOT_BROWSER_ENABLED": "false"}, True,
     False),
])
def test_the_browsers_own_enabled_setting_and_the_switch(
        tmp_path: Path, text: str, env: dict[str, str], loaded: bool,
        tool_setting: bool | None) -> None:
    path = tmp_path / "cloudybot.toml"
    path.write_text(text, encoding="utf-8")
    pm = make_plugin_manager(disabled=plugins_disabled(path, env))
    settings = load_settings(path, env=env, plugins=declared_settings(pm),
                             installed=plugin_names(pm))
    assert (pm.get_plugin("browser") is not None) is loaded
    browser = settings.plugins.get("browser")
    assert (None if browser is None else browser.enabled) is tool_setting


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
    assert "[plugins.telegram] group_mode = all  (CLOUDYBOT_TELEGRAM_GROUP_MODE), default " \
        "mention" in out
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
