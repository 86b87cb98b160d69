"""Configuration: documented defaults, an optional TOML file, and environment variables on top.

Every core option is declared once, as a field of :class:`Settings` (its TOML place, its
environment variable, default and check: :func:`gateway.options.setting`);
``config/cloudybot.toml`` documents the same list (a test keeps the two in step). Plugins
declare theirs the same way (the ``plugin_settings`` hook) and are read by the same code. A bad
value raises :class:`ConfigError` with one line that names the variable.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import tomllib
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from gateway.base.errors import ConfigError, PluginError
from gateway.config import options
from gateway.config.fallback import FallbackEntry, fallback_chain, with_secrets
from gateway.config.options import (
    Declared,
    Place,
    PluginSettings,
    declared,
    read_group,
    read_values,
    setting,
)

T = TypeVar("T")
DEFAULT_SYSTEM_PROMPT = "You are CloudyBot, a helpful assistant. Answer clearly and concisely."


@dataclass(frozen=True)
class Plan:
    """What an account on a plan gets each month, and its limits."""

    name: str
    credits: int
    browser_minutes: int
    retention_days: int
    requests_per_minute: int
    max_jobs: int = 10  # scheduled jobs not done yet
    min_job_interval_minutes: int = 60  # the shortest interval (or cron period) of a job
    daily_credits: int = 0  # the most AI credits a UTC day may spend (0: no daily cap)


def unknown_plan(name: str, plans: Iterable[str]) -> str:
    """The one wording of a plan name no configured plan has, wherever it is met (``users
    add --plan``, ``users plan``, the default plan in the configuration)."""
    return f"no plan named {name!r} (plans: {', '.join(plans)})"


@dataclass(frozen=True)
class Price:
    """AI credits charged per 1,000 prompt and completion tokens of one model."""

    prompt: float
    completion: float


PLAN_FIELDS = ("credits", "browser_minutes", "retention_days", "requests_per_minute",
               "max_jobs", "min_job_interval_minutes", "daily_credits")
PRICE_FIELDS = ("prompt", "completion")
# Tables whose keys are names chosen by the operator.
FREE_TABLES = ("plans", "prices", "plugins")
# Every [plugins.NAME] table takes this key, whether or not the plugin declares settings:
# false keeps the plugin from loading at all (its hooks never run).
ENABLED_KEY = "enabled"
# Plugins not to load, comma-separated, on top of those the file switches off.
PLUGINS_DISABLED_VARIABLE = "CLOUDYBOT_PLUGINS_DISABLED"

DEFAULT_PLANS = {
    "free": Plan("free", credits=1000, browser_minutes=30, retention_days=30,
                 requests_per_minute=20, max_jobs=10, min_job_interval_minutes=60),
    "pro": Plan("pro", credits=20000, browser_minutes=600, retention_days=365,
                requests_per_minute=120, max_jobs=100, min_job_interval_minutes=5),
    "team": Plan("team", credits=100000, browser_minutes=3000, retention_days=730,
                 requests_per_minute=0, max_jobs=1000, min_job_interval_minutes=1),
}
DEFAULT_PRICES = {
    "default": Price(prompt=1.0, completion=3.0),
    "offline": Price(prompt=0.0, completion=0.0),
}


@dataclass(frozen=True)
class Settings:
    """The gateway's whole configuration, validated; each option declared once, here.

    An option's place in TOML, its environment variable, default and check are its field's
    :func:`~gateway.options.setting`; ``config/cloudybot.toml`` documents the same list (a
    test keeps the two in step). Plugins' own settings are in ``plugins``, read the same way
    (:meth:`plugin`).
    """

    data_dir: Path = setting(
        Path("./data"), "SQLite database, sessions/ and the generated secret key",
        place=Place("storage", env="CLOUDYBOT_DATA_DIR"), parse=options.path)
    secret_key: str = setting(
        "", "key for secrets at rest; generated into the data dir (mode 0600) if empty",
        place=Place("storage", env="CLOUDYBOT_SECRET_KEY"), secret=True)
    database_url: str = setting(
        "", "postgresql://user@host/db to keep everything in PostgreSQL (several processes may "
        "share it); empty: SQLite in the data dir",
        place=Place("storage", env="CLOUDYBOT_DATABASE_URL"), secret=True,
        parse=options.database_url)
    database_pool_size: int = setting(
        10, "PostgreSQL connections each process keeps at most",
        place=Place("storage", env="CLOUDYBOT_DATABASE_POOL_SIZE"), parse=options.positive_int)
    leader_retry_seconds: float = setting(
        10.0, "with several processes, how often each asks whether a role's player (the Telegram "
        "poller) died, takes over the messages of processes that died, and reads the token "
        "revocations again (in case a notification was lost)",
        place=Place("storage", env="CLOUDYBOT_LEADER_RETRY_SECONDS"), parse=options.positive_float)
    host: str = setting(
        "127.0.0.1", "listen address",
        place=Place("server", env="CLOUDYBOT_HOST"), parse=options.name)
    port: int = setting(
        8080, "listen port",
        place=Place("server", env="CLOUDYBOT_PORT"), parse=options.port)
    max_request_bytes: int = setting(
        1_048_576, "largest accepted request body (413 above)",
        place=Place("server", env="CLOUDYBOT_MAX_REQUEST_BYTES"), parse=options.positive_int)
    body_timeout_seconds: float = setting(
        15.0, "a request body that has not fully arrived after this long is cut (408)",
        place=Place("server", env="CLOUDYBOT_BODY_TIMEOUT_SECONDS"), parse=options.positive_float)
    header_timeout_seconds: float = setting(
        10.0, "a connection whose request line and headers have not fully arrived this long after "
        "it opened (or after its previous answer) is closed",
        place=Place("server", env="CLOUDYBOT_HEADER_TIMEOUT_SECONDS"),
        parse=options.positive_float)
    max_connections_per_address: int = setting(
        64, "connections one client address (one /64 for IPv6) may hold open at once; more are "
        "answered 503 and closed; 0: no cap (behind a reverse proxy, cap there instead)",
        place=Place("server", env="CLOUDYBOT_MAX_CONNECTIONS_PER_ADDRESS"), parse=options.count)
    shutdown_grace_seconds: float = setting(
        25.0, "on SIGTERM, stop within this long (work in flight, then closing); unfinished "
        "work waits for the next start",
        place=Place("server", env="CLOUDYBOT_SHUTDOWN_GRACE_SECONDS"), parse=options.count_float)
    metrics_token: str = setting(
        "", "bearer token that opens GET /metrics to other hosts (from loopback it is open)",
        place=Place("server", env="CLOUDYBOT_METRICS_TOKEN"), secret=True, parse=options.text)
    cors_origins: tuple[str, ...] = setting(
        (), "web origins (comma-separated, or *) whose pages may call the API from a browser; "
        "none by default",
        place=Place("server", env="CLOUDYBOT_CORS_ORIGINS"), parse=options.origins)
    log_format: str = setting(
        "text", "log lines as text or json (one object per line)",
        place=Place("server", env="CLOUDYBOT_LOG_FORMAT"), parse=options.choice("text", "json"))
    log_level: str = setting(
        "info", "the least severe log lines written",
        place=Place("server", env="CLOUDYBOT_LOG_LEVEL"),
        parse=options.choice("debug", "info", "warning", "error"))
    access_log: bool = setting(
        False, "log one line per HTTP request (off by default: it costs ~8% of a turn's CPU)",
        place=Place("server", env="CLOUDYBOT_ACCESS_LOG"))
    max_context: int = setting(
        8000, "token budget of the whole prompt",
        place=Place("memory", env="MAX_CONTEXT"), parse=options.positive_int)
    summarize_at: int = setting(
        10, "summarize when this many recent messages are stored",
        place=Place("memory", env="SUMMARIZE_AT"), parse=options.positive_int)
    keep_recent: int = setting(
        5, "recent messages kept verbatim after summarizing",
        place=Place("memory", env="KEEP_RECENT"), parse=options.positive_int)
    tokenizer_encoding: str = setting(
        "cl100k_base", "tiktoken encoding used to count prompt tokens",
        place=Place("memory", env="CLOUDYBOT_TOKENIZER_ENCODING"), parse=options.name)
    max_message_chars: int = setting(
        32_000, "longest accepted user message",
        place=Place("memory", env="CLOUDYBOT_MAX_MESSAGE_CHARS"), parse=options.positive_int)
    max_pinned_keys: int = setting(
        100, "most pinned keys a thread may hold",
        place=Place("memory", env="CLOUDYBOT_MAX_PINNED_KEYS"), parse=options.positive_int)
    session_idle_minutes: float = setting(
        30.0, "rotate a session idle longer than this (fractions allowed)",
        place=Place("sessions", key="idle_minutes", env="SESSION_IDLE_MINUTES"),
        parse=options.positive_float)
    session_max_file_bytes: int = setting(
        204_800, "rotate a session file larger than this",
        place=Place("sessions", key="max_file_bytes", env="SESSION_MAX_FILE_BYTES"),
        parse=options.positive_int)
    llm_provider: str = setting(
        "", "provider plugin; empty: openai if a base URL or OPENAI_API_KEY is set, else offline",
        place=Place("llm", key="provider", env="CLOUDYBOT_LLM_PROVIDER"))
    llm_model: str = setting(
        "gpt-4o-mini", "model name sent to the provider",
        place=Place("llm", key="model", env="CLOUDYBOT_LLM_MODEL"), parse=options.name)
    llm_fallback: tuple[FallbackEntry, ...] = setting(
        (), "providers tried in order when the one before cannot answer (429, 5xx, 529, a "
        "timeout, no connection) before its first streamed token: provider/model pairs, "
        "each with settings of its plugin (see docs/providers.md)",
        place=Place("llm", key="fallback", env="CLOUDYBOT_LLM_FALLBACK"), parse=fallback_chain)
    llm_breaker_failures: int = setting(
        5, "a provider that failed this many calls in a row is skipped (its circuit opens)",
        place=Place("llm", key="breaker_failures", env="CLOUDYBOT_LLM_BREAKER_FAILURES"),
        parse=options.positive_int)
    llm_breaker_cooldown_seconds: float = setting(
        30.0, "after this long an open circuit lets one call through; its success closes it",
        place=Place("llm", key="breaker_cooldown_seconds",
                    env="CLOUDYBOT_LLM_BREAKER_COOLDOWN_SECONDS"),
        parse=options.positive_float)
    llm_max_tokens: int = setting(
        1024, "longest reply asked of the model",
        place=Place("llm", key="max_tokens", env="CLOUDYBOT_LLM_MAX_TOKENS"),
        parse=options.positive_int)
    llm_vision: bool = setting(
        False, "send pictures from channels (Telegram photos, Slack images) to the model",
        place=Place("llm", key="vision", env="CLOUDYBOT_LLM_VISION"))
    llm_max_image_bytes: int = setting(
        5_000_000, "largest picture downloaded for the model",
        place=Place("llm", key="max_image_bytes", env="CLOUDYBOT_LLM_MAX_IMAGE_BYTES"),
        parse=options.positive_int)
    max_tool_rounds: int = setting(
        5, "tool-call rounds per turn before the agent stops with a message",
        place=Place("llm", env="CLOUDYBOT_MAX_TOOL_ROUNDS"), parse=options.count)
    tool_timeout_seconds: float = setting(
        30.0, "one tool call may take this long (the model then reads a timeout error)",
        place=Place("llm", env="CLOUDYBOT_TOOL_TIMEOUT_SECONDS"), parse=options.positive_float)
    system_prompt: str = setting(
        DEFAULT_SYSTEM_PROMPT, "base system instructions (section 1 of every prompt)",
        place=Place("llm", env="CLOUDYBOT_SYSTEM_PROMPT"), parse=options.name)
    delivery_retry_hours: float = setting(
        24.0, "a reply the platform refuses for a passing reason is retried for this long",
        place=Place("channels", env="CLOUDYBOT_DELIVERY_RETRY_HOURS"), parse=options.positive_float)
    webhooks_retry_seconds: tuple[float, ...] = setting(
        (5.0, 300.0, 1800.0, 7200.0, 18000.0, 36000.0, 36000.0), "delays (s) after each failed "
        "webhook attempt, with jitter; after the last, the delivery fails",
        place=Place("webhooks", key="retry_seconds", env="CLOUDYBOT_WEBHOOKS_RETRY_SECONDS"),
        parse=options.delays)
    webhooks_allow_private: bool = setting(
        False, "let webhooks go to loopback, private, link-local and metadata addresses",
        place=Place("webhooks", key="allow_private", env="CLOUDYBOT_WEBHOOKS_ALLOW_PRIVATE"))
    webhooks_concurrency: int = setting(
        4, "deliveries in flight at once per webhook endpoint",
        place=Place("webhooks", key="concurrency", env="CLOUDYBOT_WEBHOOKS_CONCURRENCY"),
        parse=options.positive_int)
    webhooks_timeout_seconds: float = setting(
        10.0, "an endpoint that has not answered 2xx by then has failed the attempt",
        place=Place("webhooks", key="timeout_seconds", env="CLOUDYBOT_WEBHOOKS_TIMEOUT_SECONDS"),
        parse=options.positive_float)
    browser_vault: bool = setting(
        False, "saved browser logins reach the prompt as site names only: the browser tool's "
        "fill_credential is then the one way a password reaches a page",
        place=Place("browser", key="vault", env="CLOUDYBOT_BROWSER_VAULT"))
    channel_streaming: bool = setting(
        True, "show channel replies growing while the model writes (where the channel can)",
        place=Place("channels", key="streaming", env="CLOUDYBOT_CHANNEL_STREAMING"))
    purge_interval_minutes: float = setting(
        60.0, "serve purges expired threads this often (0: only `cloudybot purge`)",
        place=Place("accounts", env="CLOUDYBOT_PURGE_INTERVAL_MINUTES"), parse=options.count_float)
    auto_provision: bool = setting(
        True, "create unknown channel senders on the default plan",
        place=Place("accounts", env="CLOUDYBOT_AUTO_PROVISION"))
    default_plan: str = setting(
        "free", "plan of new accounts",
        place=Place("accounts", env="CLOUDYBOT_DEFAULT_PLAN"), parse=options.name)
    jobs_run: bool = setting(
        True, "run the scheduled jobs that fall due in this process (off: only other processes "
        "sharing its PostgreSQL database run them)",
        place=Place("jobs", key="run", env="CLOUDYBOT_JOBS_RUN"))
    jobs_time_zone: str = setting(
        "UTC", "the time zone of a user who set none, for scheduled jobs (an IANA name)",
        place=Place("jobs", key="time_zone", env="CLOUDYBOT_JOBS_TIME_ZONE"),
        parse=options.time_zone)
    jobs_lease_seconds: float = setting(
        600.0, "how long a process holds a scheduled run it claimed; one that died with it is "
        "run by another after this (longer than the slowest turn)",
        place=Place("jobs", key="lease_seconds", env="CLOUDYBOT_JOBS_LEASE_SECONDS"),
        parse=options.positive_float)
    jobs_late_seconds: float = setting(
        60.0, "a run starting later than this after its time is late: its job's misfire rule "
        "decides (run once, marked late, or skip), and every other time it missed is recorded",
        place=Place("jobs", key="late_seconds", env="CLOUDYBOT_JOBS_LATE_SECONDS"),
        parse=options.positive_float)
    trace_content: bool = setting(
        False, "with tracing on (OTEL_* variables), record the messages of each provider "
        "call and tool call in its span (saved passwords redacted); off: no message text in "
        "any span",
        place=Place("tracing", key="content", env="CLOUDYBOT_TRACE_CONTENT"))
    plans: Mapping[str, Plan] = field(default_factory=lambda: dict(DEFAULT_PLANS))
    prices: Mapping[str, Price] = field(default_factory=lambda: dict(DEFAULT_PRICES))
    # each plugin's settings (see plugin_settings), by plugin name
    plugins: Mapping[str, Any] = field(default_factory=dict)
    # plugins switched off ([plugins.NAME] enabled = false, CLOUDYBOT_PLUGINS_DISABLED): never
    # loaded, so none of their hooks runs (see plugins_disabled)
    disabled_plugins: frozenset[str] = field(default_factory=frozenset)

    def plugin(self, schema: type[T]) -> T:
        """The settings of the plugin whose settings dataclass is ``schema`` (its defaults if
        they were not read, as in a test that builds Settings by hand)."""
        for values in self.plugins.values():
            if type(values) is schema:
                return values
        return schema()

    def with_plugin(self, name: str, values: Any) -> Settings:
        """These settings with plugin ``name``'s replaced by ``values``."""
        return dataclasses.replace(self, plugins={**self.plugins, name: values})

    @property
    def chain_models(self) -> tuple[str, ...]:
        """The models a call may be answered by: the configured one, then the fallbacks'."""
        return (self.llm_model, *(entry.model for entry in self.llm_fallback))

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


