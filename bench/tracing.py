"""Tracing's cost (issue 32): server CPU per ``/chat`` turn at x8, windows interleaved, of three
``cloudybot serve`` processes on the same fake LLM:

- ``off``: tracing off (the default);
- ``local``: tracing on, every span batched (``BatchSpanProcessor``) to an exporter that
  drops the batch (bench/traced_serve.py): what tracing costs the gateway itself; the target
  is at most 1.10x ``off``;
- ``otlp``: tracing on as users turn it on (``OTEL_EXPORTER_OTLP_ENDPOINT``), exporting over
  OTLP/HTTP to a receiver on loopback in its own process (bench/otlp_receiver.py): the
  exporter's thread runs in the server, so its protobuf encoding and its requests are counted
  (the receiver's CPU is not). No target: that cost is the OpenTelemetry exporter's.

Beside them, what the OTLP server exported per turn.
"""

from __future__ import annotations

import json
import statistics
import urllib.request
from pathlib import Path
from typing import Any

from bench.cpu import WARM_UP, drive_window, interleaved, per_worker, warm_up, window_for
from bench.load import Server, add_user, free_port, gateway_env, start_fake_llm, start_serve
from bench.load import start_server as start_process

CONCURRENCY = 8
# No OTEL_* variable of this machine's decides for the servers.
UNSET = {"OTEL_TRACES_EXPORTER": "", "OTEL_EXPORTER_OTLP_ENDPOINT": "",
         "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "", "OTEL_SDK_DISABLED": ""}


def exported(receiver: Server) -> dict[str, int]:
    """The exports and bytes the receiver has taken so far."""
    with urllib.request.urlopen(f"{receiver.url}/count", timeout=10) as answer:
        counts: dict[str, int] = json.loads(answer.read())
    return counts


def start_traced_locally(env: dict[str, str]) -> Server:
    """``serve`` with its spans batched to a dropping exporter (bench/traced_serve.py)."""
    port = free_port()
    server, _ = start_process(["-m", "bench.traced_serve"],
                              {**env, "CLOUDYBOT_PORT": str(port)}, port)
    return server


async def run(quick: bool, tmp: Path) -> dict[str, Any]:
    """CPU per turn of the three servers; the bytes exported per OTLP-traced turn."""
    window = window_for(quick)
    rounds = 1 if quick else 5
    llm, llm_url = start_fake_llm()
    port = free_port()
    receiver, _ = start_process(["-m", "bench.otlp_receiver", str(port)], {}, port)
    servers: dict[str, tuple[Server, str]] = {}
    cpu: dict[str, list[float]] = {"off": [], "local": [], "otlp": []}
    traced_turns = 0
    try:
        for name in cpu:
            env = {**gateway_env(tmp / f"tracing-{name}", "openai", llm_url), **UNSET}
            if name == "otlp":
                env.update({"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
                            "OTEL_SERVICE_NAME": "cloudybot-bench"})
            token = add_user(env)
            server = start_traced_locally(env) if name == "local" else start_serve(env)
            servers[name] = (server, token)
        await warm_up(*servers["off"], "warm-off")
        await warm_up(*servers["local"], "warm-local")
        # every turn the OTLP server runs is counted (a window's first turn per worker too):
        # the bytes exported are all of theirs
        warmed = await drive_window(*servers["otlp"], CONCURRENCY, WARM_UP,
                                    per_worker("warm-otlp"))
        traced_turns = warmed.turns + CONCURRENCY
        for round_number, name in interleaved(servers, rounds):
            server, token = servers[name]
            result = await drive_window(server, token, CONCURRENCY, window,
                                        per_worker(f"{name}-r{round_number}"))
            cpu[name].append(result.cpu_us_per_turn)
            if name == "otlp":
                traced_turns += result.turns + CONCURRENCY
    finally:
        for server, _ in servers.values():
            server.stop()  # SIGTERM: the OTLP server exports what it holds as it stops
        after = exported(receiver)
        receiver.stop()
        llm.stop()
    off, local, otlp = (statistics.median(cpu[name]) for name in ("off", "local", "otlp"))
    return {"tracing_off_cpu_us": off, "tracing_local_cpu_us": local,
            "tracing_otlp_cpu_us": otlp,
            "tracing_cpu_ratio": local / off if off else 0.0,
            "tracing_otlp_cpu_ratio": otlp / off if off else 0.0,
            "tracing_exported_bytes_per_turn": after["bytes"] / traced_turns
            if traced_turns else 0.0,
            "tracing_exports": after["exports"]}
