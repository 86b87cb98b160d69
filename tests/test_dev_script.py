"""``python3 dev.py serve`` hands its process to the gateway (``exec``): a signal sent to it
reaches the gateway, which stops (issue 13: it used to keep running under PID 1)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import aiohttp

from tests.conftest import PROXY_VARIABLES
from tests.process import free_port

ROOT = Path(__file__).resolve().parent.parent


async def test_sigterm_to_dev_py_serve_stops_the_gateway(tmp_path: Path) -> None:
    port = free_port()
    env = {key: value for key, value in os.environ.items()
           if key not in PROXY_VARIABLES and not key.startswith("CLOUDYBOT_")}
    env.update({"CLOUDYBOT_DATA_DIR": str(tmp_path / "data"), "CLOUDYBOT_PORT": str(port),
                "CLOUDYBOT_PURGE_INTERVAL_MINUTES": "0"})
    log = (tmp_path / "serve.log").open("wb")
    child = await asyncio.create_subprocess_exec(sys.executable, str(ROOT / "dev.py"), "serve",
                                                 env=env, stdout=log, stderr=log, cwd=ROOT)
    url = f"http://127.0.0.1:{port}/healthz"
    try:
        async with aiohttp.ClientSession() as session:
            async def healthy() -> None:
                while True:
                    assert child.returncode is None, (tmp_path / "serve.log").read_text()
                    try:
                        async with session.get(url) as response:
                            if response.status == 200:
                                return
                    except aiohttp.ClientError:
                        pass
                    await asyncio.sleep(0.05)  # a bounded poll of a process starting up
            await asyncio.wait_for(healthy(), 60)

            child.send_signal(signal.SIGTERM)  # to dev.py's PID: now the gateway's
            assert await asyncio.wait_for(child.wait(), 60) == 0
            try:
                async with session.get(url) as response:
                    raise AssertionError(f"still answering: {response.status}")
            except aiohttp.ClientConnectionError:
                pass  # nobody listens any more
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()
        log.close()
