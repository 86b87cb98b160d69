"""Settings declared once and read one way, by the core and by every plugin alike.

A group of settings is a frozen dataclass whose fields are made with :func:`setting`: the
field's type, default and help are the declaration. :func:`read_group` reads the group from
a TOML table and the environment, environment first (an empty variable counts as unset), and
turns every bad value into one :class:`~gateway.errors.ConfigError` line naming where it came
from. A plugin declares its group with the ``plugin_settings`` hook::

    @dataclass(frozen=True)
    class EchoSettings:
        greeting: str = setting("hello", "what the bot says first")
        api_key: str = setting("", "the service's API key", secret=True)

    @hookimpl
    def plugin_settings() -> PluginSettings:
        return PluginSettings("echo", EchoSettings)   # [plugins.echo], CLOUDYBOT_ECHO_*

and reads it with ``gateway.settings.plugin(EchoSettings)``. A check across fields goes in the
dataclass's ``__post_init__``: a ``ValueError`` there is a configuration error too.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from gateway.base.errors import ConfigError

_META = "cloudybot.setting"
_ENV_UNSAFE = re.compile(r"[^A-Z0-9]+")


# --- value parsers ----------------------------------------------------------------------
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
    if isinstance(value, float) and value != value:  # NaN
        raise ValueError(rule)
    return value


def integer(raw: Any) -> int:
    """Any whole number."""
    return int(_number(raw, int, "must be a whole number"))


def number(raw: Any) -> float:
    """Any finite number."""
    value = float(_number(raw, float, "must be a number"))
    if value in (float("inf"), float("-inf")):
        raise ValueError("must be a finite number")
    return value


def positive_int(raw: Any) -> int:
    """A whole number > 0."""
    rule = "must be a positive integer"
    value = int(_number(raw, int, rule))
    if value <= 0:
        raise ValueError(rule)
    return value


def count(raw: Any) -> int:
    """A whole number >= 0."""
    rule = "must be a whole number >= 0"
    value = int(_number(raw, int, rule))
    if value < 0:
        raise ValueError(rule)
    return value


def count_float(raw: Any) -> float:
    """A finite number >= 0."""
    rule = "must be a number >= 0"
    value = float(_number(raw, float, rule))
    if not 0 <= value < float("inf"):
        raise ValueError(rule)
    return value


def positive_float(raw: Any) -> float:
    """A finite number > 0."""
    rule = "must be a positive number"
    value = float(_number(raw, float, rule))
    if not 0 < value < float("inf"):
        raise ValueError(rule)
    return value


def port(raw: Any) -> int:
    """A TCP port number."""
    rule = "must be a port number (0-65535)"
    value = int(_number(raw, int, rule))
    if not 0 <= value <= 65535:
        raise ValueError(rule)
    return value


def flag(raw: Any) -> bool:
    """true/false, yes/no, on/off, 1/0 (any case)."""
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in {"1", "true", "yes", "on"}:
        return True
    if text in {"0", "false", "no", "off"}:
        return False
    raise ValueError("must be true or false")


def text(raw: Any) -> str:
    """Any text (a TOML number is taken as its text)."""
    if not isinstance(raw, str | int | float) or isinstance(raw, bool):
        raise ValueError("must be a string")
    return str(raw)


def name(raw: Any) -> str:
    """Text that is not empty once trimmed."""
    value = text(raw).strip()
    if not value:
        raise ValueError("must not be empty")
    return value


def path(raw: Any) -> Path:
    """A file-system path (``~`` expanded)."""
    return Path(name(raw)).expanduser()


def database_url(raw: Any) -> str:
    """Empty, or a ``postgresql://`` (or ``postgres://``) connection URL."""
    value = text(raw).strip()
    if value and not value.startswith(("postgresql://", "postgres://")):
        raise ValueError("must be a postgresql:// URL, or empty for SQLite")
    return value


