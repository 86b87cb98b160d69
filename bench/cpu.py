"""The headline: server CPU per turn, from the server process's own counters.

The load client, the fake LLM and the gateway share this machine's cores, so throughput says
as much about the client as about the gateway. What a turn costs the gateway is read from the
gateway process itself: ``utime + stime`` of ``/proc/<pid>/stat`` (the process's line covers
all its threads) before and after a load window, divided by the turns completed in it.

Three servers are measured, window by window, in interleaved rounds so that a noisy moment
hits all of them alike, at 1 and 8 concurrent conversations:

- ``gateway``: ``cloudybot serve`` exactly as users run it (its default logging and access
  log), with the OpenAI-compatible fake provider in its own process on loopback; summarization
  happens as it does in use (every few turns of a conversation);
- ``inprocess``: the same ``serve`` with a zero-cost in-process provider (no provider HTTP);
- ``baseline``: an app doing only a turn's irreducible I/O (``bench/baseline.py``), a floor;
- ``reference``: ``cloudybot serve`` as it was at an earlier commit (``bench/reference.py``),
  set up exactly as ``gateway``: the goals are ratios to it, which do not depend on how fast
  this machine is;
- ``first_wave``: the same at the first wave's end (``FIRST_WAVE``), the second reference.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Callable, Coroutine, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from bench import reference
from bench.load import (
    MESSAGE,
    LoadResult,
    Server,
    add_user,
    free_port,
    gateway_env,
    start_fake_llm,
    start_gateway,
    start_serve,
    start_server,
)

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# Runs beside a load window until its event is set (the thread list read once a second).
Companion = Callable[[asyncio.Event], Coroutine[Any, Any, None]]
CONCURRENCIES = (1, 8, 32)
LABELS = {"gateway": "cloudybot serve, HTTP fake LLM",
          "reference": "the same at the reference commit",
          "first_wave": "the same at the first wave's end",
          "inprocess": "serve, in-process LLM (no provider HTTP)",
          "baseline": "baseline app (I/O only, a floor)",
          "postgresql": "serve on PostgreSQL, HTTP fake LLM"}


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds the process has used so far, all its threads included
    (fields 14 and 15 of ``/proc/<pid>/stat``, in clock ticks)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat.rsplit(")", 1)[1].split()  # the name (field 2) may hold spaces
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # fields 14, 15 (3 is index 0)


def server_cpu_seconds(server: Server) -> float:
    """:func:`cpu_seconds` of a server under test."""
    return cpu_seconds(server.pid)


@dataclass(frozen=True)
class Window:
    """How long one load window runs: until ``seconds`` have passed or ``turns`` turns have
    been started, whichever comes first (turns in flight then are finished and counted)."""

    seconds: float
    turns: int


FULL_WINDOW = Window(5.0, 5000)
QUICK_WINDOW = Window(0.6, 600)
WARM_UP = Window(0.5, 400)


def window_for(quick: bool) -> Window:
    """The load window of a full or a quick run."""
    return QUICK_WINDOW if quick else FULL_WINDOW


def interleaved(names: Iterable[str], rounds: int) -> Iterator[tuple[int, str]]:
    """``(round, name)`` for ``rounds`` rounds over ``names``, every other round in reverse
    order, so that the machine's drift falls on every variant alike."""
    order = list(names)
    for round_number in range(rounds):
        for name in order if round_number % 2 == 0 else reversed(order):
            yield round_number, name


def per_worker(prefix: str) -> Callable[[int], str]:
    """Each worker its own thread, ``{prefix}-{worker}``."""
    return lambda worker: f"{prefix}-{worker}"


def chat_request(thread: str) -> tuple[str, dict[str, Any]]:
    """A ``/chat`` turn on ``thread``: its path and body."""
    return "/chat", {"threadId": thread, "message": MESSAGE}


async def drive_window(server: Server, token: str, concurrency: int, window: Window,
                       thread_for: Callable[[int], str],
                       companion: Companion | None = None,
                       request_for: Callable[[str], tuple[str, dict[str, Any]]] = chat_request,
                       ) -> LoadResult:
    """``concurrency`` workers send turns (``/chat`` unless ``request_for(thread)`` gives
    another path and body), each waiting for its answer before its next;
    ``thread_for(worker)`` names the thread of each turn. Every worker first sends one
    warm-up turn (connections open, threads exist); then the server's CPU counters are read,
    the window runs, and they are read again once every turn started in it has answered.

    ``companion``, if given, runs alongside the window and is told to stop (its event set)
    when the window's last turn has answered; the CPU is read after it finished."""
    result = LoadResult()
    connector = aiohttp.TCPConnector(limit=concurrency)
    headers = {"Authorization": f"Bearer {token}"}
    async with aiohttp.ClientSession(server.url, connector=connector,
                                     headers=headers) as session:
        async def turn(worker: int) -> float:
            started = time.perf_counter()
            path, body = request_for(thread_for(worker))
            async with session.post(path, json=body) as answer:
                await answer.read()
                if answer.status != 200:
                    result.errors += 1
            return (time.perf_counter() - started) * 1000

        await asyncio.gather(*(turn(worker) for worker in range(concurrency)))
        started_turns = 0
        done = asyncio.Event()

        async def worker(index: int) -> None:
            nonlocal started_turns
            while started_turns < window.turns and time.perf_counter() < deadline:
                started_turns += 1
                result.latencies_ms.append(await turn(index))

        cpu_before = server_cpu_seconds(server)
        started = time.perf_counter()
        deadline = started + window.seconds
        side = asyncio.create_task(companion(done)) if companion is not None else None
        await asyncio.gather(*(worker(index) for index in range(concurrency)))
        result.seconds = time.perf_counter() - started
        done.set()
        if side is not None:
            await side
        result.cpu_seconds = server_cpu_seconds(server) - cpu_before
    result.turns = len(result.latencies_ms)
    return result


