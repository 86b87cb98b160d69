"""The plugin manager: built-in and third-party plugins both load through entry points."""

from __future__ import annotations

import importlib.metadata
import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import pluggy

from gateway import hookspecs
from gateway.base.errors import PluginError, one_line
from gateway.config.options import PluginSettings, against_default, declared, masked
from gateway.plugins import hooks

if TYPE_CHECKING:
    from gateway.config.settings import Settings
    from gateway.host import PluginHost

log = logging.getLogger(__name__)
ENTRY_POINT_GROUP = hookspecs.PROJECT


@dataclass(frozen=True)
class PluginInfo:
    """A loaded plugin, as ``cloudybot plugins`` lists it."""

    name: str
    module: str
    distribution: str
    hooks: tuple[str, ...]
    channels: tuple[tuple[str, bool], ...] = ()  # (name, enabled) of each channel it offers
    settings: tuple[str, ...] = ()  # "[plugins.NAME] key = value  (VARIABLE), the default"
    disabled: bool = False  # switched off by the configuration: installed, never loaded


class PluginManager(pluggy.PluginManager):
    """pluggy's manager, remembering which distribution each entry-point plugin came from."""

    def __init__(self) -> None:
        super().__init__(hookspecs.PROJECT)
        self.add_hookspecs(hookspecs)
        self.distributions: dict[str, str] = {}
        # Every entry point of the group seen, loaded or not (disabled, failed): its module.
        self.entry_points: dict[str, str] = {}
        # Entry points that could not be registered: why, in one line (a gateway refuses to
        # start with any; ``cloudybot plugins`` lists them).
        self.load_failures: dict[str, str] = {}

    def parse_hookimpl_opts(self, plugin: object, name: str) -> pluggy.HookimplOpts | None:
        """pluggy's options for a hook implementation; a wrapper is refused here, at
        registration: the gateway calls every implementation itself (to await async ones,
        see :mod:`gateway.plugins.hooks`), so a wrapper could never wrap anything."""
        opts = super().parse_hookimpl_opts(plugin, name)
        if opts is not None and (opts.get("wrapper") or opts.get("hookwrapper")):
            owner = getattr(plugin, "__name__", type(plugin).__name__)
            raise PluginError(f"{owner}.{name} is a hook wrapper; cloudybot calls every "
                              "implementation itself and cannot run wrappers: implement the "
                              "hook plainly (tryfirst/trylast set the order)")
        return opts


def make_plugin_manager(*, load_entry_points: bool = True,
                        disabled: Collection[str] = ()) -> PluginManager:
    """A plugin manager with the hook specs, and (by default) every installed plugin loaded
    except the ``disabled`` ones (:func:`gateway.config.settings.plugins_disabled`): those are
    blocked before their entry points are even imported, so none of their hooks ever runs.

    A broken entry point is logged, skipped and recorded in ``load_failures``: listing the
    plugins still works, and a gateway refuses to start (:meth:`Gateway.load_plugins`).
    """
    pm = PluginManager()
    for name in disabled:
        pm.set_blocked(name)
    if load_entry_points:
        load_entry_point_plugins(pm)
    return pm


def load_entry_point_plugins(pm: PluginManager) -> list[str]:
    """Register every plugin of the ``cloudybot`` entry-point group; return the names skipped
    (failed). A blocked (disabled) name is passed over without importing its entry point."""
    skipped = []
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        pm.entry_points.setdefault(entry_point.name, entry_point.value)
        if pm.is_blocked(entry_point.name) and entry_point.dist is not None:
            pm.distributions.setdefault(  # listed as disabled, with where it comes from
                entry_point.name, f"{entry_point.dist.name} {entry_point.dist.version}")
        if pm.get_plugin(entry_point.name) is not None or pm.is_blocked(entry_point.name):
            continue
        try:
            plugin = entry_point.load()
            pm.register(plugin, name=entry_point.name)
        except Exception as exc:
            log.exception("plugin %r (%s) failed to load; skipped", entry_point.name,
                          entry_point.value)
            skipped.append(entry_point.name)
            pm.load_failures[entry_point.name] = one_line(exc)
            continue
        try:
            pm.check_pending()  # a misspelled hook name fails here, for this plugin only
        except pluggy.PluginValidationError as exc:
            pm.unregister(plugin)
            log.exception("plugin %r (%s) implements an unknown hook; skipped",
                          entry_point.name, entry_point.value)
            skipped.append(entry_point.name)
            pm.load_failures[entry_point.name] = one_line(exc)
            continue
        if entry_point.dist is not None:
            pm.distributions[entry_point.name] = (
                f"{entry_point.dist.name} {entry_point.dist.version}")
    return skipped


