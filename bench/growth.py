"""Does a turn cost more on a long thread? 10 vs 10,000 display messages, 0 vs 50 pinned keys."""

from __future__ import annotations

import sqlite3
import statistics
import time
from pathlib import Path
from typing import Any

import aiohttp

from bench.load import MESSAGE, add_user, gateway_env, start_gateway

MESSAGE_BYTES = 4096
LARGE = 10_000


def populate(database: Path, user_id: str, large: int) -> None:
    """Threads g-small (10 display messages) and g-large (``large``), g-pins0 and g-pins50."""
    conn = sqlite3.connect(database)
    now = "2026-01-01T00:00:00.000000Z"
    with conn:
        for name, count in (("g-small", 10), ("g-large", large), ("g-pins0", 10),
                            ("g-pins50", 10)):
            cursor = conn.execute(
                "INSERT INTO threads (session_key, user_id, thread_id, channel, created_at,"
                " updated_at) VALUES (?, ?, ?, 'dashboard', ?, ?)",
                (f"{user_id}--{name}", user_id, name, now, now))
            thread = cursor.lastrowid
            body = "x" * MESSAGE_BYTES
            conn.executemany(
                "INSERT INTO display_messages (thread, role, content, created_at)"
                " VALUES (?, ?, ?, ?)",
                ((thread, "user" if i % 2 == 0 else "assistant", body, now)
                 for i in range(count)))
            if name == "g-pins50":
                conn.executemany(
                    "INSERT INTO pinned (thread, key, value, updated_at) VALUES (?, ?, ?, ?)",
                    ((thread, f"fact_{i:02d}", f"The value of fact number {i} is a sentence "
                      f"long enough to matter, about {i * 7} things.", now) for i in range(50)))
    conn.close()


async def _latencies(url: str, token: str, threads: list[str],
                     turns: int) -> dict[str, list[float]]:
    latencies: dict[str, list[float]] = {thread: [] for thread in threads}
    async with aiohttp.ClientSession(url, headers={"Authorization": f"Bearer {token}"}) as s:
        for _ in range(turns):
            for thread in threads:  # interleaved, so drift hits every thread alike
                started = time.perf_counter()
                async with s.post("/chat", json={"threadId": thread, "message": MESSAGE}) as r:
                    await r.read()
                    assert r.status == 200, await r.text()
                latencies[thread].append((time.perf_counter() - started) * 1000)
    return latencies


async def run(quick: bool, tmp: Path) -> dict[str, Any]:
    """p50 latency per thread and the growth ratios."""
    data_dir = tmp / "gateway-growth"
    env = gateway_env(data_dir, "inprocess")
    token = add_user(env, "grower")
    populate(data_dir / "cloudybot.sqlite3", "grower", LARGE)
    server = start_gateway(env, data_dir)
    try:
        threads = ["g-small", "g-large", "g-pins0", "g-pins50"]
        await _latencies(server.url, token, threads, 5)  # warm up every thread
        latencies = await _latencies(server.url, token, threads, 60 if quick else 300)
    finally:
        server.stop()
    p50 = {thread: statistics.median(values) for thread, values in latencies.items()}
    return {
        "growth_display_messages": LARGE,
        "growth_display_small_ms": p50["g-small"], "growth_display_large_ms": p50["g-large"],
        "growth_display_ratio": p50["g-large"] / p50["g-small"],
        "growth_pinned_small_ms": p50["g-pins0"], "growth_pinned_large_ms": p50["g-pins50"],
        "growth_pinned_ratio": p50["g-pins50"] / p50["g-pins0"],
    }
