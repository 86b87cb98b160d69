"""The configured MCP servers as the agent's tools: :class:`McpServer` (one server, its
sessions and the tools made of its listing) and :class:`McpTools` (the tool set the gateway
asks for each turn's tools).

A server's tools reach only the users its ``plans`` / ``users`` name, and only the tools its
``allowed_tools`` / ``denied_tools`` let through; their :class:`gateway.Tool` objects are made
once per listing, so a turn costs a permission check and no I/O.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from mcp import types
from mcp.shared.exceptions import MCPError

from gateway import Tool, ToolContext, ToolOutput, current_span
from plugins.mcp.connection import CallTimedOut, Connection, Limits, Unreachable
from plugins.mcp.naming import tool_name
from plugins.mcp.results import as_output
from plugins.mcp.settings import McpSettings, MissingVariable, ServerConfig

log = logging.getLogger("cloudybot.plugin.mcp")
MAX_USER_SESSIONS = 100  # per server; the least recently used is closed past it
NOTE_CHARS = 200  # room for the cut result's note


class McpServer:
    """One configured server: its session (or one per user) and its tools."""

    def __init__(self, server: ServerConfig, settings: McpSettings,
                 count: Callable[..., None]) -> None:
        self.config = server
        self.settings = settings
        self._count = count
        self._limits = Limits(settings.connect_timeout_seconds, settings.max_reconnect_seconds)
        self._shared = Connection(server, self._limits, None, count)
        self._users: OrderedDict[str, Connection] = OrderedDict()
        self._tools: tuple[Tool, ...] = ()
        self._built: tuple[int, int] = (-1, -1)  # (id, version) of the listing they came from

    def connection(self, user_id: str | None) -> Connection:
        """The session to use for ``user_id`` (the shared one unless the server is per
        user)."""
        if not self.config.per_user or user_id is None:
            return self._shared
        connection = self._users.get(user_id)
        if connection is None:
            connection = self._users[user_id] = Connection(self.config, self._limits, user_id,
                                                           self._count)
            if len(self._users) > MAX_USER_SESSIONS:
                _, oldest = self._users.popitem(last=False)
                asyncio.get_running_loop().create_task(oldest.close())
        else:
            self._users.move_to_end(user_id)
        return connection

    def _listed(self) -> Connection | None:
        """A session whose tools were listed (the shared one first)."""
        if self._shared.version:
            return self._shared
        return next((c for c in self._users.values() if c.version), None)

    async def tools(self, user_id: str | None) -> tuple[Tool, ...]:
        """The server's tools as the model sees them (from the last listing). A per-user
        server not listed yet connects this user's session first (bounded by the connect
        timeout)."""
        listed = self._listed()
        if listed is None and (user_id is not None or not self.config.per_user):
            connection = self.connection(user_id)
            # only a first connection is waited for; a server that is down is not, but once
            # its wait is over a turn starts the next attempt (a server that was down when
            # the gateway started is offered from the turn after it came up)
            if connection.state == "connecting" or (connection.state == "idle"
                                                    and self.config.per_user):
                try:
                    await connection.session()
                except Unreachable:
                    return ()
            elif connection.state == "down" and connection.may_retry():
                connection.start()
            listed = self._listed()
        if listed is None:
            return ()
        await listed.relisted()  # the server said its tools changed: the turn gets the new
        if self._built != (id(listed), listed.version):
            self._tools = self._make_tools(listed.tools)
            self._built = (id(listed), listed.version)
        return self._tools

    def _make_tools(self, listing: Sequence[types.Tool]) -> tuple[Tool, ...]:
        """The allowed tools of ``listing`` as :class:`gateway.Tool` objects."""
        made: dict[str, Tool] = {}
        for tool in listing:
            if not self.config.offers(tool.name):
                continue
            name = tool_name(self.config.name, tool.name)
            if name in made:
                log.warning("MCP server %s: two tools are named %s; %r is left out",
                            self.config.name, name, tool.name)
                continue
            made[name] = Tool(
                name=name, description=tool.description or tool.title or tool.name,
                parameters=tool.input_schema, run=partial(self.run, tool.name),
                timeout_seconds=self.settings.max_call_seconds,
                max_result_chars=self.settings.max_result_bytes + NOTE_CHARS)
        return tuple(made.values())

    async def run(self, tool: str, arguments: dict[str, Any],
                  context: ToolContext) -> str | ToolOutput:
        """Call ``tool`` for the turn of ``context``; every failure is a text starting with
        ``error:`` that the model reads. The call's span (``execute_tool``) says it is an MCP
        ``tools/call``, of which server and tool, over which transport."""
        started = time.perf_counter()
        server = self.config.name
        self._count("calls", server=server)
        span = current_span()
        if span.recording:
            span.update({"mcp.method.name": "tools/call", "cloudybot.mcp.server": server,
                         "cloudybot.mcp.tool": tool, "gen_ai.tool.type": "extension",
                         "network.transport": "pipe" if self.config.transport == "stdio"
                         else "tcp"})
        try:
            result = await self.connection(context.user_id).call(
                tool, arguments, self.config.timeout_seconds)
        except (Unreachable, MissingVariable) as exc:
            text = f"error: the MCP server {server} is unavailable: {exc}"
        except CallTimedOut as exc:
            text = f"error: the tool {tool} of {server} was cancelled: {exc}"
        except MCPError as exc:
            text = f"error: the MCP server {server} failed: {exc.error.message}"
        else:
            output = as_output(result, self.settings.max_result_bytes)
            if not result.is_error:
                self._count("call_seconds", time.perf_counter() - started, server=server)
                return output
            text = output.text
        self._count("errors", server=server)
        self._count("call_seconds", time.perf_counter() - started, server=server)
        return text

    async def close(self) -> None:
        """Close every session of the server, at once."""
        await asyncio.gather(self._shared.close(),
                             *(connection.close() for connection in self._users.values()))


class McpTools:
    """The MCP servers' tools, a :class:`gateway.ToolSet`: per turn, those of the servers the
    user may use."""

    def __init__(self, settings: McpSettings, count: Callable[..., None]) -> None:
        self.servers = {server.name: McpServer(server, settings, count)
                        for server in settings.servers if server.enabled}

    async def start(self) -> None:
        """Connect to every shared server in the background (a per-user one connects when
        its first user needs it)."""
        for server in self.servers.values():
            if not server.config.per_user:
                server.connection(None).start()

    async def tools_for(self, user_id: str, plan: str) -> Sequence[Tool]:
        """The tools of the servers this user may use."""
        found: tuple[Tool, ...] = ()
        for server in self.servers.values():
            if server.config.may_use(user_id, plan):
                found += await server.tools(user_id)
        return found

    async def close(self) -> None:
        """Close every server's sessions, together."""
        await asyncio.gather(*(server.close() for server in self.servers.values()))
