"""MCP servers' tools (issue 30), in-process against the fake MCP server of the tests
(tests/fakes/mcp_server.py, over stdio), on a zero-cost provider:

1. 100 turns in which the model calls a tool of a healthy server: connections and
   ``tools/list`` calls counted at the server after the first (goal: 0 and 0);
2. a warm call through the gateway's tool path (``Toolbox.run``: argument checks, the plugin,
   the result's text, metrics) against the same call made directly with the SDK on a session
   of its own to the same server, calls interleaved, p50 of each and the difference (goal:
   at most 3 ms);
3. a turn without MCP tools (the user may use no server) with the plugin's server configured
   against none: CPU time per ``Gateway.chat`` turn, rounds interleaved (goal: at most 1.05x).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench.browser import interleaved_turn_cpu
from gateway import Completion, CompletionRequest, PluginHost, Provider, ToolCall, hookimpl
from gateway.config.settings import load_settings
from gateway.gateway import Gateway
from gateway.plugins.manager import declared_settings, make_plugin_manager
from gateway.tools import ToolContext

ROOT = Path(__file__).resolve().parent.parent
TOOL = "files__add"


class ToolAsking(Provider):
    """Asks for ``files__add`` when the turn has no tool result yet, then answers."""

    name = "mcp-bench"

    async def complete(self, request: CompletionRequest) -> Completion:
        """A tool call first, a short answer after it (or when summarizing)."""
        last = request.messages[-1] if request.messages else {}
        if request.purpose == "chat" and last.get("role") == "user" \
                and any(t["function"]["name"] == TOOL for t in request.tools):
            return Completion("", "bench", 10, 5, tool_calls=(
                ToolCall("c1", TOOL, '{"a": 1, "b": 2}'),))
        return Completion("Done.", "bench", 10, 5)


class _Plugin:
    @hookimpl
    def register_providers(self, host: PluginHost) -> list[Provider]:
        return [ToolAsking()]


def _server(log: Path, **rules: Any) -> dict[str, Any]:
    return {"command": sys.executable, "cwd": str(ROOT), **rules,
            "args": ["-m", "tests.fakes.mcp_server", "--log", str(log), "stdio"]}


async def _gateway(data_dir: Path, servers: dict[str, Any]) -> Gateway:
    pm = make_plugin_manager()
    pm.register(_Plugin(), name="mcp-bench")
    settings = load_settings(None, env={
        "CLOUDYBOT_DATA_DIR": str(data_dir), "CLOUDYBOT_LLM_PROVIDER": "mcp-bench",
        "CLOUDYBOT_PURGE_INTERVAL_MINUTES": "0", "CLOUDYBOT_BROWSER_ENABLED": "false",
        "CLOUDYBOT_MCP_SERVERS": json.dumps(servers)}, plugins=declared_settings(pm))
    gateway = Gateway(settings, pm)
    await gateway.start()
    await gateway.accounts.add_user("bench", plan="team", credits=10**9)
    return gateway


def _lines(log: Path) -> list[str]:
    return log.read_text(encoding="utf-8").splitlines() if log.exists() else []


async def healthy_turns(tmp: Path) -> dict[str, Any]:
    """Row 1: 100 tool turns; what the server saw after the first."""
    log = tmp / "mcp-turns.log"
    gateway = await _gateway(tmp / "mcp-turns", {"files": _server(log, plans=["*"])})
    try:
        for turn in range(100):
            ref = await gateway.resolve_thread("bench", f"t{turn}")
            await gateway.chat("bench", ref, "add")
            if turn == 0:
                first = _lines(log)
    finally:
        await gateway.stop()
    after = _lines(log)[len(first):]
    return {"mcp_100_turns_calls": after.count("tools/call add") + first.count("tools/call add"),
            "mcp_100_turns_reconnects": after.count("initialize"),
            "mcp_100_turns_tools_list": after.count("tools/list")}


async def warm_call(quick: bool, tmp: Path) -> dict[str, Any]:
    """Row 2: p50 of a warm call through the gateway's tool path vs the SDK directly."""
    from mcp import ClientSession, StdioServerParameters, stdio_client

    calls = 200 if quick else 1000
    log = tmp / "mcp-warm.log"
    gateway = await _gateway(tmp / "mcp-warm", {"files": _server(log, plans=["*"])})
    server = _server(log)
    through: list[float] = []
    direct: list[float] = []
    try:
        toolbox = await gateway.agent.toolbox.for_user("bench", "team")
        context = ToolContext("bench", "t", "bench--t")
        call = ToolCall("c1", TOOL, '{"a": 1, "b": 2}')
        params = StdioServerParameters(command=server["command"], args=server["args"],
                                       cwd=server["cwd"])
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            for _ in range(20):  # warm both
                await toolbox.run(call, context, 30.0)
                await session.call_tool("add", {"a": 1, "b": 2})
            for _ in range(calls):
                began = time.perf_counter()
                await toolbox.run(call, context, 30.0)
                through.append(time.perf_counter() - began)
                began = time.perf_counter()
                await session.call_tool("add", {"a": 1, "b": 2})
                direct.append(time.perf_counter() - began)
    finally:
        await gateway.stop()
    gateway_ms = statistics.median(through) * 1000
    sdk_ms = statistics.median(direct) * 1000
    return {"mcp_call_gateway_p50_ms": gateway_ms, "mcp_call_sdk_p50_ms": sdk_ms,
            "mcp_call_overhead_ms": gateway_ms - sdk_ms}


async def turn_without_tools(quick: bool, tmp: Path) -> dict[str, Any]:
    """Row 3: CPU per turn of a user who may use no server, server configured vs none."""
    rounds, turns = (2, 100) if quick else (8, 300)
    gateways = {
        "off": await _gateway(tmp / "mcp-off", {}),
        "on": await _gateway(tmp / "mcp-on", {"files": _server(tmp / "mcp-on.log",
                                                               users=["someone-else"])}),
    }
    cpu = await interleaved_turn_cpu(gateways, rounds, turns)
    off, on = cpu["off"], cpu["on"]
    return {"mcp_off_turn_cpu_us": off, "mcp_on_turn_cpu_us": on,
            "mcp_turn_cpu_ratio": on / off if off else 0.0}


async def run(quick: bool, tmp: Path) -> dict[str, Any]:
    """The three rows."""
    return {**await healthy_turns(tmp), **await warm_call(quick, tmp),
            **await turn_without_tools(quick, tmp)}
