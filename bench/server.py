"""Run the real gateway for a benchmark: ``python -m bench.server DATA_DIR PORT
[--serve | --volatile-inbox]``.

Configured through the environment like ``cloudybot serve``; adds the in-process provider
plugin so that ``CLOUDYBOT_LLM_PROVIDER=inprocess`` works.

``--serve`` runs ``cloudybot serve`` itself (its logging, its access log, its server options,
whatever they are by default) with only the in-process provider added: the gateway without the
provider's HTTP call, comparable line by line with ``cloudybot serve`` and the HTTP fake.
Without it the app runs with the access log off and warnings only (the older sections).
``--volatile-inbox`` keeps the channel inbox and outbox in memory (bench/channel.py compares
the two).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

from aiohttp import web

from bench import inprocess
from channels.telegram import adapter as telegram_adapter
from gateway import Gateway
from gateway.app import build_app
from gateway.config.settings import load_settings
from gateway.plugins.manager import PluginManager, declared_settings, make_plugin_manager


def serve_with_inprocess(port: int) -> int:
    """``cloudybot serve --port PORT`` with the in-process provider registered."""
    from gateway.cli import main as cli
    from gateway.cli import running

    def with_inprocess(**kwargs: Any) -> PluginManager:
        pm = make_plugin_manager(**kwargs)
        pm.register(inprocess, name="inprocess")
        return pm

    # where serve's plugins come from (gateway.cli.running.load)
    running.make_plugin_manager = with_inprocess  # type: ignore[attr-defined]
    return cli.main(["serve", "--port", str(port)])


def main() -> None:
    """Serve until killed."""
    data_dir, port = Path(sys.argv[1]), int(sys.argv[2])
    # The fake Bot API has no flood limits. Paced at Telegram's 30 messages a second, both
    # inbox variants of bench/channel.py would wait on the pacing alike, and their ratio
    # could not show what durability costs.
    telegram_adapter.OVERALL_RATE = (100_000.0, 1.0)
    if "--serve" in sys.argv[3:]:
        sys.exit(serve_with_inprocess(port))
    logging.basicConfig(level=logging.WARNING)
    pm = make_plugin_manager()
    pm.register(inprocess, name="inprocess")
    settings = load_settings(None, plugins=declared_settings(pm))
    store = None
    if "--volatile-inbox" in sys.argv[3:]:
        from bench.channel import VolatileInboxStore
        store = VolatileInboxStore(settings.database_path)
    gateway = Gateway(settings, pm, store=store)
    assert settings.data_dir == data_dir
    web.run_app(build_app(gateway), host="127.0.0.1", port=port, print=None,
                access_log=None)


if __name__ == "__main__":
    main()
