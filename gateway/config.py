"""Configuration: documented defaults, an optional TOML file, and environment variables on top.

Every option is declared once in ``OPTIONS`` with its TOML place, its environment variable, its
default and its check; ``config/cloudybot.toml`` documents the same list (a test keeps the two in
step). A bad value raises :class:`ConfigError` with one line that names the variable.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ConfigError

OPENAI_BASE_URL = "https://api.openai.com/v1"
DEFAULT_SYSTEM_PROMPT = "You are CloudyBot, a helpful assistant. Answer clearly and concisely."


@dataclass(frozen=True)
class Plan:
    """What an account on a plan gets each month, and its limits."""

    name: str
    credits: int
    browser_minutes: int
    retention_days: int
    requests_per_minute: int


@dataclass(frozen=True)
class Price:
    """AI credits charged per 1,000 prompt and completion tokens of one model."""

    prompt: float
    completion: float


PLAN_FIELDS = ("credits", "browser_minutes", "retention_days", "requests_per_minute")
PRICE_FIELDS = ("prompt", "completion")
# Tables whose keys are names chosen by the operator.
FREE_TABLES = ("plans", "prices", "plugins")

DEFAULT_PLANS = {
    "free": Plan("free", credits=1000, browser_minutes=30, retention_days=30,
                 requests_per_minute=20),
    "pro": Plan("pro", credits=20000, browser_minutes=600, retention_days=365,
                requests_per_minute=120),
    "team": Plan("team", credits=100000, browser_minutes=3000, retention_days=730,
                 requests_per_minute=0),
}
DEFAULT_PRICES = {
    "default": Price(prompt=1.0, completion=3.0),
    "offline": Price(prompt=0.0, completion=0.0),
}


def _number(raw: Any, kind: type[int] | type[float], rule: str) -> int | float:
    """``raw`` as an int or float; ValueError naming ``rule`` if it is not one."""
    if isinstance(raw, bool) or not isinstance(raw, str | int | float):
        raise ValueError(rule)
    try:
        value = kind(raw.strip()) if isinstance(raw, str) else kind(raw)
    except (ValueError, OverflowError):
        raise ValueError(rule) from None
    if isinstance(raw, float) and kind is int and raw != value:
        raise ValueError(rule)
    return value


def _positive_int(raw: Any) -> int:
    rule = "must be a positive integer"
    value = int(_number(raw, int, rule))
    if value <= 0:
        raise ValueError(rule)
    return value


def _count(raw: Any) -> int:
    rule = "must be a whole number >= 0"
    value = int(_number(raw, int, rule))
    if value < 0:
        raise ValueError(rule)
    return value


def _count_float(raw: Any) -> float:
    rule = "must be a number >= 0"
    value = float(_number(raw, float, rule))
    if not 0 <= value < float("inf"):
        raise ValueError(rule)
    return value


def _port(raw: Any) -> int:
    rule = "must be a port number (0-65535)"
    value = int(_number(raw, int, rule))
    if not 0 <= value <= 65535:
        raise ValueError(rule)
    return value


def _positive_float(raw: Any) -> float:
    rule = "must be a positive number"
    value = float(_number(raw, float, rule))
    if not 0 < value < float("inf"):
        raise ValueError(rule)
    return value


def _flag(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in {"1", "true", "yes", "on"}:
        return True
    if text in {"0", "false", "no", "off"}:
        return False
    raise ValueError("must be true or false")


def _text(raw: Any) -> str:
    if not isinstance(raw, str | int | float) or isinstance(raw, bool):
        raise ValueError("must be a string")
    return str(raw)


def _choice(*allowed: str) -> Callable[[Any], str]:
    def parse(raw: Any) -> str:
        text = _text(raw).strip().lower()
        if text not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}")
        return text
    return parse


def _name(raw: Any) -> str:
    text = _text(raw).strip()
    if not text:
        raise ValueError("must not be empty")
    return text


@dataclass(frozen=True)
class Option:
    """One setting: where it lives in TOML, its environment variable, default and check."""

    attr: str
    section: str
    key: str
    env: str
    default: Any
    parse: Callable[[Any], Any]
    doc: str


OPTIONS: tuple[Option, ...] = (
    Option("data_dir", "storage", "data_dir", "CLOUDYBOT_DATA_DIR", "./data", _name,
           "SQLite database, sessions/ and the generated secret key"),
    Option("secret_key", "storage", "secret_key", "CLOUDYBOT_SECRET_KEY", "", _text,
           "key for secrets at rest; generated into the data dir (mode 0600) if empty"),
    Option("host", "server", "host", "CLOUDYBOT_HOST", "127.0.0.1", _name, "listen address"),
    Option("port", "server", "port", "CLOUDYBOT_PORT", 8080, _port, "listen port"),
    Option("max_request_bytes", "server", "max_request_bytes", "CLOUDYBOT_MAX_REQUEST_BYTES",
           1_048_576, _positive_int, "largest accepted request body (413 above)"),
    Option("body_timeout_seconds", "server", "body_timeout_seconds",
           "CLOUDYBOT_BODY_TIMEOUT_SECONDS", 15.0, _positive_float,
           "a request body that has not fully arrived after this long is cut (408)"),
    Option("shutdown_grace_seconds", "server", "shutdown_grace_seconds",
           "CLOUDYBOT_SHUTDOWN_GRACE_SECONDS", 25.0, _count_float,
           "on SIGTERM, finish work for at most this long; the rest waits for the next start"),
    Option("access_log", "server", "access_log", "CLOUDYBOT_ACCESS_LOG", False, _flag,
           "log one line per HTTP request (off by default: it costs ~8% of a turn's CPU)"),
    Option("max_context", "memory", "max_context", "MAX_CONTEXT", 8000, _positive_int,
           "token budget of the whole prompt"),
    Option("summarize_at", "memory", "summarize_at", "SUMMARIZE_AT", 10, _positive_int,
           "summarize when this many recent messages are stored"),
    Option("keep_recent", "memory", "keep_recent", "KEEP_RECENT", 5, _positive_int,
           "recent messages kept verbatim after summarizing"),
    Option("tokenizer_encoding", "memory", "tokenizer_encoding",
           "CLOUDYBOT_TOKENIZER_ENCODING", "cl100k_base", _name,
           "tiktoken encoding used to count prompt tokens"),
    Option("max_message_chars", "memory", "max_message_chars", "CLOUDYBOT_MAX_MESSAGE_CHARS",
           32_000, _positive_int, "longest accepted user message"),
    Option("max_pinned_keys", "memory", "max_pinned_keys", "CLOUDYBOT_MAX_PINNED_KEYS", 100,
           _positive_int, "most pinned keys a thread may hold"),
    Option("session_idle_minutes", "sessions", "idle_minutes", "SESSION_IDLE_MINUTES", 30.0,
           _positive_float, "rotate a session idle longer than this (fractions allowed)"),
    Option("session_max_file_bytes", "sessions", "max_file_bytes", "SESSION_MAX_FILE_BYTES",
           204_800, _positive_int, "rotate a session file larger than this"),
    Option("llm_provider", "llm", "provider", "CLOUDYBOT_LLM_PROVIDER", "", _text,
           "provider plugin; empty: openai if a base URL or OPENAI_API_KEY is set, else offline"),
    Option("llm_base_url", "llm", "base_url", "CLOUDYBOT_LLM_BASE_URL", "", _text,
           "OpenAI-compatible endpoint; requests go to {base_url}/chat/completions"),
    Option("llm_api_key", "llm", "api_key", "CLOUDYBOT_LLM_API_KEY", "", _text,
           "API key; empty: $OPENAI_API_KEY (set it in the environment, not in this file)"),
    Option("llm_model", "llm", "model", "CLOUDYBOT_LLM_MODEL", "gpt-4o-mini", _name,
           "model name sent to the provider"),
    Option("llm_timeout_seconds", "llm", "timeout_seconds", "CLOUDYBOT_LLM_TIMEOUT_SECONDS",
           60.0, _positive_float, "one provider request may take this long (504 after)"),
    Option("llm_max_retries", "llm", "max_retries", "CLOUDYBOT_LLM_MAX_RETRIES", 2,
           _count, "retries on 429/5xx, with backoff"),
    Option("llm_max_tokens", "llm", "max_tokens", "CLOUDYBOT_LLM_MAX_TOKENS", 1024,
           _positive_int, "longest reply asked of the model"),
    Option("llm_vision", "llm", "vision", "CLOUDYBOT_LLM_VISION", False, _flag,
           "send pictures from channels (Telegram photos, Slack images) to the model"),
    Option("llm_max_image_bytes", "llm", "max_image_bytes", "CLOUDYBOT_LLM_MAX_IMAGE_BYTES",
           5_000_000, _positive_int, "largest picture downloaded for the model"),
    Option("max_tool_rounds", "llm", "max_tool_rounds", "CLOUDYBOT_MAX_TOOL_ROUNDS", 5,
           _count, "tool-call rounds per turn before the agent stops with a message"),
    Option("tool_timeout_seconds", "llm", "tool_timeout_seconds",
           "CLOUDYBOT_TOOL_TIMEOUT_SECONDS", 30.0, _positive_float,
           "one tool call may take this long (the model then reads a timeout error)"),
    Option("system_prompt", "llm", "system_prompt", "CLOUDYBOT_SYSTEM_PROMPT",
           DEFAULT_SYSTEM_PROMPT, _name,
           "base system instructions (section 1 of every prompt)"),
    Option("telegram_token", "telegram", "token", "CLOUDYBOT_TELEGRAM_TOKEN", "", _text,
           "bot token from @BotFather; empty: the Telegram channel is off"),
    Option("telegram_api_base", "telegram", "api_base", "CLOUDYBOT_TELEGRAM_API_BASE",
           "https://api.telegram.org/bot", _name,
           "Bot API base URL, ending in /bot (python-telegram-bot's base_url)"),
    Option("telegram_webhook_secret", "telegram", "webhook_secret",
           "CLOUDYBOT_TELEGRAM_WEBHOOK_SECRET", "", _text,
           "set: webhook mode on POST /telegram/webhook; empty: long polling"),
    Option("telegram_webhook_url", "telegram", "webhook_url", "CLOUDYBOT_TELEGRAM_WEBHOOK_URL",
           "", _text, "public URL of /telegram/webhook, registered with setWebhook at start-up"),
    Option("telegram_group_mode", "telegram", "group_mode", "CLOUDYBOT_TELEGRAM_GROUP_MODE",
           "mention", _choice("mention", "all"),
           "in groups, answer only when mentioned or replied to (mention), or every message"),
    Option("slack_bot_token", "slack", "bot_token", "CLOUDYBOT_SLACK_BOT_TOKEN", "", _text,
           "xoxb- bot token; empty: the Slack channel is off"),
    Option("slack_signing_secret", "slack", "signing_secret", "CLOUDYBOT_SLACK_SIGNING_SECRET",
           "", _text, "signing secret that verifies POST /slack/events"),
    Option("slack_api_base", "slack", "api_base", "CLOUDYBOT_SLACK_API_BASE",
           "https://slack.com/api/", _name, "Web API base URL, ending in / (AsyncWebClient)"),
    Option("delivery_retry_hours", "channels", "delivery_retry_hours",
           "CLOUDYBOT_DELIVERY_RETRY_HOURS", 24.0, _positive_float,
           "a reply the platform refuses for a passing reason is retried for this long"),
    Option("channel_streaming", "channels", "streaming", "CLOUDYBOT_CHANNEL_STREAMING", True,
           _flag, "show channel replies growing while the model writes (where the channel can)"),
    Option("purge_interval_minutes", "accounts", "purge_interval_minutes",
           "CLOUDYBOT_PURGE_INTERVAL_MINUTES", 60.0, _count_float,
           "serve purges expired threads this often (0: only `cloudybot purge`)"),
    Option("auto_provision", "accounts", "auto_provision", "CLOUDYBOT_AUTO_PROVISION", True,
           _flag, "create unknown channel senders on the default plan"),
    Option("default_plan", "accounts", "default_plan", "CLOUDYBOT_DEFAULT_PLAN", "free", _name,
           "plan of new accounts"),
)


@dataclass(frozen=True)
class Settings:
    """The gateway's whole configuration, validated."""

    data_dir: Path = Path("./data")
    secret_key: str = ""
    host: str = "127.0.0.1"
    port: int = 8080
    max_request_bytes: int = 1_048_576
    body_timeout_seconds: float = 15.0
    shutdown_grace_seconds: float = 25.0
    access_log: bool = False
    max_context: int = 8000
    summarize_at: int = 10
    keep_recent: int = 5
    tokenizer_encoding: str = "cl100k_base"
    max_message_chars: int = 32_000
    max_pinned_keys: int = 100
    session_idle_minutes: float = 30.0
    session_max_file_bytes: int = 204_800
    llm_provider: str = "offline"
    llm_base_url: str = OPENAI_BASE_URL
    llm_api_key: str = ""
    llm_model: str = "gpt-4o-mini"
    llm_timeout_seconds: float = 60.0
    llm_max_retries: int = 2
    llm_max_tokens: int = 1024
    llm_vision: bool = False
    llm_max_image_bytes: int = 5_000_000
    max_tool_rounds: int = 5
    tool_timeout_seconds: float = 30.0
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    telegram_token: str = ""
    telegram_api_base: str = "https://api.telegram.org/bot"
    telegram_webhook_secret: str = ""
    telegram_webhook_url: str = ""
    telegram_group_mode: str = "mention"
    slack_bot_token: str = ""
    slack_signing_secret: str = ""
    slack_api_base: str = "https://slack.com/api/"
    delivery_retry_hours: float = 24.0
    channel_streaming: bool = True
    purge_interval_minutes: float = 60.0
    auto_provision: bool = True
    default_plan: str = "free"
    plans: Mapping[str, Plan] = field(default_factory=lambda: dict(DEFAULT_PLANS))
    prices: Mapping[str, Price] = field(default_factory=lambda: dict(DEFAULT_PRICES))
    # [plugins.NAME] tables, for third-party plugins' own settings
    plugin_config: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def price_for(self, *models: str) -> Price:
        """The price of the first of ``models`` that has one, else the ``default`` price."""
        for model in models:
            if model in self.prices:
                return self.prices[model]
        return self.prices["default"]

    @property
    def database_path(self) -> Path:
        """Where the SQLite database lives."""
        return self.data_dir / "cloudybot.sqlite3"

    @property
    def sessions_dir(self) -> Path:
        """Where the JSONL session files live."""
        return self.data_dir / "sessions"


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None


