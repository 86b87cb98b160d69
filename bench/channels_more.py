"""The Slack and Discord channel paths, end to end, as bench/channel.py measures Telegram's.

Slack: signed Events API ``message`` (DM) and ``app_mention`` events are POSTed to
``/slack/events`` of a gateway configured against the fake Slack Web API
(gateway/testing/slack.py); a turn ends when its reply reaches the fake's
``chat.postMessage``.

Discord: the fake Discord (gateway/testing/discord.py, REST and Gateway websocket, in this
process) dispatches ``MESSAGE_CREATE`` DMs and mentions to the gateway's discord.py client; a
turn ends when its reply reaches the fake's ``POST /channels/{id}/messages``.

Slack's Markdown → mrkdwn conversion of one full chunk (3,900 characters of a typical answer:
headings, lists, code, links, emphasis) is timed in this process: ``mrkdwn_3900_ms``, the median
of 200 conversions.

Each: x8 conversations (one per worker), each sending its next message once its reply
arrived; the server's own CPU per turn, and beside it, in the same rounds, on the same server,
a ``/chat`` turn's at x8: ``slack_vs_chat_cpu`` and ``discord_vs_chat_cpu``.
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
import sys
import time
import traceback
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from bench.cpu import Window, drive_window, per_worker, server_cpu_seconds
from bench.load import LoadResult, Server, add_user, free_port, gateway_env, start_server
from gateway.testing import discord as fake_discord
from gateway.testing import slack as fake_slack

MESSAGE = "Please remember that the quarterly report is due on Friday, and remind me later."
CONCURRENCY = 8


# --- Slack ------------------------------------------------------------------------------------
ANSWER_PARAGRAPH = (
    "## Step {n}: configure the **service**\n\n"
    "Open `config.toml` and set the *timeout* to 30 s; see [the docs](https://example.com/docs?"
    "page={n}&lang=en) for ~~old~~ every option. Note that a < b && c > d.\n\n"
    "- first, check the `PATH`\n- then restart:\n  - on Linux: `systemctl restart app`\n"
    "  - elsewhere: run it again\n\n"
    "```python\nfor item in items:\n    print(item, file=sys.stderr)\n```\n\n"
    "> A quoted **remark** that runs over\n> two lines.\n\n")


def mrkdwn_chunk(size: int = 3900) -> str:
    """A typical answer's Markdown, ``size`` characters long (a chunk as the channel cuts it)."""
    text, n = "", 1
    while len(text) < size:
        text += ANSWER_PARAGRAPH.format(n=n)
        n += 1
    return text[:size]


def time_mrkdwn(conversions: int) -> dict[str, float]:
    """The median time of converting one 3,900-character chunk to Slack mrkdwn."""
    from channels.slack.mrkdwn import to_mrkdwn

    chunk = mrkdwn_chunk()
    times = []
    for _ in range(conversions):
        began = time.perf_counter()
        to_mrkdwn(chunk)
        times.append(time.perf_counter() - began)
    return {"mrkdwn_3900_ms": statistics.median(times) * 1000}


class BenchSlack(fake_slack.FakeSlack):
    """The fake Slack; a ``chat.postMessage`` resolves its channel's waiter. Calls are not
    kept (a long run would only grow the list)."""

    def __init__(self) -> None:
        super().__init__(fake_slack.TOKEN)
        self.waiting: dict[str, asyncio.Future[None]] = {}

    async def _handle(self, request: web.Request) -> web.Response:
        answer = await super()._handle(request)
        call = self.calls.pop() if self.calls else None
        if call is not None and call.method == "chat.postMessage":
            waiter = self.waiting.pop(str(call.params.get("channel")), None)
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
        return answer


