"""Configuration: SPEC §6 defaults, TOML file, environment on top, one-line errors."""

from __future__ import annotations

import re
import textwrap
import tomllib
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from channels.discord import DiscordSettings
from channels.slack import SlackSettings
from channels.telegram import TelegramSettings
from gateway.base.errors import ConfigError
from gateway.config.options import Declared, declared
from gateway.config.settings import OPTIONS, Plan, Price, Settings
from gateway.config.settings import load_settings as load_core_settings
from gateway.plugins.manager import declared_settings, make_plugin_manager
from plugins.openai import OpenAISettings
from tests.conftest import Harness

StartGateway = Callable[..., Awaitable[Harness]]
ROOT = Path(__file__).resolve().parents[1]
SHIPPED_CONFIG = ROOT / "config" / "cloudybot.toml"


# The built-in plugins' settings (an installed third-party plugin, the example, is not ours).
BUILT_IN_PLUGINS = [group for group in declared_settings(make_plugin_manager())
                    if group.name in ("openai", "anthropic", "browser", "mcp", "slack", "telegram",
                                      "discord")]
# Every option the shipped file documents: the core's and the built-in plugins'.
ALL_OPTIONS: list[Declared] = [*OPTIONS, *(item for group in BUILT_IN_PLUGINS
                                           for item in declared(group.schema, group.name))]


def load_settings(path: Path | None, env: dict[str, str]) -> Settings:
    """Settings as ``cloudybot`` loads them: with the installed plugins' settings."""
    return load_core_settings(path, env=env, plugins=BUILT_IN_PLUGINS)


def write_toml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cloudybot.toml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def config_error(path: Path | None = None, **env: str) -> str:
    """The message of the ConfigError that loading raises."""
    with pytest.raises(ConfigError) as raised:
        load_settings(path, env=env)
    message = raised.value.message
    assert "\n" not in message, "a config error is one line"
    return message


# --- defaults ------------------------------------------------------------------------------------
def test_defaults_match_spec() -> None:
    settings = load_settings(None, env={})
    assert settings.max_context == 8000
    assert settings.summarize_at == 10
    assert settings.keep_recent == 5
    assert settings.session_idle_minutes == 30
    assert settings.session_max_file_bytes == 204800
    assert settings.host == "127.0.0.1"
    assert settings.port == 8080
    assert settings.data_dir == Path("./data")
    assert settings.llm_model == "gpt-4o-mini"
    assert settings.plugin(OpenAISettings).base_url == ""  # the provider then uses OpenAI's


def test_defaults_match_the_settings_dataclasses() -> None:
    settings = load_settings(None, env={})
    assert load_core_settings(None, env={}) == Settings(llm_provider="offline")
    assert settings.plugin(TelegramSettings) == TelegramSettings()
    assert settings.plugin(SlackSettings) == SlackSettings()
    assert settings.plugin(DiscordSettings) == DiscordSettings()
    assert settings.plugin(OpenAISettings) == OpenAISettings()


def test_builtin_plans_match_spec() -> None:
    plans = load_settings(None, env={}).plans
    assert set(plans) == {"free", "pro", "team"}
    assert {name: plan.requests_per_minute for name, plan in plans.items()} == {
        "free": 20, "pro": 120, "team": 0}


# --- provider choice -----------------------------------------------------------------------------
def test_provider_defaults_to_offline() -> None:
    assert load_settings(None, env={}).llm_provider == "offline"


def test_provider_is_openai_when_base_url_is_set() -> None:
    settings = load_settings(None, env={"CLOUDYBOT_LLM_BASE_URL": "http://127.0.0.1:9/v1/"})
    assert settings.llm_provider == "openai"
    assert settings.plugin(OpenAISettings).base_url == "http://127.0.0.1:9/v1/"


def test_provider_is_openai_when_openai_api_key_is_set() -> None:
    settings = load_settings(None, env={"OPENAI_API_KEY": "sk-from-openai-var"})
    assert settings.llm_provider == "openai"
    assert settings.plugin(OpenAISettings).api_key == "sk-from-openai-var"


def test_cloudybot_api_key_wins_over_openai_api_key() -> None:
    settings = load_settings(None, env={"OPENAI_API_KEY": "sk-openai",
                                        "CLOUDYBOT_LLM_API_KEY": "sk-cloudybot"})
    assert settings.plugin(OpenAISettings).api_key == "sk-cloudybot"


def test_explicit_provider_wins_over_the_guess() -> None:
    settings = load_settings(None, env={"OPENAI_API_KEY": "sk-x",
                                        "CLOUDYBOT_LLM_PROVIDER": "offline"})
    assert settings.llm_provider == "offline"


