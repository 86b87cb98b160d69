"""What the dashboard costs: streamed ``/chat`` turns and the thread view, against ``cloudybot
serve`` as users run it.

- **First delta**: the time from the moment the model's first streamed piece leaves the fake
  LLM to the moment the client reads the first SSE ``delta`` (both in this process, one
  clock), over sequential turns; the median and p95.
- **CPU per streamed turn vs a plain one**: the server's own CPU counters over windows of x4
  turns, streamed (``Accept: text/event-stream``, the provider streaming upstream in 12
  pieces) and plain (JSON, the provider answering at once), interleaved; medians of the rounds
  and their ratio. A third kind, the client streaming but the upstream answering in one piece,
  tells the event stream's own cost from that of reading the upstream's pieces.
- **Thread view**: ``GET /api/threads/{id}`` (the first page, 50 messages) for a thread with
  10,000 display messages and for one with 100, interleaved; client-side time on loopback
  (an upper bound of the server's), medians, and their ratio (flat in the thread's length).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import statistics
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from bench.cpu import server_cpu_seconds
from bench.load import Server, add_user, free_port, gateway_env, start_server
from gateway.testing.fake_llm import completion
from gateway.testing.loopback import LoopbackServer

REPLY = "Streaming lets the reader follow the answer while the model is still writing. " * 4
LONG, SHORT = 10_000, 100


class StreamingLLM:
    """An OpenAI-compatible fake that streams when asked (OpenAI's chunk format, usage last)
    and records when each answer's first content piece was written (``perf_counter``)."""

    def __init__(self) -> None:
        self.first_piece_at: list[float] = []
        self.streams = True  # False: answer a streaming request in one JSON piece
        self.server = LoopbackServer()
        self.url = ""

    async def start(self) -> None:
        """Serve on loopback."""
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle)
        self.url = f"http://127.0.0.1:{await self.server.serve(app)}/v1"

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if body.get("stream") is not True or not self.streams:
            return web.json_response(completion(REPLY, 100, 40))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)

        async def send(delta: dict[str, Any], finish: str | None = None,
                       usage: dict[str, int] | None = None) -> None:
            chunk: dict[str, Any] = {"id": "c", "object": "chat.completion.chunk",
                                     "model": "bench-model", "choices": [] if usage else [
                                         {"index": 0, "delta": delta, "finish_reason": finish}]}
            if usage:
                chunk["usage"] = usage
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())

        await send({"role": "assistant", "content": ""})
        for number, start in enumerate(range(0, len(REPLY), 40)):
            await send({"content": REPLY[start:start + 40]})
            if number == 0:
                self.first_piece_at.append(time.perf_counter())
            await asyncio.sleep(0)  # pieces as separate writes, as a model's arrive
        await send({}, "stop")
        await send({}, usage={"prompt_tokens": 100, "completion_tokens": 40,
                              "total_tokens": 140})
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


def seed_display(database: Path, user_id: str, thread_id: str, count: int) -> None:
    """A dashboard thread of ``user_id`` with ``count`` display messages (the gateway must not
    be running)."""
    now = datetime.now(UTC)
    conn = sqlite3.connect(database)
    try:
        with conn:
            stamp = now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            cursor = conn.execute(
                "INSERT INTO threads (session_key, user_id, thread_id, channel, created_at,"
                " updated_at) VALUES (?, ?, ?, 'dashboard', ?, ?)",
                (f"{user_id}--{thread_id}", user_id, thread_id, stamp, stamp))
            thread = cursor.lastrowid
            conn.executemany(
                "INSERT INTO display_messages (thread, role, content, created_at)"
                " VALUES (?, ?, ?, ?)",
                [(thread, "user" if index % 2 == 0 else "assistant",
                  f"message {index}: " + "words of a conversation " * 8,
                  (now - timedelta(seconds=count - index)).strftime("%Y-%m-%dT%H:%M:%S.%fZ"))
                 for index in range(count)])
    finally:
        conn.close()


