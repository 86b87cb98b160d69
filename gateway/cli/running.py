"""What every ``cloudybot`` command that touches a deployment starts from: its config file,
its settings (core and plugins') and a gateway on its store alone."""

from __future__ import annotations

import argparse
import asyncio
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from gateway.cli.datadir import warn_if_new
from gateway.config.settings import Settings, load_settings, plugins_disabled
from gateway.gateway import Gateway
from gateway.plugins.manager import (
    PluginManager,
    declared_settings,
    make_plugin_manager,
    plugin_names,
)
from gateway.store.backends import store_for

T = TypeVar("T")


def config_path(args: argparse.Namespace) -> Path | None:
    """The config file: ``--config``, else ``$CLOUDYBOT_CONFIG``, else none (built-ins)."""
    path = args.config or os.environ.get("CLOUDYBOT_CONFIG") or None
    return Path(path) if path else None


def load(args: argparse.Namespace) -> tuple[Settings, PluginManager]:
    """The installed plugins but those the configuration disables (never imported), and the
    settings (core and plugins') from the file and the environment."""
    path = config_path(args)
    pm = make_plugin_manager(disabled=plugins_disabled(path))
    return load_settings(path, plugins=declared_settings(pm), installed=plugin_names(pm)), pm


def settings_of(args: argparse.Namespace) -> Settings:
    """The command's settings."""
    return load(args)[0]


def with_gateway(settings: Settings, work: Callable[[Gateway], Awaitable[T]]) -> T:
    """Run ``work`` against the store only: no provider, no channels (warning first when
    that creates the database: see :func:`warn_if_new`)."""
    warn_if_new(settings)

    async def run() -> T:
        gateway = Gateway(settings, make_plugin_manager(load_entry_points=False),
                          store=store_for(settings))
        await gateway.store.open()
        try:
            return await work(gateway)
        finally:
            await gateway.store.close()
    return asyncio.run(run())