# Every core option, as read (the CLI and tests list them; the shipped file documents them).
OPTIONS: tuple[Declared, ...] = tuple(declared(Settings))


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None


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


# Where options that moved to a built-in plugin's table are now, for a clear message.
MOVED = {"telegram": "plugins.telegram", "slack": "plugins.slack",
         "llm.base_url": "plugins.openai", "llm.api_key": "plugins.openai",
         "llm.timeout_seconds": "plugins.openai", "llm.max_retries": "plugins.openai"}


def _check_document(document: Mapping[str, Any], plugins: Sequence[PluginSettings],
                    known: Collection[str], disabled: Collection[str]) -> None:
    """Typos are errors: every section and key of the file must be known, and every
    ``[plugins.NAME]`` table must name a plugin in ``known``; it holds that plugin's declared
    settings and ``enabled`` (anything, unread, when the plugin is ``disabled``)."""
    sections: dict[str, set[str]] = {}
    for option in OPTIONS:
        sections.setdefault(option.section, set()).add(option.key)
    for moved, place in MOVED.items():
        section, _, key = moved.partition(".")
        table = document.get(section)
        if table is not None and (not key or (isinstance(table, Mapping) and key in table)):
            where = f"[{section}] {key}" if key else f"[{section}]"
            raise ConfigError(f"{where} has moved to [{place}]")
    unknown = sorted(set(document) - {*sections, *FREE_TABLES})
    if unknown:
        raise ConfigError(f"unknown section(s): {', '.join(unknown)} (known: "
                          f"{', '.join(sorted({*sections, *FREE_TABLES}))})")
    for section, keys in sections.items():
        _no_unknown_keys(_table(document, section), section, keys)
    declared_keys = {plugin.name: [item.key for item in _declared(plugin)
                                   if item.section == f"plugins.{plugin.name}"]
                     for plugin in plugins}
    for name, table in _table(document, "plugins").items():
        if name not in known:
            raise ConfigError(f"[plugins.{name}]: {_no_plugin(name, known)}; fix the name or "
                              "remove the table")
        if name in disabled:
            continue  # not loaded: its settings stay in the file, unread
        if name not in declared_keys:
            extra = sorted(set(table) - {ENABLED_KEY})
            if extra:
                raise ConfigError(f"[plugins.{name}] has unknown key(s): {', '.join(extra)} "
                                  f"(plugin {name!r} declares no settings: its table takes "
                                  f"only {ENABLED_KEY})")
            continue
        _no_unknown_keys(table, f"plugins.{name}", [*declared_keys[name], ENABLED_KEY])