async def first_deltas(session: aiohttp.ClientSession, llm: StreamingLLM,
                       turns: int) -> list[float]:
    """Milliseconds from the model's first piece to the client's first delta, per turn."""
    gaps = []
    for index in range(turns):
        async with session.post("/chat", json={"threadId": f"first-{index % 4}",
                                               "message": "hello"},
                                headers={"Accept": "text/event-stream"}) as response:
            first = None
            async for line in response.content:
                if first is None and line.startswith(b"event: delta"):
                    first = time.perf_counter()
            if first is not None and llm.first_piece_at:
                gaps.append((first - llm.first_piece_at[-1]) * 1000)
    return gaps


async def cpu_window(server: Server, session: aiohttp.ClientSession, streamed: bool,
                     turns: int, concurrency: int = 4) -> float:
    """The server's CPU per turn (µs) over ``turns`` turns at ``concurrency``."""
    headers = {"Accept": "text/event-stream"} if streamed else {}
    left = turns

    async def worker(index: int) -> None:
        nonlocal left
        while left > 0:
            left -= 1
            async with session.post("/chat", json={"threadId": f"cpu-{index}",
                                                   "message": "hello"},
                                    headers=headers) as response:
                await response.read()

    before = server_cpu_seconds(server)
    await asyncio.gather(*(worker(index) for index in range(concurrency)))
    return (server_cpu_seconds(server) - before) / turns * 1e6


async def view_times(session: aiohttp.ClientSession, samples: int) -> dict[str, list[float]]:
    """Milliseconds per first-page request of the long and the short thread, interleaved."""
    times: dict[str, list[float]] = {"long": [], "short": []}
    for _ in range(samples):
        for name in times:
            started = time.perf_counter()
            async with session.get(f"/api/threads/{name}", params={"limit": "50"}) as response:
                await response.read()
                assert response.status == 200, response.status
            times[name].append((time.perf_counter() - started) * 1000)
    return times


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))] if ordered else 0.0


async def run(quick: bool, tmp: Path) -> dict[str, Any]:
    """Section 11 of the benchmark."""
    first_turns, window, rounds, samples = (20, 150, 1, 40) if quick else (200, 1000, 5, 300)
    llm = StreamingLLM()
    await llm.start()
    data_dir = tmp / "dashboard"
    server: Server | None = None
    try:
        env = gateway_env(data_dir, "openai", llm.url)
        token = await asyncio.to_thread(add_user, env, "viewer")
        seed_display(data_dir / "cloudybot.sqlite3", "viewer", "long", LONG)
        seed_display(data_dir / "cloudybot.sqlite3", "viewer", "short", SHORT)
        port = free_port()
        # In a thread: the fake on this loop must answer the gateway while it starts.
        server, _ = await asyncio.to_thread(
            start_server, ["-m", "gateway.cli", "serve"], {**env, "CLOUDYBOT_PORT": str(port)},
            port)
        async with aiohttp.ClientSession(
                server.url, headers={"Authorization": f"Bearer {token}"}) as session:
            await cpu_window(server, session, True, 40)  # warm up both paths
            await cpu_window(server, session, False, 40)
            gaps = await first_deltas(session, llm, first_turns)
            cpu: dict[str, list[float]] = {"plain": [], "streamed": [], "sse only": []}
            for _ in range(rounds):
                for kind in cpu:
                    llm.streams = kind != "sse only"
                    cpu[kind].append(await cpu_window(server, session, kind != "plain",
                                                      window))
                llm.streams = True
            views = await view_times(session, samples)
    finally:
        if server is not None:
            server.stop()
        await llm.server.close()
    streamed, plain = statistics.median(cpu["streamed"]), statistics.median(cpu["plain"])
    sse_only = statistics.median(cpu["sse only"])
    long_ms, short_ms = statistics.median(views["long"]), statistics.median(views["short"])
    return {"sse_first_delta_p50_ms": statistics.median(gaps) if gaps else 0.0,
            "sse_first_delta_p95_ms": _p95(gaps),
            "sse_cpu_streamed_us": streamed, "sse_cpu_plain_us": plain,
            "sse_cpu_unstreamed_upstream_us": sse_only,
            "sse_cpu_ratio": streamed / plain if plain else 0.0,
            "thread_view_10000_ms": long_ms, "thread_view_100_ms": short_ms,
            "thread_view_p95_ms": _p95(views["long"]),
            "thread_view_ratio": long_ms / short_ms if short_ms else 0.0}

