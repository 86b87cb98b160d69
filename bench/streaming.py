"""Streaming overhead on the channel path: Telegram private chats, an OpenAI-compatible model
on loopback that writes its answer in pieces over about a second.

Two gateways run side by side: channel streaming on (message drafts grow while the model
writes) and off (the reply is sent when done). Reported: the time from the model's first piece
to the first draft at the fake Bot API (by design about one preview interval, 1 s), and the
server CPU per turn of each, from the process's own counters, pooled over interleaved rounds.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path

from bench.channel import SECRET, TOKEN, FakeBotAPI, drive_channel
from bench.cpu import server_cpu_seconds
from bench.load import Server, free_port, gateway_env, start_server
from gateway.testing.fake_llm import FakeLLM, Recorded, Scripted, completion

REPLY = ("Streaming lets the reader follow the answer while the model is still writing it. "
         * 8)
PIECE_CHARS = 24
PIECE_DELAY = 0.04  # about 28 pieces over 1.1 s


async def run(quick: bool, tmp: Path) -> dict[str, float]:
    """Section 9 of the benchmark."""
    chats, turns_each, rounds = (4, 2, 1) if quick else (8, 5, 3)
    first_pieces: list[float] = []  # when each request's first piece was due, this run

    def write_slowly(request: Recorded) -> Scripted:
        first_pieces.append(time.perf_counter() + PIECE_DELAY)
        if request.body.get("stream"):
            return Scripted(body=completion(REPLY, 120, 200), piece_chars=PIECE_CHARS,
                            piece_delay=PIECE_DELAY)
        pieces = len(REPLY) // PIECE_CHARS + 1  # the same writing time, answered at the end
        return Scripted(body=completion(REPLY, 120, 200), delay=pieces * PIECE_DELAY)

    llm, bot = FakeLLM(), FakeBotAPI()
    llm.responder = write_slowly
    await llm.start()
    await bot.start()
    servers: dict[str, Server] = {}
    try:
        for variant, streaming in (("on", "true"), ("off", "false")):
            data_dir = tmp / f"streaming-{variant}"
            env = {**gateway_env(data_dir, "openai", llm.url), "CLOUDYBOT_TELEGRAM_TOKEN": TOKEN,
                   "CLOUDYBOT_TELEGRAM_API_BASE": bot.base_url,
                   "CLOUDYBOT_TELEGRAM_WEBHOOK_SECRET": SECRET,
                   "CLOUDYBOT_DEFAULT_PLAN": "team", "CLOUDYBOT_CHANNEL_STREAMING": streaming}
            port = free_port()
            # In a thread: the fakes on this loop must answer the gateway while it starts.
            servers[variant], _ = await asyncio.to_thread(
                start_server, ["-m", "bench.server", str(data_dir), str(port)], env, port)
        cpu: dict[str, list[tuple[float, int]]] = {"on": [], "off": []}  # (seconds, turns)
        first_preview_ms: list[float] = []
        update = 10_000_000
        for _ in range(rounds):
            for variant, server in servers.items():
                bot.first_draft.clear()
                first_pieces.clear()
                before = server_cpu_seconds(server)
                result = await drive_channel(server, bot, chats, turns_each, update)
                update += 100_000
                cpu[variant].append((server_cpu_seconds(server) - before, result.turns))
                if variant == "on":
                    first_preview_ms.extend(_first_previews(bot, first_pieces, chats))
    finally:
        for server in servers.values():
            server.stop()
        await bot.close()
        await llm.close()
    # pooled over the rounds: a round's few turns would measure in whole clock ticks
    on, off = (sum(seconds for seconds, _ in cpu[variant]) * 1e6
               / max(1, sum(turns for _, turns in cpu[variant])) for variant in ("on", "off"))
    return {"streaming_first_preview_ms": statistics.median(first_preview_ms)
            if first_preview_ms else 0.0,
            "streaming_cpu_on_us": on, "streaming_cpu_off_us": off,
            "streaming_cpu_ratio": on / off if off else 0.0}


def _first_previews(bot: FakeBotAPI, first_pieces: list[float], chats: int) -> list[float]:
    """Milliseconds from the model's first piece to the first draft, for each chat's first
    turn of the run (those calls start together, so the earliest pieces and drafts pair up)."""
    firsts = sorted(first_pieces)[:chats]
    drafts = sorted(bot.first_draft.values())
    return [(draft - piece) * 1000 for draft, piece in zip(drafts, firsts, strict=False)]