# --- precedence ----------------------------------------------------------------------------------
def test_file_wins_over_default(tmp_path: Path) -> None:
    path = write_toml(tmp_path, """
        [memory]
        max_context = 4000
        [server]
        port = 9001
        [sessions]
        idle_minutes = 2.5
        """)
    settings = load_settings(path, env={})
    assert settings.max_context == 4000
    assert settings.port == 9001
    assert settings.session_idle_minutes == 2.5
    assert settings.summarize_at == 10


def test_env_wins_over_file(tmp_path: Path) -> None:
    path = write_toml(tmp_path, """
        [memory]
        max_context = 4000
        [server]
        host = "0.0.0.0"
        """)
    settings = load_settings(path, env={"MAX_CONTEXT": "6000", "CLOUDYBOT_HOST": "10.0.0.1"})
    assert settings.max_context == 6000
    assert settings.host == "10.0.0.1"


def test_empty_env_value_does_not_override_file(tmp_path: Path) -> None:
    path = write_toml(tmp_path, "[memory]\nmax_context = 4000\n")
    assert load_settings(path, env={"MAX_CONTEXT": ""}).max_context == 4000


@pytest.mark.parametrize(("value", "minutes"), [("0.5", 0.5), ("1.25", 1.25), ("45", 45.0)])
def test_session_idle_minutes_accepts_fractions(value: str, minutes: float) -> None:
    assert load_settings(None, env={"SESSION_IDLE_MINUTES": value}).session_idle_minutes == minutes


@pytest.mark.parametrize(("variable", "value", "attr", "expected"), [
    ("SESSION_MAX_FILE_BYTES", "1024", "session_max_file_bytes", 1024),
    ("SUMMARIZE_AT", "20", "summarize_at", 20),
    ("KEEP_RECENT", "3", "keep_recent", 3),
    ("CLOUDYBOT_DATA_DIR", "/tmp/cloudy", "data_dir", Path("/tmp/cloudy")),
    ("CLOUDYBOT_PORT", "0", "port", 0),
    ("CLOUDYBOT_AUTO_PROVISION", "false", "auto_provision", False),
])
def test_env_sets_each_option(variable: str, value: str, attr: str, expected: object) -> None:
    assert getattr(load_settings(None, env={variable: value}), attr) == expected


@pytest.mark.parametrize(("variable", "value", "schema", "attr", "expected"), [
    ("CLOUDYBOT_LLM_MAX_RETRIES", "0", OpenAISettings, "max_retries", 0),
    ("CLOUDYBOT_LLM_TIMEOUT_SECONDS", "2.5", OpenAISettings, "timeout_seconds", 2.5),
    ("CLOUDYBOT_TELEGRAM_GROUP_MODE", "ALL", TelegramSettings, "group_mode", "all"),
    ("CLOUDYBOT_SLACK_API_BASE", "http://127.0.0.1:9/api/", SlackSettings, "api_base",
     "http://127.0.0.1:9/api/"),
])
def test_env_sets_each_built_in_plugin_setting(variable: str, value: str, schema: type,
                                               attr: str, expected: object) -> None:
    settings = load_settings(None, env={variable: value})
    assert getattr(settings.plugin(schema), attr) == expected


def test_a_plugin_setting_comes_from_its_table_and_the_environment_wins(
        tmp_path: Path) -> None:
    path = write_toml(tmp_path, """
        [plugins.telegram]
        group_mode = "all"
        webhook_url = "https://bot.example/telegram/webhook"
        """)
    settings = load_settings(path, env={"CLOUDYBOT_TELEGRAM_GROUP_MODE": "mention"})
    telegram = settings.plugin(TelegramSettings)
    assert telegram.group_mode == "mention"
    assert telegram.webhook_url == "https://bot.example/telegram/webhook"


@pytest.mark.parametrize(("toml", "names"), [
    ('[plugins.telegram]\ngroup_mod = "all"\n', ("plugins.telegram", "group_mod")),
    ('[plugins.telegram]\ngroup_mode = "some"\n', ("group_mode",
                                                   "CLOUDYBOT_TELEGRAM_GROUP_MODE")),
    ('[plugins.telegam]\ntoken = "x"\n', ("plugins.telegam", "telegram")),
    ('[plugins.openai]\nmax_retries = -1\n', ("max_retries", "CLOUDYBOT_LLM_MAX_RETRIES")),
    ('[plugins]\ntelegram = 5\n', ("plugins.telegram", "table")),
    ('[telegram]\ntoken = "x"\n', ("[telegram]", "[plugins.telegram]")),
    ('[slack]\nbot_token = "x"\n', ("[slack]", "[plugins.slack]")),
    ('[llm]\nbase_url = "http://x"\n', ("base_url", "[plugins.openai]")),
])
def test_a_bad_plugin_table_is_a_config_error_naming_it(tmp_path: Path, toml: str,
                                                        names: tuple[str, ...]) -> None:
    message = config_error(write_toml(tmp_path, toml))
    for name in names:
        assert name in message


