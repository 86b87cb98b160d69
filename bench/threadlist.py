"""``GET /api/threads`` for a user with 40,000 threads, and what it does to chat latency.

The 40,000 threads are written straight into the SQLite database before the gateway starts
(nothing else has it open): rows as a turn leaves them, each with its own ``updated_at`` (one
second apart) and a summary of about 1,000 characters, as a used thread has. Then, against
``cloudybot serve`` with the HTTP fake LLM:

- time per page (client-side, the server otherwise idle) for the first page and for a deep page
  (``before`` = the cursor after 39,500 threads), default ``limit`` (100), interleaved in
  batches; their median and p99, bytes per page, and the server CPU per page request; also
  one walk of the whole list at ``limit=500``;
- p99 of ``/chat`` turns at x8 (the same user, new threads) with and without a concurrent task
  that reads the first page once a second; windows interleaved, latencies of all rounds of
  each kind pooled.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp

from bench.cpu import drive_window, per_worker, server_cpu_seconds, warm_up, window_for
from bench.load import LoadResult, Server, add_user, gateway_env, start_fake_llm, start_serve

USER = "lister"
THREADS = 40_000
DEEP = 39_500
SUMMARY = ("The user is planning the quarterly report with the finance team; the draft is "
           "due on Friday and the figures for the third quarter still need checking. ") * 7


def seed_threads(database: Path, user_id: str, count: int) -> None:
    """``count`` dashboard threads of ``user_id``, updated one second apart (the newest now),
    in one transaction. The gateway must not be running."""
    newest = datetime.now(UTC)
    rows = []
    for index in range(count):
        stamp = (newest - timedelta(seconds=count - index)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        thread = f"l{index:05d}"
        rows.append((f"{user_id}--{thread}", user_id, thread, SUMMARY, len(SUMMARY) // 4,
                     stamp, stamp))
    conn = sqlite3.connect(database)
    try:
        with conn:
            conn.executemany(
                "INSERT INTO threads (session_key, user_id, thread_id, channel, summary,"
                " summary_tokens, created_at, updated_at)"
                " VALUES (?, ?, ?, 'dashboard', ?, ?, ?, ?)", rows)
    finally:
        conn.close()


@dataclass
class Pages:
    """Latencies (ms), bytes and server CPU of page requests of one kind."""

    latencies_ms: list[float] = field(default_factory=list)
    bytes: int = 0
    cpu_seconds: float = 0.0

    def percentile(self, q: float) -> float:
        """The ``q``-th percentile latency (nearest rank), in milliseconds."""
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))] if ordered else 0.0


async def get_page(session: aiohttp.ClientSession, params: dict[str, str]) -> tuple[float, bytes]:
    """One ``GET /api/threads``: milliseconds to the whole body, and the body."""
    started = time.perf_counter()
    async with session.get("/api/threads", params=params) as answer:
        body = await answer.read()
        answer.raise_for_status()
    return (time.perf_counter() - started) * 1000, body


async def walk(session: aiohttp.ClientSession, limit: int) -> tuple[float, list[str]]:
    """Every page in turn; the seconds it took and the ``nextBefore`` after each page."""
    cursors: list[str] = []
    started = time.perf_counter()
    params = {"limit": str(limit)}
    while True:
        _, body = await get_page(session, params)
        cursor = json.loads(body)["nextBefore"]
        if cursor is None:
            return time.perf_counter() - started, cursors
        cursors.append(cursor)
        params = {"limit": str(limit), "before": cursor}


async def page_times(server: Server, token: str, quick: bool) -> dict[str, Any]:
    """First and deep page: time per page, bytes, server CPU per request; the whole walk."""
    batches, batch = (1, 20) if quick else (4, 100)
    async with aiohttp.ClientSession(server.url,
                                     headers={"Authorization": f"Bearer {token}"}) as session:
        walk_s, cursors = await walk(session, 500)
        _, big = await get_page(session, {"limit": "500"})
        kinds = {"first": {}, "deep": {"before": cursors[DEEP // 500 - 1]}}
        pages = {kind: Pages() for kind in kinds}
        for params in kinds.values():  # warm-up
            await get_page(session, params)
        for _ in range(batches):
            for kind, params in kinds.items():
                before = server_cpu_seconds(server)
                for _ in range(batch):
                    elapsed, body = await get_page(session, params)
                    pages[kind].latencies_ms.append(elapsed)
                    pages[kind].bytes = len(body)
                pages[kind].cpu_seconds += server_cpu_seconds(server) - before
    figures: dict[str, Any] = {"threads_listed": THREADS, "threads_walk_s": walk_s,
                               "threads_walk_pages": len(cursors) + 1,
                               "threads_page_500_kb": len(big) / 1024}
    for kind, measured in pages.items():
        figures[f"threads_{kind}_page_p50_ms"] = measured.percentile(50)
        figures[f"threads_{kind}_page_p99_ms"] = measured.percentile(99)
        figures[f"threads_{kind}_page_kb"] = measured.bytes / 1024
        figures[f"threads_{kind}_page_cpu_us"] = (measured.cpu_seconds
                                                  / len(measured.latencies_ms) * 1e6)
    figures["threads_deep_page_ratio"] = (figures["threads_deep_page_p50_ms"]
                                          / figures["threads_first_page_p50_ms"])
    figures["threads_page_ms_p99"] = max(figures["threads_first_page_p99_ms"],
                                         figures["threads_deep_page_p99_ms"])
    return figures


async def chat_with_listing(server: Server, token: str, quick: bool) -> dict[str, Any]:
    """x8 chat p99 without and with the first page read once a second."""
    window = window_for(quick)
    rounds = 1 if quick else 5
    listing_ms: list[float] = []

    async def list_every_second(done: asyncio.Event) -> None:
        async with aiohttp.ClientSession(
                server.url, headers={"Authorization": f"Bearer {token}"}) as session:
            due = time.perf_counter()
            while not done.is_set():
                elapsed, _ = await get_page(session, {})
                listing_ms.append(elapsed)
                due += 1.0
                with contextlib.suppress(TimeoutError):  # the cadence is what is measured
                    await asyncio.wait_for(done.wait(), max(0.0, due - time.perf_counter()))

    await warm_up(server, token, "chat-warm-up")
    runs: dict[str, list[LoadResult]] = {"without": [], "with": []}
    for round_number in range(rounds):
        kinds = ["without", "with"] if round_number % 2 == 0 else ["with", "without"]
        for kind in kinds:
            prefix = f"chat-{kind}-{round_number}"
            runs[kind].append(await drive_window(
                server, token, 8, window, per_worker(prefix),
                list_every_second if kind == "with" else None))
    figures: dict[str, Any] = {}
    for kind, measured in runs.items():
        pooled = LoadResult(latencies_ms=[ms for run in measured for ms in run.latencies_ms])
        figures[f"listing_{kind}_p50_ms"] = pooled.p50
        figures[f"listing_{kind}_p99_ms"] = pooled.percentile(99)
        figures[f"listing_{kind}_max_ms"] = max(pooled.latencies_ms)
        figures[f"listing_{kind}_turns"] = float(len(pooled.latencies_ms))
        figures[f"listing_{kind}_errors"] = float(sum(run.errors for run in measured))
    figures["threads_listing_p99_ratio"] = (figures["listing_with_p99_ms"]
                                            / figures["listing_without_p99_ms"])
    figures["listing_requests"] = float(len(listing_ms))
    figures["listing_request_max_ms"] = max(listing_ms) if listing_ms else 0.0
    return figures


async def run(quick: bool, tmp: Path) -> dict[str, Any]:
    """Both parts against one ``cloudybot serve``."""
    data_dir = tmp / "threadlist"
    llm, llm_url = start_fake_llm()
    server: Server | None = None
    try:
        env = gateway_env(data_dir, "openai", llm_url)
        token = add_user(env, USER)
        seed_threads(data_dir / "cloudybot.sqlite3", USER, THREADS)
        server = start_serve(env)
        figures = await page_times(server, token, quick)
        figures.update(await chat_with_listing(server, token, quick))
    finally:
        if server is not None:
            server.stop()
        llm.stop()
    return figures