async def drive_slack(server: Server, slack: BenchSlack, turns_each: int,
                      first: int) -> LoadResult:
    """Workers 0-5 DM the bot (``message``, ``channel_type`` im), 6-7 mention it in a channel
    (``app_mention``); each waits for its reply at ``chat.postMessage``."""
    result = LoadResult()
    ids = itertools.count(first)
    connector = aiohttp.TCPConnector(limit=CONCURRENCY)
    async with aiohttp.ClientSession(server.url, connector=connector) as session:
        async def worker(index: int) -> None:
            loop = asyncio.get_running_loop()
            user = f"U0BENCH{index:04d}"
            mention = index >= 6
            channel = f"C0BENCH{index:04d}" if mention else f"D0BENCH{index:04d}"
            for _ in range(turns_each):
                n = next(ids)
                ts = f"{int(time.time())}.{n:06d}"
                if mention:
                    event = {"type": "app_mention", "user": user, "ts": ts, "event_ts": ts,
                             "text": f"<@{fake_slack.BOT_USER_ID}> {MESSAGE}",
                             "team": fake_slack.TEAM_ID, "channel": channel}
                else:
                    event = {"type": "message", "user": user, "ts": ts, "event_ts": ts,
                             "text": MESSAGE, "team": fake_slack.TEAM_ID, "channel": channel,
                             "channel_type": "im"}
                body = fake_slack.event_body(event, f"Ev0BENCH{n}")
                waiter: asyncio.Future[None] = loop.create_future()
                slack.waiting[channel] = waiter
                started = time.perf_counter()
                async with session.post("/slack/events", data=body,
                                        headers=fake_slack.sign(fake_slack.SIGNING_SECRET,
                                                                body)) as answer:
                    await answer.read()
                    if answer.status != 200:
                        result.errors += 1
                        continue
                await asyncio.wait_for(waiter, 30)
                result.latencies_ms.append((time.perf_counter() - started) * 1000)

        started = time.perf_counter()
        await asyncio.gather(*(worker(i) for i in range(CONCURRENCY)))
        result.seconds = time.perf_counter() - started
    result.turns = CONCURRENCY * turns_each
    return result


# --- Discord ----------------------------------------------------------------------------------
class BenchDiscord(fake_discord.FakeDiscord):
    """The fake Discord; a bot message resolves its channel's waiter. Messages are not kept
    once answered (a long run would only grow them)."""

    def __init__(self) -> None:
        super().__init__(fake_discord.TOKEN)
        self.waiting: dict[int, asyncio.Future[None]] = {}

    async def _create_message(self, request: web.Request, body: Any) -> web.Response:
        answer = await super()._create_message(request, body)
        if answer.status == 200:
            channel_id = int(request.match_info["channel"])
            waiter = self.waiting.pop(channel_id, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
        self.calls.clear()
        self.sent.clear()
        return answer


async def drive_discord(discord: BenchDiscord, turns_each: int) -> LoadResult:
    """Workers 0-5 DM the bot (each its own user), 6-7 mention it in #general and #random;
    each waits for its reply at ``POST /channels/{id}/messages``."""
    result = LoadResult()
    guild_channels = [fake_discord.CHANNEL_ID, fake_discord.OTHER_CHANNEL_ID]

    async def worker(index: int) -> None:
        loop = asyncio.get_running_loop()
        author = fake_discord.USER_ID + 1000 + index
        for _ in range(turns_each):
            waiter: asyncio.Future[None] = loop.create_future()
            started = time.perf_counter()
            if index >= 6:
                channel = guild_channels[index - 6]
                discord.waiting[channel] = waiter
                sent = await discord.message(f"<@{fake_discord.BOT_ID}> {MESSAGE}",
                                             channel_id=channel, author=author)
            else:
                channel = discord._dm_of(author)
                discord.waiting[channel] = waiter
                sent = await discord.message(MESSAGE, channel_id=channel, author=author)
            try:
                await asyncio.wait_for(waiter, 30)
            except TimeoutError:
                result.errors += 1
                continue
            finally:
                discord.messages.pop(int(sent["id"]), None)
            result.latencies_ms.append((time.perf_counter() - started) * 1000)

    started = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(CONCURRENCY)))
    result.seconds = time.perf_counter() - started
    result.turns = CONCURRENCY * turns_each
    return result


