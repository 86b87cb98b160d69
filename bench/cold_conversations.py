"""Conversations nobody touched since the server started: a first turn against a hot one.

A conversation used over weeks leaves a session file of many short lines (messages, usage,
tool calls and their results, notes), earlier sessions rotated into ``archive/``, and rows in
the store: a rolling summary, the last messages, a display transcript. After a restart the
gateway has read none of it. This section makes ``CONVERSATIONS`` such conversations: each
gets ``ARCHIVES`` rotated files and an active file of ~``LINES`` short lines written as the
gateway writes them (older than anything in rolling memory), then real turns through ``/chat``
(so summaries happen as in use: 12, 13 or 14 turns, 3 to 5 in a quick run, so that the measured
turns fall evenly on the summarization's cycle of 3 turns). The server is then stopped and a
new ``cloudybot serve`` started on the same data.

Each round drives ``/chat`` at x8 over a hot set (100 conversations that had turns since the
restart) and, beside it, over conversations not touched since the restart (each turn the first
of its conversation in this process), windows interleaved; server CPU per turn from the
process's own counters. ``cold_vs_hot_cpu`` is the ratio of the medians (goal <= 1.25).
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

from bench.conversations import USER, _line, round_robin, seed_order, send_turns
from bench.cpu import Window, drive_window, summarize
from bench.load import (
    LoadResult,
    Server,
    add_user,
    gateway_env,
    start_fake_llm,
    start_serve,
)
from gateway.memory.sessions import encode_key

LINES = 1_000
ARCHIVES = 3
HOT = 100
OLD_TS = "2026-11-01T09:30:00.000000Z"


def weeks_of_lines(key: str, thread: str, lines: int) -> bytes:
    """A session file's header and ``lines`` short events of earlier turns: user and
    assistant messages (already folded into the summary: ``messageId`` 0), their usage, a tool
    exchange every fourth turn and an occasional note."""
    out = [_line({"type": "session", "key": key, "userId": USER, "threadId": thread,
                  "createdAt": OLD_TS})]
    turn = 0
    while len(out) <= lines:
        out.append(_line({"type": "user", "content": f"ok {turn}", "messageId": 0,
                          "ts": OLD_TS}))
        if turn % 4 == 0:
            call = f"call_{turn}"
            out.append(_line({"type": "tool_calls", "replyId": 0, "content": None,
                              "calls": [{"id": call, "name": "clock", "arguments": "{}"}],
                              "ts": OLD_TS}))
            out.append(_line({"type": "tool_result", "replyId": 0, "toolCallId": call,
                              "content": "09:30", "ts": OLD_TS}))
        out.append(_line({"type": "assistant", "content": f"Sure, {turn}.", "messageId": 0,
                          "ts": OLD_TS}))
        out.append(_line({"type": "usage", "promptTokens": 120, "completionTokens": 6,
                          "credits": 1, "calls": 1, "ts": OLD_TS}))
        if turn % 25 == 0:
            out.append(_line({"type": "note", "content": "rotated the logs", "ts": OLD_TS}))
        turn += 1
    return b"".join(out[:lines + 1])


def write_weeks(sessions: Path, threads: list[str]) -> int:
    """Each thread's archived sessions and active file; the active files' total bytes."""
    archive = sessions / "archive"
    archive.mkdir(mode=0o700, parents=True, exist_ok=True)
    total = 0
    for thread in threads:
        key = f"{USER}--{thread}"
        name = encode_key(key)
        for week in range(ARCHIVES):
            old = archive / f"{name}.202611{week + 1:02d}T093000.000000Z.jsonl"
            old.write_bytes(weeks_of_lines(key, thread, LINES // 2))
        data = weeks_of_lines(key, thread, LINES)
        (sessions / f"{name}.jsonl").write_bytes(data)
        total += len(data)
    return total


async def run(quick: bool, tmp: Path) -> dict[str, Any]:
    """CPU per turn on hot conversations and on first turns after a restart, interleaved."""
    rounds, chunk, seed_turns = (1, 150, 3) if quick else (5, 300, 12)
    cold_count = rounds * chunk
    threads = [f"w{index:05d}" for index in range(cold_count + HOT)]
    cold, hot = threads[:cold_count], threads[cold_count:]
    data_dir = tmp / "cold-conversations"
    llm, llm_url = start_fake_llm()
    server: Server | None = None
    try:
        env = gateway_env(data_dir, "openai", llm_url)
        token = add_user(env, USER)
        file_bytes = write_weeks(data_dir / "sessions", threads)
        server = start_serve(env)
        errors = await send_turns(server, token, seed_order(
            threads, [seed_turns + index % 3 for index in range(len(threads))]))
        server.stop()
        server = start_serve(env)  # nothing of any conversation read yet
        errors += await send_turns(server, token, hot)
        runs: dict[str, list[LoadResult]] = {"hot": [], "cold": []}
        window = Window(60.0, chunk - 8)  # drive_window's warm-up takes one turn per worker
        for round_number in range(rounds):
            fresh = cold[round_number * chunk:(round_number + 1) * chunk]
            order = [("hot", hot), ("cold", fresh)]
            for name, active in order if round_number % 2 == 0 else order[::-1]:
                runs[name].append(await drive_window(server, token, 8, window,
                                                     round_robin(active)))
    finally:
        if server is not None:
            server.stop()
        llm.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
    figures: dict[str, Any] = {f"cold_conversations_{name}": summarize(measured)
                               for name, measured in runs.items()}
    figures["cold_vs_hot_cpu"] = (figures["cold_conversations_cold"]["cpu_us"]
                                  / figures["cold_conversations_hot"]["cpu_us"])
    figures["cold_conversations_file_kb"] = file_bytes / len(threads) / 1024
    figures["cold_conversations_seed_errors"] = float(errors)
    figures["cold_conversations_count"] = float(cold_count)
    return figures


if __name__ == "__main__":
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(prog="python -m bench.cold_conversations")
    parser.add_argument("--quick", action="store_true", help="one round of 150, short seeds")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cloudybot-bench-") as name:
        result = asyncio.run(run(args.quick, Path(name)))
    print(json.dumps(result, indent=2))