def installed_plugins() -> list[str]:
    """The names of every plugin installed under the ``cloudybot`` entry-point group, sorted;
    nothing is imported."""
    return sorted({entry_point.name for entry_point
                   in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)})


def plugin_names(pm: PluginManager) -> frozenset[str]:
    """Every plugin ``pm`` knows by name: the entry points it saw (loaded, disabled or
    failed) and the plugins registered in code. The configuration may name these and no
    others (:func:`gateway.config.settings.load_settings`'s ``installed``)."""
    registered = {name for name, plugin in pm.list_name_plugin() if plugin is not None}
    return frozenset({*pm.entry_points, *registered, *pm.load_failures})


class Described(Protocol):
    """What :func:`describe_plugins` reads of a gateway."""

    pm: PluginManager
    settings: Settings

    def host_for(self, plugin: str) -> PluginHost:
        """The plugin's host."""


async def describe_plugins(gateway: Described) -> list[PluginInfo]:
    """The gateway's plugins, sorted by name: the hooks each implements, its channels (built,
    not started: no I/O) and its settings as configured; a disabled plugin only as such."""
    pm = gateway.pm
    channels = dict(await hooks.collect_by_plugin(pm.hook.register_channels,
                                                  host=hooks.PerPlugin(gateway.host_for)))
    groups = dict(hooks.gather_now(pm.hook.plugin_settings))
    infos = []
    for name, plugin in pm.list_name_plugin():
        if plugin is None:
            if name in gateway.settings.disabled_plugins:
                infos.append(PluginInfo(
                    name=name, module=pm.entry_points.get(name, "(registered in code)"),
                    distribution=pm.distributions.get(name, "(registered in code)"),
                    hooks=(), disabled=True))
            continue
        group = groups.get(name)
        infos.append(PluginInfo(
            name=name,
            module=getattr(plugin, "__name__", type(plugin).__name__),
            distribution=pm.distributions.get(name, "(registered in code)"),
            hooks=tuple(sorted(caller.name for caller in pm.get_hookcallers(plugin) or [])),
            channels=tuple((channel.name, channel.enabled) for channel in channels.get(name, [])),
            settings=_settings_lines(group, gateway.settings.plugins)
            if isinstance(group, PluginSettings) else (),
        ))
    return sorted(infos, key=lambda info: info.name)


async def registered_names(gateway: Described) -> dict[str, str]:
    """Every channel, tool and provider the loaded plugins register (built, not started: no
    I/O), each name with what it is: ``{"calculator": "the tool 'calculator' of plugin
    'tools'"}``. A plugin that fails to build them is passed over (``serve`` says why)."""
    host = hooks.PerPlugin(gateway.host_for)
    hook = gateway.pm.hook
    names: dict[str, str] = {}
    for kind, caller in (("channel", hook.register_channels), ("tool", hook.register_tools),
                         ("provider", hook.register_providers)):
        for plugin, registered in await hooks.collect_by_plugin(caller, host=host):
            for item in registered:
                names.setdefault(str(item.name),
                                 f"the {kind} {item.name!r} of plugin {plugin!r}")
    return names


def _settings_lines(group: PluginSettings, values: Mapping[str, Any]) -> tuple[str, ...]:
    current = values.get(group.name)
    if current is None:  # settings loaded without this plugin's: its defaults hold
        current = group.schema()
    lines = []
    for item in declared(group.schema, group.name):
        value = getattr(current, item.attr)
        lines.append(f"[{item.section}] {item.key} = {masked(item, value)}  ({item.variable})"
                     f"{against_default(item, value)}")
    return tuple(lines)


def declared_settings(pm: PluginManager) -> list[PluginSettings]:
    """The settings every loaded plugin declares (the ``plugin_settings`` hook)."""
    groups = []
    for plugin, group in hooks.gather_now(pm.hook.plugin_settings):
        if not isinstance(group, PluginSettings):
            raise PluginError(f"plugin {plugin!r}: plugin_settings() returned "
                              f"{type(group).__name__}, not a PluginSettings")
        groups.append(group)
    return groups