# --- both -------------------------------------------------------------------------------------
async def _measure(name: str, quick: bool, tmp: Path, env_extra: dict[str, str],
                   ready: Callable[[], Awaitable[None]],
                   drive: Callable[[Server, int, int], Awaitable[LoadResult]],
                   ) -> dict[str, float]:
    """One gateway with the channel configured; rounds of a ``/chat`` window and a channel run
    of as many turns; the median round's figures."""
    turns_each = 25 if quick else 150
    rounds = 1 if quick else 3
    data_dir = tmp / f"channel-{name}"
    env = {**gateway_env(data_dir, "inprocess"), **env_extra,
           "NO_PROXY": "127.0.0.1,localhost",
           "CLOUDYBOT_DEFAULT_PLAN": "team"}  # channel senders: no rate limit
    chat_token = await asyncio.to_thread(add_user, env)
    port = free_port()
    # In a thread: the fake on this loop must answer the gateway while it starts.
    server, _ = await asyncio.to_thread(
        start_server, ["-m", "bench.server", str(data_dir), str(port)], env, port)
    runs: list[tuple[LoadResult, float]] = []
    chat_cpu: list[float] = []
    try:
        await ready()
        first = 10_000
        for round_number in range(rounds):
            chat = await drive_window(server, chat_token, CONCURRENCY,
                                      Window(60.0, CONCURRENCY * turns_each),
                                      per_worker(f"{name}-chat-r{round_number}"))
            chat_cpu.append(chat.cpu_us_per_turn)
            await drive(server, 2, first)  # warm-up
            first += 100_000
            cpu_before = server_cpu_seconds(server)
            result = await drive(server, turns_each, first)
            first += 100_000
            runs.append((result, (server_cpu_seconds(server) - cpu_before)
                         / max(1, result.turns)))
    finally:
        server.stop()
    runs.sort(key=lambda pair: pair[0].per_second)
    result, cpu = runs[len(runs) // 2]
    chat_us = statistics.median(chat_cpu)
    return {f"{name}_turns_per_s": result.per_second, f"{name}_p50_ms": result.p50,
            f"{name}_cpu_us": cpu * 1e6, f"{name}_errors": float(result.errors),
            f"chat_cpu_us_beside_{name}": chat_us,
            f"{name}_vs_chat_cpu": cpu * 1e6 / chat_us if chat_us else 0.0}


async def _guarded(name: str, work: Callable[[], Awaitable[dict[str, float]]]
                   ) -> dict[str, Any]:
    """The section's figures, or (CI's smoke run must not fail) a note that it failed."""
    try:
        return await work()
    except Exception:  # reported, never fatal: CI's smoke run must pass
        print(f"bench: {name} channel path failed:\n{traceback.format_exc()}",
              file=sys.stderr, flush=True)
        return {f"{name}_failed": 1.0}


async def run_slack(quick: bool, tmp: Path) -> dict[str, Any]:
    """The Slack channel path."""
    async def work() -> dict[str, float]:
        slack = BenchSlack()
        await slack.start()
        try:
            async def ready() -> None:
                pass

            async def drive(server: Server, turns_each: int, first: int) -> LoadResult:
                return await drive_slack(server, slack, turns_each, first)

            conversion = time_mrkdwn(20 if quick else 200)
            return conversion | await _measure("slack", quick, tmp, {
                "CLOUDYBOT_SLACK_BOT_TOKEN": fake_slack.TOKEN,
                "CLOUDYBOT_SLACK_SIGNING_SECRET": fake_slack.SIGNING_SECRET,
                "CLOUDYBOT_SLACK_API_BASE": slack.base_url}, ready, drive)
        finally:
            await slack.close()
    return await _guarded("slack", work)


async def run_discord(quick: bool, tmp: Path) -> dict[str, Any]:
    """The Discord channel path."""
    async def work() -> dict[str, float]:
        discord = BenchDiscord()
        await discord.start()
        try:
            async def ready() -> None:
                await discord.wait_until_ready(timeout=20.0)

            async def drive(server: Server, turns_each: int, first: int) -> LoadResult:
                return await drive_discord(discord, turns_each)

            return await _measure("discord", quick, tmp, {
                "CLOUDYBOT_DISCORD_BOT_TOKEN": fake_discord.TOKEN,
                "CLOUDYBOT_DISCORD_API_BASE": discord.api_base}, ready, drive)
        finally:
            await discord.close()
    return await _guarded("discord", work)
