"""The one place that knows pluggy is synchronous: call hooks, await what they return.

Every implementation is called by us (not by ``hook(...)``), so an ``async def`` implementation
is awaited like any other and one failing plugin is logged and skipped, never fatal. The turn
path calls its hooks through :class:`PluginHooks`, typed methods that hand each plugin its own
:class:`gateway.PluginHost` (an argument given as :class:`PerPlugin` is made for each plugin).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import pluggy

from gateway.base.errors import PluginError, one_line
from gateway.interfaces import PromptSection, TurnContext

if TYPE_CHECKING:
    from gateway.host import PluginHost
    from gateway.memory.sessions import Rotation
    from gateway.store import Delivery

log = logging.getLogger(__name__)
T = TypeVar("T")


async def resolve(value: T | Awaitable[T]) -> T:
    """Await ``value`` if it is awaitable, else return it as is."""
    if inspect.isawaitable(value):
        return await value
    return value


@dataclass(frozen=True)
class PerPlugin:
    """A hook argument made for each plugin it is passed to (its own host), by name."""

    make: Callable[[str], Any]


def _arguments(impl: pluggy.HookImpl, kwargs: dict[str, Any]) -> list[Any]:
    """The arguments ``impl`` names, a :class:`PerPlugin` one made for its plugin."""
    values = [kwargs[name] for name in impl.argnames]
    return [value.make(impl.plugin_name) if isinstance(value, PerPlugin) else value
            for value in values]


def _implementations(hook: pluggy.HookCaller) -> list[pluggy.HookImpl]:
    # pluggy runs the last registered first; keep its order (tryfirst/trylast included).
    return list(reversed(hook.get_hookimpls()))


async def collect(hook: pluggy.HookCaller, *, strict: bool = False, **kwargs: Any) -> list[Any]:
    """Call every implementation and concatenate the lists they return (None counts as []);
    ``strict``: a plugin that raises is a :class:`PluginError` naming it, not a log line."""
    return [item for _, items in await collect_by_plugin(hook, strict=strict, **kwargs)
            for item in items]


async def collect_by_plugin(hook: pluggy.HookCaller, *, strict: bool = False,
                            **kwargs: Any) -> list[tuple[str, list[Any]]]:
    """As :func:`collect`, each plugin's list apart: (plugin name, its items)."""
    return await _collect(hook, _implementations(hook), strict, kwargs)


async def collect_from(hook: pluggy.HookCaller, plugin: str, **kwargs: Any) -> list[Any]:
    """As :func:`collect` (strict), from ``plugin``'s implementation alone."""
    implementations = [impl for impl in _implementations(hook) if impl.plugin_name == plugin]
    return [item for _, items in await _collect(hook, implementations, True, kwargs)
            for item in items]


async def _collect(hook: pluggy.HookCaller, implementations: list[pluggy.HookImpl],
                   strict: bool, kwargs: dict[str, Any]) -> list[tuple[str, list[Any]]]:
    found: list[tuple[str, list[Any]]] = []
    for impl in implementations:
        try:
            result = await resolve(impl.function(*_arguments(impl, kwargs)))
        except Exception as exc:
            if strict:
                raise PluginError(f"plugin {impl.plugin_name!r} failed in {hook.name}(): "
                                  f"{one_line(exc)}") from exc
            log.exception("plugin %r failed in %s()", impl.plugin_name, hook.name)
            continue
        if result is None:
            continue
        if not isinstance(result, list | tuple):
            log.error("plugin %r returned %s from %s(), expected a list; ignored",
                      impl.plugin_name, type(result).__name__, hook.name)
            continue
        found.append((impl.plugin_name, list(result)))
    return found


def gather_now(hook: pluggy.HookCaller, **kwargs: Any) -> list[tuple[str, Any]]:
    """Call every implementation of a synchronous hook (read before the event loop runs, such
    as ``plugin_settings``): (plugin name, what it returned) for each, None left out. A
    coroutine function cannot answer one: it is a plugin error, as is one that raises."""
    results = []
    for impl in _implementations(hook):
        if inspect.iscoroutinefunction(impl.function):
            raise PluginError(f"plugin {impl.plugin_name!r}: {hook.name}() must not be async")
        try:
            result = impl.function(*_arguments(impl, kwargs))
        except Exception as exc:
            raise PluginError(f"plugin {impl.plugin_name!r} failed in {hook.name}(): "
                              f"{type(exc).__name__}: {exc}") from exc
        if result is not None:
            results.append((impl.plugin_name, result))
    return results


async def notify_each(hook: pluggy.HookCaller, **kwargs: Any) -> None:
    """Call every observer; one failing plugin cannot silence the others."""
    for impl in _implementations(hook):
        try:
            await resolve(impl.function(*_arguments(impl, kwargs)))
        except Exception:
            log.exception("plugin %r failed in %s()", impl.plugin_name, hook.name)


async def notify_all_within(hook: pluggy.HookCaller, seconds: float, **kwargs: Any) -> None:
    """Call every observer at once and wait at most ``seconds`` for them all; one that fails
    is logged, one still running then is cancelled and logged, and neither holds the others."""
    async def one(impl: pluggy.HookImpl) -> None:
        try:
            await resolve(impl.function(*_arguments(impl, kwargs)))
        except Exception:
            log.exception("plugin %r failed in %s()", impl.plugin_name, hook.name)
    running = {asyncio.ensure_future(one(impl)): impl.plugin_name
               for impl in _implementations(hook)}
    if not running:
        return
    _, late = await asyncio.wait(running, timeout=max(0.0, seconds))
    for task in late:
        task.cancel()
        log.warning("plugin %r did not finish %s() within %.3g s; cut off",
                    running[task], hook.name, seconds)
    await asyncio.gather(*late, return_exceptions=True)


class PluginHooks:
    """The hooks a running gateway calls on every turn, delivery and rotation, as typed
    methods: callers name what happened, this hands each plugin its own host."""

    def __init__(self, pm: pluggy.PluginManager, host_for: Callable[[str], PluginHost]) -> None:
        self.pm = pm
        self.host = PerPlugin(host_for)

    async def prompt_sections(self, turn: TurnContext) -> list[PromptSection]:
        """The plugins' sections for this turn's system message (anything else is logged and
        left out)."""
        sections = []
        for section in await collect(self.pm.hook.prompt_sections, host=self.host, turn=turn):
            if isinstance(section, PromptSection):
                sections.append(section)
            else:
                log.error("a prompt_sections plugin returned %s, not a PromptSection; ignored",
                          type(section).__name__)
        return sections

    async def turn_completed(self, turn: TurnContext, reply: str) -> None:
        """Tell the observers that a turn was answered and stored."""
        await notify_each(self.pm.hook.turn_completed, host=self.host, turn=turn, reply=reply)

    async def session_rotated(self, rotation: Rotation) -> None:
        """Tell the observers that a session ended."""
        await notify_each(self.pm.hook.session_rotated, host=self.host, rotation=rotation)

    async def reply_sent(self, delivery: Delivery, text: str) -> None:
        """Tell the observers that a reply reached its channel."""
        await notify_each(self.pm.hook.reply_sent, host=self.host, message=delivery, text=text)

    async def gateway_stopping(self, within: float) -> None:
        """Tell the plugins that the gateway stops: they release what they hold, all at once,
        within ``within`` seconds (the rest of the shutdown grace period)."""
        await notify_all_within(self.pm.hook.gateway_stopping, within, host=self.host)
