"""Webhooks must not slow turns (issue 12): ``/chat`` throughput at x8 of a gateway whose user
has three endpoints subscribed to ``message.created`` (one fast, one answering after 2 s, one
dead: nothing listens), against the same gateway without any, windows interleaved; the target
is at least 0.95x. Beside it the server CPU per turn (which includes sending the deliveries),
the endpoints' own CPU per turn and how busy the machine's cores were: the endpoints run on
the same cores as the gateway, the fake LLM and the load client."""

from __future__ import annotations

import json
import statistics
import urllib.request
from pathlib import Path
from typing import Any

from bench.cpu import cpu_seconds, drive_window, interleaved, per_worker, warm_up, window_for
from bench.load import Server, add_user, free_port, gateway_env, start_fake_llm, start_serve
from bench.load import start_server as start_process
from bench.scaleout import machine_busy

CONCURRENCY = 8


def register(server: Server, token: str, url: str) -> None:
    """One endpoint for ``message.created``."""
    request = urllib.request.Request(
        f"{server.url}/api/webhooks", method="POST",
        data=json.dumps({"url": url, "events": ["message.created"]}).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 201


async def run(quick: bool, tmp: Path) -> dict[str, Any]:
    """Turns per second and CPU per turn with the three endpoints and without."""
    window = window_for(quick)
    rounds = 1 if quick else 5
    llm, llm_url = start_fake_llm()
    port = free_port()
    receivers, _ = start_process(["-m", "bench.webhook_receivers", str(port)], {}, port)
    servers: dict[str, tuple[Server, str]] = {}
    try:
        for name in ("none", "hooks"):
            env = {**gateway_env(tmp / f"webhooks-{name}", "openai", llm_url),
                   "CLOUDYBOT_WEBHOOKS_ALLOW_PRIVATE": "true"}
            token = add_user(env)
            servers[name] = (start_serve(env), token)
        hooked, token = servers["hooks"]
        for url in (f"{receivers.url}/fast", f"{receivers.url}/slow",
                    f"http://127.0.0.1:{free_port()}/dead"):
            register(hooked, token, url)
        for name, (server, token) in servers.items():
            await warm_up(server, token, f"warm-{name}")
        per_second: dict[str, list[float]] = {name: [] for name in servers}
        cpu: dict[str, list[float]] = {name: [] for name in servers}
        p50: dict[str, list[float]] = {name: [] for name in servers}
        busy: dict[str, list[float]] = {name: [] for name in servers}
        receiving: list[float] = []  # the endpoints' own CPU per turn (they share the cores)
        for round_number, name in interleaved(servers, rounds):
            server, token = servers[name]
            before = cpu_seconds(receivers.pid)
            result, share = await machine_busy(drive_window(
                server, token, CONCURRENCY, window, per_worker(f"{name}-r{round_number}")))
            busy[name].append(share)
            if name == "hooks" and result.turns:
                receiving.append((cpu_seconds(receivers.pid) - before) * 1e6 / result.turns)
            per_second[name].append(result.per_second)
            cpu[name].append(result.cpu_us_per_turn)
            p50[name].append(result.p50)
    finally:
        for server, _ in servers.values():
            server.stop()
        receivers.stop()
        llm.stop()
    none, hooks = (statistics.median(per_second[name]) for name in ("none", "hooks"))
    return {"webhooks_none_turns_per_s": none, "webhooks_three_turns_per_s": hooks,
            "webhooks_throughput_ratio": hooks / none if none else 0.0,
            "webhooks_none_cpu_us": statistics.median(cpu["none"]),
            "webhooks_three_cpu_us": statistics.median(cpu["hooks"]),
            "webhooks_none_p50_ms": statistics.median(p50["none"]),
            "webhooks_three_p50_ms": statistics.median(p50["hooks"]),
            "webhooks_receivers_cpu_us": statistics.median(receiving),
            "webhooks_none_busy": statistics.median(busy["none"]),
            "webhooks_three_busy": statistics.median(busy["hooks"])}