async def warm_up(server: Server, token: str, prefix: str) -> None:
    """A short unmeasured x8 window: lazy imports, caches and connections settle first."""
    await drive_window(server, token, 8, WARM_UP, per_worker(prefix))


def summarize(runs: list[LoadResult]) -> dict[str, float]:
    """A row of the table from a server's windows at one concurrency: the median of each
    figure over the rounds, and the spread (lowest, highest) of CPU per turn."""
    cpu = [run.cpu_us_per_turn for run in runs]
    return {"cpu_us": statistics.median(cpu), "cpu_us_min": min(cpu), "cpu_us_max": max(cpu),
            "turns_per_s": statistics.median(run.per_second for run in runs),
            "p50_ms": statistics.median(run.p50 for run in runs),
            "p95_ms": statistics.median(run.percentile(95) for run in runs),
            "p99_ms": statistics.median(run.percentile(99) for run in runs),
            "turns": float(sum(run.turns for run in runs)),
            "errors": float(sum(run.errors for run in runs)), "rounds": float(len(runs))}


async def run(quick: bool, tmp: Path, against: str | None,
              database_url: str | None = None,
              first_wave: str | None = None) -> dict[str, Any]:
    """The headline section: each server's rows, the targets' figures and the peak RSS of
    ``cloudybot serve`` during it; ``against`` and ``first_wave``: the reference commits
    (None: not run); ``database_url``: an empty PostgreSQL database, whose ``serve`` runs
    beside the others."""
    window = window_for(quick)
    rounds = 1 if quick else 5
    llm, llm_url = start_fake_llm()
    servers: dict[str, tuple[Server, str]] = {}
    sources = {name: reference.extract(revision, tmp / f"{name}-source")
               for name, revision in (("reference", against), ("first_wave", first_wave))
               if revision}
    try:
        env = gateway_env(tmp / "headline-gateway", "openai", llm_url)
        token = add_user(env)
        servers["gateway"] = (start_serve(env), token)
        for name, source in sources.items():
            if source is None:
                continue
            env = gateway_env(tmp / f"headline-{name}", "openai", llm_url)
            token = add_user(env, cwd=source)
            servers[name] = (start_serve(env, cwd=source), token)
        if database_url is not None:
            env = {**gateway_env(tmp / "headline-postgresql", "openai", llm_url),
                   "CLOUDYBOT_DATABASE_URL": database_url}
            token = add_user(env)
            servers["postgresql"] = (start_serve(env), token)
        env = gateway_env(tmp / "headline-inprocess", "inprocess")
        token = add_user(env)
        servers["inprocess"] = (start_gateway(env, tmp / "headline-inprocess", "--serve"),
                                token)
        data_dir = tmp / "headline-baseline"
        data_dir.mkdir()
        port = free_port()
        baseline, _ = start_server(["-m", "bench.baseline", str(data_dir), str(port)], {}, port)
        servers["baseline"] = (baseline, "none")
        for name, (server, token) in servers.items():
            await warm_up(server, token, f"{name}-warm-up")
        runs: dict[str, list[LoadResult]] = {}
        names = list(servers)
        for round_number in range(rounds):
            order = names[round_number % len(names):] + names[:round_number % len(names)]
            for concurrency in CONCURRENCIES:
                for name in order:
                    server, token = servers[name]
                    prefix = f"{name}{concurrency}r{round_number}"
                    runs.setdefault(f"{name}_{concurrency}", []).append(await drive_window(
                        server, token, concurrency, window, per_worker(prefix)))
        peak_rss_mb = servers["gateway"][0].rss_kib("VmHWM") / 1024
    finally:
        for server, _ in servers.values():
            server.stop()
        llm.stop()
    figures: dict[str, Any] = {key: summarize(value) for key, value in runs.items()}
    for concurrency in CONCURRENCIES:
        gateway = figures[f"gateway_{concurrency}"]["cpu_us"]
        floor = figures[f"baseline_{concurrency}"]["cpu_us"]
        figures[f"cpu_us_per_turn_{concurrency}"] = gateway
        figures[f"cpu_over_baseline_{concurrency}"] = gateway / floor if floor else 0.0
        for name in sources:
            if name in servers:
                figures[f"cpu_vs_{name}_{concurrency}"] = (
                    gateway / figures[f"{name}_{concurrency}"]["cpu_us"])
        if database_url is not None:
            figures[f"postgresql_vs_sqlite_{concurrency}"] = (
                figures[f"postgresql_{concurrency}"]["cpu_us"] / gateway)
    figures["reference"] = against if "reference" in servers else None
    figures["first_wave"] = first_wave if "first_wave" in servers else None
    figures["p50_ms_1_thread_inprocess"] = figures["inprocess_1"]["p50_ms"]
    figures["peak_rss_mb"] = peak_rss_mb
    figures["window_s"], figures["window_turns"] = window.seconds, window.turns
    figures["headline_rounds"] = rounds
    return figures
