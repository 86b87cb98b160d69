"""``cloudybot serve`` as a real child process, for tests that kill it (SIGKILL) or stop it
(SIGTERM) and start it again on the same data dir."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from pathlib import Path

import aiohttp

from tests.conftest import PROXY_VARIABLES


def free_port() -> int:
    """A port of 127.0.0.1 nobody listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class ServeProcess:
    """One ``cloudybot serve`` child on ``data_dir`` with ``env`` on top of a clean
    environment; its output goes to ``{data_dir}.log`` (read it when a test fails)."""

    def __init__(self, data_dir: Path, env: dict[str, str]) -> None:
        self.data_dir = data_dir
        self.overrides = env
        self.port = free_port()
        self.log = data_dir.with_suffix(".log")
        self.env = {key: value for key, value in os.environ.items()
                    if key not in PROXY_VARIABLES and not key.startswith("CLOUDYBOT_")}
        self.env.update({"CLOUDYBOT_DATA_DIR": str(data_dir), "CLOUDYBOT_HOST": "127.0.0.1",
                         "CLOUDYBOT_PORT": str(self.port), "NO_PROXY": "127.0.0.1,localhost",
                         "CLOUDYBOT_PURGE_INTERVAL_MINUTES": "0", **env})
        self.process: asyncio.subprocess.Process | None = None

    def again(self) -> ServeProcess:
        """Another child on the same data dir and settings (not started)."""
        return ServeProcess(self.data_dir, self.overrides)

    @property
    def url(self) -> str:
        """The server's base URL."""
        return f"http://127.0.0.1:{self.port}"

    async def start(self, timeout: float = 20.0) -> None:
        """Start the child and wait until ``/healthz`` answers."""
        with self.log.open("ab") as log:
            self.process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "gateway.cli", "serve", env=self.env,
                stdout=log, stderr=log, cwd=Path(__file__).resolve().parent.parent)
        async with aiohttp.ClientSession() as session:
            async def healthy() -> None:
                while True:
                    assert self.process is not None and self.process.returncode is None, \
                        self.log.read_text()
                    try:
                        async with session.get(f"{self.url}/healthz") as response:
                            if response.status == 200:
                                return
                    except aiohttp.ClientError:
                        pass
                    await asyncio.sleep(0.05)  # a bounded poll of a process starting up
            await asyncio.wait_for(healthy(), timeout)

    async def kill(self) -> None:
        """SIGKILL: no clean-up of any kind runs."""
        assert self.process is not None
        self.process.kill()
        await self.process.wait()

    async def terminate(self, timeout: float = 60.0) -> int:
        """SIGTERM, then wait for the exit; return the exit code."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        return await asyncio.wait_for(self.process.wait(), timeout)

    async def ensure_stopped(self) -> None:
        """Kill the child if it still runs (test teardown)."""
        if self.process is not None and self.process.returncode is None:
            await self.kill()