def _no_plugin(name: str, known: Collection[str]) -> str:
    """Why ``name`` names no plugin, with the closest installed names."""
    close = difflib.get_close_matches(name, sorted(known), n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return (f"no installed plugin is named {name!r} ({hint}installed: "
            f"{', '.join(sorted(known)) or 'none'}; `cloudybot plugins` lists them)")


def _declared(plugin: PluginSettings) -> list[Declared]:
    """A plugin's declared settings, or a PluginError naming the plugin."""
    try:
        return declared(plugin.schema, plugin.name)
    except TypeError as exc:  # a plugin's declaration the gateway cannot read
        raise PluginError(f"plugin settings {plugin.name!r}: {exc}") from None


def _tables_of_plugins(document: Mapping[str, Any]) -> Mapping[str, Mapping[str, Any]]:
    """The ``[plugins.NAME]`` tables; ConfigError for one that is not a table."""
    tables = _table(document, "plugins")
    for name, table in tables.items():
        if not isinstance(table, Mapping):
            raise ConfigError(f"[plugins.{name}] must be a table, got {table!r}")
    return tables


def _disabled_in_file(document: Mapping[str, Any]) -> set[str]:
    """The plugins whose ``[plugins.NAME]`` table says ``enabled = false``."""
    disabled = set()
    for name, table in _tables_of_plugins(document).items():
        if ENABLED_KEY not in table:
            continue
        try:
            enabled = options.flag(table[ENABLED_KEY])
        except ValueError as exc:
            raise ConfigError(f"[plugins.{name}] {ENABLED_KEY} {exc}, got "
                              f"{table[ENABLED_KEY]!r}") from None
        if not enabled:
            disabled.add(name)
    return disabled


def _disabled_by_env(env: Mapping[str, str]) -> set[str]:
    """The plugins ``CLOUDYBOT_PLUGINS_DISABLED`` names (comma-separated; spaces ignored)."""
    return {name.strip() for name in env.get(PLUGINS_DISABLED_VARIABLE, "").split(",")
            if name.strip()}


def plugins_disabled(path: Path | None = None,
                     env: Mapping[str, str] | None = None) -> frozenset[str]:
    """The plugins the configuration switches off, read before any plugin is loaded (give
    them to :func:`gateway.plugins.manager.make_plugin_manager`): those whose table in the
    TOML file at ``path`` says ``enabled = false``, and those ``CLOUDYBOT_PLUGINS_DISABLED``
    names in ``env`` (defaults to os.environ). A plugin is disabled if either says so.
    :func:`load_settings` checks the names and keeps the same set in
    ``Settings.disabled_plugins``."""
    env = os.environ if env is None else env
    document = _read_toml(path) if path is not None else {}
    try:
        in_file = _disabled_in_file(document)
    except ConfigError as exc:
        raise ConfigError(f"config file {path}: {exc.message}") from None
    return frozenset(in_file | _disabled_by_env(env))


def _plugin_values(document: Mapping[str, Any], env: Mapping[str, str],
                   plugins: Sequence[PluginSettings],
                   disabled: Collection[str]) -> dict[str, Any]:
    """Each plugin's settings, read like the core's from ``[plugins.NAME]`` and the
    environment; a disabled plugin's are not read."""
    tables = _tables_of_plugins(document)
    values = {}
    for plugin in plugins:
        if plugin.name in values:
            raise ConfigError(f"two plugins declare settings named {plugin.name!r}")
        if plugin.name in disabled:
            continue
        items = _declared(plugin)
        section = f"plugins.{plugin.name}"
        values[plugin.name] = read_group(plugin.schema, items,
                                         {section: tables.get(plugin.name, {})}, env,
                                         f"[{section}]")
    return values


def load_settings(path: Path | None = None, env: Mapping[str, str] | None = None,
                  plugins: Sequence[PluginSettings] = (),
                  installed: Collection[str] = ()) -> Settings:
    """Build Settings from defaults, then ``path`` (TOML), then ``env`` (defaults to
    os.environ); ``plugins``: the settings the loaded plugins declare
    (:func:`gateway.plugins.declared_settings`), read into ``Settings.plugins``;
    ``installed``: the names of every plugin, loaded or disabled
    (:func:`gateway.plugins.manager.plugin_names`), which ``[plugins.NAME]`` tables and
    ``CLOUDYBOT_PLUGINS_DISABLED`` may name (besides the ``plugins``' own names)."""
    env = os.environ if env is None else env
    document = _read_toml(path) if path is not None else {}
    known = {*installed, *(plugin.name for plugin in plugins)}
    by_env = _disabled_by_env(env)
    try:
        in_file = _disabled_in_file(document)
        disabled = in_file | by_env
        _check_document(document, plugins, known, disabled)
        for name in sorted(in_file):
            if installed and name not in installed:  # the settings' name, not the plugin's
                raise ConfigError(f"[plugins.{name}] {ENABLED_KEY} = false: "
                                  f"{_no_plugin(name, installed)}")
        plans = _plans(_table(document, "plans"))
        prices = _prices(_table(document, "prices"))
    except ConfigError as exc:  # about the file's contents: say which file
        raise ConfigError(f"config file {path}: {exc.message}") from None
    for name in sorted(by_env):
        if name not in known:
            raise ConfigError(f"{PLUGINS_DISABLED_VARIABLE}: {_no_plugin(name, known)}; fix "
                              "the name or take it out")
    values = read_values(OPTIONS, document, env)
    values["plans"] = plans
    values["prices"] = prices
    values["plugins"] = _plugin_values(document, env, plugins, disabled)
    values["llm_fallback"] = with_secrets(values.get("llm_fallback", ()), env)
    values["disabled_plugins"] = frozenset(disabled)
    if not values.get("llm_provider"):
        openai = values["plugins"].get("openai")
        uses_openai = bool(getattr(openai, "base_url", "") or env.get("OPENAI_API_KEY"))
        if "openai" in disabled:  # the default never picks a plugin switched off
            uses_openai = False
        values["llm_provider"] = "openai" if uses_openai else "offline"
    settings = Settings(**values)
    if settings.keep_recent >= settings.summarize_at:
        raise ConfigError(f"KEEP_RECENT ({settings.keep_recent}) must be smaller than "
                          f"SUMMARIZE_AT ({settings.summarize_at})")
    if settings.default_plan not in settings.plans:
        raise ConfigError(f"[accounts] default_plan (CLOUDYBOT_DEFAULT_PLAN): "
                          f"{unknown_plan(settings.default_plan, settings.plans)}")
    return settings
