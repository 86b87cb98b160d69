"""The channel path: Telegram webhook updates in, replies out to a fake Bot API, end to end.

Two gateways run side by side on the in-process provider: the real one, and one whose durable
inbox and outbox are replaced by memory (``VolatileInboxStore``, bench-only). Each worker is one
private chat: it posts an update to ``/telegram/webhook`` and waits until the fake Bot API got
the reply, then sends the next. Rounds are interleaved; the median round counts. The inbox's
cost is how much throughput and server CPU per turn the durable one gives up.

Beside them, in the same rounds, the durable gateway also answers ``POST /chat`` turns at x8
(the same process, provider and settings): a Telegram channel turn's server CPU over a
``/chat`` turn's is what the channel itself costs (``channel_vs_chat_cpu``).
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from bench.cpu import Window, drive_window, per_worker, server_cpu_seconds
from bench.load import LoadResult, Server, add_user, free_port, gateway_env, start_server
from gateway.store import InboxEntry, TurnCommit, TurnWritten
from gateway.store.sqlite import SQLiteStore
from gateway.testing.loopback import LoopbackServer

TOKEN = "123456:BENCH-token"
SECRET = "bench-webhook-secret"
MESSAGE = "Please remember that the quarterly report is due on Friday, and remind me later."


class VolatileInboxStore(SQLiteStore):
    """The SQLite store with the inbox and outbox in memory: what the channel path would
    cost without durability. For the benchmark's comparison only."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._seen: set[tuple[str, str]] = set()
        self._ids = itertools.count(1)

    async def inbox_add(self, entry: InboxEntry, answered: bool = False) -> int | None:
        """Remember the id in memory only."""
        key = (entry.channel, entry.message_id)
        if key in self._seen:
            return None
        self._seen.add(key)
        return next(self._ids)

    async def commit_turn(self, commit: TurnCommit) -> TurnWritten:
        """The turn without its inbox and outbox rows."""
        return await super().commit_turn(TurnCommit(commit.ref, commit.billed_user,
                                                    commit.messages, commit.charges))

    async def answer_inbox(self, channel: str, message_id: str, reply: str) -> bool:
        """Nothing to write."""
        return True

    async def delivery_progress(self, channel: str, message_id: str, chunks_sent: int) -> None:
        """Nothing to write."""

    async def delivery_finished(self, channel: str, message_id: str,
                                error: str | None = None) -> None:
        """Nothing to write."""


