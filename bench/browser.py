"""The browser tool (issue 16): what a context costs to start, what the tool adds to each
Playwright action, how much memory an open context holds, and that turns which never use the
browser are not slowed by it.

1. In-process, on a gateway with the browser plugin, against a page served on loopback:
   Chromium's launch; a new context (context, page, its first minute charged) as a median of
   several; per action the tool's call against the Playwright calls it needs made directly
   (goto and the title for open, one evaluate for read, one fill): the difference is the
   tool's overhead (argument and address checks, minute metering, finding the target); the
   memory (PSS, so shared pages count once) of Chromium's processes with N contexts open
   against none, per context.
2. ``cloudybot serve`` x8 with the browser plugin enabled (its hint in every prompt, its schema
   in every call) against ``CLOUDYBOT_BROWSER_ENABLED=false``, windows interleaved: server CPU
   per turn, target at most 1.05x. Beside it the same comparison in-process (two gateways in
   this process on the zero-cost provider, no HTTP anywhere, CPU time of this process per
   turn), which leaves out everything but the gateway's own work.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from bench.cpu import drive_window, interleaved, per_worker, warm_up, window_for
from bench.load import Server, add_user, gateway_env, start_fake_llm, start_serve
from gateway.config.settings import load_settings
from gateway.gateway import Gateway
from gateway.plugins.manager import declared_settings, make_plugin_manager
from gateway.testing.loopback import LoopbackServer
from gateway.testing.processes import descendants, pss_mb
from gateway.tools import ToolContext

from . import inprocess

CONCURRENCY = 8
PAGE = ("<!doctype html><html><head><title>Bench</title></head><body><h1>Prices</h1>"
        "<form><label>Query <input name=q></label><button>Search</button></form><table>"
        + "".join(f"<tr><td>item {n}</td><td>{n * 3}.00</td></tr>" for n in range(200))
        + "</table></body></html>")


def chromium_pss_mb() -> float:
    """Proportional memory of this process's descendants (the Playwright driver and
    Chromium), in MB."""
    return pss_mb(descendants(os.getpid()))


async def _timed(work: Callable[[], Awaitable[Any]]) -> float:
    started = time.perf_counter()
    await work()
    return (time.perf_counter() - started) * 1000


async def in_process(quick: bool, tmp: Path) -> dict[str, Any]:
    """Sections 1's figures (see the module's docstring)."""
    site = LoopbackServer()
    app = web.Application()
    app.router.add_get("/", lambda request: web.Response(text=PAGE, content_type="text/html"))
    url = f"http://127.0.0.1:{await site.serve(app)}/"
    pm = make_plugin_manager()
    settings = load_settings(None, env={
        "CLOUDYBOT_DATA_DIR": str(tmp / "browser-inprocess"), "CLOUDYBOT_LLM_PROVIDER": "offline",
        "CLOUDYBOT_BROWSER_ALLOW_PRIVATE": "true", "CLOUDYBOT_BROWSER_MAX_CONTEXTS": "100"},
        plugins=declared_settings(pm))
    gateway = Gateway(settings, pm)
    await gateway.start()
    contexts = 2 if quick else 10
    actions = 5 if quick else 50
    try:
        if "browser" not in gateway.tools:
            return {"browser_unavailable": 1.0}
        from plugins.browser import pool_of

        tool = gateway.tools["browser"]
        await gateway.accounts.add_user("bench", plan="team")
        pool = pool_of(gateway.host_for("browser"))
        assert pool is not None

        def context(n: int) -> ToolContext:
            return ToolContext("bench", f"t{n}", f"bench--t{n}")

        launch_ms = await _timed(lambda: tool.run({"action": "open", "url": url}, context(0)))
        baseline_mb = chromium_pss_mb()
        starts = []
        for n in range(1, contexts + 1):
            starts.append(await _timed(lambda n=n: pool.open_session(f"bench--t{n}", "bench")))
        for n in range(1, contexts + 1):
            await tool.run({"action": "open", "url": url}, context(n))
        await asyncio.sleep(0.5)  # let the renderers settle before memory is read
        per_context_mb = (chromium_pss_mb() - baseline_mb) / contexts
        page = pool.sessions["bench--t0"].page
        raw_js = "() => [document.title, document.body.innerText]"

        async def open_directly() -> None:  # what open itself needs of Playwright
            await page.goto(url, wait_until="domcontentloaded")
            await page.title()

        figures: dict[str, Any] = {
            "browser_launch_ms": launch_ms,
            "browser_context_start_ms": statistics.median(starts),
            "browser_memory_per_context_mb": per_context_mb,
            "browser_contexts_measured": contexts,
        }
        pairs: dict[str, tuple[Callable[[], Awaitable[Any]], Callable[[], Awaitable[Any]]]] = {
            "read": (lambda: tool.run({"action": "read"}, context(0)),
                     lambda: page.evaluate(raw_js)),
            "fill": (lambda: tool.run({"action": "fill", "target": "input[name=q]",
                                       "value": "lamp"}, context(0)),
                     lambda: page.locator("input[name=q]").first.fill("lamp")),
            "open": (lambda: tool.run({"action": "open", "url": url}, context(0)),
                     open_directly),
        }
        for name, (through_tool, direct) in pairs.items():
            tool_ms, direct_ms = [], []
            for _ in range(actions):  # interleaved: each pair meets the same machine
                tool_ms.append(await _timed(through_tool))
                direct_ms.append(await _timed(direct))
            figures[f"browser_{name}_ms"] = statistics.median(tool_ms)
            figures[f"browser_{name}_direct_ms"] = statistics.median(direct_ms)
            figures[f"browser_{name}_overhead_ms"] = (statistics.median(tool_ms)
                                                      - statistics.median(direct_ms))
        return figures
    finally:
        await gateway.stop()
        await site.close()


async def turn_path(quick: bool, tmp: Path) -> dict[str, Any]:
    """Section 2: server CPU per turn with the browser plugin on (unused) and off."""
    window = window_for(quick)
    rounds = 1 if quick else 7
    llm, llm_url = start_fake_llm()
    servers: dict[str, tuple[Server, str]] = {}
    try:
        for name, enabled in (("off", "false"), ("on", "true")):
            env = {**gateway_env(tmp / f"browser-{name}", "openai", llm_url),
                   "CLOUDYBOT_BROWSER_ENABLED": enabled}
            token = add_user(env)
            servers[name] = (start_serve(env), token)
        for name, (server, token) in servers.items():
            await warm_up(server, token, f"warm-{name}")
        cpu: dict[str, list[float]] = {name: [] for name in servers}
        for round_number, name in interleaved(servers, rounds):
            server, token = servers[name]
            result = await drive_window(server, token, CONCURRENCY, window,
                                        per_worker(f"{name}-r{round_number}"))
            cpu[name].append(result.cpu_us_per_turn)
    finally:
        for server, _ in servers.values():
            server.stop()
        llm.stop()
    off, on = (statistics.median(cpu[name]) for name in ("off", "on"))
    return {"browser_off_cpu_us": off, "browser_on_cpu_us": on,
            "browser_turn_cpu_ratio": on / off if off else 0.0}


async def _turn_gateway(data_dir: Path, enabled: bool) -> Gateway:
    pm = make_plugin_manager()
    pm.register(inprocess, name="inprocess")
    settings = load_settings(None, env={
        "CLOUDYBOT_DATA_DIR": str(data_dir), "CLOUDYBOT_LLM_PROVIDER": "inprocess",
        "CLOUDYBOT_PURGE_INTERVAL_MINUTES": "0",
        "CLOUDYBOT_BROWSER_ENABLED": "true" if enabled else "false"},
        plugins=declared_settings(pm))
    gateway = Gateway(settings, pm)
    await gateway.start()
    await gateway.accounts.add_user("bench", plan="team", credits=10**9)
    return gateway


async def turn_in_process(quick: bool, tmp: Path) -> dict[str, Any]:
    """Section 2's in-process figures: CPU time per ``Gateway.chat`` turn, plugin on vs off."""
    rounds, turns = (2, 100) if quick else (8, 300)
    gateways = {name: await _turn_gateway(tmp / f"browser-turns-{name}", name == "on")
                for name in ("off", "on")}
    if "browser" not in gateways["on"].tools:
        for gateway in gateways.values():
            await gateway.stop()
        return {}  # no Playwright or Chromium here: nothing to compare
    cpu = await interleaved_turn_cpu(gateways, rounds, turns)
    off, on = cpu["off"], cpu["on"]
    return {"browser_off_inprocess_us": off, "browser_on_inprocess_us": on,
            "browser_inprocess_ratio": on / off if off else 0.0}


async def interleaved_turn_cpu(gateways: dict[str, Gateway], rounds: int,
                               turns: int) -> dict[str, float]:
    """CPU µs per in-process turn of each gateway (this process's own clock), rounds
    interleaved in alternating order, the median round of each; the gateways are stopped."""
    cpu: dict[str, list[float]] = {name: [] for name in gateways}
    try:
        for round_number, name in interleaved(gateways, rounds):
            gateway = gateways[name]
            ref = await gateway.resolve_thread("bench", f"t{round_number % 4}")
            began = time.process_time()
            for turn in range(turns):
                await gateway.chat("bench", ref, f"hello {turn}")
            cpu[name].append((time.process_time() - began) * 1e6 / turns)
    finally:
        for gateway in gateways.values():
            await gateway.stop()
    return {name: statistics.median(values) for name, values in cpu.items()}


async def run(quick: bool, tmp: Path) -> dict[str, Any]:
    """Both parts."""
    return {**await in_process(quick, tmp), **await turn_path(quick, tmp),
            **await turn_in_process(quick, tmp)}