@pytest.mark.parametrize(("env", "names"), [
    ({"CLOUDYBOT_TELEGRAM_WEBHOOK_SECRET": "has spaces"}, ("[plugins.telegram]",
                                                           "CLOUDYBOT_TELEGRAM_WEBHOOK_SECRET")),
    ({"CLOUDYBOT_SLACK_BOT_TOKEN": "xoxb-1"}, ("CLOUDYBOT_SLACK_SIGNING_SECRET",)),
])
def test_a_check_across_a_plugins_settings_is_a_config_error(env: dict[str, str],
                                                             names: tuple[str, ...]) -> None:
    message = config_error(**env)
    for name in names:
        assert name in message


def test_a_bad_secret_value_is_named_but_never_shown(tmp_path: Path) -> None:
    path = write_toml(tmp_path, "[plugins.openai]\napi_key = [1, 2]\n")
    message = config_error(path)
    assert "api_key" in message and "[1, 2]" not in message


# --- bad values ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("variable", "value"), [
    ("MAX_CONTEXT", "abc"),
    ("MAX_CONTEXT", "0"),
    ("MAX_CONTEXT", "12.5"),
    ("SESSION_IDLE_MINUTES", "-1"),
    ("SESSION_IDLE_MINUTES", "0"),
    ("SESSION_IDLE_MINUTES", "nan"),
    ("SESSION_MAX_FILE_BYTES", "lots"),
    ("SUMMARIZE_AT", "0"),
    ("KEEP_RECENT", "-2"),
    ("CLOUDYBOT_PORT", "70000"),
    ("CLOUDYBOT_PORT", "-1"),
    ("CLOUDYBOT_LLM_TIMEOUT_SECONDS", "never"),
    ("CLOUDYBOT_TELEGRAM_GROUP_MODE", "everyone"),
    ("CLOUDYBOT_AUTO_PROVISION", "maybe"),
])
def test_bad_env_value_is_a_config_error_naming_the_variable(variable: str, value: str) -> None:
    message = config_error(**{variable: value})
    assert variable in message
    assert repr(value) in message


def test_bad_file_value_is_a_config_error_naming_key_and_variable(tmp_path: Path) -> None:
    path = write_toml(tmp_path, '[memory]\nmax_context = "abc"\n')
    message = config_error(path)
    assert "max_context" in message
    assert "MAX_CONTEXT" in message


@pytest.mark.parametrize("env", [
    {"KEEP_RECENT": "10"},
    {"KEEP_RECENT": "12"},
    {"SUMMARIZE_AT": "4", "KEEP_RECENT": "4"},
])
def test_keep_recent_not_below_summarize_at_is_a_config_error(env: dict[str, str]) -> None:
    message = config_error(**env)
    assert "KEEP_RECENT" in message
    assert "SUMMARIZE_AT" in message


def test_bad_toml_is_a_config_error_naming_the_file(tmp_path: Path) -> None:
    path = write_toml(tmp_path, "[memory\nmax_context = \n")
    message = config_error(path)
    assert str(path) in message
    assert "TOML" in message


def test_missing_file_is_a_config_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "nowhere.toml"
    assert str(path) in config_error(path)


def test_unknown_default_plan_is_a_config_error_naming_it() -> None:
    message = config_error(CLOUDYBOT_DEFAULT_PLAN="platinum")
    assert "CLOUDYBOT_DEFAULT_PLAN" in message
    assert "platinum" in message


@pytest.mark.parametrize(("toml", "names"), [
    ("[plans.gold]\ncredits = -5\n", ("plans.gold", "credits")),
    ("[plans.gold]\nrequests_per_minute = \"fast\"\n", ("plans.gold", "requests_per_minute")),
    ("[plans]\ngold = 5\n", ("plans.gold",)),
    ("[prices.\"gpt-x\"]\nprompt = -1.0\n", ("gpt-x", "prompt")),
    ("[prices.\"gpt-x\"]\nprompt = nan\n", ("gpt-x", "prompt")),
    ("[prices.\"gpt-x\"]\ncompletion = inf\n", ("gpt-x", "completion")),
    ("plans = \"gold\"\n", ("plans",)),
    ("prices = 5\n", ("prices",)),
    ("[memory]\nmax_contxt = 1\n", ("memory", "max_contxt")),
    ("[memroy]\nmax_context = 1\n", ("memroy",)),
    ("memory = 5\n", ("memory",)),
    ("[plans.gold]\ncredit = 5\n", ("plans.gold", "credit")),
])
def test_bad_plan_or_price_is_a_config_error_naming_it(tmp_path: Path, toml: str,
                                                       names: tuple[str, ...]) -> None:
    message = config_error(write_toml(tmp_path, toml))
    for name in names:
        assert name in message


