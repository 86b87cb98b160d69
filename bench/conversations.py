"""Does a turn cost more when many conversations are active? 100 vs 2,000 vs 10,000.

One ``cloudybot serve`` (HTTP fake LLM) holds 10,000 conversations of one user, each with a
~150 KB session file. Each file is what a long conversation leaves: the header, then about
150 KB of earlier turns (user, assistant and usage events shaped as the gateway writes them,
long since folded into the summary, so older than anything in rolling memory: ``messageId``
0), then the conversation's real turns, sent through ``/chat`` (1 to 5 per conversation, so
that the summarization every few turns falls evenly over the measured turns). The files are
written before each conversation's first turn, with the server idle.

Then ``/chat`` is driven at x8 round-robin over the N active conversations (every worker takes
the next one from a shared counter), so that each turn finds its conversation as long unused as
N allows, and the server's CPU per turn is read from its own counters. N = 100 uses another 100
conversations in each round, each sent one unmeasured turn first (so that the set is as warm as
100 conversations in use are); rounds are interleaved across N. Files stay under the 200 KB
rotation size (``SESSION_MAX_FILE_BYTES``, left at its default) for the whole run: a 100-set
conversation gets at most ~50 turns (~27 KB) in its window; rotations are counted to show it.

``python -m bench.conversations --notes-after`` lays the files out the other way (real turns
first, then ~150 KB of ``note`` events appended after them): the rolling window's messages then
lie before 150 KB of events no turn needs, which a real conversation does not leave, but which
shows whether a turn's work on a cache miss depends on what lies after its recent messages.

The quick run uses 100 vs 1,500 conversations with one seed turn each: indicative only.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

from bench.cpu import drive_window, summarize, window_for
from bench.load import (
    MESSAGE,
    LoadResult,
    Server,
    add_user,
    gateway_env,
    start_fake_llm,
    start_serve,
)
from gateway.memory.sessions import encode_key

USER = "talker"
PAD_BYTES = 150 * 1024
OLD_TS = "2026-01-01T00:00:00.000000Z"
SIZES_FULL = (100, 2_000, 10_000)
SIZES_QUICK = (100, 1_500)


def _line(event: dict[str, Any]) -> bytes:
    return json.dumps(event, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def earlier_history(target_bytes: int) -> bytes:
    """About ``target_bytes`` of earlier turns, as the gateway writes a turn's events."""
    turn = (_line({"type": "user", "content": MESSAGE, "messageId": 0, "ts": OLD_TS})
            + _line({"type": "assistant", "content": "Noted. " * 20, "messageId": 0,
                     "ts": OLD_TS})
            + _line({"type": "usage", "promptTokens": 100, "completionTokens": 20, "credits": 1,
                     "calls": 1, "ts": OLD_TS}))
    return turn * (target_bytes // len(turn) + 1)


def append_notes(sessions_dir: Path, threads: list[str], target_bytes: int) -> None:
    """Pad each thread's session file to ~``target_bytes`` with ``note`` events appended
    (``--notes-after``)."""
    for thread in threads:
        path = sessions_dir / (encode_key(f"{USER}--{thread}") + ".jsonl")
        note = _line({"type": "note", "content": "z" * 1000, "ts": OLD_TS})
        missing = max(0, target_bytes - path.stat().st_size)
        with path.open("ab") as handle:
            handle.write(note * (missing // len(note)))


def write_session_files(sessions_dir: Path, threads: list[str], target_bytes: int) -> None:
    """Each thread's session file: the header as the gateway writes it, then ~``target_bytes``
    of earlier history (before the thread's first turn; the gateway appends after it)."""
    sessions_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    history = earlier_history(target_bytes)
    for thread in threads:
        key = f"{USER}--{thread}"
        header = _line({"type": "session", "key": key, "userId": USER, "threadId": thread,
                        "createdAt": OLD_TS})
        path = sessions_dir / (encode_key(key) + ".jsonl")
        path.write_bytes(header + history[:target_bytes - len(header)].rsplit(b"\n", 1)[0]
                         + b"\n")
        path.chmod(0o600)


async def send_turns(server: Server, token: str, threads: list[str],
                     concurrency: int = 8) -> int:
    """One ``/chat`` turn for each entry of ``threads``, ``concurrency`` at a time, taken in
    order from a shared iterator; return how many failed."""
    pending = iter(threads)
    errors = 0
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(server.url, connector=connector,
                                     headers={"Authorization": f"Bearer {token}"}) as session:
        async def worker() -> None:
            nonlocal errors
            for thread in pending:
                async with session.post("/chat", json={"threadId": thread,
                                                       "message": MESSAGE}) as answer:
                    await answer.read()
                    errors += answer.status != 200
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return errors


def round_robin(active: list[str]) -> Callable[[int], str]:
    """Whichever worker asks, the next conversation of ``active`` in turn."""
    counter = itertools.count()
    return lambda worker: active[next(counter) % len(active)]


def seed_order(threads: list[str], turns_of: list[int]) -> list[str]:
    """Every thread's seed turns, layer by layer (each thread's first turn, then the second
    turn of those that get one, ...), so that no thread waits on itself."""
    return [thread for layer in range(max(turns_of))
            for thread, turns in zip(threads, turns_of, strict=True) if turns > layer]


async def run(quick: bool, tmp: Path, notes_after: bool = False) -> dict[str, Any]:
    """CPU per turn, turns/s and p99 at each number of active conversations, and the ratio of
    the worst of the larger sets to 100 (``notes_after``: the other file layout)."""
    sizes = SIZES_QUICK if quick else SIZES_FULL
    rounds = 1 if quick else 5
    window = window_for(quick)
    data_dir = tmp / "conversations"
    threads = [f"c{index:05d}" for index in range(max(sizes))]
    turns_of = [1 if quick else 1 + index % 5 for index in range(len(threads))]
    llm, llm_url = start_fake_llm()
    server: Server | None = None
    try:
        env = gateway_env(data_dir, "openai", llm_url)
        token = add_user(env, USER)
        if not notes_after:
            write_session_files(data_dir / "sessions", threads, PAD_BYTES)
        server = start_serve(env)
        seed_errors = await send_turns(server, token, seed_order(threads, turns_of))
        if notes_after:
            append_notes(data_dir / "sessions", threads, PAD_BYTES)
        runs: dict[int, list[LoadResult]] = {size: [] for size in sizes}
        for round_number in range(rounds):
            shift = round_number % len(sizes)
            for size in sizes[shift:] + sizes[:shift]:
                # 100: a fresh hundred each round; larger sets: the first ``size`` threads
                active = (threads[round_number * size:(round_number + 1) * size]
                          if size == sizes[0] else threads[:size])
                if size == sizes[0]:
                    seed_errors += await send_turns(server, token, active)
                runs[size].append(await drive_window(server, token, 8, window,
                                                     round_robin(active)))
        sessions = data_dir / "sessions"
        sizes_kb = [path.stat().st_size / 1024 for path in sessions.glob("*.jsonl")]
        rotations = sum(1 for _ in (sessions / "archive").glob("*.jsonl"))
    finally:
        if server is not None:
            server.stop()
        llm.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
    figures: dict[str, Any] = {f"conversations_{size}": summarize(measured)
                               for size, measured in runs.items()}
    small = figures[f"conversations_{sizes[0]}"]["cpu_us"]
    figures["active_conversations_ratio"] = max(
        figures[f"conversations_{size}"]["cpu_us"] for size in sizes[1:]) / small
    figures["conversations_sizes"] = list(sizes)
    figures["conversations_file_kb_min"] = min(sizes_kb)
    figures["conversations_file_kb_max"] = max(sizes_kb)
    figures["conversations_rotations"] = float(rotations)
    figures["conversations_seed_errors"] = float(seed_errors)
    return figures


if __name__ == "__main__":
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(prog="python -m bench.conversations")
    parser.add_argument("--quick", action="store_true", help="100 vs 1,500, short windows")
    parser.add_argument("--notes-after", action="store_true",
                        help="pad with note events after the real turns instead")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cloudybot-bench-") as name:
        result = asyncio.run(run(args.quick, Path(name), args.notes_after))
    print(json.dumps(result, indent=2))