class FakeBotAPI:
    """Just enough of the Bot API for the gateway; a sendMessage resolves its chat's waiter."""

    def __init__(self) -> None:
        self.waiting: dict[int, asyncio.Future[None]] = {}
        self.first_draft: dict[int, float] = {}  # chat -> when its first draft arrived
        self._server = LoopbackServer()
        self._message_ids = itertools.count(1)
        self.base_url = ""

    async def _handle(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        params = dict(await request.post())
        if method == "getMe":
            result: Any = {"id": 1, "is_bot": True, "first_name": "Bench",
                           "username": "bench_bot", "can_join_groups": True,
                           "can_read_all_group_messages": False,
                           "supports_inline_queries": False}
        elif method == "sendMessage":
            chat = int(str(params["chat_id"]))
            result = {"message_id": next(self._message_ids), "date": int(time.time()),
                      "chat": {"id": chat, "type": "private"}, "text": params.get("text", "")}
            waiter = self.waiting.pop(chat, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
        else:
            if method == "sendMessageDraft":  # a preview while the model writes
                self.first_draft.setdefault(int(str(params["chat_id"])), time.perf_counter())
            result = True
        return web.json_response({"ok": True, "result": result})

    async def start(self) -> None:
        """Listen on loopback."""
        app = web.Application()
        app.router.add_post("/bot{token}/{method}", self._handle)
        port = await self._server.serve(app)
        self.base_url = f"http://127.0.0.1:{port}/bot"

    async def close(self) -> None:
        """Stop listening."""
        await self._server.close()


async def drive_channel(server: Server, bot: FakeBotAPI, concurrency: int, turns_each: int,
                        first_update: int) -> LoadResult:
    """``concurrency`` chats, each posting ``turns_each`` updates one after another, each
    waiting for its reply at the fake Bot API."""
    result = LoadResult()
    updates = itertools.count(first_update)
    headers = {"X-Telegram-Bot-Api-Secret-Token": SECRET}
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(server.url, connector=connector,
                                     headers=headers) as session:
        async def worker(chat: int) -> None:
            loop = asyncio.get_running_loop()
            for _ in range(turns_each):
                update_id = next(updates)
                started = time.perf_counter()
                waiter: asyncio.Future[None] = loop.create_future()
                bot.waiting[chat] = waiter
                update = {"update_id": update_id, "message": {
                    "message_id": update_id, "date": int(time.time()), "text": MESSAGE,
                    "chat": {"id": chat, "type": "private", "first_name": "B"},
                    "from": {"id": chat, "is_bot": False, "first_name": "B"}}}
                async with session.post("/telegram/webhook", json=update) as answer:
                    await answer.read()
                    if answer.status != 200:
                        result.errors += 1
                        continue
                await asyncio.wait_for(waiter, 30)
                result.latencies_ms.append((time.perf_counter() - started) * 1000)

        started = time.perf_counter()
        await asyncio.gather(*(worker(first_update + i) for i in range(concurrency)))
        result.seconds = time.perf_counter() - started
    result.turns = concurrency * turns_each
    return result


async def run(quick: bool, tmp: Path) -> dict[str, float]:
    """Channel-path throughput, latency and server CPU per turn, durable vs volatile inbox;
    and the durable gateway's CPU per ``/chat`` turn beside it."""
    # bench.server lifts the Telegram channel's pacing (30 messages a second): the fake Bot
    # API has no limits, and paced sends would hide what the inbox costs.
    concurrency, turns_each = 8, (25 if quick else 150)
    rounds = 1 if quick else 3
    bot = FakeBotAPI()
    await bot.start()
    servers: dict[str, Server] = {}
    chat_token = ""
    try:
        for variant in ("durable", "volatile"):
            data_dir = tmp / f"channel-{variant}"
            env = {**gateway_env(data_dir, "inprocess"), "CLOUDYBOT_TELEGRAM_TOKEN": TOKEN,
                   "CLOUDYBOT_TELEGRAM_API_BASE": bot.base_url,
                   "CLOUDYBOT_TELEGRAM_WEBHOOK_SECRET": SECRET,
                   "CLOUDYBOT_DEFAULT_PLAN": "team"}  # channel senders: no rate limit
            if variant == "durable":  # its /chat turns: an account of the same plan
                chat_token = await asyncio.to_thread(add_user, env)
            port = free_port()
            args = ["-m", "bench.server", str(data_dir), str(port)]
            # In a thread: the fake Bot API on this loop must answer the gateway's getMe.
            servers[variant], _ = await asyncio.to_thread(
                start_server, [*args, "--volatile-inbox"] if variant == "volatile" else args,
                env, port)
        runs: dict[str, list[tuple[LoadResult, float]]] = {}
        chat_cpu: list[float] = []
        chat_window = Window(60.0, concurrency * turns_each)  # as many turns as a channel run
        first_update = 10_000
        for round_number in range(rounds):
            chat = await drive_window(servers["durable"], chat_token, concurrency, chat_window,
                                      per_worker(f"chat-r{round_number}"))
            chat_cpu.append(chat.cpu_us_per_turn)
            for variant, server in servers.items():
                await drive_channel(server, bot, concurrency, 2, first_update)  # warm-up
                first_update += 100_000
                cpu_before = server_cpu_seconds(server)
                result = await drive_channel(server, bot, concurrency, turns_each,
                                             first_update)
                first_update += 100_000
                cpu_per_turn = (server_cpu_seconds(server) - cpu_before) / max(1, result.turns)
                runs.setdefault(variant, []).append((result, cpu_per_turn))
    finally:
        for server in servers.values():
            server.stop()
        await bot.close()
    figures: dict[str, float] = {}
    for variant, measured in runs.items():
        measured.sort(key=lambda pair: pair[0].per_second)
        result, cpu = measured[len(measured) // 2]
        figures[f"channel_{variant}_turns_per_s"] = result.per_second
        figures[f"channel_{variant}_p50_ms"] = result.p50
        figures[f"channel_{variant}_cpu_us"] = cpu * 1e6
        figures[f"channel_{variant}_errors"] = float(result.errors)
    figures["channel_inbox_throughput_ratio"] = (figures["channel_durable_turns_per_s"]
                                                 / figures["channel_volatile_turns_per_s"])
    chat_us = statistics.median(chat_cpu)
    figures["chat_cpu_us_beside_channel"] = chat_us
    figures["channel_vs_chat_cpu"] = figures["channel_durable_cpu_us"] / chat_us if chat_us \
        else 0.0
    return figures
