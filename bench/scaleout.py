"""Scale-out on PostgreSQL (``--backend postgresql``): the throughput of two ``cloudybot serve``
processes on one database against one process, at x64, in interleaved rounds; and the
database round trips a turn makes, counted as the gateway's connections send them.

The machine's two cores are shared by everything: the gateways, PostgreSQL, the fake LLM and
this load generator. Two processes can only win what one leaves idle.
"""

from __future__ import annotations

import asyncio
import statistics
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

from bench.cpu import Window, drive_window, per_worker, warm_up, window_for
from bench.load import (
    MESSAGE,
    LoadResult,
    Server,
    add_user,
    gateway_env,
    start_fake_llm,
    start_serve,
)
from bench.postgres import fresh_database
from gateway import Gateway
from gateway.config.settings import load_settings
from gateway.plugins.manager import make_plugin_manager
from gateway.store.postgres import PostgresStore

CONCURRENCY = 64
SECRET = "bench-shared-secret-key"
COUNTED_TURNS = 200


def _env(tmp: Path, name: str, llm_url: str, database_url: str) -> dict[str, str]:
    return {**gateway_env(tmp / name, "openai", llm_url),
            "CLOUDYBOT_DATABASE_URL": database_url, "CLOUDYBOT_SECRET_KEY": SECRET,
            # the takeover check would add a few statements of its own to the count
            "CLOUDYBOT_LEADER_RETRY_SECONDS": "3600"}


def _machine_ticks() -> tuple[int, int]:
    """(busy, all) CPU ticks of the whole machine so far (``/proc/stat``)."""
    fields = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return sum(fields) - idle, sum(fields)


async def machine_busy(work: Awaitable[LoadResult]) -> tuple[LoadResult, float]:
    """Run a window; also return how busy the machine's cores were meanwhile (0-1)."""
    busy_before, all_before = _machine_ticks()
    result = await work
    busy_after, all_after = _machine_ticks()
    return result, (busy_after - busy_before) / max(1, all_after - all_before)


async def _pair_window(pair: list[Server], token: str, window: Window,
                       prefix: str) -> LoadResult:
    """x64 split across both processes at once: one result, their turns added up."""
    halves = await asyncio.gather(*(
        drive_window(server, token, CONCURRENCY // len(pair), window,
                     per_worker(f"{prefix}-{index}")) for index, server in enumerate(pair)))
    return LoadResult(turns=sum(half.turns for half in halves),
                      seconds=max(half.seconds for half in halves),
                      latencies_ms=[ms for half in halves for ms in half.latencies_ms],
                      errors=sum(half.errors for half in halves),
                      cpu_seconds=sum(half.cpu_seconds for half in halves))


async def _round_trips(server_url: str, tmp: Path) -> float:
    """Statements a turn sends to PostgreSQL on its way (summarization, which runs after the
    reply, set aside), counted as the gateway's connections send them: a gateway in this
    process, the offline provider, ``COUNTED_TURNS`` turns one after another."""
    statements = 0

    def count(query: str) -> None:
        nonlocal statements
        statements += 1

    async with fresh_database(server_url) as url:
        env = {**gateway_env(tmp / "scale-round-trips", "offline"),
               "CLOUDYBOT_DATABASE_URL": url, "SUMMARIZE_AT": "100000"}
        gateway = Gateway(load_settings(env=env), make_plugin_manager(),
                          store=PostgresStore(url, observe_statements=count))
        await gateway.start()
        try:
            await gateway.accounts.add_user("bench", plan="team")
            ref = await gateway.resolve_thread("bench", "counted")
            await gateway.chat("bench", ref, "warm up")
            statements = 0
            for _ in range(COUNTED_TURNS):
                await gateway.chat("bench", ref, MESSAGE)
            return statements / COUNTED_TURNS
        finally:
            await gateway.stop()


async def run(quick: bool, tmp: Path, server_url: str) -> dict[str, Any]:
    """The section's figures: turns a second for one process and for two at x64 (medians
    of interleaved rounds), their ratio, and the round trips of a turn."""
    window = window_for(quick)
    rounds = 1 if quick else 3
    llm, llm_url = start_fake_llm()
    servers: list[Server] = []
    try:
        async with fresh_database(server_url) as one_url, \
                fresh_database(server_url) as two_url:
            env = _env(tmp, "scale-one", llm_url, one_url)
            one_token = add_user(env)
            single = start_serve(env)
            servers.append(single)
            env = _env(tmp, "scale-two-a", llm_url, two_url)
            two_token = add_user(env)
            pair = [start_serve(env), start_serve(_env(tmp, "scale-two-b", llm_url, two_url))]
            servers += pair
            for server, token in ((single, one_token), (pair[0], two_token),
                                  (pair[1], two_token)):
                await warm_up(server, token, f"warm-{server.pid}")
            one: list[tuple[LoadResult, float]] = []
            two: list[tuple[LoadResult, float]] = []
            for round_number in range(rounds):
                for which in ("one", "two") if round_number % 2 == 0 else ("two", "one"):
                    if which == "one":
                        one.append(await machine_busy(drive_window(
                            single, one_token, CONCURRENCY, window,
                            per_worker(f"one-r{round_number}"))))
                    else:
                        two.append(await machine_busy(_pair_window(pair, two_token, window,
                                                            f"two-r{round_number}")))
            round_trips = await _round_trips(server_url, tmp)
    finally:
        for server in servers:
            server.stop()
        llm.stop()
    one_rate = statistics.median(result.per_second for result, _ in one)
    two_rate = statistics.median(result.per_second for result, _ in two)
    return {"scaleout_one_turns_per_s": one_rate, "scaleout_two_turns_per_s": two_rate,
            "scaleout_two_vs_one": two_rate / one_rate if one_rate else 0.0,
            "scaleout_one_busy": statistics.median(busy for _, busy in one),
            "scaleout_two_busy": statistics.median(busy for _, busy in two),
            "scaleout_one_gateway_cpu_us": statistics.median(r.cpu_us_per_turn for r, _ in one),
            "scaleout_errors": float(sum(r.errors for r, _ in one + two)),
            "postgresql_round_trips_per_turn": round_trips}
