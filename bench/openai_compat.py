"""The OpenAI-compatible endpoint's cost (issue 12): ``cloudybot serve``'s CPU per turn through
``POST /v1/chat/completions`` against ``POST /chat``, on the same server at x8, windows
interleaved; the target is at most 1.1x."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from bench.cpu import drive_window, per_worker, warm_up, window_for
from bench.load import MESSAGE, add_user, gateway_env, start_fake_llm, start_serve

CONCURRENCY = 8


def v1_request(thread: str) -> tuple[str, dict[str, Any]]:
    """An OpenAI-shaped turn on ``thread``: what the SDK sends."""
    return "/v1/chat/completions", {
        "model": "bench-model", "metadata": {"thread_id": thread},
        "messages": [{"role": "system", "content": "You are helpful."},
                     {"role": "user", "content": MESSAGE}]}


async def run(quick: bool, tmp: Path) -> dict[str, Any]:
    """CPU per turn of each way in, and their ratio (medians of interleaved rounds)."""
    window = window_for(quick)
    rounds = 1 if quick else 5
    llm, llm_url = start_fake_llm()
    try:
        env = gateway_env(tmp / "openai-compat", "openai", llm_url)
        token = add_user(env)
        server = start_serve(env)
        try:
            await warm_up(server, token, "v1-warm-up")
            chat: list[float] = []
            v1: list[float] = []
            for round_number in range(rounds):
                for which in ("chat", "v1") if round_number % 2 == 0 else ("v1", "chat"):
                    if which == "chat":
                        result = await drive_window(server, token, CONCURRENCY, window,
                                                    per_worker(f"chat-r{round_number}"))
                        chat.append(result.cpu_us_per_turn)
                    else:
                        result = await drive_window(server, token, CONCURRENCY, window,
                                                    per_worker(f"v1-r{round_number}"),
                                                    request_for=v1_request)
                        v1.append(result.cpu_us_per_turn)
        finally:
            server.stop()
    finally:
        llm.stop()
    chat_us, v1_us = statistics.median(chat), statistics.median(v1)
    return {"v1_cpu_us": v1_us, "chat_cpu_us_beside_v1": chat_us,
            "v1_vs_chat_cpu": v1_us / chat_us if chat_us else 0.0}
