"""``python -m bench --soak`` (issue 13): a gateway run long, to see that nothing accumulates.

20,000 turns over 500 threads through one ``cloudybot serve``: ``/chat`` at x8 and, beside it,
Telegram webhook updates from 50 private chats (about one turn in ten) answered through a fake
Bot API, with summarization on (every thread folds every few turns) and session files
rotated at 8 KB (so rotation runs all along). Per window of 1,000 turns: the ``/chat`` p99,
the server's RSS and its open file descriptors. Targets: RSS growth under 10% from the first
window to the last, no growth in descriptors (the second half's peak against the first
half's: connection pools fill up to their peak in the first windows), and no upward trend in
p99 (the median window p99 of the second half against the first half's).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import statistics
import time
from pathlib import Path
from typing import Any

import aiohttp

from bench.channel import MESSAGE as CHANNEL_MESSAGE
from bench.channel import SECRET, TOKEN, FakeBotAPI
from bench.load import MESSAGE, Server, add_user, gateway_env, start_fake_llm, start_serve

TURNS = 20_000
THREADS = 500
CHATS = 50
WINDOW = 1_000
CONCURRENCY = 8
CHANNEL_SHARE = 10  # one channel update per this many /chat turns
ROTATE_AT = 8_000  # session file bytes: a thread's file rotates every dozen turns or so


def open_fds(server: Server) -> int:
    """File descriptors the server process holds open."""
    return len(os.listdir(f"/proc/{server.pid}/fd"))


async def _chat_window(session: aiohttp.ClientSession, token: str, turns: int,
                       threads: itertools.cycle[int]) -> list[float]:
    """``turns`` /chat turns by CONCURRENCY workers, each on the next thread in turn; their
    latencies in ms."""
    latencies: list[float] = []
    left = itertools.count()
    headers = {"Authorization": f"Bearer {token}"}

    async def worker() -> None:
        while next(left) < turns:
            started = time.perf_counter()
            async with session.post("/chat", headers=headers, json={
                    "threadId": f"soak-{next(threads)}", "message": MESSAGE}) as answer:
                await answer.read()
                if answer.status == 200:
                    latencies.append((time.perf_counter() - started) * 1000)
    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return latencies


async def _channel_updates(session: aiohttp.ClientSession, bot: FakeBotAPI, count: int,
                           updates: itertools.count[int], chats: itertools.cycle[int]) -> int:
    """``count`` Telegram updates, one after another, each waiting for its reply."""
    answered = 0
    loop = asyncio.get_running_loop()
    for _ in range(count):
        chat, update_id = next(chats), next(updates)
        waiter: asyncio.Future[None] = loop.create_future()
        bot.waiting[chat] = waiter
        async with session.post("/telegram/webhook", headers={
                "X-Telegram-Bot-Api-Secret-Token": SECRET}, json={
                "update_id": update_id, "message": {
                    "message_id": update_id, "date": int(time.time()), "text": CHANNEL_MESSAGE,
                    "chat": {"id": chat, "type": "private", "first_name": "S"},
                    "from": {"id": chat, "is_bot": False, "first_name": "S"}}}) as response:
            await response.read()
        try:
            await asyncio.wait_for(waiter, 60)
            answered += 1
        except TimeoutError:
            pass
    return answered


async def run(tmp: Path, turns: int = TURNS) -> dict[str, Any]:
    """The soak's figures."""
    bot = FakeBotAPI()
    await bot.start()
    llm, llm_url = start_fake_llm()
    env = {**gateway_env(tmp / "soak", "openai", llm_url), "CLOUDYBOT_DEFAULT_PLAN": "team",
           "SESSION_MAX_FILE_BYTES": str(ROTATE_AT), "CLOUDYBOT_TELEGRAM_TOKEN": TOKEN,
           "CLOUDYBOT_TELEGRAM_API_BASE": bot.base_url,
           "CLOUDYBOT_TELEGRAM_WEBHOOK_SECRET": SECRET}
    token = add_user(env)
    server = await asyncio.to_thread(start_serve, env)  # its getMe is answered on this loop
    windows: list[dict[str, float]] = []
    channel_turns = 0
    try:
        threads = itertools.cycle(range(THREADS))
        chats = itertools.cycle(range(1_000, 1_000 + CHATS))
        updates = itertools.count(1)
        connector = aiohttp.TCPConnector(limit=CONCURRENCY + 1)
        async with aiohttp.ClientSession(server.url, connector=connector) as session:
            # Warm-up: every thread exists, and both paths' connection pools are open.
            warm = asyncio.ensure_future(_channel_updates(session, bot, CHATS, updates, chats))
            await _chat_window(session, token, THREADS, threads)
            channel_turns += await warm
            for _ in range(turns // WINDOW):
                channel = asyncio.ensure_future(_channel_updates(
                    session, bot, WINDOW // CHANNEL_SHARE, updates, chats))
                latencies = await _chat_window(session, token,
                                               WINDOW - WINDOW // CHANNEL_SHARE, threads)
                channel_turns += await channel
                ordered = sorted(latencies) or [0.0]
                windows.append({"p99_ms": ordered[int(0.99 * (len(ordered) - 1))],
                                "rss_mb": server.rss_kib() / 1024, "fds": open_fds(server)})
        archived = tmp / "soak" / "sessions" / "archive"
        rotations = sum(1 for _ in archived.iterdir()) if archived.exists() else 0
    finally:
        server.stop()
        llm.stop()
        await bot.close()
    first, last = windows[0], windows[-1]
    half = len(windows) // 2
    early = statistics.median(w["p99_ms"] for w in windows[:half])
    late = statistics.median(w["p99_ms"] for w in windows[half:])
    return {"soak_turns": float(len(windows) * WINDOW), "soak_channel_turns": float(channel_turns),
            "soak_rss_start_mb": first["rss_mb"], "soak_rss_end_mb": last["rss_mb"],
            "soak_rss_growth": last["rss_mb"] / first["rss_mb"] - 1,
            "soak_fds_start": float(first["fds"]), "soak_fds_end": float(last["fds"]),
            # Pools (the provider's keep-alive connections) fill up to their peak in the first
            # windows; growth is what the second half holds beyond the first half's peak.
            "soak_fds_growth": float(max(w["fds"] for w in windows[len(windows) // 2:])
                                     - max(w["fds"] for w in windows[:len(windows) // 2])),
            "soak_fds_by_window": [w["fds"] for w in windows],
            "soak_p99_first_ms": early, "soak_p99_last_ms": late,
            "soak_p99_trend": late / early if early else 0.0,
            "soak_rotations": float(rotations),
            "soak_p99_by_window_ms": [round(w["p99_ms"], 2) for w in windows]}
