"""The provider fallback chain as configured: ``CLOUDYBOT_LLM_FALLBACK`` (``[llm] fallback``).

An ordered list of provider/model pairs tried, in order, after the primary
(``CLOUDYBOT_LLM_PROVIDER`` / ``CLOUDYBOT_LLM_MODEL``) when it cannot answer. Each entry may
carry settings of its provider plugin (``base_url``, ``timeout_seconds``, ``max_retries``...)
on top of that plugin's own; a secret setting is named by the variable that holds it
(``api_key_env = "GROQ_API_KEY"``), never written in the file. Written as:

- a TOML array: ``fallback = ["anthropic/claude-y", {provider = "openai", model = "m",
  base_url = "https://...", api_key_env = "KEY_VARIABLE"}]`` (or ``[[llm.fallback]]`` tables);
- in the variable, the same as a JSON array, or plain ``provider/model`` pairs separated by
  commas (``anthropic/claude-y, openai/gpt-x``; the model is what follows the first ``/``).

What each entry's keys mean is its plugin's business: they are checked against the settings
the plugin declares when the gateway starts (:mod:`gateway.plugins.providers`).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.base.errors import ConfigError

VARIABLE = "CLOUDYBOT_LLM_FALLBACK"
# A setting whose value is read from the variable this key names (``api_key_env``).
SECRET_SUFFIX = "_env"
_VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class FallbackEntry:
    """One provider/model pair of the chain, with the settings of its plugin it changes.

    ``values`` are the entry's own (raw, checked against the plugin's declarations at start);
    ``secret_variables`` map a secret setting to the variable that holds it, and ``secrets``
    hold what those variables held when the settings were read (never shown).
    """

    provider: str
    model: str
    values: Mapping[str, Any] = field(default_factory=dict)
    secret_variables: Mapping[str, str] = field(default_factory=dict)
    secrets: Mapping[str, str] = field(default_factory=dict, repr=False)

    @property
    def name(self) -> str:
        """``provider/model``: how logs and metrics name it."""
        return f"{self.provider}/{self.model}"


def fallback_chain(raw: Any) -> tuple[FallbackEntry, ...]:
    """Parse the setting: a TOML array, or the variable's text (a JSON array, or
    comma-separated ``provider/model`` pairs); empty: no fallback."""
    if isinstance(raw, str):
        text = raw.strip()
        if not text:
            return ()
        if text.startswith("["):
            try:
                raw = json.loads(text)
            except ValueError as exc:
                raise ValueError(f"is not a JSON array ({exc})") from None
        else:
            raw = [pair.strip() for pair in text.split(",") if pair.strip()]
    if not isinstance(raw, list):
        raise ValueError("must be a list of provider/model pairs")
    return tuple(_entry(item, number) for number, item in enumerate(raw, 1))


def _entry(item: Any, number: int) -> FallbackEntry:
    """One entry: ``"provider/model"`` or a table with ``provider``, ``model`` and settings."""
    where = f"entry {number}"
    if isinstance(item, str):
        pair = item.partition("/")
        item = {"provider": pair[0], "model": pair[2]}
    if not isinstance(item, Mapping):
        raise ValueError(f"{where} must be \"provider/model\" or a table, got {item!r}")
    provider, model = item.get("provider"), item.get("model")
    if not isinstance(provider, str) or not provider.strip() \
            or not isinstance(model, str) or not model.strip():
        raise ValueError(f"{where} needs a provider and a model (\"provider/model\")")
    values: dict[str, Any] = {}
    variables: dict[str, str] = {}
    for key, value in item.items():
        if key in ("provider", "model"):
            continue
        if not isinstance(key, str) or not key:
            raise ValueError(f"{where} has a key that is not a name: {key!r}")
        if isinstance(value, Mapping | list) or value is None:
            raise ValueError(f"{where}: {key} must be a string, number or boolean")
        if key.endswith(SECRET_SUFFIX):
            if not isinstance(value, str) or not _VARIABLE_NAME.fullmatch(value):
                raise ValueError(f"{where}: {key} must name an environment variable")
            variables[key.removesuffix(SECRET_SUFFIX)] = value
        else:
            values[key] = value
    return FallbackEntry(provider.strip(), model.strip(), values, variables)


def with_secrets(chain: tuple[FallbackEntry, ...],
                 env: Mapping[str, str]) -> tuple[FallbackEntry, ...]:
    """The chain with each entry's secrets read from the variables it names; a variable that
    is not set is a :class:`ConfigError`."""
    read = []
    for number, entry in enumerate(chain, 1):
        secrets = {}
        for key, variable in entry.secret_variables.items():
            if not env.get(variable):
                raise ConfigError(f"{VARIABLE} entry {number} ({entry.name}): "
                                  f"{key}{SECRET_SUFFIX} names {variable}, which is not set")
            secrets[key] = env[variable]
        read.append(dataclasses.replace(entry, secrets=secrets))
    return tuple(read)
