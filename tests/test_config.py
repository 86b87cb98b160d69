"""Configuration: SPEC §6 defaults, TOML file, environment on top, one-line errors."""

from __future__ import annotations

import re
import textwrap
import tomllib
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from gateway.config import (
    OPENAI_BASE_URL,
    OPTIONS,
    Option,
    Plan,
    Price,
    Settings,
    load_settings,
)
from gateway.errors import ConfigError
from tests.conftest import Harness

StartGateway = Callable[..., Awaitable[Harness]]
ROOT = Path(__file__).resolve().parents[1]
SHIPPED_CONFIG = ROOT / "config" / "cloudybot.toml"


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
    assert settings.llm_base_url == OPENAI_BASE_URL


def test_defaults_match_the_settings_dataclass() -> None:
    assert load_settings(None, env={}) == Settings()


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
    assert settings.llm_base_url == "http://127.0.0.1:9/v1"


def test_provider_is_openai_when_openai_api_key_is_set() -> None:
    settings = load_settings(None, env={"OPENAI_API_KEY": "sk-from-openai-var"})
    assert settings.llm_provider == "openai"
    assert settings.llm_api_key == "sk-from-openai-var"
    assert settings.llm_base_url == OPENAI_BASE_URL


def test_cloudybot_api_key_wins_over_openai_api_key() -> None:
    settings = load_settings(None, env={"OPENAI_API_KEY": "sk-openai",
                                        "CLOUDYBOT_LLM_API_KEY": "sk-cloudybot"})
    assert settings.llm_api_key == "sk-cloudybot"


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
    ("CLOUDYBOT_LLM_MAX_RETRIES", "0", "llm_max_retries", 0),
])
def test_env_sets_each_option(variable: str, value: str, attr: str, expected: object) -> None:
    assert getattr(load_settings(None, env={variable: value}), attr) == expected


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


@pytest.mark.parametrize("option", OPTIONS, ids=lambda option: option.env)
def test_shipped_config_documents_every_option(option: Option) -> None:
    text = SHIPPED_CONFIG.read_text(encoding="utf-8")
    document = tomllib.loads(text)
    assert option.key in document.get(option.section, {}), (
        f"[{option.section}] {option.key} is missing")
    comments = [line for line in _sections(text)[option.section].splitlines()
                if line.lstrip().startswith("#")]
    assert any(option.env in line for line in comments), (
        f"no comment in [{option.section}] names {option.env}")


def test_shipped_config_holds_no_secret_values() -> None:
    document = tomllib.loads(SHIPPED_CONFIG.read_text(encoding="utf-8"))
    assert document["llm"]["api_key"] == ""
    assert document["storage"]["secret_key"] == ""


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