def time_zone(raw: Any) -> str:
    """An IANA time zone name the system (or the tzdata package) knows."""
    value = text(raw)
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError("must be an IANA time zone name (Europe/Paris)") from None
    return value


def choice(*allowed: str) -> Callable[[Any], str]:
    """One of ``allowed`` (compared in lower case)."""
    def parse(raw: Any) -> str:
        value = text(raw).strip().lower()
        if value not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}")
        return value
    return parse


def delays(raw: Any) -> tuple[float, ...]:
    """Comma-separated seconds, each a finite number >= 0 (a TOML array of numbers too)."""
    items = raw if isinstance(raw, list) else text(raw).split(",")
    try:
        values = tuple(count_float(str(item).strip()) for item in items if str(item).strip())
    except ValueError:
        raise ValueError("must be comma-separated numbers of seconds, each >= 0") from None
    return values


def origins(raw: Any) -> tuple[str, ...]:
    """Comma-separated web origins (``https://dash.example.com``) or ``*`` (a TOML array
    too); none by default."""
    items = raw if isinstance(raw, list) else text(raw).split(",")
    values = tuple(str(item).strip().rstrip("/") for item in items if str(item).strip())
    for value in values:
        scheme, sep, host = value.partition("://")
        if value != "*" and not (sep and scheme in ("http", "https") and host
                                 and "/" not in host):
            raise ValueError(f"{value!r} is not an origin (scheme://host[:port]) or '*'")
    return values


_BY_TYPE: dict[Any, Callable[[Any], Any]] = {str: text, int: integer, float: number,
                                             bool: flag, Path: path}


# --- declarations -----------------------------------------------------------------------
@dataclass(frozen=True)
class SettingInfo:
    """How one field of a settings group is read (what :func:`setting` records)."""

    help: str
    secret: bool
    env: tuple[str, ...]
    key: str
    section: str
    parse: Callable[[Any], Any] | None


@dataclass(frozen=True)
class Place:
    """Where a setting is read from, when not its plugin's defaults: the TOML ``section`` (a
    plugin's is ``[plugins.NAME]``), its ``key`` there (default: the field's name) and the
    environment variable(s) ``env``, the first set one winning (default:
    ``CLOUDYBOT_{PLUGIN}_{KEY}``). The core's settings name all three."""

    section: str = ""
    key: str = ""
    env: str | tuple[str, ...] = ()


def setting(default: Any, help: str, *, secret: bool = False,
            parse: Callable[[Any], Any] | None = None, place: Place | None = None) -> Any:
    """A field of a settings dataclass: its ``default`` and ``help`` (shown by ``cloudybot
    plugins`` and in error messages).

    :param secret: masked wherever settings are shown (tokens, keys, passwords).
    :param parse: checks and converts a raw value (raise ``ValueError`` with the rule);
        default: by the field's type (str, int, float, bool or Path).
    :param place: where it is read from (:class:`Place`); default: ``[plugins.NAME]`` and
        ``CLOUDYBOT_{NAME}_{KEY}``.
    """
    place = place or Place()
    names = (place.env,) if isinstance(place.env, str) else tuple(place.env)
    info = SettingInfo(help, secret, names, place.key, place.section, parse)
    return dataclasses.field(default=default, metadata={_META: info})


@dataclass(frozen=True)
class PluginSettings:
    """What a plugin's ``plugin_settings`` hook returns: its name (the TOML table
    ``[plugins.NAME]`` and the variables ``CLOUDYBOT_{NAME}_{KEY}``) and its settings
    dataclass, whose fields are made with :func:`setting`."""

    name: str
    schema: type[Any]


@dataclass(frozen=True)
class Declared:
    """One setting as read: where it lives and what it is (``cloudybot plugins`` shows it)."""

    attr: str
    section: str
    key: str
    env: tuple[str, ...]
    default: Any
    parse: Callable[[Any], Any]
    help: str
    secret: bool

    @property
    def variable(self) -> str:
        """The environment variable that names it in messages (the first one read)."""
        return self.env[0]


