"""The MCP client: the agent calls the tools of Model Context Protocol servers (stdio or
Streamable HTTP), on the official Python SDK (``pip install 'cloudybot[mcp]'``).

Servers are declared in ``[plugins.mcp.servers.NAME]`` (:mod:`plugins.mcp.settings`); their
tools reach the model as ``{server}__{tool}`` (:mod:`plugins.mcp.naming`), only for the users
and plans the server names. Sessions stay open across turns (:mod:`plugins.mcp.connection`);
``cloudybot mcp list|call`` is :func:`operator_command` (:mod:`plugins.mcp.cli`). The SDK is
imported only when a server is configured (it takes a second or two to import).
"""

from __future__ import annotations

import argparse
import importlib.util
from typing import Any

from gateway import ConfigError, PluginHost, PluginSettings, Tool, ToolSet, hookimpl
from plugins.mcp.settings import McpSettings

INSTALL_HINT = "pip install 'cloudybot[mcp]'"


def _check_installed() -> None:
    if importlib.util.find_spec("mcp") is None:
        raise ConfigError(f"[plugins.mcp] names servers but the MCP SDK is not installed "
                          f"({INSTALL_HINT})")


@hookimpl
def plugin_settings() -> PluginSettings:
    """``[plugins.mcp]``: the servers and the limits of their calls."""
    return PluginSettings("mcp", McpSettings)


@hookimpl
def register_tools(host: PluginHost) -> list[Tool | ToolSet]:
    """The configured servers' tools, as one tool set (none when no server is enabled)."""
    settings = host.settings.plugin(McpSettings)
    if not any(server.enabled for server in settings.servers):
        return []
    _check_installed()
    from plugins.mcp.servers import McpTools

    return [McpTools(settings, host.metrics.count)]


async def operator_command(settings: Any, args: argparse.Namespace) -> int:
    """``cloudybot mcp list`` / ``cloudybot mcp call SERVER TOOL JSON`` (see
    :mod:`plugins.mcp.cli`); ``settings`` are the gateway's."""
    _check_installed()
    from plugins.mcp.cli import run

    return await run(settings.plugin(McpSettings), args)
