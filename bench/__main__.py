"""``python -m bench [--quick] [--json FILE]``: what a turn costs the gateway itself.

Every figure comes from this machine in this run; every goal is a ratio or a bound:

1. /chat throughput and latency at 1, 8 and 64 concurrent threads, with the OpenAI-compatible
   fake on loopback and with a zero-cost in-process provider (the gateway's own cost);
2. a baseline app doing only a turn's irreducible I/O, driven by the same client;
3. growth: per-turn latency with 10 vs 10,000 display messages (4 KB each), 0 vs 50 pinned keys;
4. prompt assembly: tokens/s, per-turn assembly time, token-count cache hit rate;
5. sessions: append + rotation check with a 10 KB vs a 190 KB file;
6. memory: peak RSS during (1), RSS after 10,000 threads were used;
7. cold start: ``cloudybot serve`` to a healthy ``/healthz``;
8. the channel path: Telegram webhook updates to replies at a fake Bot API, with the durable
   inbox and outbox vs the same gateway keeping them in memory (their cost);
9. streaming on that path: the model's first piece to the first draft, and server CPU per
   turn with channel streaming on vs off.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import assembly, channel, growth, sessions, streaming
from bench.load import (
    LoadResult,
    Server,
    add_user,
    drive,
    free_port,
    gateway_env,
    start_gateway,
    start_server,
)

TARGETS = {
    "throughput_vs_baseline": (">=", 0.5),
    "growth_display_ratio": ("<=", 1.15),
    "growth_pinned_ratio": ("<=", 1.15),
    "session_ratio": ("<=", 1.2),
    "p50_ms_1_thread_inprocess": ("<=", 2.0),
    "peak_rss_mb": ("<", 120.0),
    "cold_start_s": ("<", 1.5),
    "channel_inbox_throughput_ratio": (">=", 0.85),
}


def load_figures(result: LoadResult) -> dict[str, float]:
    """Throughput and latency percentiles of one load run."""
    return {"turns_per_s": result.per_second, "p50_ms": result.p50,
            "p95_ms": result.percentile(95), "p99_ms": result.percentile(99),
            "errors": result.errors}


async def throughput(quick: bool, tmp: Path) -> dict[str, Any]:
    """(1), (2) and the peak RSS of (6): every server up at once, measured in turns, rounds
    interleaved so that a noisy moment hits all of them alike; the median round counts."""
    plans = [(1, 150 if quick else 800), (8, 40 if quick else 200), (64, 5 if quick else 40)]
    rounds = 1 if quick else 3
    llm_port = free_port()
    llm, _ = start_server(["-m", "bench.fake_llm_server", str(llm_port)], {}, llm_port)
    servers: dict[str, tuple[Server, str]] = {}
    try:
        for provider, llm_url in (("inprocess", ""),
                                  ("openai", f"http://127.0.0.1:{llm_port}/v1")):
            data_dir = tmp / f"gateway-{provider}"
            env = gateway_env(data_dir, provider, llm_url)
            token = add_user(env)
            servers[provider] = (start_gateway(env, data_dir), token)
        data_dir = tmp / "baseline"
        data_dir.mkdir()
        port = free_port()
        baseline, _ = start_server(["-m", "bench.baseline", str(data_dir), str(port)], {}, port)
        servers["baseline"] = (baseline, "none")
        results: dict[str, list[LoadResult]] = {}
        for round_number in range(rounds):
            for concurrency, turns in plans:
                for name, (server, token) in servers.items():
                    result = await drive(server.url, token, concurrency, turns,
                                         f"{name}{concurrency}r{round_number}")
                    results.setdefault(f"{name}_{concurrency}", []).append(result)
        figures: dict[str, Any] = {}
        for key, runs in results.items():
            runs.sort(key=lambda run: run.per_second)
            figures[key] = load_figures(runs[len(runs) // 2])
        figures["peak_rss_mb"] = servers["inprocess"][0].rss_kib("VmHWM") / 1024
    finally:
        for server, _ in servers.values():
            server.stop()
        llm.stop()
    for concurrency, _ in plans:
        figures[f"ratio_{concurrency}"] = (figures[f"inprocess_{concurrency}"]["turns_per_s"]
                                           / figures[f"baseline_{concurrency}"]["turns_per_s"])
    # The goal holds only if it holds at every concurrency.
    figures["throughput_vs_baseline"] = min(figures[f"ratio_{c}"] for c, _ in plans)
    figures["p50_ms_1_thread_inprocess"] = figures["inprocess_1"]["p50_ms"]
    return figures


async def threads_memory(quick: bool, tmp: Path) -> dict[str, float]:
    """RSS of the gateway after 10,000 (quick: 1,000) threads were used."""
    threads = 1000 if quick else 10_000
    data_dir = tmp / "gateway-threads"
    env = gateway_env(data_dir, "inprocess")
    token = add_user(env)
    server = start_gateway(env, data_dir)
    try:
        result = await drive(server.url, token, 64, 1, "many", warmup=0)
        for batch in range(1, threads // 64 + 1):
            result = await drive(server.url, token, 64, 1, f"many{batch}", warmup=0)
        return {"threads_used": float(threads), "rss_after_threads_mb": server.rss_kib() / 1024,
                "threads_errors": float(result.errors)}
    finally:
        server.stop()


def cold_start(tmp: Path, runs: int) -> float:
    """Median seconds from launching ``cloudybot serve`` to a healthy /healthz."""
    times = []
    for run in range(runs):
        data_dir = tmp / f"cold{run}"
        port = free_port()
        env = {**gateway_env(data_dir, "offline"), "CLOUDYBOT_PORT": str(port)}
        server, seconds = start_server(["-m", "gateway.cli", "serve"], env, port)
        server.stop()
        times.append(seconds)
    return statistics.median(times)


def verdicts(figures: dict[str, Any]) -> dict[str, bool]:
    """Which targets hold."""
    results = {}
    for name, (op, bound) in TARGETS.items():
        value = figures.get(name)
        if value is None:
            continue
        results[name] = value >= bound if op == ">=" else value <= bound if op == "<=" \
            else value < bound
    return results


def print_table(figures: dict[str, Any]) -> None:
    """The human-readable report."""
    print(f"\nCloudyBot gateway benchmark — {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"\n{'load (/chat over HTTP)':<28}{'turns/s':>10}{'p50 ms':>9}{'p95 ms':>9}"
          f"{'p99 ms':>9}{'errors':>8}")
    for name in ("inprocess", "openai", "baseline"):
        for concurrency in (1, 8, 64):
            row = figures.get(f"{name}_{concurrency}")
            if row:
                label = {"inprocess": "gateway, in-process LLM", "openai": "gateway, fake HTTP LLM",
                         "baseline": "baseline (I/O only)"}[name]
                print(f"{label + f' x{concurrency}':<28}{row['turns_per_s']:>10.0f}"
                      f"{row['p50_ms']:>9.2f}{row['p95_ms']:>9.2f}{row['p99_ms']:>9.2f}"
                      f"{row['errors']:>8.0f}")
    print()
    rows = [
        ("gateway / baseline throughput, 1 thread", "ratio_1", "{:.2f}x"),
        ("gateway / baseline throughput, 8 threads", "ratio_8", "{:.2f}x"),
        ("gateway / baseline throughput, 64 threads", "ratio_64", "{:.2f}x"),
        ("  lowest of the three", "throughput_vs_baseline", "{:.2f}x"),
        ("p50 per turn, 1 thread, in-process", "p50_ms_1_thread_inprocess", "{:.2f} ms"),
        ("p50 per turn, 10 display messages", "growth_display_small_ms", "{:.2f} ms"),
        ("p50 per turn, 10,000 display messages", "growth_display_large_ms", "{:.2f} ms"),
        ("  growth ratio (display)", "growth_display_ratio", "{:.2f}"),
        ("p50 per turn, 0 pinned keys", "growth_pinned_small_ms", "{:.2f} ms"),
        ("p50 per turn, 50 pinned keys", "growth_pinned_large_ms", "{:.2f} ms"),
        ("  growth ratio (pinned)", "growth_pinned_ratio", "{:.2f}"),
        ("prompt assembly per turn", "assembly_us", "{:.1f} µs"),
        ("token counting", "tokens_per_s", "{:,.0f} tokens/s"),
        ("token-count cache hit rate", "cache_hit_rate", "{:.1%}"),
        ("in-process turn (no HTTP), gateway only", "inprocess_turn_us", "{:.0f} µs"),
        ("session append+check, 10 KB file", "session_us_10kb", "{:.1f} µs"),
        ("session append+check, 190 KB file", "session_us_190kb", "{:.1f} µs"),
        ("  session ratio", "session_ratio", "{:.2f}"),
        ("peak RSS during load", "peak_rss_mb", "{:.1f} MB"),
        ("RSS after N threads used", "rss_after_threads_mb", "{:.1f} MB"),
        ("  N", "threads_used", "{:,.0f}"),
        ("cold start to healthy /healthz", "cold_start_s", "{:.2f} s"),
        ("channel path x8, durable inbox", "channel_durable_turns_per_s", "{:.0f} turns/s"),
        ("channel path x8, inbox in memory", "channel_volatile_turns_per_s", "{:.0f} turns/s"),
        ("  durable / in memory", "channel_inbox_throughput_ratio", "{:.2f}x"),
        ("channel p50, durable inbox", "channel_durable_p50_ms", "{:.2f} ms"),
        ("channel p50, inbox in memory", "channel_volatile_p50_ms", "{:.2f} ms"),
        ("server CPU per channel turn, durable", "channel_durable_cpu_us", "{:.0f} µs"),
        ("server CPU per channel turn, in memory", "channel_volatile_cpu_us", "{:.0f} µs"),
        ("streaming: first piece to first draft", "streaming_first_preview_ms", "{:.0f} ms"),
        ("server CPU per turn, streaming on", "streaming_cpu_on_us", "{:.0f} µs"),
        ("server CPU per turn, streaming off", "streaming_cpu_off_us", "{:.0f} µs"),
    ]
    results = verdicts(figures)
    for label, key, fmt in rows:
        if key in figures:
            mark = ""
            if key in results:
                op, bound = TARGETS[key]
                mark = f"   target {op} {bound}: {'ok' if results[key] else 'MISSED'}"
            print(f"{label:<42}{fmt.format(figures[key]):>18}{mark}")


async def run(quick: bool) -> dict[str, Any]:
    """Every section, in one run."""
    figures: dict[str, Any] = {"quick": quick, "machine": platform.machine(),
                               "cores": os.cpu_count(), "python": platform.python_version(),
                               "when": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    with tempfile.TemporaryDirectory(prefix="cloudybot-bench-") as name:
        tmp = Path(name)
        figures.update(await throughput(quick, tmp))
        figures.update(await growth.run(quick, tmp))
        figures.update(await assembly.run(quick, tmp))
        figures.update(sessions.run())
        figures.update(await threads_memory(quick, tmp))
        figures["cold_start_s"] = cold_start(tmp, 3 if quick else 5)
        figures.update(await channel.run(quick, tmp))
        figures.update(await streaming.run(quick, tmp))
    return figures


def main() -> int:
    """Run the benchmark; print the table; write JSON if asked. Never fails on figures."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a smoke run under 60 s")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = parser.parse_args()
    figures = asyncio.run(run(args.quick))
    print_table(figures)
    if args.json:
        Path(args.json).write_text(json.dumps({**figures, "targets": verdicts(figures)},
                                              indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
