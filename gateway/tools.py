"""Tools the agent can call: what a tool is, and running one safely.

A tool error or timeout becomes a result the model can read; it never crashes the turn. So does
a malformed call: an unknown tool, arguments that are not JSON text of an object, or
arguments nested deeper than ``MAX_ARGUMENT_DEPTH``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

log = logging.getLogger(__name__)
MAX_RESULT_CHARS = 8000
MAX_ARGUMENT_DEPTH = 64
MAX_NAME_CHARS_SHOWN = 80


@dataclass(frozen=True)
class Credential:
    """A saved browser login, decrypted for one turn only."""

    site: str
    username: str
    password: str


@dataclass(frozen=True)
class ToolContext:
    """Who called a tool and where: handed to every tool run. ``saved_logins`` holds the
    user's saved browser logins, decrypted, for a tool that declared it fills them in
    (``Tool.uses_saved_logins``); every other tool gets none."""

    user_id: str
    thread_id: str
    session_key: str
    saved_logins: tuple[Credential, ...] = field(default=(), compare=False, repr=False)


@dataclass(frozen=True)
class Tool:
    """A function the model may call.

    :param name: unique, ``[a-zA-Z0-9_-]{1,64}`` (OpenAI's rule).
    :param description: what it does, for the model.
    :param parameters: a JSON schema object for the arguments.
    :param run: ``async (arguments, context) -> str`` (a dict result is sent as JSON).
    :param uses_saved_logins: it fills the user's saved logins in somewhere (the browser):
        its context then carries them (``ToolContext.saved_logins``); no other tool sees them.
    """

    name: str
    description: str
    parameters: Mapping[str, Any]
    run: Callable[[dict[str, Any], ToolContext], Awaitable[Any]]
    uses_saved_logins: bool = False

    def schema(self) -> dict[str, Any]:
        """The tool in OpenAI's ``tools`` format."""
        return {"type": "function", "function": {
            "name": self.name, "description": self.description,
            "parameters": dict(self.parameters)}}


@dataclass(frozen=True)
class ToolCall:
    """One call the model asked for; ``arguments`` is the raw JSON text it sent.

    ``malformed`` says why the call cannot run when the provider sent it in a shape the gateway
    will not run (arguments as a JSON object or number instead of text): the model reads it as
    the call's error result. ``arguments`` then holds what was sent, encoded as JSON text.
    """

    id: str
    name: str
    arguments: str
    malformed: str = ""

    def as_message_part(self) -> dict[str, Any]:
        """The call as it appears in an assistant message's ``tool_calls``."""
        return {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": self.arguments}}


@dataclass(frozen=True)
class Toolbox:
    """The loaded tools and their schemas as every chat call sends them, counted once (the
    schemas' tokens count against MAX_CONTEXT)."""

    tools: Mapping[str, Tool]
    schemas: list[dict[str, Any]]
    schema_tokens: int

    @classmethod
    def of(cls, tools: Mapping[str, Tool], count: Callable[[str], int]) -> Toolbox:
        """The toolbox of ``tools``, its schemas counted with ``count``."""
        schemas = [tool.schema() for tool in tools.values()]
        return cls(dict(tools), schemas, count(json.dumps(schemas)) if schemas else 0)

    async def run(self, call: ToolCall, context: ToolContext, timeout: float) -> str:
        """Run one call (see :func:`run_tool`)."""
        return await run_tool(self.tools, call, context, timeout)


def _as_text(result: Any) -> str:
    text = result if isinstance(result, str) else json.dumps(result, default=str)
    if len(text) > MAX_RESULT_CHARS:
        text = text[:MAX_RESULT_CHARS] + f"... [truncated, {len(text)} characters in all]"
    return text


def nests_deeper_than(text: str, limit: int) -> bool:
    """Whether JSON ``text`` nests arrays and objects more than ``limit`` deep (brackets inside
    strings do not count). A loop, not recursion: any depth is safe to ask about."""
    if text.count("[") + text.count("{") <= limit:
        return False
    depth = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > limit:
                return True
        elif char in "]}":
            depth -= 1
    return False


async def run_tool(tools: Mapping[str, Tool], call: ToolCall, context: ToolContext,
                   timeout: float) -> str:
    """Run one call and return the text the model will read (errors included)."""
    if call.malformed:
        return f"error: {call.malformed}"
    tool = tools.get(call.name)
    if tool is None:
        return f"error: there is no tool named {call.name[:MAX_NAME_CHARS_SHOWN]!r}"
    if nests_deeper_than(call.arguments, MAX_ARGUMENT_DEPTH):
        return f"error: the arguments are nested deeper than {MAX_ARGUMENT_DEPTH} levels"
    try:
        arguments = json.loads(call.arguments or "{}")
    except json.JSONDecodeError as exc:
        return f"error: the arguments are not valid JSON ({exc.msg})"
    except ValueError as exc:  # valid JSON Python will not read: an integer of 5,000 digits
        return f"error: the arguments cannot be read ({exc})"
    if not isinstance(arguments, dict):
        return "error: the arguments must be a JSON object"
    if context.saved_logins and not tool.uses_saved_logins:
        context = replace(context, saved_logins=())
    try:
        result = await asyncio.wait_for(tool.run(arguments, context), timeout)
    except TimeoutError:
        log.warning("tool %s timed out after %.1f s", call.name, timeout)
        return f"error: the tool {call.name} did not finish within {timeout:g} seconds"
    except Exception as exc:
        log.warning("tool %s failed: %s: %s", call.name, type(exc).__name__, exc)
        return f"error: the tool {call.name} failed: {type(exc).__name__}: {exc}"
    return _as_text(result)
