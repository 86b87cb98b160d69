"""The plugin manager: built-in and third-party plugins both load through entry points."""

from __future__ import annotations

import importlib.metadata
import logging
from dataclasses import dataclass

import pluggy

from . import hookspecs

log = logging.getLogger(__name__)
ENTRY_POINT_GROUP = hookspecs.PROJECT


@dataclass(frozen=True)
class PluginInfo:
    """A loaded plugin, as ``cloudybot plugins`` lists it."""

    name: str
    module: str
    distribution: str
    hooks: tuple[str, ...]


class PluginManager(pluggy.PluginManager):
    """pluggy's manager, remembering which distribution each entry-point plugin came from."""

    def __init__(self) -> None:
        super().__init__(hookspecs.PROJECT)
        self.add_hookspecs(hookspecs)
        self.distributions: dict[str, str] = {}


def make_plugin_manager(*, load_entry_points: bool = True) -> PluginManager:
    """A plugin manager with the hook specs, and (by default) every installed plugin loaded.

    A broken entry point is logged and skipped: one bad plugin never stops the gateway.
    """
    pm = PluginManager()
    if load_entry_points:
        load_entry_point_plugins(pm)
    return pm


def load_entry_point_plugins(pm: PluginManager) -> list[str]:
    """Register every plugin of the ``cloudybot`` entry-point group; return the names skipped."""
    skipped = []
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if pm.get_plugin(entry_point.name) is not None or pm.is_blocked(entry_point.name):
            continue
        try:
            plugin = entry_point.load()
            pm.register(plugin, name=entry_point.name)
        except Exception:
            log.exception("plugin %r (%s) failed to load; skipped", entry_point.name,
                          entry_point.value)
            skipped.append(entry_point.name)
            continue
        try:
            pm.check_pending()  # a misspelled hook name fails here, for this plugin only
        except pluggy.PluginValidationError:
            pm.unregister(plugin)
            log.exception("plugin %r (%s) implements an unknown hook; skipped",
                          entry_point.name, entry_point.value)
            skipped.append(entry_point.name)
            continue
        if entry_point.dist is not None:
            pm.distributions[entry_point.name] = (
                f"{entry_point.dist.name} {entry_point.dist.version}")
    return skipped


def describe_plugins(pm: PluginManager) -> list[PluginInfo]:
    """The loaded plugins with the hooks each implements, sorted by name."""
    infos = []
    for name, plugin in pm.list_name_plugin():
        if plugin is None:
            continue
        hooks = tuple(sorted(caller.name for caller in pm.get_hookcallers(plugin) or []))
        infos.append(PluginInfo(
            name=name,
            module=getattr(plugin, "__name__", type(plugin).__name__),
            distribution=pm.distributions.get(name, "(registered in code)"),
            hooks=hooks,
        ))
    return sorted(infos, key=lambda info: info.name)
