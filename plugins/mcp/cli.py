"""``cloudybot mcp list`` and ``cloudybot mcp call SERVER TOOL JSON``: an operator's view of
the configured servers (state, tools, who may use them) and one call to try a tool, whoever
the server's rules allow."""

from __future__ import annotations

import argparse
import json
from typing import Any

from gateway import ConfigError, ToolContext
from plugins.mcp.servers import McpServer, McpTools
from plugins.mcp.settings import McpSettings

OPERATOR = ToolContext(user_id="", thread_id="", session_key="")


def _count(name: str, amount: float = 1.0, **labels: str) -> None:
    """Nothing is counted outside a gateway."""


async def run(settings: McpSettings, args: argparse.Namespace) -> int:
    """Run ``args.mcp_command`` (``list`` or ``call``) against the configured servers."""
    tools = McpTools(settings, _count)
    try:
        if args.mcp_command == "list":
            return await _list(settings, tools)
        return await _call(tools, args.server, args.tool, args.arguments)
    finally:
        await tools.close()


async def _list(settings: McpSettings, tools: McpTools) -> int:
    if not settings.servers:
        print("no MCP servers configured ([plugins.mcp.servers.NAME])")
    for config in settings.servers:
        where = config.url or " ".join([config.command, *config.args])
        print(f"{config.name}  ({config.transport}: {where})")
        print(f"  may use: {config.who()}")
        server = tools.servers.get(config.name)
        if server is None:
            print("  state: disabled")
            continue
        names = await _connect(server)
        connection = server.connection(None)
        state = connection.state + (f" ({connection.error})" if connection.error else "")
        print(f"  state: {state}")
        for name in names:
            print(f"  tool: {name}")
    return 0


async def _connect(server: McpServer) -> list[str]:
    """The model's names of the server's tools, after connecting (as its operator)."""
    connection = server.connection(None)
    try:
        await connection.session()
    except Exception:
        return []
    return [tool.name for tool in await server.tools(None)]


async def _call(tools: McpTools, server_name: str, tool: str, arguments: str) -> int:
    server = tools.servers.get(server_name)
    if server is None:
        raise ConfigError(f"no enabled MCP server named {server_name!r}")
    try:
        parsed: Any = json.loads(arguments)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"the arguments are not JSON ({exc.msg})") from None
    if not isinstance(parsed, dict):
        raise ConfigError("the arguments must be a JSON object")
    result = await server.run(tool, parsed, OPERATOR)
    text = result if isinstance(result, str) else result.text  # (pictures named in the text)
    print(text)
    return 1 if text.startswith("error:") else 0


__all__ = ["run"]
