"""Prompt assembly and the whole turn without HTTP, in this process."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

from bench import inprocess
from gateway import Gateway
from gateway.base.tokens import TokenCounter
from gateway.config.settings import load_settings
from gateway.plugins.manager import make_plugin_manager
from gateway.store import StoredMessage, ThreadRef
from gateway.turn.prompt import PromptInputs, assemble

SENTENCE = ("The committee reviewed the budget for the third quarter and agreed to move the "
            "launch of the new service to the week after the conference in Lisbon. ")


def tokens_per_second(counter: TokenCounter) -> float:
    """Raw counting speed on text never seen before."""
    text = "".join(f"{SENTENCE} Item {i}. " for i in range(20_000))  # ~3 MB
    started = time.perf_counter()
    tokens = len(counter.encoding.encode_ordinary(text))
    return tokens / (time.perf_counter() - started)


def assembly_us(counter: TokenCounter, rounds: int) -> float:
    """One turn's prompt assembly: 5 recent messages, 10 pinned keys, a summary."""
    recent = [StoredMessage(i, "user" if i % 2 == 0 else "assistant", SENTENCE * 3,
                            counter.count(SENTENCE * 3)) for i in range(5)]
    inputs = PromptInputs(
        instructions="You are CloudyBot.", model="bench", pinned={
            f"key{i}": f"value number {i}" for i in range(10)},
        specialist=None, summary=SENTENCE * 6, credentials=(), session_rotated=False,
        sections=(), recent=recent, user_message="next question", user_tokens=3)
    started = time.perf_counter()
    for index in range(rounds):
        assemble(dataclasses.replace(inputs, user_message=f"question {index}"), counter, 8000)
    return (time.perf_counter() - started) / rounds * 1e6


async def inprocess_turns(tmp: Path, turns: int) -> tuple[float, float]:
    """Mean µs of a whole turn through ``Gateway.chat`` (no HTTP), and the cache hit rate."""
    settings = load_settings(None, env={"CLOUDYBOT_DATA_DIR": str(tmp / "inprocess-turns"),
                                        "CLOUDYBOT_LLM_PROVIDER": "inprocess",
                                        "CLOUDYBOT_PURGE_INTERVAL_MINUTES": "0"})
    pm = make_plugin_manager()
    pm.register(inprocess, name="inprocess")
    async with Gateway(settings, pm) as gateway:
        await gateway.accounts.add_user("bench", plan="team", credits=10**9)
        refs: list[ThreadRef] = [await gateway.resolve_thread("bench", f"t{i}")
                                 for i in range(4)]
        for ref in refs:
            await gateway.chat("bench", ref, "warm up")
        await gateway.drain()
        hits, misses = gateway.counter.hits, gateway.counter.misses
        started = time.perf_counter()
        for index in range(turns):
            await gateway.chat("bench", refs[index % len(refs)], f"{SENTENCE} number {index}")
        await gateway.drain()
        elapsed = time.perf_counter() - started
        hit = gateway.counter.hits - hits
        miss = gateway.counter.misses - misses
    return elapsed / turns * 1e6, hit / max(1, hit + miss)


async def run(quick: bool, tmp: Path) -> dict[str, Any]:
    """Figures of section 4."""
    counter = TokenCounter.for_encoding("cl100k_base")
    turn_us, hit_rate = await inprocess_turns(tmp, 300 if quick else 2000)
    return {"tokens_per_s": tokens_per_second(counter),
            "assembly_us": assembly_us(counter, 2000 if quick else 20_000),
            "inprocess_turn_us": turn_us, "cache_hit_rate": hit_rate}
