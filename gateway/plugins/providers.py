"""The providers of the fallback chain (``CLOUDYBOT_LLM_FALLBACK``), each built by its plugin.

An entry's provider is made the way its plugin always makes it (its ``register_providers``
hook), from that plugin's settings with the entry's own on top: any provider plugin, built-in
or not, can stand in the chain with a base URL, key or timeout of its own. An entry that sets
its own ``base_url`` starts from the plugin's defaults for its secret settings: an API key
given for one address never follows the entry to another.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, cast

from gateway.base.errors import ConfigError
from gateway.config.fallback import SECRET_SUFFIX, VARIABLE, FallbackEntry
from gateway.config.options import Declared, PluginSettings, declared
from gateway.config.settings import Settings
from gateway.host import PluginHost
from gateway.interfaces import Provider
from gateway.plugins import hooks
from gateway.plugins.manager import PluginManager

# The setting whose change keeps the plugin's secrets from following an entry.
DESTINATION_KEY = "base_url"


class _EntryHost:
    """A plugin's host whose settings are one fallback entry's; everything else is the
    plugin's own host."""

    def __init__(self, host: PluginHost, settings: Settings) -> None:
        self._host = host
        self._settings = settings

    @property
    def settings(self) -> Settings:
        """The gateway's settings, with the entry's for its plugin."""
        return self._settings

    def __getattr__(self, name: str) -> Any:
        return getattr(self._host, name)


async def fallback_providers(pm: PluginManager, host_for: Callable[[str], PluginHost],
                             settings: Settings,
                             owners: Mapping[str, str]) -> list[tuple[FallbackEntry, Provider]]:
    """Each entry of ``settings.llm_fallback`` with a provider of its own, built by the plugin
    that registers its provider's name (``owners``: provider name -> plugin name). A
    ConfigError names the entry that names no loaded provider or a setting its plugin does not
    declare."""
    groups = dict(hooks.gather_now(pm.hook.plugin_settings))
    built = []
    for number, entry in enumerate(settings.llm_fallback, 1):
        where = f"{VARIABLE} entry {number} ({entry.name})"
        plugin = owners.get(entry.provider)
        if plugin is None:
            known = ", ".join(sorted(owners)) or "none"
            raise ConfigError(f"{where} names no loaded provider: {entry.provider!r} "
                              f"(loaded: {known})")
        group = groups.get(plugin)
        own = settings if group is None and not (entry.values or entry.secrets) \
            else settings.with_plugin(*_entry_values(entry, group, settings, where))

        def host(name: str, own: Settings = own) -> PluginHost:
            return cast(PluginHost, _EntryHost(host_for(name), own))
        found = [provider for provider in await hooks.collect_from(
            pm.hook.register_providers, plugin, host=hooks.PerPlugin(host))
            if isinstance(provider, Provider) and provider.name == entry.provider]
        if not found:
            raise ConfigError(f"{where}: plugin {plugin!r} registered no provider "
                              f"{entry.provider!r} with these settings")
        built.append((entry, found[0]))
    return built


def _entry_values(entry: FallbackEntry, group: PluginSettings | None, settings: Settings,
                  where: str) -> tuple[str, Any]:
    """The plugin's settings group name and its values for ``entry``: the plugin's own, the
    entry's on top (checked by the plugin's declarations)."""
    if group is None:
        raise ConfigError(f"{where}: its provider's plugin declares no settings to change")
    items = {item.key: item for item in declared(group.schema, group.name)}
    changes: dict[str, Any] = {}
    if DESTINATION_KEY in entry.values:  # a key never follows the entry to another address
        defaults = group.schema()
        changes.update({item.attr: getattr(defaults, item.attr)
                        for item in items.values() if item.secret})
    for key, raw in [*entry.values.items(), *entry.secrets.items()]:
        item = items.get(key)
        if item is None:
            settable = ", ".join(sorted(
                f"{k}{SECRET_SUFFIX}" if i.secret else k for k, i in items.items()))
            raise ConfigError(f"{where}: {key!r} is not a setting of plugin {group.name!r} "
                              f"(its settings: {settable})")
        if item.secret and key not in entry.secrets:  # shown wherever the settings are
            raise ConfigError(f"{where}: {key} is a secret: name the variable that holds it "
                              f"({key}{SECRET_SUFFIX} = \"VARIABLE\")")
        changes[item.attr] = _parsed(item, raw, key in entry.secrets, where)
    try:
        return group.name, dataclasses.replace(settings.plugin(group.schema), **changes)
    except ValueError as exc:  # a check across the plugin's settings
        raise ConfigError(f"{where}: {exc}") from None


def _parsed(item: Declared, raw: Any, secret: bool, where: str) -> Any:
    """One of an entry's settings, checked as the plugin declared it."""
    try:
        return item.parse(raw)
    except ValueError as exc:
        shown = "a value that is not shown (secret)" if secret or item.secret else repr(raw)
        raise ConfigError(f"{where}: {item.key} {exc}, got {shown}") from None
