"""The load client and process helpers shared by every HTTP benchmark."""

from __future__ import annotations

import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import aiohttp

from bench import reference

MESSAGE = "Please remember that the quarterly report is due on Friday, and remind me later."


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Server:
    """A server process under test."""

    process: subprocess.Popen[bytes]
    url: str
    log: IO[bytes] | None = None  # the process's stderr (its log), kept in a file

    @property
    def pid(self) -> int:
        """The process id (its ``/proc/<pid>/stat`` line covers all its threads)."""
        return self.process.pid

    def rss_kib(self, field_name: str = "VmRSS") -> int:
        """Resident memory of the process (``VmHWM`` for the peak), in KiB."""
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        for line in status.splitlines():
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
        return 0

    def stop(self) -> None:
        """Terminate and reap the process."""
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.log is not None:
            self.log.close()


def _tail(log: IO[bytes]) -> str:
    log.seek(0)
    return log.read().decode(errors="replace")[-2000:]


def start_server(args: list[str], env: Mapping[str, str], port: int,
                 timeout: float = 20.0, cwd: Path | None = None) -> tuple[Server, float]:
    """Start ``python args...`` (in ``cwd``, if given) and wait for ``/healthz``; return it
    and the seconds it took.

    The process's stderr (where ``cloudybot serve`` logs, access log included) goes to an
    unnamed temporary file: written as a log file would be, never a pipe that fills up."""
    started = time.perf_counter()
    log = tempfile.TemporaryFile()  # noqa: SIM115 (closed by Server.stop)
    process = subprocess.Popen([sys.executable, *args], env={**os.environ, **env},
                               stdout=subprocess.DEVNULL, stderr=log, cwd=cwd)
    url = f"http://127.0.0.1:{port}"
    deadline = started + timeout
    while True:
        if process.poll() is not None:
            message = f"{args} exited: {_tail(log)}"
            log.close()
            raise RuntimeError(message)
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                pass
            if _healthy(url):
                return Server(process, url, log), time.perf_counter() - started
        except OSError:
            pass
        if time.perf_counter() > deadline:
            process.kill()
            process.wait()
            message = f"{args} did not become healthy in {timeout} s: {_tail(log)}"
            log.close()
            raise RuntimeError(message)
        time.sleep(0.01)  # polling a booting server; not part of any measured figure


def _healthy(url: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=1) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


@dataclass
class LoadResult:
    """Turns driven, wall time, and each turn's latency in milliseconds."""

    turns: int = 0
    seconds: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)
    errors: int = 0
    cpu_seconds: float = 0.0  # the server's user + system CPU over the window (if measured)

    @property
    def per_second(self) -> float:
        """Turns completed per wall-clock second."""
        return self.turns / self.seconds if self.seconds else 0.0

    @property
    def cpu_us_per_turn(self) -> float:
        """The server's CPU per completed turn, in microseconds."""
        return self.cpu_seconds / self.turns * 1e6 if self.turns else 0.0

    def percentile(self, q: float) -> float:
        """The ``q``-th percentile latency in milliseconds (nearest rank)."""
        if not self.latencies_ms:
            return 0.0
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]

    @property
    def p50(self) -> float:
        """Median latency in milliseconds."""
        return statistics.median(self.latencies_ms) if self.latencies_ms else 0.0


async def drive(url: str, token: str, concurrency: int, turns_each: int, prefix: str,
                warmup: int = 5) -> LoadResult:
    """``concurrency`` workers, each on its own thread, each sending ``turns_each`` turns."""
    result = LoadResult()
    headers = {"Authorization": f"Bearer {token}"}
    connector = aiohttp.TCPConnector(limit=concurrency, force_close=False)
    async with aiohttp.ClientSession(url, connector=connector, headers=headers) as session:
        async def turn(thread: str) -> float:
            started = time.perf_counter()
            async with session.post("/chat", json={"threadId": thread,
                                                   "message": MESSAGE}) as answer:
                await answer.read()
                if answer.status != 200:
                    result.errors += 1
            return (time.perf_counter() - started) * 1000

        for index in range(warmup):
            await turn(f"{prefix}-warmup-{index % concurrency}")

        async def worker(index: int) -> None:
            for _ in range(turns_each):
                result.latencies_ms.append(await turn(f"{prefix}-{index}"))

        started = time.perf_counter()
        await asyncio.gather(*(worker(i) for i in range(concurrency)))
        result.seconds = time.perf_counter() - started
    result.turns = concurrency * turns_each
    return result


def gateway_env(data_dir: Path, provider: str, llm_url: str = "") -> dict[str, str]:
    """The environment of a gateway under test."""
    env = {"CLOUDYBOT_DATA_DIR": str(data_dir), "CLOUDYBOT_LLM_PROVIDER": provider,
           "CLOUDYBOT_LLM_MODEL": "bench-model", "CLOUDYBOT_PURGE_INTERVAL_MINUTES": "0",
           "HTTP_PROXY": "", "HTTPS_PROXY": "", "http_proxy": "", "https_proxy": "",
           "CLOUDYBOT_CONFIG": ""}  # no configuration file of this machine's user
    if llm_url:
        env["CLOUDYBOT_LLM_BASE_URL"] = llm_url
        env["CLOUDYBOT_LLM_API_KEY"] = "sk-bench"
    return env


def add_user(env: dict[str, str], user_id: str = "bench", cwd: Path | None = None) -> str:
    """Create a team-plan (unlimited) account with the CLI (of the gateway in ``cwd``, if
    given); return its token."""
    out = subprocess.run([sys.executable, *reference.cli(cwd), "users", "add", user_id,
                          "--plan", "team", "--credits", "100000000"],
                         env={**os.environ, **env}, check=True, capture_output=True, text=True,
                         cwd=cwd)
    return out.stdout.strip().splitlines()[-1]


def start_gateway(env: dict[str, str], data_dir: Path, *extra: str) -> Server:
    """Start ``bench.server`` (the real gateway plus the in-process provider plugin);
    ``extra`` are its options (``--serve``, ``--volatile-inbox``)."""
    port = free_port()
    server, _ = start_server(["-m", "bench.server", str(data_dir), str(port), *extra], env,
                             port)
    return server


def start_serve(env: dict[str, str], cwd: Path | None = None) -> Server:
    """Start ``cloudybot serve`` exactly as a user runs it (``python -m gateway.cli serve``),
    configured only through ``env`` plus its port: its own logging and access log as they
    are by default. ``cwd``: the source tree to run (``-m`` puts it first on ``sys.path``)."""
    port = free_port()
    server, _ = start_server([*reference.cli(cwd), "serve"],
                             {**env, "CLOUDYBOT_PORT": str(port)}, port, cwd=cwd)
    return server


def start_fake_llm() -> tuple[Server, str]:
    """The OpenAI-compatible fake in its own process; return it and its base URL."""
    port = free_port()
    server, _ = start_server(["-m", "bench.fake_llm_server", str(port)], {}, port)
    return server, f"http://127.0.0.1:{port}/v1"