def _parse(option: Option, raw: Any, origin: str) -> Any:
    try:
        return option.parse(raw)
    except ValueError as exc:
        raise ConfigError(f"{origin} {exc}, got {raw!r}") from None


def _table(document: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    table = document.get(name, {})
    if not isinstance(table, Mapping):
        raise ConfigError(f"[{name}] must be a table, got {table!r}")
    return table


def _plans(table: Mapping[str, Any]) -> dict[str, Plan]:
    plans = dict(DEFAULT_PLANS)
    for name, spec in table.items():
        if not isinstance(spec, Mapping):
            raise ConfigError(f"[plans.{name}] must be a table")
        _no_unknown_keys(spec, f"plans.{name}", PLAN_FIELDS)
        base = plans.get(name, Plan(name, 0, 0, 30, 0))
        values = {}
        for attr in PLAN_FIELDS:
            raw = spec.get(attr, getattr(base, attr))
            if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
                raise ConfigError(f"[plans.{name}] {attr} must be a whole number >= 0, got {raw!r}")
            values[attr] = raw
        plans[name] = Plan(name, **values)
    return plans


def _prices(table: Mapping[str, Any]) -> dict[str, Price]:
    prices = dict(DEFAULT_PRICES)
    for model, spec in table.items():
        if not isinstance(spec, Mapping):
            raise ConfigError(f"[prices.{model!r}] must be a table")
        _no_unknown_keys(spec, f"prices.{model!r}", PRICE_FIELDS)
        base = prices.get(model, Price(0.0, 0.0))
        values = {}
        for attr in PRICE_FIELDS:
            raw = spec.get(attr, getattr(base, attr))
            if (isinstance(raw, bool) or not isinstance(raw, int | float)
                    or not 0 <= raw < float("inf")):
                raise ConfigError(f"[prices.{model!r}] {attr} must be a finite number >= 0, "
                                  f"got {raw!r}")
            values[attr] = float(raw)
        prices[model] = Price(**values)
    return prices


def _no_unknown_keys(table: Mapping[str, Any], where: str, known: Iterable[str]) -> None:
    unknown = sorted(set(table) - set(known))
    if unknown:
        raise ConfigError(f"[{where}] has unknown key(s): {', '.join(unknown)}")


def _check_document(document: Mapping[str, Any]) -> None:
    """Typos are errors: every section and key of the file must be known."""
    sections: dict[str, set[str]] = {}
    for option in OPTIONS:
        sections.setdefault(option.section, set()).add(option.key)
    _no_unknown_keys(document, "the file", [*sections, *FREE_TABLES])
    for section, keys in sections.items():
        _no_unknown_keys(_table(document, section), section, keys)


def load_settings(path: Path | None = None, env: Mapping[str, str] | None = None) -> Settings:
    """Build Settings from defaults, then ``path`` (TOML), then ``env`` (defaults to os.environ)."""
    env = os.environ if env is None else env
    document = _read_toml(path) if path is not None else {}
    _check_document(document)
    values: dict[str, Any] = {}
    for option in OPTIONS:
        raw, origin = option.default, option.env
        table = document.get(option.section, {})
        if isinstance(table, Mapping) and option.key in table:
            raw, origin = table[option.key], f"[{option.section}] {option.key} ({option.env})"
        if env.get(option.env, "") != "":
            raw, origin = env[option.env], option.env
        values[option.attr] = _parse(option, raw, origin)

    values["data_dir"] = Path(values["data_dir"]).expanduser()
    values["llm_api_key"] = values["llm_api_key"] or env.get("OPENAI_API_KEY", "")
    if not values["llm_provider"]:
        uses_openai = values["llm_base_url"] or env.get("OPENAI_API_KEY")
        values["llm_provider"] = "openai" if uses_openai else "offline"
    values["llm_base_url"] = (values["llm_base_url"] or OPENAI_BASE_URL).rstrip("/")
    values["plans"] = _plans(_table(document, "plans"))
    values["prices"] = _prices(_table(document, "prices"))
    values["plugin_config"] = {name: dict(table) for name, table
                               in _table(document, "plugins").items()
                               if isinstance(table, Mapping)}

    if values["keep_recent"] >= values["summarize_at"]:
        raise ConfigError(
            f"KEEP_RECENT ({values['keep_recent']}) must be smaller than "
            f"SUMMARIZE_AT ({values['summarize_at']})"
        )
    secret = values["telegram_webhook_secret"]
    if secret and not re.fullmatch(r"[A-Za-z0-9_-]{1,256}", secret):
        raise ConfigError("CLOUDYBOT_TELEGRAM_WEBHOOK_SECRET must be 1-256 characters of "
                          "A-Z a-z 0-9 _ - (Telegram's rule)")
    if values["slack_bot_token"] and not values["slack_signing_secret"]:
        raise ConfigError("CLOUDYBOT_SLACK_SIGNING_SECRET is required with "
                          "CLOUDYBOT_SLACK_BOT_TOKEN: Slack requests must be verified")
    if values["default_plan"] not in values["plans"]:
        raise ConfigError(f"CLOUDYBOT_DEFAULT_PLAN names no plan: {values['default_plan']!r}")
    return Settings(**values)