def declared(schema: type[Any], plugin: str | None = None) -> list[Declared]:
    """Every setting of ``schema``, with its TOML place and variables filled in (a plugin's
    defaults come from its ``plugin`` name)."""
    if not dataclasses.is_dataclass(schema):
        raise TypeError(f"{schema!r} is not a dataclass")
    types = typing.get_type_hints(schema)
    found = []
    for item in dataclasses.fields(schema):
        info = item.metadata.get(_META)
        if not isinstance(info, SettingInfo):
            continue  # not an option (the core's plans and prices, say)
        key = info.key or item.name
        if plugin is None and not (info.section and info.env):
            raise TypeError(f"{schema.__name__}.{item.name}: a core setting names its "
                            "section and variable")
        section = info.section or f"plugins.{plugin}"
        env = info.env or (_env_name(plugin or "", key),)
        parse = info.parse or _BY_TYPE.get(types[item.name])
        if parse is None:
            raise TypeError(f"{schema.__name__}.{item.name}: no parser for "
                            f"{types[item.name]!r}; pass parse=")
        found.append(Declared(item.name, section, key, env, item.default, parse, info.help,
                              info.secret))
    return found


def _env_name(plugin: str, key: str) -> str:
    return _ENV_UNSAFE.sub("_", f"CLOUDYBOT_{plugin}_{key}".upper()).strip("_")


# --- reading ----------------------------------------------------------------------------
def read_group(schema: type[Any], settings: Sequence[Declared], tables: Mapping[str, Any],
               env: Mapping[str, str], label: str) -> Any:
    """An instance of ``schema`` from ``tables`` (section name -> TOML table) and ``env``;
    ``label`` names the group in a message about a check across its fields."""
    try:
        return schema(**read_values(settings, tables, env))
    except ValueError as exc:
        raise ConfigError(f"{label}: {exc}") from None


def read_values(settings: Sequence[Declared], tables: Mapping[str, Any],
                env: Mapping[str, str]) -> dict[str, Any]:
    """The values given for ``settings`` in ``tables`` or ``env`` (environment first),
    checked; a setting given nowhere is left out (its declared default stands)."""
    values = {}
    for item in settings:
        origin = ""
        table = tables.get(item.section, {})
        if isinstance(table, Mapping) and item.key in table:
            raw, origin = table[item.key], f"[{item.section}] {item.key} ({item.variable})"
        for variable in item.env:
            if env.get(variable, "") != "":
                raw, origin = env[variable], variable
                break
        if not origin:
            continue  # the declared default stands as written
        try:
            values[item.attr] = item.parse(raw)
        except ValueError as exc:
            raise ConfigError(f"{origin} {exc}, got {_shown(raw, item.secret)}") from None
    return values


def _shown(raw: Any, secret: bool) -> str:
    return "a value that is not shown (secret)" if secret else repr(raw)


def written(value: Any) -> str:
    """A value as docs/configuration.md writes it in a default cell: ``true``/``false``, a
    whole number without ``.0``, text and paths bare, a list comma-separated, ``empty``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (tuple, list, frozenset, set)):
        return ",".join(written(item) for item in value) or "empty"
    return str(value) or "empty"


def masked(item: Declared, value: Any) -> str:
    """A setting's value as ``cloudybot plugins`` shows it (as the docs write values, see
    :func:`written`): secrets only say whether set."""
    if item.secret:
        return "(set, not shown)" if value else "(not set)"
    return written(value)


def against_default(item: Declared, value: Any) -> str:
    """What follows a setting's line in ``cloudybot plugins``: ``, the default`` or
    ``, default X`` (nothing for a secret, whose default is always unset)."""
    if item.secret:
        return ""
    return ", the default" if value == item.default else f", default {written(item.default)}"
