"""The MCP plugin's settings (``[plugins.mcp]``, ``CLOUDYBOT_MCP_*``): the servers and their
rules.

A server is a table under ``[plugins.mcp.servers]`` (or ``CLOUDYBOT_MCP_SERVERS`` as JSON):
``command`` (with ``args``, ``env``, ``cwd``) for a stdio server, or ``url`` (with
``headers``) for a Streamable HTTP one. ``${NAME}`` in an ``env`` or ``headers`` value is the
environment variable NAME, read when connecting (so no secret sits in the file); ``{user_id}``
in a header makes the server per user: one session for each user who calls it. Nobody may use
a server until its ``plans`` or ``users`` say so (``plans = ["*"]``: every plan).
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway import options, setting

SERVER_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
USER_PLACEHOLDER = "{user_id}"
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_KEYS = {"command", "args", "env", "cwd", "url", "headers", "enabled", "timeout_seconds",
         "allowed_tools", "denied_tools", "plans", "users"}


class MissingVariable(LookupError):
    """A ``${NAME}`` in a server's env or headers names an unset variable."""


@dataclass(frozen=True)
class ServerConfig:
    """One MCP server as configured."""

    name: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str = ""
    url: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    enabled: bool = True
    timeout_seconds: float = 60.0
    allowed_tools: tuple[str, ...] = ()
    denied_tools: tuple[str, ...] = ()
    plans: tuple[str, ...] = ()
    users: tuple[str, ...] = ()

    @property
    def transport(self) -> str:
        """``stdio`` or ``http``."""
        return "http" if self.url else "stdio"

    @property
    def per_user(self) -> bool:
        """Whether each user gets a session of their own (a header names ``{user_id}``)."""
        return any(USER_PLACEHOLDER in value for value in self.headers.values())

    def may_use(self, user_id: str, plan: str) -> bool:
        """Whether this user, on this plan, may call the server's tools."""
        return user_id in self.users or plan in self.plans or "*" in self.plans

    def offers(self, tool: str) -> bool:
        """Whether the server's tool ``tool`` passes ``allowed_tools`` / ``denied_tools``
        (shell-style patterns)."""
        if self.allowed_tools and not any(fnmatch.fnmatchcase(tool, pattern)
                                          for pattern in self.allowed_tools):
            return False
        return not any(fnmatch.fnmatchcase(tool, pattern) for pattern in self.denied_tools)

    def who(self) -> str:
        """Who may use it, in words."""
        if "*" in self.plans:
            return "every user"
        parts = [f"plans {', '.join(self.plans)}"] if self.plans else []
        parts += [f"users {', '.join(self.users)}"] if self.users else []
        return " and ".join(parts) or "nobody (set plans or users)"

    def resolved_headers(self, user_id: str | None) -> dict[str, str]:
        """The headers to send, variables filled in (``{user_id}`` with ``user_id``)."""
        return {key: expand(value).replace(USER_PLACEHOLDER, user_id or "")
                for key, value in self.headers.items()}

    def resolved_env(self) -> dict[str, str]:
        """The extra environment of a stdio server, variables filled in."""
        return {key: expand(value) for key, value in self.env.items()}


def expand(value: str) -> str:
    """``value`` with each ``${NAME}`` replaced by that environment variable."""
    def variable(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in os.environ:
            raise MissingVariable(f"the variable {name} is not set")
        return os.environ[name]
    return _VARIABLE.sub(variable, value)


def _strings(raw: Any, where: str) -> tuple[str, ...]:
    if not isinstance(raw, list | tuple) or not all(isinstance(item, str) for item in raw):
        raise ValueError(f"{where} must be a list of strings")
    return tuple(raw)


def _table(raw: Any, where: str) -> dict[str, str]:
    if not isinstance(raw, Mapping) or not all(
            isinstance(key, str) and isinstance(value, str) for key, value in raw.items()):
        raise ValueError(f"{where} must be a table of strings")
    return dict(raw)


def _server(name: str, raw: Any) -> ServerConfig:
    """One server's table, checked."""
    where = f"server {name!r}"
    if not SERVER_NAME.fullmatch(name):
        raise ValueError(f"{where}: a name is 1-32 of a-z 0-9 _ - (a letter or digit first)")
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where} must be a table")
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise ValueError(f"{where} has unknown key(s): {', '.join(unknown)}")
    command, url = raw.get("command", ""), raw.get("url", "")
    if not isinstance(command, str) or not isinstance(url, str) or bool(command) == bool(url):
        raise ValueError(f"{where} needs either command (stdio) or url (Streamable HTTP)")
    if url and not url.startswith(("http://", "https://")):
        raise ValueError(f"{where}: url must be http:// or https://")
    return ServerConfig(
        name=name, command=command, url=url,
        args=_strings(raw.get("args", []), f"{where} args"),
        env=_table(raw.get("env", {}), f"{where} env"),
        cwd=options.text(raw.get("cwd", "")),
        headers=_table(raw.get("headers", {}), f"{where} headers"),
        enabled=options.flag(raw.get("enabled", True)),
        timeout_seconds=options.positive_float(raw.get("timeout_seconds", 60.0)),
        allowed_tools=_strings(raw.get("allowed_tools", []), f"{where} allowed_tools"),
        denied_tools=_strings(raw.get("denied_tools", []), f"{where} denied_tools"),
        plans=_strings(raw.get("plans", []), f"{where} plans"),
        users=_strings(raw.get("users", []), f"{where} users"))


def servers(raw: Any) -> tuple[ServerConfig, ...]:
    """The ``servers`` table (or its JSON text, from the environment), every server checked."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError as exc:
            raise ValueError(f"is not JSON ({exc.msg})") from None
    if not isinstance(raw, Mapping):
        raise ValueError("must be a table of servers")
    return tuple(_server(str(name), table) for name, table in raw.items())


@dataclass(frozen=True)
class McpSettings:
    """The MCP servers the agent may use, and the limits of their calls."""

    servers: tuple[ServerConfig, ...] = setting(
        (), "the MCP servers, one table each under [plugins.mcp.servers] (JSON in the "
        "variable): command/args/env/cwd or url/headers, enabled, timeout_seconds, "
        "allowed_tools, denied_tools, plans, users", parse=servers)
    max_result_bytes: int = setting(16_384, "a tool result longer than this is cut, with a "
                                    "note saying so", parse=options.positive_int)
    max_call_seconds: float = setting(600.0, "a call is cut after this long even while it "
                                      "reports progress", parse=options.positive_float)
    connect_timeout_seconds: float = setting(10.0, "connecting to a server and listing its "
                                             "tools may take this long",
                                             parse=options.positive_float)
    max_reconnect_seconds: float = setting(30.0, "the longest wait between reconnection "
                                           "attempts to a server that is down (doubling from "
                                           "0.5 s)", parse=options.positive_float)
