"""The one place that knows pluggy is synchronous: call hooks, await what they return.

Every implementation is called by us (not by ``hook(...)``), so an ``async def`` implementation
is awaited like any other and one failing plugin is logged and skipped, never fatal.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable
from typing import Any, TypeVar

import pluggy

log = logging.getLogger(__name__)
T = TypeVar("T")


async def resolve(value: T | Awaitable[T]) -> T:
    """Await ``value`` if it is awaitable, else return it as is."""
    if inspect.isawaitable(value):
        return await value
    return value


def _implementations(hook: pluggy.HookCaller) -> list[pluggy.HookImpl]:
    # pluggy runs the last registered first; keep its order (tryfirst/trylast included).
    return list(reversed(hook.get_hookimpls()))


async def collect(hook: pluggy.HookCaller, **kwargs: Any) -> list[Any]:
    """Call every implementation and concatenate the lists they return (None counts as [])."""
    items: list[Any] = []
    for impl in _implementations(hook):
        try:
            result = await resolve(impl.function(*(kwargs[name] for name in impl.argnames)))
        except Exception:
            log.exception("plugin %r failed in %s()", impl.plugin_name, hook.name)
            continue
        if result is None:
            continue
        if not isinstance(result, list | tuple):
            log.error("plugin %r returned %s from %s(), expected a list; ignored",
                      impl.plugin_name, type(result).__name__, hook.name)
            continue
        items.extend(result)
    return items


async def notify_each(hook: pluggy.HookCaller, **kwargs: Any) -> None:
    """Call every observer; one failing plugin cannot silence the others."""
    for impl in _implementations(hook):
        try:
            await resolve(impl.function(*(kwargs[name] for name in impl.argnames)))
        except Exception:
            log.exception("plugin %r failed in %s()", impl.plugin_name, hook.name)
