"""Run the real gateway for a benchmark: ``python -m bench.server DATA_DIR PORT
[--volatile-inbox]``.

Configured through the environment like ``cloudybot serve``; adds the in-process provider
plugin so that ``CLOUDYBOT_LLM_PROVIDER=inprocess`` works. ``--volatile-inbox`` keeps the
channel inbox and outbox in memory (bench/channel.py compares the two).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from aiohttp import web

from bench import inprocess
from gateway import Gateway
from gateway.app import build_app
from gateway.config import load_settings
from gateway.plugins import make_plugin_manager


def main() -> None:
    """Serve until killed."""
    data_dir, port = Path(sys.argv[1]), int(sys.argv[2])
    logging.basicConfig(level=logging.WARNING)
    settings = load_settings(None)
    pm = make_plugin_manager()
    pm.register(inprocess, name="inprocess")
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