# --- the shipped config file ---------------------------------------------------------------------
def test_shipped_config_parses_to_the_builtin_defaults() -> None:
    assert load_settings(SHIPPED_CONFIG, env={}) == load_settings(None, env={})


def _sections(text: str) -> dict[str, str]:
    """The shipped file's text by ``[section]`` (sub-tables like ``[plans.free]`` included)."""
    sections: dict[str, str] = {}
    current = ""
    for line in text.splitlines():
        header = re.fullmatch(r"\[([^\]]+)\]\s*", line)
        if header:
            current = header.group(1)
            continue
        sections[current] = sections.get(current, "") + line + "\n"
    return sections


def _table_of(document: dict[str, object], section: str) -> dict[str, object]:
    table: object = document
    for part in section.split("."):
        table = table.get(part, {}) if isinstance(table, dict) else {}
    return table if isinstance(table, dict) else {}


@pytest.mark.parametrize("option", ALL_OPTIONS, ids=lambda option: option.variable)
def test_shipped_config_documents_every_option(option: Declared) -> None:
    text = SHIPPED_CONFIG.read_text(encoding="utf-8")
    document = tomllib.loads(text)
    assert option.key in _table_of(document, option.section), (
        f"[{option.section}] {option.key} is missing")
    comments = [line for line in _sections(text)[option.section].splitlines()
                if line.lstrip().startswith("#")]
    assert any(option.variable in line for line in comments), (
        f"no comment in [{option.section}] names {option.variable}")


@pytest.mark.parametrize("option", [option for option in ALL_OPTIONS if option.secret],
                         ids=lambda option: option.variable)
def test_shipped_config_holds_no_secret_values(option: Declared) -> None:
    document = tomllib.loads(SHIPPED_CONFIG.read_text(encoding="utf-8"))
    assert _table_of(document, option.section)[option.key] == ""


# --- plans and prices ----------------------------------------------------------------------------
def test_plan_added_by_config(tmp_path: Path) -> None:
    path = write_toml(tmp_path, """
        [plans.gold]
        credits = 5000
        browser_minutes = 90
        retention_days = 180
        requests_per_minute = 60
        [accounts]
        default_plan = "gold"
        """)
    settings = load_settings(path, env={})
    assert settings.plans["gold"] == Plan("gold", credits=5000, browser_minutes=90,
                                          retention_days=180, requests_per_minute=60)
    assert {"free", "pro", "team", "gold"} <= set(settings.plans)
    assert settings.default_plan == "gold"


def test_plan_overridden_in_part_keeps_its_other_values(tmp_path: Path) -> None:
    settings = load_settings(write_toml(tmp_path, "[plans.free]\ncredits = 50\n"), env={})
    builtin = load_settings(None, env={}).plans["free"]
    assert settings.plans["free"] == Plan("free", 50, builtin.browser_minutes,
                                          builtin.retention_days, builtin.requests_per_minute)


def test_price_overridden_in_part_keeps_its_other_value(tmp_path: Path) -> None:
    settings = load_settings(write_toml(tmp_path, "[prices.default]\nprompt = 2.0\n"), env={})
    builtin = load_settings(None, env={}).prices["default"]
    assert settings.prices["default"] == Price(prompt=2.0, completion=builtin.completion)


def test_price_added_by_config(tmp_path: Path) -> None:
    path = write_toml(tmp_path, '[prices."fake-model"]\nprompt = 100.0\ncompletion = 200\n')
    settings = load_settings(path, env={})
    assert settings.price_for("fake-model") == Price(prompt=100.0, completion=200.0)
    assert settings.price_for("unpriced-model") == settings.prices["default"]


async def test_configured_plan_and_price_apply_to_accounts_and_charges(
        tmp_path: Path, start_gateway: StartGateway) -> None:
    configured = load_settings(write_toml(tmp_path, """
        [plans.gold]
        credits = 5000
        [prices."fake-model"]
        prompt = 100.0
        completion = 100.0
        """), env={})
    harness = await start_gateway(plans=configured.plans, prices=configured.prices)
    auth = await harness.user(plan="gold")

    response = await harness.chat(auth, "hello")

    # The fake reports 10 prompt and 5 completion tokens: (10*100 + 5*100) / 1000 = 1.5 -> 2.
    assert response.status == 200, await response.text()
    assert (await response.json())["usage"]["credits"] == 2
    credits = await (await harness.client.get("/api/user/credits", headers=auth)).json()
    assert credits["plan"] == "gold"
    assert credits["credits"] == 5000 - 2
